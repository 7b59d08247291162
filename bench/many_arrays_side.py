"""One side of bench_many_arrays.py: thousands of small arrays in one commit, then seven commits
touching one of them each (the median reported), through zarr-python on either system's
store; prints JSON.

    .venv/bin/python bench/many_arrays_side.py --system ours --arrays 5760
    bench/.venv312/bin/python bench/many_arrays_side.py --system icechunk --arrays 5760

Both sides run exactly the same zarr calls inside the timers; only opening a session and
committing differ (each system's own call). Local disk, a fresh temporary folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import zarr

GROUPS = 96  # 96 groups x 60 arrays = 5,760 (the shape of icechunk#2348's report)
TOUCHES = 7  # commits touching one array each; their median is reported


def open_system(system: str, path: str) -> tuple[Any, Any]:
    """(repository, function(repo) -> writable session on main)."""
    if system == "icechunk":
        import icechunk as ic

        repo = ic.Repository.create(ic.local_filesystem_storage(path))
        return repo, lambda r: r.writable_session("main")
    from icechunk_spark import Repository

    repo = Repository.create(f"file://{path}")
    return repo, lambda r: r.writable_session("main")


def array_path(i: int, arrays: int) -> str:
    """Where the ``i``-th of ``arrays`` arrays is made: ``gNNN/aNNN``, 96 groups."""
    per_group = -(-arrays // GROUPS)
    return f"g{i // per_group:03d}/a{i % per_group:03d}"


def create_arrays(store: Any, arrays: int) -> None:
    root = zarr.group(store)
    for i in range(arrays):
        group_name, name = array_path(i, arrays).split("/")
        array = root.require_group(group_name).create_array(
            name, shape=(10,), chunks=(10,), dtype="float32", compressors=None
        )
        array[:] = np.full(10, i, dtype="float32")


def create_arrays_natively(session: Any, arrays: int) -> None:
    """The same arrays and chunks through our own API (no zarr-python): the engine's cost."""
    session.create_group("/")
    for i in range(arrays):
        path = "/" + array_path(i, arrays)
        group = path.rsplit("/", 1)[0]
        if session.find_node(group) is None:
            session.create_group(group)
        session.create_array(path, (10,), (10,), "float32")
        session.set_chunk_values(path, (0,), np.full(10, i, dtype="float32"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["ours", "icechunk"], required=True)
    parser.add_argument("--arrays", type=int, default=5760)
    parser.add_argument(
        "--native", action="store_true", help="ours only: create through our API, not zarr's"
    )
    args = parser.parse_args()
    path = tempfile.mkdtemp(prefix=f"bench-many-{args.system}-")
    repo, writable = open_system(args.system, path)

    t0 = time.perf_counter()
    session = writable(repo)
    if args.native:
        create_arrays_natively(session, args.arrays)
    else:
        create_arrays(session.store, args.arrays)
    t1 = time.perf_counter()
    session.commit(f"{args.arrays} arrays")
    t2 = time.perf_counter()

    # Several commits touching one array, each in a session of its own: one alone is as
    # likely as not to carry a full collection of Python's garbage collector (tens of ms).
    writes, commits = [], []
    for k in range(TOUCHES):
        session = writable(repo)
        w0 = time.perf_counter()
        array = zarr.open_array(session.store, path=array_path(k, args.arrays), mode="r+")
        array[:] = np.full(10, -1 - k, "float32")
        c0 = time.perf_counter()
        session.commit(f"one array touched ({k})")
        commits.append(time.perf_counter() - c0)
        writes.append(c0 - w0)
    reader = writable(repo).store
    check = zarr.open_array(reader, path=array_path(args.arrays - 1, args.arrays), mode="r")[:]
    assert float(check[0]) == args.arrays - 1, check
    touched = zarr.open_array(reader, path=array_path(TOUCHES - 1, args.arrays), mode="r")[:]
    assert float(touched[0]) == -TOUCHES, touched
    print(
        json.dumps(
            {
                "system": args.system + (" (our API)" if args.native else " (zarr)"),
                "arrays": args.arrays,
                "create_and_write_s": t1 - t0,
                "first_commit_s": t2 - t1,
                "total_s": t2 - t0,
                "touch_one_write_s": statistics.median(writes),
                "touch_one_commit_s": statistics.median(commits),
            }
        )
    )


if __name__ == "__main__":
    main()

"""One side of bench_many_arrays.py: thousands of small arrays in one commit, then a commit
touching one of them, through zarr-python on either system's store; prints JSON.

    .venv/bin/python bench/many_arrays_side.py --system ours --arrays 5760
    bench/.venv312/bin/python bench/many_arrays_side.py --system icechunk --arrays 5760

Both sides run exactly the same zarr calls inside the timers; only opening a session and
committing differ (each system's own call). Local disk, a fresh temporary folder.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np
import zarr

GROUPS = 96  # 96 groups x 60 arrays = 5,760 (the shape of icechunk#2348's report)


def open_system(system: str, path: str) -> tuple[Any, Any]:
    """(repository, function(repo) -> writable session on main)."""
    if system == "icechunk":
        import icechunk as ic

        repo = ic.Repository.create(ic.local_filesystem_storage(path))
        return repo, lambda r: r.writable_session("main")
    from icechunk_spark import Repository

    repo = Repository.create(f"file://{path}")
    return repo, lambda r: r.writable_session("main")


def create_arrays(store: Any, arrays: int) -> None:
    root = zarr.group(store)
    per_group = -(-arrays // GROUPS)
    for i in range(arrays):
        group = root.require_group(f"g{i // per_group:03d}")
        array = group.create_array(
            f"a{i % per_group:03d}", shape=(10,), chunks=(10,), dtype="float32", compressors=None
        )
        array[:] = np.full(10, i, dtype="float32")


def create_arrays_natively(session: Any, arrays: int) -> None:
    """The same arrays and chunks through our own API (no zarr-python): the engine's cost."""
    per_group = -(-arrays // GROUPS)
    session.create_group("/")
    for i in range(arrays):
        group = f"/g{i // per_group:03d}"
        if session.find_node(group) is None:
            session.create_group(group)
        path = f"{group}/a{i % per_group:03d}"
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

    session = writable(repo)
    zarr.open_array(session.store, path="g000/a001", mode="r+")[:] = np.full(10, -1, "float32")
    t3 = time.perf_counter()
    session.commit("one array touched")
    t4 = time.perf_counter()
    check = zarr.open_array(writable(repo).store, path="g095/a059", mode="r")[:]
    assert float(check[0]) == args.arrays - 1, check
    print(
        json.dumps(
            {
                "system": args.system + (" (our API)" if args.native else " (zarr)"),
                "arrays": args.arrays,
                "create_and_write_s": t1 - t0,
                "first_commit_s": t2 - t1,
                "total_s": t2 - t0,
                "touch_one_write_s": t3 - t2,
                "touch_one_commit_s": t4 - t3,
            }
        )
    )


if __name__ == "__main__":
    main()

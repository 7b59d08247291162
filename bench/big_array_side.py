"""The Icechunk side of bench_big_array_commit.py, run with an interpreter that has `icechunk`.

    bench/.venv312/bin/python bench/big_array_side.py --refs N --commits C

The same array and refs; each commit changes one chunk through zarr in a session of its own
(written before the timer). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import icechunk as ic
import numpy as np
import zarr

CONTAINER = "file:///data/"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(CONTAINER, ic.local_filesystem_store("/data"))
    )
    storage = ic.local_filesystem_storage(tempfile.mkdtemp(prefix="bench-big-array-ic-"))
    repo = ic.Repository.create(storage, config)
    session = repo.writable_session("main")
    root = zarr.group(session.store)
    root.create_array("a", shape=(args.refs,), chunks=(1,), dtype="float64")
    session.store.set_virtual_refs_arr(
        "a",
        (args.refs,),
        [f"{CONTAINER}f.nc"] * args.refs,
        np.arange(args.refs, dtype=np.uint64) * 8,
        np.full(args.refs, 8, dtype=np.uint64),
        validate_containers=False,
    )
    session.commit(f"{args.refs:,} refs")
    times = []
    for k in range(args.commits):
        session = repo.writable_session("main")
        zarr.open_array(session.store, path="a")[(k * 7919 + 1) % args.refs] = float(k)
        start = time.perf_counter()
        session.commit(f"one chunk {k}")
        times.append(time.perf_counter() - start)
    print(json.dumps({"commit_ms": statistics.median(times) * 1000}))


if __name__ == "__main__":
    main()

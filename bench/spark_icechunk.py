"""The Icechunk side of bench_spark.py's write: the same refs written with Icechunk.

    bench/.venv312/bin/python bench/spark_icechunk.py --refs N --arrays A

Icechunk needs Python >= 3.12, so this runs in its own venv (``make bench`` builds
bench/.venv312) and prints one JSON object: the write's seconds, the part of them spent making
the refs, the process's peak RSS (MB of 10^6 bytes; Icechunk starts no child process) and
Icechunk's version.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark import CELLS, CONTAINER, LENGTH, PER_FILE, array_shape


def icechunk_side(refs: int, arrays: int) -> dict[str, Any]:
    """A 10,000-ref write first (the warm-up the Spark side gets too), then the timed one."""
    import icechunk as ic

    icechunk_write(10_000, arrays)
    result = icechunk_write(refs, arrays)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB -> MB
    return {**result, "peak_rss_mb": peak_mb, "version": ic.__version__}


def icechunk_write(refs: int, arrays: int) -> dict[str, float]:
    """Arrays declared, refs made in numpy and set, and the commit, all in the timer, as the
    Spark side generates its refs and declares its arrays inside its own."""
    import icechunk as ic
    import zarr

    path = tempfile.mkdtemp(prefix="bench-spark-icechunk-")
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(CONTAINER, ic.local_filesystem_store("/data"))
    )
    repo = ic.Repository.create(ic.local_filesystem_storage(path), config)
    session = repo.writable_session("main")
    root = zarr.group(session.store)
    shape = array_shape(refs, arrays)
    build_s = 0.0
    start = time.perf_counter()
    for i in range(arrays):
        root.create_array(f"var{i}", shape=shape, chunks=(1, 1), dtype="float32")
        built = time.perf_counter()
        names, offsets, lengths = icechunk_refs(len(range(i, refs, arrays)))
        build_s += time.perf_counter() - built
        set_icechunk_refs(session.store, f"var{i}", names, offsets, lengths)
    session.commit("bench")
    seconds = time.perf_counter() - start
    shutil.rmtree(path, ignore_errors=True)
    return {"write_s": seconds, "build_s": build_s}


def icechunk_refs(n: int) -> tuple[list[str], Any, Any]:
    """The refs ``refs_frame`` makes for one array, in numpy: one URL string per file, picked
    per ref by indexing (``set_virtual_refs_arr`` takes the URLs as a list of str)."""
    import numpy as np

    k = np.arange(n)
    files = np.array([f"{CONTAINER}run/day-{f}.nc" for f in range(-(-n // PER_FILE))], dtype=object)
    names = files[k // PER_FILE].tolist()
    offsets = ((k % PER_FILE) * LENGTH).astype(np.uint64)
    return names, offsets, np.full(n, LENGTH, np.uint64)


def set_icechunk_refs(store: Any, path: str, names: list[str], offsets: Any, lengths: Any) -> None:
    """Rows of ``CELLS`` refs from the origin; a ragged last row is set on its own."""
    n = len(names)
    full = (n // CELLS) * CELLS
    if full:
        store.set_virtual_refs_arr(
            path,
            (n // CELLS, CELLS),
            names[:full],
            offsets[:full],
            lengths[:full],
            validate_containers=False,
        )
    if n > full:
        store.set_virtual_refs_arr(
            path,
            (1, n - full),
            names[full:],
            offsets[full:],
            lengths[full:],
            validate_containers=False,
            arr_offset=(n // CELLS, 0),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refs", type=int, required=True)
    parser.add_argument("--arrays", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(icechunk_side(args.refs, args.arrays)))


if __name__ == "__main__":
    main()

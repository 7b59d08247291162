"""The Icechunk side of bench_splitting.py, run with an interpreter that has `icechunk`.

    bench/.venv312/bin/python bench/icechunk_side.py --refs N [--split]

Same repository shape and the same refs (same generator, same seed) as bench_splitting.py;
prints one JSON object of figures. Icechunk needs Python >= 3.12, so it lives in its own venv
(`make bench` builds bench/.venv312).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import icechunk as ic
import numpy as np
import zarr

CELLS = 1000
CONTAINER = "file:///data/"


def refs(
    steps: int, first_step: int = 0, seed: int = 0
) -> tuple[list[str], np.ndarray, np.ndarray]:
    n = steps * CELLS
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20_000, 40_000, n).astype(np.uint64)
    step = np.repeat(np.arange(first_step, first_step + steps), CELLS)
    file_no = step // 10
    ends = np.cumsum(lengths)
    starts = ends - lengths
    offsets = starts - starts[np.searchsorted(file_no, file_no, side="left")]
    names = [f"{CONTAINER}run/day-{f}.nc" for f in file_no.tolist()]
    return names, offsets.astype(np.uint64), lengths


def config(split: bool) -> ic.RepositoryConfig:
    cfg = ic.RepositoryConfig.default()
    cfg.set_virtual_chunk_container(
        ic.VirtualChunkContainer(CONTAINER, ic.local_filesystem_store("/data"))
    )
    if split:
        splitting = ic.ManifestSplittingConfig.from_dict(
            {
                ic.ManifestSplitCondition.path_matches(".*var"): {
                    ic.ManifestSplitDimCondition.Axis(0): 1000
                }
            }
        )
        cfg.manifest = ic.ManifestConfig(splitting=splitting)
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--refs", type=int, default=10_000_000)
    parser.add_argument("--split", action="store_true")
    args = parser.parse_args()
    steps = args.refs // CELLS
    path = tempfile.mkdtemp(prefix="bench-icechunk-")
    storage = ic.local_filesystem_storage(path)
    repo = ic.Repository.create(storage, config(args.split))
    session = repo.writable_session("main")
    root = zarr.group(session.store)
    for name, size in (("time", steps), ("lat", 180), ("lon", 360)):
        root.create_array(name, shape=(size,), chunks=(100,), dtype="float64", compressors=None)[
            :
        ] = 0.0
    for i in range(50):
        root.create_array(
            f"small{i}", shape=(100,), chunks=(10,), dtype="float64", compressors=None
        )[:] = 1.0
    root.create_array(
        "var",
        shape=(steps, CELLS),
        chunks=(1, 1),
        dtype="float32",
        dimension_names=["time", "cell"],
    )
    names, offsets, lengths = refs(steps)
    t0 = time.perf_counter()
    session.store.set_virtual_refs_arr(
        "var", (steps, CELLS), names, offsets, lengths, validate_containers=False
    )
    set_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    session.commit("datacube")
    commit_s = time.perf_counter() - t0
    manifest_bytes = sum(
        p.stat().st_size for p in Path(path, "manifests").rglob("*") if p.is_file()
    )

    os.sync()  # as bench_splitting.py: the build's writes reach the disk before any timer
    # The same warm-up as bench_splitting.py: one zarr read of `lat`, from another open.
    warm = ic.Repository.open(ic.local_filesystem_storage(path), config(args.split))
    zarr.open_array(warm.readonly_session("main").store, path="lat", mode="r")[:]
    t0 = time.perf_counter()
    reader = ic.Repository.open(
        ic.local_filesystem_storage(path), config(args.split)
    ).readonly_session("main")
    zarr.open_array(reader.store, path="time", mode="r")[:]
    cold_ms = (time.perf_counter() - t0) * 1000

    session = repo.writable_session("main")
    zarr.open_array(session.store, path="small7")[30:40] = 2.0
    t0 = time.perf_counter()
    session.commit("one chunk of one small array")
    small_ms = (time.perf_counter() - t0) * 1000
    again, again_cpu = [], []
    for k in range(20):  # bench_splitting.SMALL_COMMITS_AGAIN, each a session of its own
        session = repo.writable_session("main")
        zarr.open_array(session.store, path="small7")[(k % 10) * 10 : (k % 10 + 1) * 10] = k
        cpu = time.process_time()
        t0 = time.perf_counter()
        session.commit(f"small commit {k}")
        again.append((time.perf_counter() - t0) * 1000)
        again_cpu.append((time.process_time() - cpu) * 1000)
    small_again_ms = statistics.median(again)

    session = repo.writable_session("main")
    zarr.open_array(session.store, path="var").resize((steps + 1, CELLS))
    names, offsets, lengths = refs(1, first_step=steps, seed=1)
    t0 = time.perf_counter()
    session.store.set_virtual_refs_arr(
        "var", (1, CELLS), names, offsets, lengths, validate_containers=False, arr_offset=(steps, 0)
    )
    t1 = time.perf_counter()
    session.commit("append 1,000 refs")
    append_ms = (time.perf_counter() - t0) * 1000
    append_commit_ms = (time.perf_counter() - t1) * 1000
    print(
        json.dumps(
            {
                "set_refs_s": set_s,
                "commit_s": commit_s,
                "bytes_per_ref": manifest_bytes / args.refs,
                "cold_read_time_ms": cold_ms,
                "small_commit_ms": small_ms,
                "small_commit_again_ms": small_again_ms,
                "small_commit_again_cpu_ms": statistics.median(again_cpu),
                "append_ms": append_ms,
                "append_commit_ms": append_commit_ms,
            }
        )
    )


if __name__ == "__main__":
    main()

"""Zarr-through-the-repository benchmarks (issue: zarr and xarray on a repository).

    .venv/bin/python bench/bench_zarr.py [--gib 1.0] [--snapshots 1000]

1. Read a float32 array (uncompressed chunks of 4 MiB) with zarr through `session.store` vs
   the same data in zarr's own LocalStore, same process: throughput ratio (target >= 0.9).
2. `xr.open_zarr` on a repository with 200 arrays and N snapshots, cold (target <= 0.2 s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import xarray as xr
import zarr
from zarr.storage import LocalStore

from bench.common import median_seconds, print_table
from icechunk_spark import Repository

CHUNK = (1024, 1024)  # float32: 4 MiB per chunk


def read_throughput(gib: float) -> tuple[float, float, float]:
    side = int(np.sqrt(gib * 2**30 / 4) // CHUNK[0] * CHUNK[0])
    data = np.random.default_rng(0).random((side, side), dtype=np.float32)
    root = Path(tempfile.mkdtemp(prefix="bench-zarr-"))
    local = zarr.create_array(
        LocalStore(root / "plain"),
        shape=data.shape,
        chunks=CHUNK,
        dtype="float32",
        compressors=None,
    )
    local[:] = data
    repo = Repository.create((root / "repo").as_uri())
    session = repo.writable_session()
    ours = zarr.create_array(
        session.store, name="a", shape=data.shape, chunks=CHUNK, dtype="float32", compressors=None
    )
    ours[:] = data
    session.commit("1 GiB")
    nbytes = data.nbytes
    del data

    def read_local() -> None:
        zarr.open_array(LocalStore(root / "plain", read_only=True), mode="r")[:]

    def read_ours() -> None:
        reader = Repository.open((root / "repo").as_uri()).readonly_session()
        zarr.open_array(reader.store, path="a", mode="r")[:]

    read_local(), read_ours()  # warm the page cache for both, equally
    local_s, ours_s = median_seconds(read_local, 3), median_seconds(read_ours, 3)
    return nbytes / 2**30, nbytes / local_s / 2**20, nbytes / ours_s / 2**20


def open_dataset(snapshots: int) -> float:
    url = Path(tempfile.mkdtemp(prefix="bench-open-")).as_uri()
    repo = Repository.create(url)
    session = repo.writable_session()
    ds = xr.Dataset(
        {f"v{i}": (("time",), np.arange(10.0)) for i in range(200)}, coords={"time": np.arange(10)}
    )
    ds.to_zarr(session.store, mode="w", consolidated=False)
    session.commit("200 arrays")
    for i in range(snapshots - 2):
        session = repo.writable_session()
        session.set_chunk(f"/v{i % 200}", (0,), np.full(10, i, np.float64).tobytes())
        session.commit(f"commit {i}")

    def cold_open() -> None:
        xr.open_zarr(Repository.open(url).readonly_session().store, consolidated=False)

    return median_seconds(cold_open, 5)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--snapshots", type=int, default=1000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    gib, local_mbs, ours_mbs = read_throughput(args.gib)
    open_s = open_dataset(args.snapshots)
    print_table(
        "zarr and xarray through a repository (local disk)",
        ["benchmark", "figure", "target"],
        [
            [f"read {gib:.2f} GiB float32, LocalStore MiB/s", local_mbs, ""],
            [f"read {gib:.2f} GiB float32, session.store MiB/s", ours_mbs, ""],
            ["  ratio ours / LocalStore", ours_mbs / local_mbs, ">= 0.9"],
            [f"xr.open_zarr, 200 arrays, {args.snapshots} snapshots: s", open_s, "<= 0.2"],
        ],
    )


if __name__ == "__main__":
    main()

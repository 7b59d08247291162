"""Writing a Dask-backed dataset with two workers: to_repository vs to_zarr (issue 14).

    .venv/bin/python bench/bench_dask_write.py [--gib 1.0] [--rounds 2] [--uncompressed]

One ``dask.distributed`` LocalCluster (2 worker processes, 1 thread each) writes the same
Dask-backed float32 dataset (Zarr chunks of 32 MiB, one per Dask block, zarr's default codecs
or none with ``--uncompressed``) twice per round, alternating:

* ``ds.to_zarr`` into zarr's own ``LocalStore``;
* ``to_repository(ds, session)`` + ``session.commit`` into a ``file://`` repository: every
  block through a fork on a worker, merged and committed once.

Both sides generate the data on the workers the same way, so the difference is the write
path. The table shows the median seconds and the ratio ours / to_zarr (target <= 1.2). The
repository fsyncs every chunk file and its folder before the commit can reference it (a
commit must survive a crash); LocalStore does not, so both figures are also shown with the
page cache flushed before the clock stops (``sync``), which is what durable data costs either
way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dask.array as da
import xarray as xr
from distributed import Client, LocalCluster
from zarr.storage import LocalStore

from bench.common import print_table
from icechunk_spark import Repository
from icechunk_spark.xarray import to_repository

SIDE = 1024
BLOCK_TIMES = 8  # 8 x 1024 x 1024 float32: 32 MiB per Dask block and per Zarr chunk
CHUNKS = (BLOCK_TIMES, SIDE, SIDE)


def dataset(gib: float) -> xr.Dataset:
    times = max(BLOCK_TIMES, int(gib * 2**30 / (4 * SIDE * SIDE)) // BLOCK_TIMES * BLOCK_TIMES)
    rng = da.random.default_rng(0)
    data = rng.random((times, SIDE, SIDE), dtype="float32", chunks=(BLOCK_TIMES, SIDE, SIDE))
    return xr.Dataset({"v": (("time", "y", "x"), data)})


def write_plain(ds: xr.Dataset, root: Path, encoding: dict[str, Any]) -> None:
    ds.to_zarr(LocalStore(root / "plain"), mode="w", consolidated=False, encoding=encoding)


def write_ours(ds: xr.Dataset, root: Path, encoding: dict[str, Any]) -> None:
    repo = Repository.create((root / "repo").as_uri())
    session = repo.writable_session()
    to_repository(ds, session, mode="w", encoding=encoding)
    session.commit("1 GiB from two Dask workers")


def timed(
    write: Callable[[xr.Dataset, Path, dict[str, Any]], None],
    ds: xr.Dataset,
    root: Path,
    encoding: dict[str, Any],
) -> tuple[float, float]:
    """(seconds until the write returns, seconds until its data is on disk)."""
    os.sync()  # start from a clean page cache, for both sides alike
    start = time.perf_counter()
    write(ds, root, encoding)
    returned = time.perf_counter() - start
    os.sync()
    return returned, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--uncompressed", action="store_true", help="no compression codec")
    args = parser.parse_args()
    encoding = {"v": {"chunks": CHUNKS, **({"compressors": None} if args.uncompressed else {})}}
    codecs = "uncompressed" if args.uncompressed else "zarr's default codecs"
    warnings.simplefilter("ignore")
    ds = dataset(args.gib)
    gib = ds["v"].nbytes / 2**30
    figures: dict[str, list[tuple[float, float]]] = {"to_zarr": [], "to_repository": []}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        for _ in range(args.rounds):
            for name, write in (("to_zarr", write_plain), ("to_repository", write_ours)):
                root = Path(tempfile.mkdtemp(prefix="bench-dask-"))
                try:
                    figures[name].append(timed(write, ds, root, encoding))
                finally:
                    shutil.rmtree(root, ignore_errors=True)
    plain = [statistics.median(f[i] for f in figures["to_zarr"]) for i in (0, 1)]
    ours = [statistics.median(f[i] for f in figures["to_repository"]) for i in (0, 1)]
    blocks = ds["v"].data.npartitions
    print_table(
        f"{gib:.2f} GiB Dask-backed float32 ({blocks} blocks of 32 MiB, {codecs}), "
        f"2 workers, median of {args.rounds}",
        ["write", "s (returned)", "MiB/s", "s (data on disk)", "MiB/s"],
        [
            [
                "to_zarr, LocalStore",
                plain[0],
                gib * 1024 / plain[0],
                plain[1],
                gib * 1024 / plain[1],
            ],
            [
                "to_repository + commit",
                ours[0],
                gib * 1024 / ours[0],
                ours[1],
                gib * 1024 / ours[1],
            ],
            [
                "ratio ours / to_zarr (target <= 1.2)",
                ours[0] / plain[0],
                "",
                ours[1] / plain[1],
                "",
            ],
        ],
    )


if __name__ == "__main__":
    main()

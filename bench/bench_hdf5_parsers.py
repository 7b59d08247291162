"""Which HDF5 scanner imports faster: kerchunk's (ours) or VirtualiZarr's HDFParser.

One NetCDF4 file of about 1000 chunks (``tas``: 1000 x 32 x 32 float32, one zlib chunk per
time step), imported with ``import_netcdf(parser=...)`` into a fresh local repository and
committed; the best of ``--repeat`` runs per scanner (the machine may be shared).

    PYTHONPATH=. python bench/bench_hdf5_parsers.py [--chunks 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import netCDF4
import numpy as np

from icechunk_spark import Repository
from icechunk_spark.virtual import import_netcdf


def write_file(path: Path, chunks: int) -> None:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", chunks)
        ds.createDimension("lat", 32)
        ds.createDimension("lon", 32)
        time_ = ds.createVariable("time", "f8", ("time",))
        time_.units = "days since 2000-01-01"
        time_[:] = np.arange(chunks)
        tas = ds.createVariable(
            "tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 32, 32)
        )
        tas[:] = np.random.default_rng(0).normal(280, 5, (chunks, 32, 32)).astype("f4")


def run(directory: Path, url: str, parser: str, k: int) -> float:
    repo = Repository.create(
        (directory / f"repo-{parser}-{k}").as_uri(),
        config={"virtual_chunk_containers": {directory.as_uri() + "/": {}}},
        authorize_virtual=[directory.as_uri() + "/"],
    )
    start = time.perf_counter()
    session = repo.writable_session()
    import_netcdf(session, url, concat_dim=None, parser=parser)  # type: ignore[arg-type]
    session.commit("import")
    elapsed = time.perf_counter() - start
    repo.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "big.nc"
        write_file(path, args.chunks)
        for name in ("kerchunk", "virtualizarr"):
            best = min(run(directory, path.as_uri(), name, k) for k in range(args.repeat))
            print(f"{name:13s} {args.chunks} chunks: {best:.3f} s (best of {args.repeat})")


if __name__ == "__main__":
    main()

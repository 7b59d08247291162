"""Ingest files as one virtual dataset: the bytes stay in the files.

Executors scan only the files the dataset does not hold yet (kerchunk's NetCDF4/HDF5 scanner,
or with --parser any of VirtualiZarr's: NetCDF3, TIFF, FITS, Zarr...; --parser auto reads each
file with its own, so a folder may mix formats) into
ref rows with file-local chunk coords plus one small summary per file. The driver sees only
the summaries: it checks the files agree with each other and the dataset, and places them
after it along --concat-dim in the order of their times, not their names (a file whose times
fall before the dataset's end, or repeat another's, is refused: the job only appends);
executors shift the rows into place and the commit coordinator commits them as one
snapshot. Which files the dataset holds is read from
the repository (the files its refs point into, plus those the last ingest recorded), so a
re-run imports only new files, says how many it skipped, and commits nothing when none is
new. Files that do not agree (another variable, dtype, packing...) are refused; the
single-process `icechunk-spark import` combines such files by rebuilding the dataset.

    spark-submit jobs/ingest_virtual.py --files '/data/tas_*.nc' --repo file:///tmp/tas
    spark-submit jobs/ingest_virtual.py --files '/archive/*.nc' --parser auto --repo ...
    spark-submit jobs/ingest_virtual.py --make-sample demo-data --days 10   # sample files
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from icechunk_spark.cli.parser import add_import_options
from icechunk_spark.errors import InvalidInputError
from icechunk_spark.exit import exit_process
from icechunk_spark.repository import Repository
from icechunk_spark.spark.jobs import base_parser, run, spark_session, storage_options


def make_sample(folder: str, days: int, first_day: int = 0) -> list[str]:
    """Daily NetCDF4 files (zlib-compressed, chunked) of a small temperature field."""
    import netCDF4

    Path(folder).mkdir(parents=True, exist_ok=True)
    lat, lon = np.linspace(-90, 90, 73), np.linspace(0, 357.5, 144)
    paths = []
    for day in range(first_day, first_day + days):
        path = Path(folder, f"tas_day{day:04d}.nc").absolute()
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", lat.size)
            ds.createDimension("lon", lon.size)
            time = ds.createVariable("time", "f8", ("time",))
            time.units, time.calendar = "days since 2000-01-01", "standard"
            ds.createVariable("lat", "f8", ("lat",))[:] = lat
            ds.createVariable("lon", "f8", ("lon",))[:] = lon
            tas = ds.createVariable(
                "tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 73, 72)
            )
            tas.units, tas.standard_name = "K", "air_temperature"
            time[:] = [day]
            tas[0] = (
                280
                + 20 * np.cos(np.radians(lat))[:, None]
                + np.sin(day / 10 + np.radians(lon))[None, :]
            )
        paths.append(str(path))
    return paths


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--files", help="glob of files (local path, file:// or s3://)")
    add_import_options(parser)
    parser.add_argument(
        "--make-sample", metavar="DIR", help="write sample daily files into DIR and exit"
    )
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--first-day", type=int, default=0)
    args = parser.parse_args()
    if args.make_sample:
        for path in make_sample(args.make_sample, args.days, args.first_day):
            print(path)
        return 0

    def body() -> tuple[Repository, str | None]:
        if not args.files:
            raise InvalidInputError("--files is required (a glob of NetCDF files)")
        from icechunk_spark.spark.virtual_ingest import ingest_virtual

        spark = spark_session("ingest_virtual", args)
        result = ingest_virtual(
            spark,
            args.repo,
            args.files,
            branch=args.branch,
            concat_dim=args.concat_dim,
            group=args.group,
            container=args.container,
            file_options=storage_options(args.files_option),
            storage_options=storage_options(args.storage_option),
            message=args.message,
            parser=args.parser,
        )
        print(
            f"ingest_virtual: {len(result.imported)} new files imported, "
            f"{result.skipped} skipped (already in the dataset)",
            file=sys.stderr,
        )
        return result.repo, result.snapshot

    return run("ingest_virtual", body)


if __name__ == "__main__":
    exit_process(main())

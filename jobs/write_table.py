"""Write a tidy table (one row per element: time, lat, lon, values...) as arrays.

The rows come from Parquet files (or any Spark table); every column but the dimensions
becomes an array on them, with coordinate arrays xarray reads back (``xr.open_zarr``).
Executors assemble and encode the chunks; the driver commits once. ``--append-dim time``
adds new times after those the dataset has.

    spark-submit jobs/write_table.py --repo file:///tmp/obs --input obs.parquet \\
        --dims time,lat,lon --chunks time=24,lat=90,lon=90 [--group /obs] \\
        [--append-dim time] [--mode overwrite] [--table db.hourly]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout too

from icechunk_spark.errors import InvalidInputError
from icechunk_spark.exit import exit_process
from icechunk_spark.repository import Repository
from icechunk_spark.spark import write_values
from icechunk_spark.spark.jobs import (
    base_parser,
    open_or_create,
    run,
    spark_session,
    storage_options,
)


def parse_chunks(text: str) -> dict[str, int]:
    """``time=24,lat=90`` -> ``{"time": 24, "lat": 90}``."""
    chunks = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, size = part.partition("=")
        if not size.isdigit():
            raise InvalidInputError(f"--chunks takes dim=size pairs, not {part!r}")
        chunks[name.strip()] = int(size)
    return chunks


def main() -> int:
    parser = base_parser(__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="Parquet file or folder of the rows")
    source.add_argument("--table", help="a table Spark knows (spark.table)")
    parser.add_argument("--dims", required=True, help="dimension columns in order: time,lat,lon")
    parser.add_argument("--chunks", default="", help="chunk sizes: time=24,lat=90,lon=90")
    parser.add_argument("--group", default="/", help="the dataset's group (default /)")
    parser.add_argument("--append-dim", help="a dimension new labels are appended along")
    parser.add_argument("--mode", choices=("append", "overwrite"), default="append")
    args = parser.parse_args()

    def body() -> tuple[Repository, str | None]:
        options = storage_options(args.storage_option)
        repo = open_or_create(args.repo, options)
        spark = spark_session("write-table", args)
        rows = spark.read.parquet(args.input) if args.input else spark.table(args.table)
        snapshot = write_values(
            rows,
            args.repo,
            dims=args.dims,
            chunks=parse_chunks(args.chunks),
            group=args.group,
            mode=args.mode,
            append_dim=args.append_dim,
            branch=args.branch,
            message=args.message,
            storage_options=options,
        )
        return repo, snapshot

    return run("write-table", body)


if __name__ == "__main__":
    exit_process(main())

"""Append time steps to a datacube made by ingest_datacube.py, in one atomic commit.

The reader/writer scenario of seed 001: while this runs, readers of the branch see the cube
either before or after the append, never a mix, whatever chunk they read.

    spark-submit jobs/append.py --repo file:///tmp/cube --steps 8
"""

from __future__ import annotations

import argparse

import ingest_datacube as cube  # jobs/ is on sys.path: it is this script's folder

from icechunk_spark.errors import InvalidInputError
from icechunk_spark.exit import exit_process
from icechunk_spark.repository import Repository
from icechunk_spark.spark import write_chunks
from icechunk_spark.spark.jobs import base_parser, run, spark_session, storage_options


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--steps", type=int, default=8, help="time steps to add (whole chunks)")
    parser.add_argument("--array", default="/air_temperature")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()

    def body() -> tuple[Repository, str | None]:
        options = storage_options(args.storage_option)
        repo = Repository.open(args.repo, storage_options=options)
        meta = repo.readonly_session(branch=args.branch).get_node(args.array).meta
        if meta is None or meta.ndim != 3:
            raise InvalidInputError(f"{args.array!r} is not a time x lat x lon array")
        ntime, nlat, nlon = meta.shape
        ct, cy, cx = meta.chunk_shape
        if args.steps < 1 or args.steps % ct or ntime % ct:
            raise InvalidInputError(f"--steps must be a positive multiple of the time chunk ({ct})")
        layout = argparse.Namespace(
            nlat=nlat,
            nlon=nlon,
            chunk_time=ct,
            chunk_lat=cy,
            chunk_lon=cx,
            partitions=args.partitions,
        )
        spark = spark_session("append", args)
        spark.sparkContext.addPyFile(cube.__file__)  # executors unpickle cube.chunk_rows
        rows = cube.cube_rows(spark, layout, range(ntime // ct, (ntime + args.steps) // ct))
        message = args.message or f"append {args.steps} time steps"
        snapshot = write_chunks(
            rows,
            args.repo,
            branch=args.branch,
            storage_options=options,
            append_dim="time",
            message=message,
        )
        return repo, snapshot

    return run("append", body)


if __name__ == "__main__":
    exit_process(main())

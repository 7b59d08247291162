"""Write a synthetic CF datacube (time x lat x lon, float32) with Spark.

Executors compute each chunk's values and encode them with the array's Zarr codecs (zstd);
the driver packs manifests and commits once. The default (64 x 721 x 1440, about 265 MB of
float32) fits a laptop; sizes are flags.

    spark-submit jobs/ingest_datacube.py --repo file:///tmp/cube [--ntime 64 --nlat 721 --nlon 1440]
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout too

import numpy as np
import pyarrow as pa

from icechunk_spark.errors import InvalidInputError
from icechunk_spark.exit import exit_process
from icechunk_spark.spark import write_chunks
from icechunk_spark.spark.jobs import (
    base_parser,
    open_or_create,
    run,
    spark_session,
    storage_options,
)

ROW_SCHEMA = pa.schema(
    [("array", pa.string()), ("coord", pa.list_(pa.int64())), ("data", pa.binary())]
)
ROW_DDL = "array string, coord array<bigint>, data binary"


def array_docs(args) -> dict[str, dict]:
    zstd = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ]

    def doc(shape, chunks, dtype, dims, attrs, fill=0.0, codecs=None):
        return {
            "shape": list(shape),
            "chunk_shape": list(chunks),
            "data_type": dtype,
            "fill_value": fill,
            "dimension_names": dims,
            "attributes": attrs,
            **({"codecs": codecs} if codecs else {}),
        }

    cube = (args.ntime, args.nlat, args.nlon)
    return {
        "/time": doc(
            [args.ntime],
            [args.chunk_time],  # chunked like the cube's time axis, so appends grow both alike
            "int64",
            ["time"],
            {"units": "days since 2000-01-01", "calendar": "standard", "standard_name": "time"},
            fill=0,
        ),
        "/lat": doc(
            [args.nlat],
            [args.nlat],
            "float64",
            ["lat"],
            {"units": "degrees_north", "standard_name": "latitude"},
        ),
        "/lon": doc(
            [args.nlon],
            [args.nlon],
            "float64",
            ["lon"],
            {"units": "degrees_east", "standard_name": "longitude"},
        ),
        "/air_temperature": doc(
            cube,
            (args.chunk_time, args.chunk_lat, args.chunk_lon),
            "float32",
            ["time", "lat", "lon"],
            {
                "units": "K",
                "standard_name": "air_temperature",
                "long_name": "Synthetic near-surface air temperature",
            },
            fill="NaN",
            codecs=zstd,
        ),
    }


def coordinate_rows(args, time_chunks: range) -> list[tuple[str, list[int], bytes]]:
    """Rows of the coordinate arrays: lat and lon whole with the first time chunk, and the
    time chunks asked for (days since 2000-01-01, one per step)."""
    rows = []
    ct = args.chunk_time
    for t in time_chunks:
        rows.append(("/time", [t], np.arange(t * ct, (t + 1) * ct, dtype=np.int64).tobytes()))
    if time_chunks.start == 0:
        rows.append(("/lat", [0], np.linspace(-90, 90, args.nlat).tobytes()))
        rows.append(("/lon", [0], np.linspace(0, 360, args.nlon, endpoint=False).tobytes()))
    return rows


def cube_rows(spark, args, time_chunks: range):
    """A DataFrame of every chunk row of the cube's time chunks ``time_chunks``: the data
    chunks are computed by executors, the coordinate chunks come from the driver."""
    coord_df = spark.createDataFrame(coordinate_rows(args, time_chunks), ROW_DDL)
    space = (-(-args.nlat // args.chunk_lat), -(-args.nlon // args.chunk_lon))
    count = len(time_chunks) * space[0] * space[1]
    sizes = (
        time_chunks.start,
        args.nlat,
        args.nlon,
        args.chunk_time,
        args.chunk_lat,
        args.chunk_lon,
    )
    data_df = spark.range(count, numPartitions=max(1, min(args.partitions, count))).mapInArrow(
        lambda batches: chunk_rows(batches, sizes), ROW_DDL
    )
    return coord_df.unionByName(data_df)


def chunk_rows(
    batches: Iterator[pa.RecordBatch], sizes: tuple[int, ...]
) -> Iterator[pa.RecordBatch]:
    """Executors: chunk numbers in, raw C-order chunk bytes out (a smooth seasonal field)."""
    first_t, nlat, nlon, ct, cy, cx = sizes
    space = (-(-nlat // cy), -(-nlon // cx))
    lat_all = np.linspace(-90, 90, nlat)
    lon_all = np.linspace(0, 360, nlon, endpoint=False)
    for batch in batches:
        coords, data = [], []
        for flat in batch.column(0).to_pylist():
            t, y, x = (
                first_t + flat // (space[0] * space[1]),
                *np.unravel_index(flat % (space[0] * space[1]), space),
            )
            days = np.arange(t * ct, (t + 1) * ct)
            lat, lon = lat_all[y * cy : (y + 1) * cy], lon_all[x * cx : (x + 1) * cx]
            sin_lat = np.sin(np.radians(lat))[None, :, None]
            season = np.cos(2 * np.pi * days / 365.0)[:, None, None]
            field = 288.0 - 40.0 * sin_lat**2 + 10.0 * season * sin_lat
            field = field + 3.0 * np.cos(np.radians(lon))[None, None, :]
            chunk = np.full((ct, cy, cx), np.nan, dtype=np.float32)  # edge chunks: fill outside
            chunk[:, : len(lat), : len(lon)] = field
            coords.append([int(t), int(y), int(x)])
            data.append(chunk.tobytes())
        arrays = [
            pa.array(["/air_temperature"] * len(coords)),
            pa.array(coords, pa.list_(pa.int64())),
            pa.array(data, pa.binary()),
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=ROW_SCHEMA)


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--ntime", type=int, default=64)
    parser.add_argument("--nlat", type=int, default=721)
    parser.add_argument("--nlon", type=int, default=1440)
    parser.add_argument("--chunk-time", type=int, default=8)
    parser.add_argument("--chunk-lat", type=int, default=181)
    parser.add_argument("--chunk-lon", type=int, default=360)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()

    def body():
        if args.ntime % args.chunk_time:
            raise InvalidInputError(
                "--ntime must be a multiple of --chunk-time (appends add whole chunks)"
            )
        options = storage_options(args.storage_option)
        repo = open_or_create(args.repo, options)
        session = repo.writable_session(args.branch)
        if not any(n.path == "/" for n in session.list_nodes()):
            session.create_group(
                "/", attributes={"Conventions": "CF-1.8", "title": "Synthetic datacube"}
            )
            session.commit("create the dataset group")
        spark = spark_session("ingest_datacube", args)
        rows = cube_rows(spark, args, range(args.ntime // args.chunk_time))
        snapshot = write_chunks(
            rows,
            args.repo,
            branch=args.branch,
            storage_options=options,
            arrays=array_docs(args),
            message=args.message or "ingest datacube",
        )
        return repo, snapshot

    return run("ingest_datacube", body)


if __name__ == "__main__":
    exit_process(main())

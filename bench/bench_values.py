"""Arrays as tables in Spark (issue: SQL over the values), on local disk, one run.

    .venv/bin/python bench/bench_values.py [--days 3650] [--lat 180] [--lon 360]
    .venv/bin/python bench/bench_values.py --write   # tidy rows -> arrays (bench/values_write.py)

A native float32 ``tas(time, lat, lon)`` (zstd, chunks of 30 days x 90 x 90) written by xarray
with chunk statistics on; the same values as Parquet (time, lat, lon, tas; written a year at a
time). Timed:

1. full scan ``count()`` and ``avg(tas)`` through ``table=values``, against Spark reading the
   Parquet copy, and against xarray + pandas in this process (``to_dataframe`` a year at a time,
   so it fits in memory; the mean of all the rows);
2. one month in one box (July 2005, lat 0..30, lon 100..150, the ``where`` option): seconds,
   and chunk boxes planned against chunks intersecting (computed from the labels);
3. ``aggregate(mean)`` over the whole array from statistics, against the full-scan ``avg``.

Memory: every process of the tree (driver, JVM, Python workers), sampled while each step runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import xarray as xr

from bench.common import TreeMemory, local_spark, memory_rows, print_table, timed
from icechunk_spark import Repository
from icechunk_spark.values import LabelCondition, Selection, chunk_boxes, values_layout

CHUNKS = (30, 90, 90)


def write_repository(root: Path, days: int, nlat: int, nlon: int) -> tuple[str, Path]:
    """The repository (xarray writes it a year at a time) and the Parquet copy."""
    url = (root / "repo").as_uri()
    repo = Repository.create(url, config={"chunk_statistics": ["/tas"]})
    time = pd.date_range("2000-01-01", periods=days, freq="D")
    lat = np.linspace(-89.5, 89.5, nlat, dtype="f4")
    lon = np.linspace(0.5, 359.5, nlon, dtype="f4")
    parquet = root / "tas.parquet"
    parquet.mkdir()
    rng = np.random.default_rng(0)
    session = repo.writable_session("main")
    step = 360  # a multiple of the time chunk: each slab writes whole chunks
    for start in range(0, days, step):
        t = time[start : start + step]
        tas = (250 + 50 * rng.random((t.size, nlat, nlon))).astype("f4")
        ds = xr.Dataset(
            {"tas": (("time", "lat", "lon"), tas)}, coords={"time": t, "lat": lat, "lon": lon}
        )
        if start == 0:
            zstd = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
            encoding = {"tas": {"chunks": CHUNKS, "compressors": [zstd]}}
            ds.to_zarr(session.store, encoding=encoding, zarr_format=3, consolidated=False)
        else:
            ds.to_zarr(session.store, append_dim="time", zarr_format=3, consolidated=False)
        frame = ds.to_dataframe().reset_index()
        table = pa.Table.from_pandas(frame, preserve_index=False)
        # Spark reads Parquet timestamps in microseconds, and these are instants (UTC).
        table = table.set_column(0, "time", table.column("time").cast(pa.timestamp("us", "UTC")))
        pq.write_table(table, parquet / f"{start}.parquet")
    session.commit("tas")
    return url, parquet


def xarray_mean(url: str) -> tuple[int, float]:
    """Rows and mean of tas through xr.open_zarr + to_dataframe, a year at a time."""
    ds = xr.open_zarr(Repository.open(url).readonly_session().store, consolidated=False)
    rows, total = 0, 0.0
    for start in range(0, ds.sizes["time"], 360):
        frame = ds.tas.isel(time=slice(start, start + 360)).to_dataframe()
        rows += len(frame)
        total += float(frame["tas"].astype("f8").sum())
    return rows, total / rows


def month_box(url: str) -> list[LabelCondition]:
    return [
        LabelCondition("time", ">=", "2005-07-01"),
        LabelCondition("time", "<=", "2005-07-31"),
        LabelCondition("lat", ">=", 0.0),
        LabelCondition("lat", "<=", 30.0),
        LabelCondition("lon", ">=", 100.0),
        LabelCondition("lon", "<=", 150.0),
    ]


def intersecting(url: str) -> tuple[int, int]:
    """Chunk boxes the plan reads for the month box, and those the labels say intersect it."""
    session = Repository.open(url).readonly_session()
    layout = values_layout(session, "/", ["tas"])
    planned = len(chunk_boxes(layout, Selection.of(layout, month_box(url))))
    ds = xr.open_zarr(session.store, consolidated=False)
    t = ds.time.values
    hits = [
        np.flatnonzero((t >= np.datetime64("2005-07-01")) & (t <= np.datetime64("2005-07-31"))),
        np.flatnonzero((ds.lat.values >= 0) & (ds.lat.values <= 30)),
        np.flatnonzero((ds.lon.values >= 100) & (ds.lon.values <= 150)),
    ]
    count = 1
    for index, chunk in zip(hits, CHUNKS, strict=True):
        count *= len({int(i) // chunk for i in index})
    return planned, count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=3650)
    parser.add_argument("--lat", type=int, default=180)
    parser.add_argument("--lon", type=int, default=360)
    parser.add_argument("--write", action="store_true", help="tidy rows -> arrays instead")
    parser.add_argument("--time", type=int, default=1000, help="--write: days")
    parser.add_argument("--write-lat", type=int, default=100)
    parser.add_argument("--write-lon", type=int, default=1000)
    parser.add_argument("--xarray-rows", type=int, default=20_000_000)
    args = parser.parse_args()
    if args.write:
        from bench.values_write import main as write_main

        write_main(args.time, args.write_lat, args.write_lon, args.xarray_rows)
        return
    from icechunk_spark.spark import aggregate

    root = Path(tempfile.mkdtemp(prefix="bench-values-"))
    seconds, (url, parquet) = timed(lambda: write_repository(root, args.days, args.lat, args.lon))
    raw_mb = args.days * args.lat * args.lon * 4 / 1e6
    print(f"wrote {raw_mb:,.0f} MB of float32 (and its Parquet copy) in {seconds:.1f} s")

    spark = local_spark("bench-values", 4, driver_memory="1g")
    values = spark.read.format("icechunk").option("table", "values").option("arrays", "tas")
    table = values.load(url)
    copy = spark.read.parquet(str(parquet))
    rows, memory = [], {}
    # Warm-up outside the timers: the JVM's first query and the data source's Python workers.
    table.where("lat < -1000").count()
    copy.where("lat < -1000").count()

    def step(name: str, work: object) -> object:
        with TreeMemory() as tree:
            seconds, result = timed(work)  # type: ignore[arg-type]
        memory[name] = tree.peaks
        rows.append([name, f"{seconds:.2f}", result])
        return result

    step("values: count()", table.count)
    avg = step("values: avg(tas)", lambda: table.agg({"tas": "avg"}).first()[0])
    step("Parquet copy: count()", copy.count)
    step("Parquet copy: avg(tas)", lambda: copy.agg({"tas": "avg"}).first()[0])
    step("xarray + pandas: rows, mean", lambda: xarray_mean(url))
    # Read through the where option: the month and the box define the DataFrame.
    box = values.option(
        "where", '{"time": ["2005-07-01", "2005-07-31"], "lat": [0, 30], "lon": [100, 150]}'
    ).load(url)
    step("values: one month, one box, count()", box.count)
    mean = step(
        "aggregate(mean), whole array", lambda: aggregate(spark, url, "tas", funcs=["mean"])
    )
    planned, count = intersecting(url)

    print_table("table=values against Parquet and xarray (seconds)", ["step", "s", "answer"], rows)
    print(f"one month, one box: chunk boxes planned {planned}, intersecting {count}")
    assert isinstance(mean, dict)
    print(f"aggregate mean {mean['mean']:.6f} against avg(tas) {avg:.6f}")
    print_table("peak memory, MB", ["process", *memory], memory_rows(memory))
    spark.stop()


if __name__ == "__main__":
    main()

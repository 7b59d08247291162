"""Tidy rows -> arrays (``write_values``), against Spark writing Parquet and xarray's own path.

    .venv/bin/python bench/bench_values.py --write [--time 1000] [--lat 100] [--lon 1000]

Rows ``(time, lat, lon, tas, pr)``, two float32 value columns, made by Spark from
``spark.range`` (no input file to read), ``local[2]``. Timed, one run each, in this order:

1. ``xr.Dataset.from_dataframe(pdf.set_index(dims)).to_zarr(LocalStore)`` of the largest
   slice pandas holds here (``--xarray-rows``), rows made in this process first (not timed),
   before Spark starts;
2. Spark writes the rows as Parquet (snappy), the floor for any Spark write of them;
3. ``write_values`` of the same rows to a new repository (chunks 100 days x 100 x 100).

Memory: every process of the tree, sampled while each step runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from bench.common import TreeMemory, local_spark, memory_rows, print_table, timed
from icechunk_spark import Repository

DIMS = ("time", "lat", "lon")
CHUNKS = {"time": 100, "lat": 100, "lon": 100}
EPOCH_2000 = 946_684_800


def tidy_rows(spark: Any, ntime: int, nlat: int, nlon: int) -> Any:
    from pyspark.sql import functions as F

    cells = nlat * nlon
    return spark.range(ntime * cells).select(
        F.timestamp_seconds(F.lit(EPOCH_2000) + (F.col("id") / cells).cast("long") * 86_400).alias(
            "time"
        ),
        ((F.col("id") / nlon).cast("long") % nlat).cast("double").alias("lat"),
        (F.col("id") % nlon).cast("double").alias("lon"),
        (F.rand(1) * 50 + 250).cast("float").alias("tas"),
        (F.rand(2) * 10).cast("float").alias("pr"),
    )


def xarray_write(root: Path, rows: int, nlat: int, nlon: int) -> tuple[float, int]:
    """Seconds for from_dataframe + to_zarr of ``rows`` rows made here (making them untimed)."""
    cells = nlat * nlon
    ntime = max(rows // cells, 1)
    index = pd.MultiIndex.from_product(
        [
            pd.date_range("2000-01-01", periods=ntime, freq="D"),
            np.arange(nlat, dtype="f8"),
            np.arange(nlon, dtype="f8"),
        ],
        names=DIMS,
    )
    rng = np.random.default_rng(0)
    pdf = pd.DataFrame(
        {
            "tas": (250 + 50 * rng.random(len(index))).astype("f4"),
            "pr": (10 * rng.random(len(index))).astype("f4"),
        },
        index=index,
    )

    def write() -> None:
        ds = xr.Dataset.from_dataframe(pdf)
        encoding = {v: {"chunks": tuple(CHUNKS[d] for d in DIMS)} for v in ds.data_vars}
        store = zarr.storage.LocalStore(str(root / "xarray.zarr"))
        ds.to_zarr(store, zarr_format=3, consolidated=False, encoding=encoding, mode="w")

    seconds, _ = timed(write)
    return seconds, len(index)


def main(ntime: int, nlat: int, nlon: int, xarray_rows: int) -> None:
    from icechunk_spark.spark import write_values

    root = Path(tempfile.mkdtemp(prefix="bench-values-write-"))
    rows, memory = [], {}
    # xarray first, while no JVM runs: its memory column is this process alone.
    with TreeMemory() as tree:
        seconds, count = xarray_write(root, xarray_rows, nlat, nlon)
    memory["xarray from_dataframe + to_zarr"] = tree.peaks
    rows.append(_row("xarray from_dataframe + to_zarr", count, seconds))

    spark = local_spark("bench-values-write", 8, driver_memory="768m")
    rows_total = ntime * nlat * nlon
    df = tidy_rows(spark, ntime, nlat, nlon)
    url = (root / "repo").as_uri()
    Repository.create(url)
    spark.range(10).write.mode("overwrite").parquet(str(root / "warm.parquet"))  # JVM warm-up

    def step(name: str, work: Any) -> None:
        with TreeMemory() as tree:
            seconds, _ = timed(work)
        memory[name] = tree.peaks
        rows.append(_row(name, rows_total, seconds))

    step("Spark: Parquet", lambda: df.write.parquet(str(root / "rows.parquet")))
    step("write_values", lambda: write_values(df, url, dims=DIMS, chunks=CHUNKS, mode="overwrite"))
    spark.stop()
    ds = xr.open_zarr(Repository.open(url).readonly_session("main").store, consolidated=False)
    print(f"written: {dict(ds.sizes)}, arrays {sorted(ds.data_vars)}")
    print_table("tidy rows -> arrays", ["step", "rows", "s", "M rows/s"], rows)
    print_table("peak memory, MB", ["process", *memory], memory_rows(memory))


def _row(name: str, count: int, seconds: float) -> list[str]:
    return [name, f"{count:,}", f"{seconds:.1f}", f"{count / seconds / 1e6:.2f}"]


__all__ = ["main"]

"""Tidy rows -> arrays in one process (``write_table``): the dataset xarray's own path writes,
appends along a dimension, partly covered chunks merged, and bad rows refused."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
import zarr

from icechunk_spark import Repository
from icechunk_spark.errors import InvalidInputError
from icechunk_spark.values.assemble import (
    DuplicateLabelsError,
    chunk_rows,
    keyed,
    packed,
)
from icechunk_spark.values.grid import TidySpec
from icechunk_spark.values.tidy_write import write_table

DIMS = ("time", "lat", "lon")


def tidy(days: int, start: str = "2001-01-01", seed: int = 0, drop: float = 0.0) -> pd.DataFrame:
    time = pd.date_range(start, periods=days, freq="D")
    grid = pd.MultiIndex.from_product(
        [time, [-10.0, 0.0, 10.0], [0.0, 1.0, 2.0, 3.0, 4.0]], names=DIMS
    ).to_frame(index=False)
    rng = np.random.default_rng(seed)
    grid["tas"] = rng.random(len(grid)).astype("f4")
    grid["n"] = rng.integers(0, 100, len(grid))
    return grid.sample(frac=1 - drop, random_state=seed)


def xarray_writes(pdf: pd.DataFrame, encoding: dict | None = None) -> xr.Dataset:
    store = zarr.storage.MemoryStore()
    ds = xr.Dataset.from_dataframe(pdf.set_index(list(DIMS)))
    ds.to_zarr(store, zarr_format=3, consolidated=False, encoding=encoding)
    return xr.open_zarr(store, consolidated=False).load()


def written(
    repo: Repository, pdf: pd.DataFrame, mode: str = "append", **spec: object
) -> xr.Dataset:
    session = repo.writable_session("main")
    options = {"chunks": {"time": 3, "lat": 2, "lon": 2}, "group": "/g", **spec}
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    write_table(session, table, TidySpec(DIMS, **options), mode=mode)  # type: ignore[arg-type]
    session.commit("tidy rows")
    store = repo.readonly_session("main").store
    return xr.open_zarr(store, group="g", consolidated=False).load()


@pytest.fixture
def repo() -> Repository:
    return Repository.create(f"memory://{uuid.uuid4().hex}")


def test_rows_with_holes_give_xarrays_dataset(repo: Repository) -> None:
    pdf = tidy(7, drop=0.25)
    xr.testing.assert_identical(written(repo, pdf), xarray_writes(pdf))


def test_full_rows_keep_integer_arrays(repo: Repository) -> None:
    pdf = tidy(4)
    got = written(repo, pdf)
    assert got["n"].dtype == np.int64
    xr.testing.assert_identical(got, xarray_writes(pdf))


def test_append_merges_the_chunk_it_shares_with_the_old_end(repo: Repository) -> None:
    first, later = tidy(7), tidy(4, start="2001-01-08", seed=1)
    written(repo, first)
    got = written(repo, later, append_dim="time")  # chunk 2 (days 7..9) holds day 7 already
    xr.testing.assert_identical(got, xarray_writes(pd.concat([first, later])))


def test_update_rewrites_only_the_given_elements(repo: Repository) -> None:
    base = tidy(6)
    written(repo, base)
    patch = base[base.lon == 1.0].assign(tas=np.float32(-1), n=-1)
    expected = base.set_index(list(DIMS))
    expected.update(patch.set_index(list(DIMS)))
    got = written(repo, patch)
    xr.testing.assert_identical(got, xarray_writes(expected.reset_index().astype(base.dtypes)))


def test_placement_update_takes_old_and_new_labels_of_the_append_dim(repo: Repository) -> None:
    base = tidy(5)
    written(repo, base)
    both = tidy(4, start="2001-01-04", seed=3)  # days 4, 5 there already; 6, 7 new
    got = written(repo, both, append_dim="time", placement="update")
    expected = pd.concat([base[base.time < "2001-01-04"], both])
    xr.testing.assert_identical(got, xarray_writes(expected))


def test_packed_encoding_and_time_units_as_xarray(repo: Repository) -> None:
    pdf = tidy(5, drop=0.1)[[*DIMS, "tas"]]
    packed = {"dtype": "int16", "scale_factor": 0.001, "add_offset": 0.5, "_FillValue": -9999}
    encoding = {"tas": packed, "time": {"units": "hours since 1990-01-01", "calendar": "noleap"}}
    got = written(repo, pdf, encoding=encoding)
    xr.testing.assert_identical(got, xarray_writes(pdf, encoding))
    assert got.tas.encoding["dtype"] == np.int16


def test_compressors_are_zarr_codec_specs(repo: Repository) -> None:
    pdf = tidy(3)[[*DIMS, "tas"]]
    zstd = {"name": "zstd", "configuration": {"level": 9, "checksum": True}}
    got = written(repo, pdf, encoding={"tas": {"compressors": [zstd]}})
    xr.testing.assert_identical(got, xarray_writes(pdf))
    doc = repo.readonly_session("main").get_node("/g/tas").zarr_json
    assert zstd in json.loads(doc)["codecs"]


@pytest.mark.parametrize(
    ("change", "spec", "message"),
    [
        (lambda df: df.drop(columns="lat"), {}, "no dimension column 'lat'"),
        (lambda df: df.assign(name="x"), {}, "value column 'name' holds string"),
        (lambda df: df.assign(lon=df.lon + 0.5), {}, "dimension 'lon' has no label 0.5"),
        (lambda df: df, {"append_dim": "time"}, "has label 2001-01-01T00:00:00.* already"),
        (
            lambda df: df.assign(time=df.time - pd.Timedelta(days=30)),
            {"append_dim": "time", "placement": "update"},
            "sorts before the last one",
        ),
        (lambda df: df.assign(time=df.lat), {}, "the rows' labels are float64"),
        (lambda df: df, {"encoding": {"tas": {"dtype": "int8"}}}, "applies when a dataset is made"),
        (lambda df: df, {"append_dim": "depth"}, "append_dim='depth' is not one of dims"),
        (lambda df: df, {"placement": "middle"}, "placement='middle'"),
    ],
)
def test_bad_rows_are_refused(repo: Repository, change, spec, message) -> None:  # type: ignore[no-untyped-def]
    written(repo, tidy(3))
    with pytest.raises(InvalidInputError, match=message):
        written(repo, change(tidy(3)), **spec)


def test_duplicate_labels_name_the_first_element(repo: Repository) -> None:
    pdf = tidy(3)
    twice = pd.concat([pdf, pdf[(pdf.lat == 10.0) & (pdf.lon == 4.0)]])
    first = r"time=2001-01-01T00:00:00, lat=10\.0, lon=4\.0"
    with pytest.raises(DuplicateLabelsError, match=first):
        written(repo, twice)


def test_rows_of_one_chunk_in_any_order_and_batch_make_one_chunk(repo: Repository) -> None:
    pdf = tidy(6, drop=0.2)
    session = repo.writable_session("main")
    spec = TidySpec(DIMS, {"time": 3, "lat": 2, "lon": 2}, group="/g")
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    grid = write_table(session, table, spec, mode="overwrite")
    assert grid is not None
    shuffled = pa.Table.from_pandas(pdf.sample(frac=1, random_state=9), preserve_index=False)
    batches = [keyed(b, grid) for b in shuffled.to_batches(max_chunksize=7)]
    rows = [r for b in chunk_rows(batches, grid, lambda *_: None) for r in b.to_pylist()]  # type: ignore[arg-type,return-value]
    chunks = {(r["array"], tuple(r["coord"])) for r in rows}
    assert len(rows) == len(chunks) == 2 * math.prod(grid.grid_shape)
    # Packed a row per (batch, chunk), as Spark shuffles them: the same chunks, byte for byte.
    packed_rows = chunk_rows(packed(batches, grid), grid, lambda *_: None, packed_rows=True)  # type: ignore[arg-type,return-value]
    assert [r for b in packed_rows for r in b.to_pylist()] == rows


def test_null_values_are_holes(repo: Repository) -> None:
    pdf = tidy(4)
    pdf["tas"] = pdf["tas"].where(pdf.lon != 2.0)  # NaN here, null in Arrow
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    table = table.set_column(3, "tas", pa.array(pdf["tas"], pa.float32(), from_pandas=True))
    assert table.column("tas").null_count
    session = repo.writable_session("main")
    write_table(session, table, TidySpec(DIMS, {"time": 3}, group="/g"), mode="overwrite")
    session.commit("nulls")
    got = xr.open_zarr(repo.readonly_session("main").store, group="g", consolidated=False).load()
    xr.testing.assert_identical(got, xarray_writes(pdf))

"""A values table holds the rows ``xr.open_zarr(store)[arrays].to_dataframe()`` holds."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from icechunk_spark import InvalidInputError, NotFoundError, Repository, TruncatedChunkError
from icechunk_spark.values import read_values, values_layout

from .conftest import assert_same_rows, daily_dataset, write, xarray_rows

DIMS = ["time", "lat", "lon"]


def test_rows_equal_xarrays_on_native_chunks(daily_repo: Repository) -> None:
    table = read_values(daily_repo.readonly_session(), "/", ["tas", "pk"])
    assert table.num_rows == 40 * 6 * 12
    assert_same_rows(table, xarray_rows(daily_repo, ["tas", "pk"]), DIMS)


def test_masked_packed_and_nan_values_are_null(daily_repo: Repository) -> None:
    table = read_values(daily_repo.readonly_session(), "/", ["tas", "pk"])
    assert table.column("tas").null_count == 1  # the NaN
    assert table.column("pk").null_count == 3  # written as the fill value
    assert table.schema.field("pk").type == "double"  # decoded: scaled, not int16


def test_raw_values_with_decode_false(daily_repo: Repository) -> None:
    table = read_values(daily_repo.readonly_session(), "/", ["pk"], decode=False)
    assert str(table.schema.field("pk").type) == "int16"
    assert (np.asarray(table.column("pk")) == -32768).sum() == 3
    time = table.column("time")
    assert str(time.type) == "int64"  # undecoded CF time: days since the units' origin


def test_unwritten_chunks_read_as_the_fill_value() -> None:
    repo = write(daily_dataset())
    session = repo.writable_session("main")
    session.delete_chunk("/tas", (1, 0, 0))
    session.commit("a chunk gone")
    table = read_values(repo.readonly_session(), "/", ["tas"])
    assert table.num_rows == 40 * 6 * 12  # the rows are there, as xarray lists them
    assert_same_rows(table, xarray_rows(repo, ["tas"]), DIMS)


def test_non_standard_calendar_times_are_iso_text() -> None:
    repo = write(daily_dataset(days=70, calendar="noleap"))
    table = read_values(repo.readonly_session(), "/", ["tas"])
    assert str(table.schema.field("time").type) == "string"
    assert "2001-02-28T00:00:00" in table.column("time").to_pylist()
    assert_same_rows(table, xarray_rows(repo, ["tas"]), DIMS)


def test_arrays_in_a_group_and_dimensions_without_coordinates() -> None:
    ds = daily_dataset().drop_vars("lon")  # lon keeps its size, loses its labels
    repo = write(ds, group="climate")
    table = read_values(repo.readonly_session(), "/climate", ["tas"])
    assert sorted(set(table.column("lon").to_pylist())) == list(range(12))
    assert_same_rows(table, xarray_rows(repo, ["tas"], group="climate"), DIMS)


def test_bad_input_names_what_is_wrong(daily_repo: Repository) -> None:
    session = daily_repo.readonly_session()
    with pytest.raises(InvalidInputError, match=r"no array 'tass'.*'tas'"):
        values_layout(session, "/", ["tass"])
    with pytest.raises(InvalidInputError, match="name the arrays"):
        values_layout(session, "/", [])
    with pytest.raises(NotFoundError, match="no group"):
        values_layout(session, "/nowhere", ["tas"])
    with pytest.raises(
        InvalidInputError, match=r"share their dimensions.*tas\(time, lat, lon\); lat\(lat\)"
    ):
        values_layout(session, "/", ["tas", "lat"])


def test_sharded_arrays_read_like_xarray() -> None:
    ds = daily_dataset()
    repo = Repository.create(f"memory://{uuid.uuid4().hex}")
    session = repo.writable_session("main")
    encoding = {"tas": {"chunks": (5, 3, 4), "shards": (10, 6, 12)}}
    ds[["tas"]].to_zarr(session.store, encoding=encoding, zarr_format=3, consolidated=False)
    session.commit("sharded")
    reader = repo.readonly_session()
    assert "sharding_indexed" in reader.get_node("/tas").zarr_json.decode()
    table = read_values(reader, "/", ["tas"])
    assert_same_rows(table, xarray_rows(repo, ["tas"]), DIMS)


def test_a_corrupt_chunk_is_an_error_naming_the_array_and_chunk() -> None:
    repo = Repository.create(
        f"memory://{uuid.uuid4().hex}", config={"inline_chunk_threshold_bytes": 0}
    )
    session = repo.writable_session("main")
    ds = daily_dataset()
    ds[["tas"]].to_zarr(
        session.store, encoding={"tas": {"chunks": (10, 3, 5)}}, zarr_format=3, consolidated=False
    )
    session.commit("written")
    ref = repo.readonly_session().get_chunk_ref("/tas", (2, 1, 0))
    assert ref is not None and ref.chunk_id is not None
    key = f"c/{ref.chunk_id}"
    repo.storage.put(key, repo.storage.get(key)[:10])  # cut short, as a broken copy would
    with pytest.raises(TruncatedChunkError) as info:
        read_values(repo.readonly_session(), "/", ["tas"])
    assert "/tas" in str(info.value) and "(2, 1, 0)" in str(info.value)

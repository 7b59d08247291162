"""Tidy DataFrames become arrays (``write_values``): the dataset xarray would write, grown
along ``append_dim``, partly covered chunks merged, conflicts kept, streams exactly once."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from icechunk_spark import Repository
from icechunk_spark.errors import ConflictError, InvalidInputError
from icechunk_spark.spark import values_batches, write_values
from icechunk_spark.spark.values_write import regular_step
from icechunk_spark.values.assemble import DuplicateLabelsError

from .test_streaming import forget_batch_done

pytestmark = pytest.mark.spark

DIMS = ["time", "lat", "lon"]
LAT = np.array([-30.0, 0.0, 30.0])
LON = np.array([0.0, 90.0, 180.0, 270.0])


def tidy(days: pd.DatetimeIndex, seed: int = 0, drop: float = 0.0) -> pd.DataFrame:
    """One row per (time, lat, lon): float32 ``tas`` and int64 ``n``; ``drop`` of the rows
    left out at random (holes)."""
    grid = pd.MultiIndex.from_product([days, LAT, LON], names=DIMS).to_frame(index=False)
    rng = np.random.default_rng(seed)
    grid["tas"] = (250 + 50 * rng.random(len(grid))).astype("f4")
    grid["n"] = rng.integers(0, 1000, len(grid))
    return grid.sample(frac=1 - drop, random_state=seed) if drop else grid


def as_xarray_writes(pdf: pd.DataFrame) -> xr.Dataset:
    """What xarray's own path gives: from_dataframe, to_zarr in a LocalStore, opened again."""
    store = zarr.storage.LocalStore(tempfile.mkdtemp(prefix="xarray-writes-"))
    xr.Dataset.from_dataframe(pdf.set_index(DIMS)).to_zarr(store, zarr_format=3, consolidated=False)
    return xr.open_zarr(store, consolidated=False).load()


def opened(url: str, group: str = "g") -> xr.Dataset:
    store = Repository.open(url).readonly_session("main").store
    return xr.open_zarr(store, group=group, consolidated=False).load()


def new_repo(tmp_path: Path, name: str = "repo") -> str:
    url = (tmp_path / name).as_uri()
    Repository.create(url)
    return url


def test_a_tidy_table_becomes_the_dataset_xarray_writes(spark: Any, tmp_path: Path) -> None:
    pdf = tidy(pd.date_range("2001-01-01", periods=9, freq="D"), drop=0.3)
    url = new_repo(tmp_path)
    df = spark.createDataFrame(pdf).repartition(3)  # rows of one chunk on several tasks
    write_values(df, url, dims="time,lat,lon", chunks={"time": 4, "lat": 2, "lon": 3}, group="/g")
    got = opened(url)
    xr.testing.assert_identical(got, as_xarray_writes(pdf))
    assert got["n"].dtype == np.float64  # holes make integers NaN-able, as in xarray
    assert got["tas"].encoding["chunks"] == (4, 2, 3)


def test_uneven_labels_are_placed_by_a_join(spark: Any, tmp_path: Path) -> None:
    days = pd.DatetimeIndex(["2001-01-01", "2001-01-02", "2001-01-05", "2001-02-01"])
    pdf = tidy(days, drop=0.2)
    pdf["lat"] = pdf["lat"].map({-30.0: -31.5, 0.0: 0.25, 30.0: 60.0})
    url = new_repo(tmp_path)
    write_values(
        spark.createDataFrame(pdf), url, dims=DIMS, chunks={"time": 3, "lon": 3}, group="/g"
    )
    xr.testing.assert_identical(opened(url), as_xarray_writes(pdf))


@pytest.mark.parametrize(
    ("values", "step"),
    [
        (np.array([0.5, 1.5, 2.5]), 1.0),
        (np.linspace(-89.5, 89.5, 180, dtype="f4"), 1.0),
        (np.array([0.0, 1.0, 3.0]), None),
        (np.array([7.0]), None),
        (pd.date_range("2001-01-01", periods=3, freq="h").values, 3_600_000_000_000),
        (pd.DatetimeIndex(["2001-01-01", "2001-01-03", "2001-01-04"]).values, None),
    ],
)
def test_even_labels_are_found_by_their_step(values: np.ndarray, step: object) -> None:
    found = regular_step(values)
    assert found == pytest.approx(step) if step is not None else found is None


def test_append_grows_along_time_and_merges_partly_covered_chunks(
    spark: Any, tmp_path: Path
) -> None:
    first = tidy(pd.date_range("2001-01-01", periods=5, freq="D"))
    url = new_repo(tmp_path)
    chunks = {"time": 4, "lat": 2, "lon": 3}
    write_values(spark.createDataFrame(first), url, dims=DIMS, chunks=chunks, group="/g")
    # days 6..8: day 6..8 land in chunk 1 (days 5..8), which holds day 5 already
    later = tidy(pd.date_range("2001-01-06", periods=3, freq="D"), seed=1)
    write_values(spark.createDataFrame(later), url, dims=DIMS, group="/g", append_dim="time")
    xr.testing.assert_identical(opened(url), as_xarray_writes(pd.concat([first, later])))


def test_rows_inside_the_grid_update_those_elements(spark: Any, tmp_path: Path) -> None:
    days = pd.date_range("2001-01-01", periods=6, freq="D")
    base = tidy(days)
    url = new_repo(tmp_path)
    write_values(spark.createDataFrame(base), url, dims=DIMS, chunks={"time": 4}, group="/g")
    patch = base[(base.time == days[2]) & (base.lat == 0.0)].assign(tas=np.float32(1.0), n=7)
    write_values(spark.createDataFrame(patch), url, dims=DIMS, group="/g")
    expected = base.set_index(DIMS)
    expected.update(patch.set_index(DIMS))
    xr.testing.assert_identical(opened(url), as_xarray_writes(expected.reset_index()))


def test_overwrite_replaces_the_dataset(spark: Any, tmp_path: Path) -> None:
    url = new_repo(tmp_path)
    old = tidy(pd.date_range("2001-01-01", periods=8, freq="D"))
    write_values(spark.createDataFrame(old), url, dims=DIMS, group="/g")
    new = tidy(pd.date_range("2002-01-01", periods=3, freq="D"), seed=5)[[*DIMS, "tas"]]
    write_values(spark.createDataFrame(new), url, dims=DIMS, group="/g", mode="overwrite")
    xr.testing.assert_identical(opened(url), as_xarray_writes(new))


def test_encoding_packs_values_as_xarray_does(spark: Any, tmp_path: Path) -> None:
    pdf = tidy(pd.date_range("2001-01-01", periods=4, freq="D"), drop=0.2)[[*DIMS, "tas"]]
    url = new_repo(tmp_path)
    packed = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 275.0, "_FillValue": -32768}
    encoding = {"tas": packed, "time": {"units": "hours since 2000-01-01"}}
    write_values(spark.createDataFrame(pdf), url, dims=DIMS, group="/g", encoding=encoding)
    store = zarr.storage.MemoryStore()
    ds = xr.Dataset.from_dataframe(pdf.set_index(DIMS))
    ds.to_zarr(store, zarr_format=3, consolidated=False, encoding=encoding)
    expected = xr.open_zarr(store, consolidated=False).load()
    got = opened(url)
    xr.testing.assert_identical(got, expected)
    assert got["tas"].encoding["dtype"] == np.int16
    assert got["time"].encoding["units"] == "hours since 2000-01-01"


def test_two_writes_to_one_chunk_conflict_never_lose_an_update(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    days = pd.date_range("2001-01-01", periods=4, freq="D")
    base = tidy(days)
    url = new_repo(tmp_path)
    write_values(spark.createDataFrame(base), url, dims=DIMS, chunks={"time": 4}, group="/g")
    one = base[(base.time == days[0]) & (base.lat == LAT[0])].assign(tas=np.float32(1.0))
    two = base[(base.time == days[1]) & (base.lat == LAT[0])].assign(tas=np.float32(2.0))
    # The second write commits while the first is between planning and committing: both
    # rewrite chunk (0, 0, 0) from the same base, so the first must fail, not overwrite.
    from icechunk_spark.spark import values_write

    real_stage = values_write._stage

    def stage_then_race(*args: Any) -> Any:
        staged = real_stage(*args)
        monkeypatch.setattr(values_write, "_stage", real_stage)  # the other write: no race
        write_values(spark.createDataFrame(two), url, dims=DIMS, group="/g")
        return staged

    monkeypatch.setattr(values_write, "_stage", stage_then_race)
    with pytest.raises(ConflictError):
        write_values(spark.createDataFrame(one), url, dims=DIMS, group="/g")
    got = opened(url)["tas"].sel(lat=LAT[0])
    assert (got.sel(time=days[1]).values == 2.0).all()  # the update that landed is kept
    write_values(spark.createDataFrame(one), url, dims=DIMS, group="/g")  # retried: lands
    got = opened(url)["tas"].sel(lat=LAT[0])
    assert (got.sel(time=days[0]).values == 1.0).all() and (
        got.sel(time=days[1]).values == 2.0
    ).all()


def test_bad_input_is_refused_and_nothing_is_committed(spark: Any, tmp_path: Path) -> None:
    days = pd.date_range("2001-01-01", periods=4, freq="D")
    base = tidy(days)
    url = new_repo(tmp_path)
    write_values(spark.createDataFrame(base), url, dims=DIMS, chunks={"time": 2}, group="/g")
    repo = Repository.open(url)
    tip = repo.lookup_branch("main")

    def refused(pdf: pd.DataFrame, match: str, **options: Any) -> InvalidInputError:
        options = {"dims": DIMS, "group": "/g", **options}
        with pytest.raises(InvalidInputError, match=match) as caught:
            write_values(spark.createDataFrame(pdf), url, **options)
        assert Repository.open(url).lookup_branch("main") == tip
        return caught.value

    refused(base.drop(columns="lon"), "no dimension column 'lon'")
    refused(base.assign(name="x"), "value column 'name' holds string")
    refused(base.assign(lat=base.lat + 1), "dimension 'lat' has no label -29.0")
    refused(base.assign(time=base.lat), "dimension 'time': the rows' labels are float64")
    refused(base, "has label 2001-01-01.* already", append_dim="time")
    early = tidy(pd.date_range("2000-12-01", periods=1, freq="D"))
    refused(early, "placement='update'|sorts before", append_dim="time", placement="update")
    twice = pd.concat([base, base.iloc[[5]].assign(tas=np.float32(0))])
    error = refused(twice, "two rows have the labels time=2001-01-01")
    assert isinstance(error, DuplicateLabelsError)
    # The data source's own error, which Spark wraps (as it wraps every writer's).
    wrapped = r"(?s)InvalidInputError: table=values .*spark.write_values"
    with pytest.raises(Exception, match=wrapped):
        spark.createDataFrame(base).write.format("icechunk").option("table", "values").mode(
            "append"
        ).save(url)


def test_a_stream_appends_each_batch_once_across_a_replay_and_maintenance(
    spark: Any, tmp_path: Path
) -> None:
    url = new_repo(tmp_path)
    days = pd.date_range("2001-01-01", periods=6, freq="D")
    write_values(
        spark.createDataFrame(tidy(days[:2])), url, dims=DIMS, group="/g", chunks={"time": 2}
    )
    source = tmp_path / "feed"
    source.mkdir()
    schema = spark.createDataFrame(tidy(days[:1])).schema
    checkpoint = str(tmp_path / "checkpoint")

    def run_until_idle() -> None:
        query = (
            spark.readStream.schema(schema)
            .parquet(str(source))
            .writeStream.foreachBatch(values_batches(url, dims=DIMS, group="/g", append_dim="time"))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    feed(tidy(days[2:4], seed=2), source / "a.parquet")
    run_until_idle()
    # Spark loses the batch's "done" mark after the commit landed (a driver killed between
    # the two): the replay must commit nothing, with another commit, expiry and GC between.
    repo = Repository.open(url)
    landed = repo.lookup_branch("main")
    forget_batch_done(Path(checkpoint), 0)
    session = repo.writable_session("main")
    session.create_group("/other")
    session.commit("another writer")
    now = datetime.now(UTC) + timedelta(seconds=1)
    assert landed in repo.expire_snapshots(now)  # the batch's snapshot leaves the history
    repo.garbage_collect(now)
    run_until_idle()
    assert next(repo.ancestry(branch="main")).message == "another writer"
    feed(tidy(days[4:], seed=4), source / "b.parquet")
    run_until_idle()
    expected = pd.concat([tidy(days[:2]), tidy(days[2:4], seed=2), tidy(days[4:], seed=4)])
    xr.testing.assert_identical(opened(url), as_xarray_writes(expected))


def feed(pdf: pd.DataFrame, path: Path) -> None:
    """A file for the stream to pick up (times in microseconds, as Spark reads them)."""
    pdf.to_parquet(path, coerce_timestamps="us", allow_truncated_timestamps=True)


def test_the_stream_helper_runs_only_in_foreach_batch(spark: Any, tmp_path: Path) -> None:
    url = new_repo(tmp_path)
    rows = spark.createDataFrame(tidy(pd.date_range("2001-01-01", periods=2)))
    with pytest.raises(InvalidInputError, match="foreachBatch"):
        values_batches(url, dims=DIMS)(rows, 0)
    # A query id given (a Connect client's): batch 0 lands once, however often it is run.
    write = values_batches(url, query_id="feed", dims=DIMS, group="/g", append_dim="time")
    write(rows, 0)
    landed = Repository.open(url).lookup_branch("main")
    write(rows, 0)
    assert Repository.open(url).lookup_branch("main") == landed
    with pytest.raises(InvalidInputError, match="already"):
        write(rows, 1)  # another batch of the same days: refused, not appended twice

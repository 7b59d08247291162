"""A values query reads only the chunks it needs: conditions on labels pick the chunk boxes,
chunk statistics drop boxes no value of which can meet a condition on values."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from icechunk_spark import Repository, Session
from icechunk_spark.storage import open_storage
from icechunk_spark.values import LabelCondition, ValueCondition, read_values
from tests.support.counting import CountingStorage

from .conftest import assert_same_rows

CHUNKS = {"time": 30, "lat": 9, "lon": 12}


@pytest.fixture(scope="module")
def decade() -> str:
    """Ten years of daily ``tas(time, lat, lon)``, every chunk a file, statistics on."""
    time = pd.date_range("2000-01-01", "2009-12-31", freq="D")
    lat = np.linspace(-85, 85, 18, dtype="f4")
    lon = np.linspace(0, 350, 36, dtype="f4")
    # A value grows with the day, so each time chunk has its own range of values.
    tas = np.broadcast_to(np.arange(time.size, dtype="f4")[:, None, None], (time.size, 18, 36))
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas.copy())}, coords={"time": time, "lat": lat, "lon": lon}
    )
    url = f"memory://{uuid.uuid4().hex}"
    config = {"inline_chunk_threshold_bytes": 0, "chunk_statistics": ["/tas"]}
    repo = Repository.create(url, config=config)
    session = repo.writable_session("main")
    encoding = {"tas": {"chunks": tuple(CHUNKS[d] for d in ("time", "lat", "lon"))}}
    ds.to_zarr(session.store, encoding=encoding, zarr_format=3, consolidated=False)
    session.commit("a decade")
    return url


def _counted(url: str) -> tuple[Repository, CountingStorage]:
    storage = CountingStorage(open_storage(url))
    return Repository.open(storage), storage


def _chunk_reads(storage: CountingStorage, session: Session, path: str) -> int:
    """How many reads of the array's chunk files (not its coordinates', nor manifests)."""
    ids = {f"c/{i}" for i in session.chunk_refs(path).column("chunk_id").to_pylist()}
    return sum(n for key, n in storage.keys_read.items() if key in ids)


def _chunks_touched(index: np.ndarray, size: int) -> set[int]:
    return {int(i) // size for i in index}


def test_a_month_in_a_box_reads_only_the_chunks_it_intersects(decade: str) -> None:
    repo, storage = _counted(decade)
    july = [
        LabelCondition("time", ">=", datetime(2005, 7, 1, tzinfo=UTC)),
        LabelCondition("time", "<", datetime(2005, 8, 1, tzinfo=UTC)),
        LabelCondition("lat", ">=", 0.0),
        LabelCondition("lat", "<=", 30.0),
        LabelCondition("lon", ">", 95.0),
        LabelCondition("lon", "<", 150.0),
    ]
    session = repo.readonly_session()
    storage.reset()
    table = read_values(session, "/", ["tas"], where=july)

    ds = xr.open_zarr(Repository.open(decade).readonly_session().store, consolidated=False)
    expected = ds.sel(time=slice("2005-07-01", "2005-07-31"), lat=slice(0, 30))
    expected = expected.sel(lon=(expected.lon > 95) & (expected.lon < 150))
    assert_same_rows(table, expected[["tas"]].to_dataframe().reset_index(), ["time", "lat", "lon"])
    days = np.flatnonzero(
        (ds.time.values >= np.datetime64("2005-07-01"))
        & (ds.time.values < np.datetime64("2005-08-01"))
    )
    lats = np.flatnonzero((ds.lat.values >= 0) & (ds.lat.values <= 30))
    lons = np.flatnonzero((ds.lon.values > 95) & (ds.lon.values < 150))
    intersecting = (
        len(_chunks_touched(days, 30))
        * len(_chunks_touched(lats, 9))
        * len(_chunks_touched(lons, 12))
    )
    assert intersecting == 2 * 1 * 2
    assert _chunk_reads(storage, session, "/tas") == intersecting


def test_statistics_rule_out_chunks_for_conditions_on_values(decade: str) -> None:
    repo, storage = _counted(decade)
    session = repo.readonly_session()
    storage.reset()
    # Values are the day number (3653 days): only the last time chunk, days 3630-3652,
    # holds values above 3640.
    table = read_values(session, "/", ["tas"], where_values=[ValueCondition("tas", ">", 3640.0)])
    assert (
        _chunk_reads(storage, session, "/tas") == 2 * 3
    )  # one time chunk: 2 lat chunks x 3 lon chunks
    values = np.asarray(table.column("tas"))
    assert (values > 3640).sum() == (3652 - 3640) * 18 * 36  # every matching row is there
    assert values.size == (3652 - 3640) * 18 * 36  # and no other row


def test_no_chunk_is_read_when_nothing_is_selected(decade: str) -> None:
    repo, storage = _counted(decade)
    storage.reset()
    before = [LabelCondition("time", "<", datetime(1999, 1, 1, tzinfo=UTC))]
    session = repo.readonly_session()
    assert read_values(session, "/", ["tas"], where=before).num_rows == 0
    assert _chunk_reads(storage, session, "/tas") == 0

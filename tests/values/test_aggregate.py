"""``aggregate``: exact answers from chunk statistics where chunks lie wholly inside, reading
only the chunks the selection's edges cut; equal to numpy on the same values."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from icechunk_spark import InvalidInputError, Repository, Session
from icechunk_spark.storage import open_storage
from icechunk_spark.values import aggregate, chunk_stats_table, plan_aggregate
from tests.support.counting import CountingStorage

CHUNKS = (30, 9, 12)
FILL = -999.0


@pytest.fixture(scope="module")
def years() -> tuple[str, xr.Dataset]:
    """Three years of daily ``tas`` with NaNs and fill values, statistics on, and the data."""
    rng = np.random.default_rng(11)
    time = pd.date_range("2001-01-01", "2003-12-31", freq="D")
    lat = np.linspace(-85, 85, 18, dtype="f4")
    lon = np.linspace(0, 350, 36, dtype="f4")
    tas = (250 + 50 * rng.random((time.size, 18, 36))).astype("f4")
    tas[rng.random(tas.shape) < 0.01] = np.nan
    tas[rng.random(tas.shape) < 0.01] = FILL
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas)}, coords={"time": time, "lat": lat, "lon": lon}
    )
    url = f"memory://{uuid.uuid4().hex}"
    config = {"inline_chunk_threshold_bytes": 0, "chunk_statistics": ["/tas"]}
    repo = Repository.create(url, config=config)
    session = repo.writable_session("main")
    encoding = {"tas": {"chunks": CHUNKS, "_FillValue": FILL}}
    ds.to_zarr(session.store, encoding=encoding, zarr_format=3, consolidated=False)
    session.commit("three years")
    return url, ds


def _numpy(values: np.ndarray) -> dict[str, float]:
    flat = values.reshape(-1).astype("f8")
    valid = flat[~np.isnan(flat) & (flat != FILL)]
    return {
        "count": valid.size,
        "sum": valid.sum(),
        "mean": valid.mean(),
        "min": valid.min(),
        "max": valid.max(),
    }


def _chunk_reads(storage: CountingStorage, session: Session) -> int:
    ids = {f"c/{i}" for i in session.chunk_refs("/tas").column("chunk_id").to_pylist()}
    return sum(n for key, n in storage.keys_read.items() if key in ids)


def _cut(index: np.ndarray, chunk: int, size: int) -> tuple[int, int]:
    """Chunks touched by the selected ``index`` range, and of those how many lie inside it."""
    first, last = int(index[0]), int(index[-1])
    touched = range(first // chunk, last // chunk + 1)
    inside = [
        k
        for k in touched
        if k * chunk >= first and min((k + 1) * chunk, size) - 1 <= last and (k + 1) * chunk <= size
    ]
    return len(touched), len(inside)


def test_equal_to_numpy_reading_only_the_cut_chunks(years: tuple[str, xr.Dataset]) -> None:
    url, ds = years
    storage = CountingStorage(open_storage(url))
    session = Repository.open(storage).readonly_session()
    where = {"time": ("2001-03-15", "2003-06-30"), "lat": (-90.0, 0.0)}  # lat: chunk 0
    storage.reset()
    got = aggregate(session, "tas", where)

    raw = ds.tas.sel(time=slice("2001-03-15", "2003-06-30"), lat=slice(-90, 0)).values
    want = _numpy(raw)
    assert got["count"] == want["count"]
    for f in ("sum", "mean", "min", "max"):
        assert got[f] == pytest.approx(want[f], rel=1e-9)

    days = np.flatnonzero(
        (ds.time.values >= np.datetime64("2001-03-15"))
        & (ds.time.values <= np.datetime64("2003-06-30"))
    )
    lats = np.flatnonzero((ds.lat.values >= -90) & (ds.lat.values <= 0))
    t_all, t_in = _cut(days, 30, ds.time.size)
    y_all, y_in = _cut(lats, 9, 18)
    lon_all = 3  # lon 36 in chunks of 12, all selected, none an edge
    cut = t_all * y_all * lon_all - t_in * y_in * lon_all
    assert 0 < cut < t_all * y_all * lon_all
    assert _chunk_reads(storage, session) == cut


def test_the_whole_array_from_statistics_reads_only_edge_chunks(
    years: tuple[str, xr.Dataset],
) -> None:
    url, ds = years
    storage = CountingStorage(open_storage(url))
    session = Repository.open(storage).readonly_session()
    plan = plan_aggregate(session, "/", "tas", {})
    # 1095 days in chunks of 30: the last time chunk reaches past the end (an edge chunk).
    assert len(plan.boxes) == 2 * 3
    storage.reset()
    got = aggregate(session, "tas", funcs=["count", "mean"])
    assert _chunk_reads(storage, session) == 2 * 3
    want = _numpy(ds.tas.values)
    assert got == {"count": want["count"], "mean": pytest.approx(want["mean"], rel=1e-9)}


def test_bad_input(years: tuple[str, xr.Dataset]) -> None:
    session = Repository.open(years[0]).readonly_session()
    with pytest.raises(InvalidInputError, match="choose among"):
        aggregate(session, "tas", funcs=["median"])
    with pytest.raises(InvalidInputError, match="not a dimension"):
        aggregate(session, "tas", {"depth": (0, 10)})
    with pytest.raises(InvalidInputError, match=r"must be \(lo, hi\)"):
        aggregate(session, "tas", {"lat": 3})  # type: ignore[dict-item]


def test_chunk_stats_in_label_space(years: tuple[str, xr.Dataset]) -> None:
    url, ds = years
    table = chunk_stats_table(Repository.open(url).readonly_session(), "/", ["tas"])
    assert table.num_rows == 37 * 2 * 3  # every chunk written
    assert table.column_names[:8] == [
        "array",
        "coord",
        "time_start",
        "time_end",
        "lat_start",
        "lat_end",
        "lon_start",
        "lon_end",
    ]
    rows = table.to_pylist()
    last = next(r for r in rows if r["coord"] == [36, 1, 2])  # the edge chunk along time
    assert last["time_start"].date().isoformat() == "2003-12-17"
    assert last["time_end"].date().isoformat() == "2003-12-31"
    assert last["lat_end"] == pytest.approx(85.0) and last["lon_end"] == pytest.approx(350.0)
    assert last["stat_max"] is None  # an edge chunk's statistics are unknown
    inner = next(r for r in rows if r["coord"] == [1, 0, 0])
    want = ds.tas.values[30:60, :9, :12]
    valid = want[~np.isnan(want) & (want != FILL)]
    assert inner["stat_max"] == pytest.approx(float(valid.max()))
    # "do we have July 2002 data?" is a count of rows
    july = [
        r
        for r in rows
        if r["time_start"].isoformat() <= "2002-07-31" and r["time_end"].isoformat() >= "2002-07-01"
    ]
    assert len(july) == 2 * 2 * 3

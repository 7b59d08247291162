"""xarray datasets through the store: write, commit, read back identical."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from icechunk_spark import Repository
from tests.support.helpers import create_repo

from .readers import read_until_stopped

# zarr warns that consolidated metadata is not in the v3 spec yet; we store it all the same.
CONSOLIDATED_WARNING = "ignore:Consolidated metadata is currently not part:UserWarning"


def memory_repo() -> Repository:
    return Repository.create(f"memory://{uuid.uuid4().hex}")


def datacube(times: int = 4) -> xr.Dataset:
    """A (time, lat, lon) float32 cube with CF coordinates and attributes."""
    rng = np.random.default_rng(42)
    lat = np.linspace(-85.0, 85.0, 18)
    lon = np.linspace(5.0, 355.0, 36)
    data = (250 + 40 * rng.random((times, lat.size, lon.size))).astype("float32")
    return xr.Dataset(
        {
            "tas": (
                ("time", "lat", "lon"),
                data,
                {"standard_name": "air_temperature", "units": "K", "cell_methods": "time: mean"},
            )
        },
        coords={
            "time": ("time", pd.date_range("2024-01-01", periods=times, freq="D"), {"axis": "T"}),
            "lat": (
                "lat",
                lat,
                {"standard_name": "latitude", "units": "degrees_north", "axis": "Y"},
            ),
            "lon": (
                "lon",
                lon,
                {"standard_name": "longitude", "units": "degrees_east", "axis": "X"},
            ),
        },
        attrs={"Conventions": "CF-1.8", "title": "a test datacube", "history": "made in a test"},
    )


def write_and_read(
    repo: Repository, ds: xr.Dataset, consolidated: bool = False, **kwargs: Any
) -> xr.Dataset:
    session = repo.writable_session("main")
    ds.to_zarr(session.store, mode="w", consolidated=consolidated, **kwargs)
    session.commit("write dataset")
    return xr.open_zarr(repo.readonly_session("main").store, consolidated=consolidated)


@pytest.mark.filterwarnings(CONSOLIDATED_WARNING)
@pytest.mark.parametrize("consolidated", [False, True], ids=["plain", "consolidated"])
def test_a_cf_datacube_round_trips_on_every_backend(backend: Any, consolidated: bool) -> None:
    repo = create_repo(backend)
    ds = datacube()
    back = write_and_read(repo, ds, consolidated, encoding={"tas": {"chunks": (1, 9, 18)}})
    xr.testing.assert_identical(back, ds)
    assert back["tas"].encoding["chunks"] == (1, 9, 18)


def test_strings_datetimes_and_fill_values_round_trip() -> None:
    ds = xr.Dataset(
        {
            "name": ("site", np.array(["alpha", "beta", "ünïcode"], dtype=object)),
            "observed_at": (
                "site",
                np.array(["2024-01-01T06:00", "NaT", "2024-03-01T12:30"], "datetime64[ns]"),
            ),
            "depth": ("site", np.array([1.5, np.nan, 3.25], "float32"), {"units": "m"}),
            "flag": ("site", np.array([1, 0, 1], "int8")),
        },
        coords={"site": ("site", np.array([10, 20, 30], "int64"))},
        attrs={"source": "strings and dates"},
    )
    encoding = {
        "depth": {"_FillValue": -9999.0},
        "observed_at": {"units": "minutes since 2000-01-01"},
    }
    back = write_and_read(memory_repo(), ds, encoding=encoding)
    xr.testing.assert_identical(back, ds)
    assert back["depth"].encoding["_FillValue"] == -9999.0


def test_appending_along_time_in_three_commits_keeps_each_snapshot() -> None:
    repo = memory_repo()
    full = datacube(times=6)
    parts = [full.isel(time=slice(i, i + 2)) for i in (0, 2, 4)]
    snapshots = []
    for i, part in enumerate(parts):
        session = repo.writable_session("main")
        if i == 0:
            part.to_zarr(
                session.store,
                mode="w",
                consolidated=False,
                encoding={"tas": {"chunks": (1, 18, 18)}},
            )
        else:
            part.to_zarr(session.store, mode="a", append_dim="time", consolidated=False)
        snapshots.append(session.commit(f"append part {i}"))
    for i, snapshot in enumerate(snapshots):
        back = xr.open_zarr(repo.readonly_session(snapshot_id=snapshot).store, consolidated=False)
        xr.testing.assert_identical(back, full.isel(time=slice(0, 2 * (i + 1))))


@pytest.mark.filterwarnings(CONSOLIDATED_WARNING)
@pytest.mark.parametrize("consolidated", [False, True], ids=["plain", "consolidated"])
def test_sharded_arrays_round_trip_on_every_backend(backend: Any, consolidated: bool) -> None:
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 64})  # shards in files
    ds = datacube()
    encoding = {"tas": {"chunks": (1, 9, 9), "shards": (2, 18, 18)}}
    back = write_and_read(repo, ds, consolidated, encoding=encoding)
    xr.testing.assert_identical(back, ds)
    # One stored chunk per shard; zarr reads inner chunks with byte ranges (index = a suffix).
    coords = repo.readonly_session("main").chunk_coords("/tas")
    assert coords.tolist() == [[t, 0, lon] for t in range(2) for lon in range(2)]
    xr.testing.assert_identical(
        back.isel(time=3, lat=slice(9, 18), lon=slice(0, 9)),
        ds.isel(time=3, lat=slice(9, 18), lon=slice(0, 9)),
    )


def time_step(step: int, lat: int = 60, lon: int = 120) -> xr.Dataset:
    """Time step ``step`` of the seed-001 cube: every value is ``step + 1``."""
    values = np.full((1, lat, lon), step + 1, dtype="float32")
    return xr.Dataset(
        {"v": (("time", "lat", "lon"), values)},
        coords={"time": ("time", np.array([step], "int64"))},
    )


@pytest.mark.slow
def test_seed_001_readers_see_each_append_whole_or_not_at_all(tmp_path: Path) -> None:
    """A writer appends one time step (resize, 6x12 chunk writes, commit) at a time while
    four reader processes read the whole cube over and over; no read may mix two versions."""
    repo = Repository.create((tmp_path / "repo").as_uri())
    session = repo.writable_session("main")
    time_step(0).to_zarr(
        session.store, mode="w", consolidated=False, encoding={"v": {"chunks": (1, 10, 10)}}
    )
    session.commit("first time step")

    ready, stop = tmp_path / "ready", tmp_path / "stop"
    deadline = time.time() + 50
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        readers = [
            pool.apply_async(
                read_until_stopped, (repo.storage.url, str(ready), str(stop), deadline)
            )
            for _ in range(4)
        ]
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        appends = 4
        for step in range(1, appends + 1):
            writer = repo.writable_session("main")
            time_step(step).to_zarr(writer.store, mode="a", append_dim="time", consolidated=False)
            assert writer.status().chunks == {"/v": 6 * 12, "/time": 1}
            writer.commit(f"append time step {step}")
            time.sleep(0.3)
        stop.touch()
        results = [r.get(timeout=60) for r in readers]

    torn = [t for r in results for t in r["torn"]]
    assert torn == []
    lengths = [n for r in results for n in r["lengths"]]
    assert set(lengths) <= set(range(1, appends + 2))
    assert len(set(lengths)) >= 2, f"the readers never overlapped a commit: {lengths}"
    assert all(r["lengths"] == sorted(r["lengths"]) for r in results)  # never back in time
    final = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)
    assert final.sizes["time"] == appends + 1

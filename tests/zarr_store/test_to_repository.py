"""``icechunk_spark.xarray.to_repository``: every Dask scheduler ends in one commit.

Dask-backed variables are written by the scheduler's workers through forks and merged; eager
ones are written directly. Each test reads back through a fresh read-only session and counts
the commits, so a write that stayed in a worker shows up as missing data or an extra commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from icechunk_spark import ForkConflictError, ForkError, Repository, Session
from icechunk_spark.xarray import to_repository
from tests.support.helpers import create_repo

TIMES = 12


def cube(start: int = 0, times: int = TIMES, chunks: int | None = 3) -> xr.Dataset:
    """A (time, y, x) dataset: a float32 variable with CF encoding and an int16 one."""
    rng = np.random.default_rng(start)
    temp = (270 + 20 * rng.random((times, 6, 8))).astype("float32")
    count = rng.integers(0, 100, size=(times, 6, 8)).astype("int16")
    ds = xr.Dataset(
        {
            "temp": (("time", "y", "x"), temp, {"units": "K"}),
            "count": (("time", "y", "x"), count),
        },
        coords={
            "time": pd.date_range("2024-01-01", periods=times, freq="D") + pd.Timedelta(days=start),
            "y": np.arange(6.0),
            "x": np.arange(8.0),
        },
        attrs={"title": "a test cube"},
    )
    return ds.chunk({"time": chunks}) if chunks else ds


def _read(repo: Repository) -> xr.Dataset:
    return xr.open_zarr(repo.readonly_session().store, consolidated=False).load()


def _commits(repo: Repository) -> int:
    return len(list(repo.ancestry(branch="main")))


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.create((tmp_path / "repo").as_uri())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A dask.distributed LocalCluster of two worker processes (one thread each)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        Client(local, set_as_default=False) as client,
    ):
        yield client


def _write_then_append(repo: Repository, **compute: Any) -> None:
    """Three commits: the first 12 days, then two appends of 6 days along time."""
    session = repo.writable_session()
    to_repository(cube(0), session, mode="w", **compute)
    session.commit("first 12 days")
    for start in (TIMES, TIMES + 6):
        session = repo.writable_session()
        to_repository(cube(start, times=6, chunks=3), session, append_dim="time", **compute)
        session.commit(f"append from day {start}")


def _expected() -> xr.Dataset:
    return xr.concat(
        [cube(0, chunks=None), cube(TIMES, 6, None), cube(TIMES + 6, 6, None)], dim="time"
    )


def test_eager_data_is_written_directly(repo):
    session = repo.writable_session()
    to_repository(cube(chunks=None), session)
    assert session.status().chunks  # in the session, before the commit
    session.commit("eager")
    xr.testing.assert_identical(_read(repo), cube(chunks=None))
    assert _commits(repo) == 2


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_dask_data_ends_in_one_commit_per_write_on_local_schedulers(repo, scheduler):
    with dask.config.set(scheduler=scheduler):
        _write_then_append(repo)
    xr.testing.assert_identical(_read(repo), _expected())
    assert _commits(repo) == 4  # the empty root and three commits: no write left behind


@pytest.mark.slow
def test_dask_data_ends_in_one_commit_per_write_on_a_local_cluster(repo, cluster):
    _write_then_append(repo, scheduler=cluster)
    xr.testing.assert_identical(_read(repo), _expected())
    assert _commits(repo) == 4


@pytest.mark.parametrize("process_backend", ["s3"], indirect=True)
def test_dask_processes_write_to_s3(process_backend):
    repo = create_repo(process_backend)
    session = repo.writable_session()
    with dask.config.set(scheduler="processes"):
        to_repository(cube(), session)
    session.commit("on s3")
    xr.testing.assert_identical(_read(repo), cube(chunks=None))


def test_region_and_encoding_as_to_zarr(repo):
    template = cube(chunks=None)
    session = repo.writable_session()
    encoding = {
        "temp": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 270, "_FillValue": -1},
        "count": {"chunks": (3, 6, 8)},
    }
    to_repository(template.chunk({"time": 3}), session, encoding=encoding, mode="w")
    session.commit("encoded")
    stored = xr.open_zarr(repo.readonly_session().store, consolidated=False, decode_cf=False)
    assert stored["temp"].dtype == np.int16 and stored["temp"].attrs["scale_factor"] == 0.01

    # Overwrite days 3..8 through a region, with Dask, on processes.
    patch = template.isel(time=slice(3, 9)).drop_vars(["y", "x"])
    patch["count"] = patch["count"] * 0 + 7
    patch["temp"] = patch["temp"] * 0 + 280
    session = repo.writable_session()
    with dask.config.set(scheduler="processes"):
        to_repository(patch.chunk({"time": 3}), session, region={"time": slice(3, 9)})
    session.commit("region")
    read = _read(repo)
    assert (read["count"].isel(time=slice(3, 9)) == 7).all()
    assert np.allclose(read["temp"].isel(time=slice(3, 9)), 280, atol=0.01)
    xr.testing.assert_identical(read["count"].isel(time=slice(0, 3)), template["count"][:3])
    assert _commits(repo) == 3


def test_unsafe_chunks_writing_one_zarr_chunk_from_two_tasks_are_a_conflict(repo):
    session = repo.writable_session()
    ds = cube(chunks=None)
    encoding = {"temp": {"chunks": (4, 6, 8)}, "count": {"chunks": (4, 6, 8)}}
    with pytest.raises(ForkConflictError, match=r"'/temp'"):
        # Dask chunks of 3 days over Zarr chunks of 4: two tasks write Zarr chunk 0.
        to_repository(ds.chunk({"time": 3}), session, encoding=encoding, safe_chunks=False)
    assert not session.status().chunks.get("/temp")


def test_memory_repositories_refuse_worker_processes_saying_why():
    repo = Repository.create(f"memory://{uuid.uuid4().hex}")
    session = repo.writable_session()
    with (
        dask.config.set(scheduler="processes"),
        pytest.raises(ForkError, match=r"memory://.*process"),
    ):
        to_repository(cube(), session)


def test_memory_repositories_work_on_threads():
    repo = Repository.create(f"memory://{uuid.uuid4().hex}")
    session = repo.writable_session()
    with dask.config.set(scheduler="threads"):
        to_repository(cube(), session)
    session.commit("threads")
    xr.testing.assert_identical(_read(repo), cube(chunks=None))


def test_plain_to_zarr_on_worker_processes_stops_the_commit_instead_of_losing_data(repo):
    """The pitfall to_repository exists for: ``to_zarr`` sends the store to the workers,
    whose writes never come back. The commit refuses instead of publishing metadata only."""
    session = repo.writable_session()
    with dask.config.set(scheduler="processes"):
        cube().to_zarr(session.store, mode="w", consolidated=False)
    with pytest.raises(ForkError, match="never merged"):
        session.commit("would hold metadata and coordinates only")
    assert _commits(repo) == 1


def test_to_repository_needs_a_writable_session(repo):
    session: Session = repo.readonly_session()
    with pytest.raises(Exception, match="read-only"):
        to_repository(cube(), session)

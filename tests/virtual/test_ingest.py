"""The daily update: ingest a growing folder of NetCDF files, each file exactly once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import xarray as xr

from icechunk_spark import InvalidInputError
from icechunk_spark.virtual import ingest_files, list_files, open_for_files, plan_ingest
from tests.support.helpers import loaded_files
from tests.support.progress import Recorder

from .conftest import NUMCODECS_WARNING
from .netcdf_data import MonthlyFiles

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)


def arrive(monthly: MonthlyFiles, folder: Path, months: range) -> None:
    for path in monthly.paths[months.start : months.stop]:
        shutil.copy(path, folder / path.name)


def files_as_xarray(folder: Path) -> xr.Dataset:
    combined = xr.combine_by_coords(loaded_files(sorted(folder.glob("*.nc"))))
    assert isinstance(combined, xr.Dataset)
    return combined.load()


def test_new_files_are_appended_once_and_match_xarray(
    monthly: MonthlyFiles, data_dir: Path, tmp_path: Path
) -> None:
    url = (tmp_path / "repo").as_uri()
    pattern = str(data_dir / "tas_*.nc")
    arrive(monthly, data_dir, range(0, 2))
    repo = open_for_files(url, data_dir.as_uri() + "/")

    recorder = Recorder()
    plan = plan_ingest(repo, list_files(pattern))
    assert len(plan.new) == len(plan.files) == 2
    first = ingest_files(repo, plan, concat_dim="time", progress=recorder)
    assert recorder.all_complete() and recorder.stage("scanning files").total == 2

    again = plan_ingest(repo, list_files(pattern))
    assert again.new == () and len(again.files) == 2  # nothing new: nothing to commit
    with pytest.raises(InvalidInputError, match="nothing to ingest"):
        ingest_files(repo, again)

    arrive(monthly, data_dir, range(2, 3))
    later = plan_ingest(repo, list_files(pattern))
    assert later.new == (data_dir.joinpath(monthly.paths[2].name).as_uri(),)
    second = ingest_files(repo, later, concat_dim="time")

    assert [s.id for s in repo.ancestry(branch="main")][:2] == [second, first]
    store = repo.readonly_session(branch="main").store
    got = xr.open_zarr(store, consolidated=False).load()
    xr.testing.assert_identical(got, files_as_xarray(data_dir))
    assert got.sizes["time"] == 31 + 28 + 31


def write_day_with_own_units(folder: Path, day: int) -> Path:
    """A daily file as xarray writes it: time in ``days since <that day>``."""
    import numpy as np
    import pandas as pd

    time = pd.Timestamp("2024-03-01") + pd.Timedelta(days=day)
    values = np.full((1, 4, 6), 270 + day, "float32")
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), values, {"units": "K"})},
        coords={"time": [time], "lat": np.arange(4.0), "lon": np.arange(6.0)},
    )
    path = folder / f"tas_{time:%Y%m%d}.nc"
    ds.to_netcdf(path, engine="netcdf4", encoding={"tas": {"chunksizes": (1, 2, 3)}})
    return path


def test_daily_files_with_their_own_time_units_keep_their_dates(
    data_dir: Path, tmp_path: Path
) -> None:
    for day in range(3):
        write_day_with_own_units(data_dir, day)
    opened = loaded_files(data_dir.glob("*"), decode_times=False)
    units = {str(ds.time.units) for ds in opened}
    assert len(units) == 3  # the case to handle: every file has its own reference date
    repo = open_for_files((tmp_path / "repo").as_uri(), data_dir.as_uri() + "/")
    first = ingest_files(repo, plan_ingest(repo, list_files(str(data_dir / "*.nc"))))
    write_day_with_own_units(data_dir, 3)
    second = ingest_files(repo, plan_ingest(repo, list_files(str(data_dir / "*.nc"))))

    got = xr.open_zarr(repo.readonly_session().store, consolidated=False).load()
    xr.testing.assert_identical(got, files_as_xarray(data_dir))
    assert str(got.time.values[-1])[:10] == "2024-03-04"

    # The update keeps each array's identity: the diff shows grown arrays and the new
    # day's chunks, not every array deleted and re-created.
    d = repo.diff(from_snapshot_id=first, to_snapshot_id=second)
    assert d.nodes_added == d.nodes_deleted == ()
    assert set(d.nodes_updated) == {"/tas", "/time"}
    assert d.chunks_changed == {"/tas": 4, "/time": 1}  # 2x2 chunks a day; time is one chunk


def test_an_existing_repository_gains_the_files_container(
    monthly: MonthlyFiles, data_dir: Path, tmp_path: Path
) -> None:
    from icechunk_spark import Repository

    url = (tmp_path / "repo").as_uri()
    Repository.create(url)
    arrive(monthly, data_dir, range(0, 1))
    container = data_dir.as_uri() + "/"
    repo = open_for_files(url, container)
    assert container in repo.config.virtual_chunk_containers
    ingest_files(repo, plan_ingest(repo, list_files(str(data_dir / "*.nc"))))
    assert Repository.open(url).config.virtual_chunk_containers.keys() == {container}


def test_a_glob_matching_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no files match"):
        list_files(str(tmp_path / "*.nc"))

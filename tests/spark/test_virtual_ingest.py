"""Virtual ingestion on executors (issue 12, item 4): real NetCDF4 files, a real SparkSession.

Files are scanned on executors into ref rows, placed along ``time`` from per-file summaries
and committed through the coordinator; the repository then reads like xarray reading the
files. A re-run imports only new files, and the driver never receives a ref row.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr

from icechunk_spark import CoordinateOrderError, InvalidInputError, Repository
from icechunk_spark.spark.virtual_ingest import IngestResult, ingest_virtual
from tests.support.helpers import loaded_files

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr:UserWarning"),
]


def write_day_pair(folder: Path, k: int, name: str | None = None) -> Path:
    """File ``k``: two days from 2001-01-01 + 2k days, time in days since the file's own
    first day (rebased on ingest); ``tas`` in whole chunks of 2 days (stays virtual); ``rh``
    in chunks of 3 days (never whole per file: copied); a chunk of ``tas`` never written."""
    path = folder / (name or f"day{k:03d}.nc")
    rng = np.random.default_rng(abs(k))
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "pairs of days"
        ds.createDimension("time", None)
        ds.createDimension("lat", 16)
        ds.createDimension("lon", 24)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = f"days since {date(2001, 1, 1) + timedelta(days=2 * k)}"
        time.calendar = "standard"
        time[:] = [0, 1]
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(16) * 10.0
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(24) * 5.0
        # Random values: chunks of ~750 bytes even compressed, too big for kerchunk to inline.
        tas = ds.createVariable(
            "tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(2, 16, 12), fill_value=-1.0
        )
        tas.units = "K"
        values = (250 + 50 * rng.random((2, 16, 24))).astype("f4")
        tas[:, :, 0:12] = values[:, :, 0:12]  # the chunks of lon 12..23 stay unwritten
        rh = ds.createVariable("rh", "f4", ("time", "lat"), chunksizes=(3, 16))
        rh[:] = rng.random((2, 16)).astype("f4")
    return path


def files_as_xarray(paths: list[Path]) -> xr.Dataset:
    opened = loaded_files(sorted(paths))
    combined = xr.combine_by_coords(
        opened, data_vars="minimal", coords="minimal", join="exact", combine_attrs="override"
    )
    assert isinstance(combined, xr.Dataset)
    return combined


def run(spark: Any, url: str, folder: Path) -> IngestResult:
    return ingest_virtual(spark, url, str(folder / "*.nc"), concat_dim="time")


def read(url: str, folder: Path) -> xr.Dataset:
    repo = Repository.open(url, authorize_virtual=[folder.as_uri() + "/"])
    return xr.open_zarr(repo.readonly_session().store, consolidated=False).load()


def assert_no_ref_rows_reached_the_driver(result: IngestResult, files: int) -> None:
    for got in result.received:
        assert "coord" not in got.columns and "offset" not in got.columns, got
        assert got.rows <= files, got  # one summary (or one held location) per file


def test_files_are_scanned_on_executors_and_appended_once(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    url = (tmp_path / "repo").as_uri()
    paths = [write_day_pair(folder, k) for k in range(3)]

    first = run(spark, url, folder)
    assert len(first.imported) == 3 and first.skipped == 0
    assert_no_ref_rows_reached_the_driver(first, 3)
    ours = read(url, folder)
    xr.testing.assert_identical(ours, files_as_xarray(paths))
    assert str(ours.time.values[-1])[:10] == "2001-01-06"

    paths += [write_day_pair(folder, k) for k in range(3, 5)]
    second = run(spark, url, folder)
    assert len(second.imported) == 2 and second.skipped == 3
    assert_no_ref_rows_reached_the_driver(second, 5)
    xr.testing.assert_identical(read(url, folder), files_as_xarray(paths))
    repo = Repository.open(url)
    assert [s.message for s in repo.ancestry()][:2] == [
        "ingest 2 new files (5 in all)",
        "ingest 3 new files (3 in all)",
    ]
    # tas stayed virtual: its refs point into the files, shifted by whole chunks.
    refs = repo.readonly_session().chunk_refs("/tas").to_pylist()
    assert {r["virtual_path"] for r in refs} == {p.as_uri() for p in paths}
    assert len(refs) == 5  # one written chunk per file; unwritten ones stay absent (fill)

    again = run(spark, url, folder)
    assert again.imported == () and again.skipped == 5
    assert again.snapshot == second.snapshot  # nothing new: nothing committed


def test_files_that_disagree_are_refused_before_anything_is_committed(
    spark: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    url = (tmp_path / "repo").as_uri()
    write_day_pair(folder, 0)
    first = run(spark, url, folder)
    odd = folder / "day001.nc"
    with netCDF4.Dataset(odd, "w") as ds:  # tas as float64: another dtype
        ds.createDimension("time", None)
        ds.createDimension("lat", 16)
        ds.createDimension("lon", 24)
        time = ds.createVariable("time", "f8", ("time",))
        time.units, time.calendar = "days since 2001-01-03", "standard"
        time[:] = [0, 1]
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(16) * 10.0
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(24) * 5.0
        ds.createVariable("tas", "f8", ("time", "lat", "lon"))[:] = 1.0
        ds.createVariable("rh", "f4", ("time", "lat"))[:] = 0.5
    with pytest.raises(InvalidInputError, match=r"'/tas': data_type is 'float64' in .*day001"):
        run(spark, url, folder)
    assert Repository.open(url).lookup_branch("main") == first.snapshot


def test_files_that_cannot_be_appended_one_by_one_are_refused(spark: Any, tmp_path: Path) -> None:
    """Issue 18's awkward files (packing that differs per file, a variable only in later
    files) cannot be appended file by file: the ingest names the problem and commits nothing
    (``icechunk-spark import`` rebuilds such datasets in one process, tests/virtual). The
    spark-submit job runs this code; its one-line failure is tests/test_jobs.py's."""
    from tests.virtual.netcdf_data import write_awkward_files

    paths = write_awkward_files(tmp_path / "data")
    url = (tmp_path / "repo").as_uri()
    with pytest.raises(InvalidInputError, match="do not have the same variables"):
        run(spark, url, paths[0].parent)
    assert [s.message for s in Repository.open(url).ancestry()] == ["Repository initialized"]


def test_files_are_placed_in_time_order_and_a_rerun_only_appends(
    spark: Any, tmp_path: Path
) -> None:
    """Issue 26: the order is the files' times, not their names; a re-run appends after the
    dataset's last time and refuses a file that falls before it (docs/spark.md)."""
    folder = tmp_path / "data"
    folder.mkdir()
    url = (tmp_path / "repo").as_uri()
    # b.nc holds 01-01..01-02, a.nc 01-03..01-04: name order is not time order.
    paths = [write_day_pair(folder, 1, "a.nc"), write_day_pair(folder, 0, "b.nc")]
    first = run(spark, url, folder)
    assert len(first.imported) == 2
    ours = read(url, folder)
    xr.testing.assert_identical(ours, files_as_xarray(paths))
    assert str(ours.time.values[0])[:10] == "2001-01-01"

    # A later day named before every held file is appended (it used to be refused by name).
    paths.append(write_day_pair(folder, 2, "0_named_first.nc"))
    second = run(spark, url, folder)
    assert second.imported == (paths[-1].as_uri(),)
    xr.testing.assert_identical(read(url, folder), files_as_xarray(paths))

    # A back-filled earlier day cannot be appended: refused, naming it and the dataset's end.
    write_day_pair(folder, -1, "z_backfill.nc")  # 2000-12-30..31
    with pytest.raises(
        CoordinateOrderError,
        match=r"z_backfill\.nc' starts at 2000-12-30.*dataset holds \(2001-01-06",
    ) as refused:
        run(spark, url, folder)
    assert refused.value.files == ((folder / "z_backfill.nc").as_uri(),)
    assert Repository.open(url).lookup_branch("main") == second.snapshot


def test_a_folder_of_netcdf3_and_netcdf4_files_is_scanned_with_each_files_parser(
    spark: Any, tmp_path: Path
) -> None:
    """``parser="auto"``: each executor reads its file with VirtualiZarr's parser for the
    file's format; the result equals xarray's reading of the files, chunks still refs."""
    pytest.importorskip("virtualizarr", reason="the virtualizarr extra is not installed")
    from tests.virtual.netcdf_data import write_series_file

    folder = tmp_path / "data"
    folder.mkdir()
    write_series_file(folder, 0, 2, "NETCDF3_CLASSIC")
    write_series_file(folder, 2, 2, "NETCDF4", endian="big", contiguous=True)
    url = (tmp_path / "repo").as_uri()
    result = ingest_virtual(spark, url, str(folder / "*.nc"), parser="auto")
    assert len(result.imported) == 2
    got = read(url, folder)
    expected = xr.concat(loaded_files(sorted(folder.glob("*.nc"))), "time")
    xr.testing.assert_equal(got.tas, expected.tas.load())
    refs = Repository.open(url).readonly_session().chunk_refs("/tas").to_pylist()
    assert all(r["virtual_path"] for r in refs)

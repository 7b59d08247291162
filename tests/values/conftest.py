"""Datasets written by xarray into repositories, and how to compare a values table with them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

from icechunk_spark import Repository


def daily_dataset(days: int = 40, calendar: str = "standard") -> xr.Dataset:
    """``tas(time, lat, lon)`` float32 with NaNs, and ``pk``, packed int16 with a fill value."""
    rng = np.random.default_rng(7)
    if calendar == "standard":
        time = pd.date_range("2001-01-01", periods=days, freq="D")
    else:
        time = xr.date_range(
            "2001-01-01", periods=days, freq="D", calendar=calendar, use_cftime=True
        )
    lat = np.linspace(-60, 60, 6, dtype="f4")
    lon = np.linspace(0, 330, 12, dtype="f4")
    tas = (250 + 50 * rng.random((days, lat.size, lon.size))).astype("f4")
    tas[3, 1, 2] = np.nan
    pk = (10 * rng.random((days, lat.size, lon.size))).astype("f8")
    pk[0, 0, :3] = np.nan  # written as the fill value, read back as missing
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas, {"units": "K"}), "pk": (("time", "lat", "lon"), pk)},
        coords={"time": time, "lat": lat, "lon": lon},
    )
    ds["pk"].encoding = {
        "dtype": "int16",
        "scale_factor": 0.01,
        "add_offset": 5.0,
        "_FillValue": -32768,
    }
    return ds


def write(
    ds: xr.Dataset, group: str | None = None, chunks: dict[str, int] | None = None
) -> Repository:
    """A new memory repository holding ``ds`` (chunked by ``chunks``), committed."""
    repo = Repository.create(f"memory://{uuid.uuid4().hex}")
    session = repo.writable_session("main")
    sizes = chunks or {"time": 10, "lat": 3, "lon": 5}  # lon 12 by 5: edge chunks
    encoding = {
        name: {**ds[name].encoding, "chunks": tuple(sizes[d] for d in ds[name].dims)}
        for name in ds.data_vars
    }
    ds.to_zarr(session.store, group=group, encoding=encoding, zarr_format=3, consolidated=False)
    session.commit("written by xarray")
    return repo


def xarray_rows(repo: Repository, arrays: Sequence[str], group: str | None = None) -> pd.DataFrame:
    """``xr.open_zarr(store)[arrays].to_dataframe().reset_index()``, the rows to match."""
    ds = xr.open_zarr(repo.readonly_session().store, group=group, consolidated=False)
    return ds[list(arrays)].to_dataframe().reset_index()


def as_frame(table: pa.Table) -> pd.DataFrame:
    """A values table as pandas, to compare with xarray's rows (null -> NaN, UTC -> naive)."""
    frame = table.to_pandas()
    for name, dtype in frame.dtypes.items():
        if isinstance(dtype, pd.DatetimeTZDtype):
            frame[name] = frame[name].dt.tz_convert(None).astype("datetime64[ns]")
    return frame


def assert_same_rows(ours: pa.Table, theirs: pd.DataFrame, dims: Sequence[str]) -> None:
    """The same rows in the same columns, whatever their order (Spark's is not C order)."""
    frame = as_frame(ours)
    theirs = theirs.copy()
    for name in theirs.columns:
        if theirs[name].dtype == object:  # cftime dates: their ISO text
            theirs[name] = [v.isoformat() for v in theirs[name]]
    assert list(frame.columns) == list(theirs.columns)
    frame = frame.sort_values(list(dims)).reset_index(drop=True)
    theirs = theirs.sort_values(list(dims)).reset_index(drop=True)
    pd.testing.assert_frame_equal(frame, theirs, check_dtype=False)


@pytest.fixture(scope="module")
def daily_repo() -> Repository:
    return write(daily_dataset())

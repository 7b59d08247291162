"""Writing realistic NetCDF4 test files: monthly daily-mean fields, compressed and chunked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pandas as pd

LAT = np.linspace(-85, 85, 18, dtype="f4")
LON = np.linspace(0, 350, 36, dtype="f4")
FILL = -9999.0


@dataclass(frozen=True, slots=True)
class MonthlyFiles:
    directory: Path
    paths: tuple[Path, ...]

    @property
    def urls(self) -> list[str]:
        return [p.as_uri() for p in self.paths]

    @property
    def container(self) -> str:
        return self.directory.as_uri() + "/"


def write_monthly_files(directory: Path, year: int = 2022) -> MonthlyFiles:
    rng = np.random.default_rng(year)
    paths = []
    for month in range(1, 13):
        start = pd.Timestamp(year=year, month=month, day=1)
        days = start.days_in_month
        path = directory / f"tas_{year}{month:02d}.nc"
        with netCDF4.Dataset(path, "w") as ds:
            ds.title = "synthetic daily means"
            ds.createDimension("time", None)
            ds.createDimension("lat", LAT.size)
            ds.createDimension("lon", LON.size)
            time = ds.createVariable("time", "f8", ("time",))
            time.units = f"days since {year}-01-01"
            time.calendar = "standard"
            time[:] = np.arange(days) + (start - pd.Timestamp(year=year, month=1, day=1)).days
            lat = ds.createVariable("lat", "f4", ("lat",))
            lat.units = "degrees_north"
            lat[:] = LAT
            lon = ds.createVariable("lon", "f4", ("lon",))
            lon.units = "degrees_east"
            lon[:] = LON
            tas = ds.createVariable(
                "tas",
                "f4",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=4,
                shuffle=True,
                chunksizes=(1, 9, 18),
                fill_value=FILL,
            )
            tas.units = "K"
            tas.long_name = "near-surface air temperature"
            values = (250 + 50 * rng.random((days, LAT.size, LON.size))).astype("f4")
            values[0, 0, 0] = FILL  # one missing value per month
            tas[:] = values
            pr = ds.createVariable(
                "pr",
                "f8",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=6,
                shuffle=False,
                chunksizes=(1, 18, 36),
            )
            pr.units = "kg m-2 s-1"
            pr[:] = rng.random((days, LAT.size, LON.size)) * 1e-4
        paths.append(path)
    return MonthlyFiles(directory, tuple(paths))


def write_awkward_files(directory: Path, count: int = 3) -> list[Path]:
    """Small NetCDF4 files that combined naively read wrong (issue 18), in a folder whose
    name has a space and an accent: per-file time units with CF bounds, packing that differs
    per file, a variable only in later files, unwritten chunks, tiny (inlined) chunks."""
    folder = directory / "jour données"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        path = folder / f"day {k}.nc"
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("nv", 2)
            ds.createDimension("x", 4)
            time = ds.createVariable("time", "f8", ("time",))
            time.units = f"days since 2000-01-{2 * k + 1:02d}"
            time.calendar = "standard"
            time.bounds = "time_bnds"
            time[:] = [0, 1]
            ds.createVariable("time_bnds", "f8", ("time", "nv"))[:] = [[0, 1], [1, 2]]
            packed = ds.createVariable("packed", "i2", ("time", "x"), fill_value=-1)
            packed.set_auto_maskandscale(False)
            packed.scale_factor = np.float32(10.0**k)
            packed[:] = np.arange(8, dtype="i2").reshape(2, 4)
            sparse = ds.createVariable("sparse", "f4", ("time", "x"), chunksizes=(1, 2))
            sparse[0, 0:2] = [k, k]  # the other chunks are never written
            if k > 0:
                ds.createVariable("late", "f4", ("time",), fill_value=-9.0)[:] = [k, k]
        paths.append(path)
    return paths


def write_days(path: Path, first: str, days: int = 1) -> Path:
    """A file of ``days`` daily fields from ``first``, as xarray writes it: time in ``days
    since`` the file's own first day (so files differ in units), ``tas`` in whole chunks."""
    import xarray as xr

    times = pd.date_range(first, periods=days, freq="D")
    base = (times - pd.Timestamp("2000-01-01")).days.to_numpy()
    values = (base[:, None, None] + np.arange(24).reshape(1, 4, 6) / 100).astype("f4")
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), values, {"units": "K"})},
        coords={"time": times, "lat": np.arange(4.0), "lon": np.arange(6.0)},
    )
    ds.to_netcdf(path, engine="netcdf4", encoding={"tas": {"chunksizes": (1, 2, 3)}})
    return path


def write_series_file(folder: Path, first_day: int, days: int, fmt: str, **variable: Any) -> Path:
    """``days`` days of a small series as one file, NetCDF4 or NetCDF3, in ``folder``;
    ``variable``: netCDF4's createVariable options for ``tas`` (endian, zlib...)."""
    path = folder / f"tas_{first_day:03d}.nc"
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", days)
        ds.createDimension("lat", 20)  # chunks of 4.8 kB: over every inlining threshold
        ds.createDimension("lon", 30)
        # An explicit fill for time too: without one each format reports its own default
        # (NaN for NetCDF3, 9.97e36 for NetCDF4), and a file-by-file append (the Spark job)
        # refuses files whose metadata disagree.
        time = ds.createVariable("time", "f8", ("time",), fill_value=-999.0)
        time.units, time.calendar = "days since 2000-01-01", "standard"
        time[:] = np.arange(first_day, first_day + days)
        dtype = ">f4" if variable.get("endian") == "big" else "f4"
        # The same _FillValue in every file: else each parser reports its format's default
        # fill for the unwritten chunks, and files that disagree are copied, not referenced.
        dims = ("time", "lat", "lon")
        tas = ds.createVariable("tas", dtype, dims, fill_value=-999.0, **variable)
        tas[:] = np.arange(days * 600, dtype="float32").reshape(days, 20, 30) + first_day
    return path

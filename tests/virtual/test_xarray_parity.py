"""A virtual dataset reads exactly what xarray reads from the same NetCDF4 files (issue 18).

Every test writes real NetCDF4 files with netCDF4, imports them (``import_netcdf`` or the
``icechunk-spark import`` CLI) and compares ``xr.open_zarr`` of the repository with
``xr.open_dataset`` / ``xr.combine_by_coords`` of the files, or checks the documented
refusal (see docs/format.md, "Virtual datasets: what a combined import reads").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr

from icechunk_spark import InvalidInputError, Repository
from icechunk_spark.virtual import import_netcdf

from .conftest import NUMCODECS_WARNING, RepoFactory

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)

Writer = Callable[[netCDF4.Dataset, int], None]


def write_files(directory: Path, count: int, write: Writer, name: str = "f") -> list[Path]:
    """``count`` NetCDF4 files; ``write(dataset, k)`` fills file ``k``."""
    paths = []
    for k in range(count):
        path = directory / f"{name}{k}.nc"
        with netCDF4.Dataset(path, "w") as ds:
            write(ds, k)
        paths.append(path)
    return paths


def xarray_reading(paths: list[Path], **combine: Any) -> xr.Dataset:
    """What xarray reads from the files: one file opened, several combined by coords."""
    opened = [xr.open_dataset(p).load() for p in paths]
    if len(opened) == 1:
        return opened[0]
    combined = xr.combine_by_coords(opened, **combine)
    assert isinstance(combined, xr.Dataset)
    return combined


def our_reading(repo: Repository, group: str | None = None) -> xr.Dataset:
    store = repo.readonly_session("main").store
    dataset: xr.Dataset = xr.open_zarr(store, group=group, consolidated=False).load()
    return dataset


def imported(
    make_repo: RepoFactory, container: Path, paths: list[Path], **options: Any
) -> Repository:
    repo = make_repo([container.as_uri() + "/"])
    session = repo.writable_session()
    import_netcdf(session, [p.as_uri() for p in paths], **options)
    session.commit("import")
    return repo


def assert_same_values(ours: xr.Dataset, theirs: xr.Dataset) -> None:
    """Same variables, dims, coordinates and values (NaN equal to NaN)."""
    assert sorted(ours.variables) == sorted(theirs.variables)
    for name, variable in theirs.variables.items():
        assert ours[name].dims == variable.dims, name
        np.testing.assert_array_equal(ours[name].values, variable.values, err_msg=str(name))


# -- 1. unwritten chunks read as the NetCDF fill ---------------------------------------------
def _partly_written(ds: netCDF4.Dataset, k: int) -> None:
    ds.createDimension("x", 8)
    default = ds.createVariable("default_fill", "f4", ("x",), chunksizes=(2,))
    default[0:4] = np.arange(4)  # chunks 2 and 3 never written
    integer = ds.createVariable("int_default", "i4", ("x",), chunksizes=(2,))
    integer[0:2] = [1, 2]
    explicit = ds.createVariable("explicit", "i2", ("x",), chunksizes=(2,), fill_value=-5)
    explicit[0:2] = [1, 2]


def test_unwritten_chunks_read_as_the_netcdf_fill(data_dir: Path, make_repo: RepoFactory) -> None:
    paths = write_files(data_dir, 1, _partly_written)
    repo = imported(make_repo, data_dir, paths, concat_dim=None)
    ours, theirs = our_reading(repo), xarray_reading(paths)
    assert_same_values(ours, theirs)
    assert theirs["default_fill"].values[-1] == netCDF4.default_fillvals["f4"]
    assert np.isnan(ours["explicit"].values[-1])  # masked through _FillValue, like xarray

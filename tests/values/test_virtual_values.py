"""A values table over virtual refs into NetCDF files: packed and masked variables decode as
xarray decodes them, and only allowed containers are read."""

from __future__ import annotations

import uuid
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from icechunk_spark import Repository, VirtualRefRefusedError
from icechunk_spark.values import read_values
from icechunk_spark.virtual import import_netcdf

from .conftest import assert_same_rows, xarray_rows

DIMS = ["time", "lat", "lon"]
# zarr warns whenever it loads a numcodecs.* codec (HDF5's zlib): expected here.
# and xarray says so when a variable has both a _FillValue and a missing_value (on purpose).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr"),
    pytest.mark.filterwarnings("ignore:variable 't' has multiple fill values"),
]


def _write_packed(path: Path) -> None:
    """``t`` packed in int16 (scale, offset, _FillValue, missing_value), ``q`` float with a fill."""
    rng = np.random.default_rng(3)
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 6)
        ds.createDimension("lon", 8)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = "hours since 2020-03-01 00:00"
        time.calendar = "standard"
        time[:] = np.arange(12) * 6.0
        ds.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-50, 50, 6)
        ds.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 315, 8)
        t = ds.createVariable(
            "t", "i2", ("time", "lat", "lon"), fill_value=-32767, chunksizes=(4, 3, 4), zlib=True
        )
        t.set_auto_maskandscale(False)
        t.scale_factor = 0.01
        t.add_offset = 280.0
        t.missing_value = np.int16(-32000)
        raw = rng.integers(-3000, 3000, (12, 6, 8)).astype("i2")
        raw[0, 0, 0] = -32767  # _FillValue
        raw[5, 2, 3] = -32000  # missing_value
        t[:] = raw
        q = ds.createVariable(
            "q", "f4", ("time", "lat", "lon"), fill_value=-1.0, chunksizes=(6, 6, 8)
        )
        values = rng.random((12, 6, 8)).astype("f4")
        values[11, 5, 7] = -1.0
        q[:] = values


@pytest.fixture(scope="module")
def packed_repo(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    folder = tmp_path_factory.mktemp("packed")
    _write_packed(folder / "t.nc")
    container = folder.as_uri() + "/"
    repo = Repository.create(
        f"memory://{uuid.uuid4().hex}",
        config={"virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    session = repo.writable_session("main")
    import_netcdf(session, [(folder / "t.nc").as_uri()], concat_dim="time", inline_threshold=0)
    session.commit("virtual")
    return repo


def test_packed_and_masked_virtual_variables_match_xarray(packed_repo: Repository) -> None:
    reader = packed_repo.readonly_session()
    assert reader.get_chunk_ref("/t", (1, 1, 1)).kind == "virtual"  # type: ignore[union-attr]
    table = read_values(reader, "/", ["t", "q"])
    assert_same_rows(table, xarray_rows(packed_repo, ["t", "q"]), DIMS)
    assert table.column("t").null_count == 2  # _FillValue and missing_value
    assert table.column("q").null_count == 1


def test_virtual_reads_need_the_container_authorized(packed_repo: Repository) -> None:
    stranger = Repository.open(packed_repo.storage)  # no authorize_virtual
    with pytest.raises(VirtualRefRefusedError):
        read_values(stranger.readonly_session(), "/", ["t"])

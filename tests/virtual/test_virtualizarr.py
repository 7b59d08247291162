"""Every VirtualiZarr parser on real files the tests write (issue 31, items 1 and 2).

Each format is written small in ``tmp_path`` by its own library (netCDF4, scipy through
xarray, zarr, kerchunk, tifffile, astropy), opened with ``open_virtual``, written with
``write_virtual_dataset`` and committed; the repository read by ``xr.open_zarr`` must be
identical (``xarray.testing.assert_identical``, after CF decoding) to ``xr.open_dataset`` of
the original. Two formats have no xarray reader to compare with, said where they are tested:
TIFF and FITS are compared with their own libraries' reading (tifffile, astropy).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from icechunk_spark import Repository
from icechunk_spark.errors import (
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    VirtualRefRefusedError,
)
from icechunk_spark.virtual import (
    detect_parser,
    import_netcdf,
    open_virtual,
    write_virtual_dataset,
)
from icechunk_spark.xarray import to_repository

from .conftest import NUMCODECS_WARNING, RepoFactory

pytest.importorskip("virtualizarr", reason="the virtualizarr extra is not installed")

pytestmark = [
    pytest.mark.filterwarnings(NUMCODECS_WARNING),
    # VirtualiZarr's parsers warn about what they cannot know (kerchunk's fill values,
    # FITS headers, TIFF tags); the comparisons below say what matters.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]


# -- files -----------------------------------------------------------------------------------
def write_netcdf4(
    path: Path, start: int = 0, days: int = 8, scale: float = 0.01, lats: int = 6
) -> Path:
    """A NetCDF4 file with what faithful imports must keep: chunked zlib data, a packed
    int16 variable (scale_factor, add_offset, _FillValue and masked values), a variable with
    unwritten chunks and no _FillValue (HDF5's default fill, unmasked), CF time bounds."""
    rng = np.random.default_rng(start)
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "virtualizarr parity"
        # A fixed time dimension: along an unlimited one, netCDF4 gives ``sparse`` (written
        # shorter) the dimension's length, but its HDF5 dataset keeps its own extent, which
        # is what VirtualiZarr's HDFParser reads ("conflicting sizes for dimension").
        ds.createDimension("time", days)
        ds.createDimension("lat", lats)
        ds.createDimension("nv", 2)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = "days since 2020-01-01"
        time.calendar = "standard"
        time.bounds = "time_bnds"
        time[:] = np.arange(start, start + days)
        bounds = ds.createVariable("time_bnds", "f8", ("time", "nv"), chunksizes=(4, 2))
        days_from = np.arange(start, start + days)
        bounds[:] = np.stack([days_from, days_from + 1], 1)
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = np.linspace(-50, 50, lats)
        tas = ds.createVariable(
            "tas", "f4", ("time", "lat"), zlib=True, shuffle=True, chunksizes=(4, 3)
        )
        tas.units = "K"
        tas[:] = rng.normal(280, 5, (days, lats)).astype("f4")
        pr = ds.createVariable(
            "pr", "i2", ("time", "lat"), chunksizes=(4, lats), fill_value=np.int16(-32767)
        )
        pr.scale_factor = scale
        pr.add_offset = 1.0
        pr.set_auto_maskandscale(True)
        values = np.ma.masked_array(rng.uniform(0, 10, (days, lats)), mask=False)
        values.mask[0, 0] = True
        pr[:] = values
        sparse = ds.createVariable("sparse", "f4", ("time", "lat"), chunksizes=(4, lats))
        sparse[:4] = np.ones((4, lats), "f4")  # the second chunk is never written
    return path


def write_netcdf3(path: Path) -> Path:
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {
            "tas": (("time", "lat"), rng.normal(280, 5, (5, 4)).astype("f4"), {"units": "K"}),
            "pr": (("time", "lat"), rng.uniform(0, 10, (5, 4))),
        },
        coords={"time": np.arange(5.0), "lat": np.linspace(-30, 30, 4)},
        attrs={"title": "NetCDF3 classic"},
    )
    ds["time"].attrs = {"units": "days since 1987-01-01", "calendar": "standard"}
    ds["pr"][0, 1] = np.nan
    encoding = {"pr": {"dtype": "int16", "scale_factor": 0.01, "_FillValue": -999}}
    ds.to_netcdf(path, format="NETCDF3_CLASSIC", engine="scipy", encoding=encoding)
    return path


def opened(path: Path, **kwargs: Any) -> xr.Dataset:
    with xr.open_dataset(path, **kwargs) as ds:
        return ds.load()


def ours(repo: Repository, group: str | None = None) -> xr.Dataset:
    store = repo.readonly_session("main").store
    with xr.open_zarr(store, group=group, consolidated=False) as ds:
        return ds.load()


def written(make_repo: RepoFactory, container: Path, url: str, **open_options: Any) -> Repository:
    repo = make_repo([container.as_uri() + "/"])
    session = repo.writable_session()
    write_virtual_dataset(session, open_virtual(url, **open_options))
    session.commit("virtual")
    return repo


# -- HDF5 / NetCDF4 ----------------------------------------------------------------------------
def test_hdf5_through_open_virtual_is_identical(make_repo: RepoFactory, data_dir: Path) -> None:
    path = write_netcdf4(data_dir / "a.nc")
    assert detect_parser(path.as_uri()) == "hdf5"
    xr.testing.assert_identical(ours(written(make_repo, data_dir, path.as_uri())), opened(path))


@pytest.mark.parametrize("parser", ["kerchunk", "virtualizarr"])
def test_import_netcdf_with_either_hdf5_parser_is_identical(
    make_repo: RepoFactory, data_dir: Path, parser: str
) -> None:
    paths = [write_netcdf4(data_dir / f"m{k}.nc", start=8 * k) for k in range(2)]
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    import_netcdf(session, [p.as_uri() for p in paths], concat_dim="time", parser=parser)  # type: ignore[arg-type]
    session.commit("import")
    expected = xr.concat([opened(p) for p in paths], "time", data_vars="minimal", coords="minimal")
    xr.testing.assert_identical(ours(repo), expected)


# -- NetCDF3 ----------------------------------------------------------------------------------
def test_netcdf3_is_identical(make_repo: RepoFactory, data_dir: Path) -> None:
    path = write_netcdf3(data_dir / "obs.nc")
    assert detect_parser(path.as_uri()) == "netcdf3"
    xr.testing.assert_identical(ours(written(make_repo, data_dir, path.as_uri())), opened(path))


# -- Zarr stores as sources -------------------------------------------------------------------
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_store_is_identical(make_repo: RepoFactory, data_dir: Path, zarr_format: int) -> None:
    source = write_netcdf3(data_dir / "src.nc")
    path = data_dir / f"store_v{zarr_format}.zarr"
    opened(source).chunk({"time": 2}).to_zarr(path, zarr_format=zarr_format, consolidated=False)
    assert detect_parser(path.as_uri()) == "zarr"
    expected = opened(path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours(written(make_repo, data_dir, path.as_uri())), expected)


# -- kerchunk JSON and Parquet ----------------------------------------------------------------
@pytest.mark.parametrize("form", ["json", "parquet"])
def test_kerchunk_references_are_identical(
    make_repo: RepoFactory, data_dir: Path, tmp_path: Path, form: str
) -> None:
    from kerchunk.df import refs_to_dataframe
    from kerchunk.hdf import SingleHdf5ToZarr

    path = write_netcdf4(data_dir / "k.nc")
    # VirtualiZarr's kerchunk parsers refuse inlined chunks (VirtualiZarr#489): no inlining
    # here; import_kerchunk reads inlined ones.
    refs = SingleHdf5ToZarr(path.as_uri(), inline_threshold=0).translate()
    if form == "json":
        target = tmp_path / "refs.json"
        target.write_text(json.dumps(refs))
    else:
        target = tmp_path / "refs.parq"
        refs_to_dataframe(refs, str(target))
    assert detect_parser(target.as_uri()) == "kerchunk"
    repo = written(make_repo, data_dir, target.as_uri())
    # kerchunk's scan leaves a NetCDF variable's fill value null where it has no _FillValue
    # (its own reference set loses HDF5's fill value), and VirtualiZarr's translator then
    # stores NaN for floats: ``sparse``'s unwritten chunk reads NaN, where HDF5 (and xarray
    # on the file) gives the NetCDF default fill 9.97e36, unmasked. import_netcdf fills in
    # HDF5's value (importers._storage_fill_values); from a reference set it is gone, so
    # that chunk alone is compared with NaN.
    theirs = opened(path)
    theirs["sparse"][4:] = np.nan
    xr.testing.assert_identical(ours(repo), theirs)


# -- TIFF and FITS: no xarray reader of their own ---------------------------------------------
def test_tiff_reads_what_tifffile_reads(make_repo: RepoFactory, data_dir: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    image = (np.arange(64 * 48).reshape(64, 48) % 251).astype("uint8")
    path = data_dir / "scene.tif"
    tifffile.imwrite(path, image, tile=(16, 16), compression="zlib")
    assert detect_parser(path.as_uri()) == "tiff"
    # xarray has no TIFF backend of its own; rioxarray's (GDAL) gives band/y/x coordinates
    # and a spatial_ref variable, another model than virtual-tiff's one array per image
    # (named by its IFD, dims y/x). So the reference is tifffile's reading of the pixels in
    # virtual-tiff's model; the one attribute is the TIFF tag virtual-tiff keeps.
    expected = xr.Dataset(
        {"0": (("y", "x"), tifffile.imread(path), {"photometric_interpretation": 1})}
    )
    xr.testing.assert_identical(ours(written(make_repo, data_dir, path.as_uri())), expected)


def test_fits_reads_what_astropy_reads(make_repo: RepoFactory, data_dir: Path) -> None:
    fits = pytest.importorskip("astropy.io.fits")
    path = data_dir / "image.fits"
    fits.PrimaryHDU(np.arange(60, dtype=">f4").reshape(6, 10)).writeto(path)
    assert detect_parser(path.as_uri()) == "fits"
    # xarray has no FITS backend; astropy's reading is the reference: the header cards as
    # attributes, the primary HDU as PRIMARY (y, x), as VirtualiZarr's FITSParser names it.
    with fits.open(path) as hdus:
        header = dict(hdus[0].header)
        data = np.asarray(hdus[0].data).astype("f4")  # native order, as zarr decodes it
    expected = xr.Dataset({"PRIMARY": (("y", "x"), data, header)})
    xr.testing.assert_identical(ours(written(make_repo, data_dir, path.as_uri())), expected)


def test_grib_is_skipped_not_faked(tmp_path: Path) -> None:
    path = tmp_path / "forecast.grib2"
    path.write_bytes(b"GRIB\x00\x00\x00\x02" + bytes(8))
    with pytest.raises(InvalidInputError, match="no GRIB parser"):
        detect_parser(path.as_uri())
    pytest.skip(
        "GRIB: VirtualiZarr 2.5.1 has no GRIB parser; gribberish (a wheel installs) ships a "
        "kerchunk mapper and codec, not a VirtualiZarr parser, and nothing here writes GRIB"
    )


# -- the rules --------------------------------------------------------------------------------
def test_a_ref_outside_the_containers_is_refused_and_nothing_is_written(
    make_repo: RepoFactory, data_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = write_netcdf4(outside / "secret.nc")
    vds = open_virtual(path.as_uri())  # no containers given: it reads
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    with pytest.raises(VirtualRefRefusedError):
        write_virtual_dataset(session, vds)
    assert session.list_nodes() == []  # not even the loaded coordinates
    assert not session.has_uncommitted_changes()
    containers = repo.handle.config.virtual_chunk_containers
    with pytest.raises(VirtualRefRefusedError):  # refused before a byte is read
        open_virtual((outside / "missing.nc").as_uri(), containers=containers)


def test_append_dim_appends_refs_after_the_stored_chunks(
    make_repo: RepoFactory, data_dir: Path
) -> None:
    paths = [write_netcdf4(data_dir / f"d{k}.nc", start=8 * k) for k in range(3)]
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    write_virtual_dataset(session, open_virtual(paths[0].as_uri()))
    session.commit("first")
    for path in paths[1:]:
        session = repo.writable_session()
        write_virtual_dataset(session, open_virtual(path.as_uri()), append_dim="time")
        session.commit("append")
    expected = xr.concat([opened(p) for p in paths], "time", data_vars="minimal", coords="minimal")
    xr.testing.assert_identical(ours(repo), expected)


def test_append_refuses_what_would_read_back_wrong(make_repo: RepoFactory, data_dir: Path) -> None:
    first = write_netcdf4(data_dir / "a.nc", days=6)  # 6 days: not whole chunks of 4
    repacked = write_netcdf4(data_dir / "b.nc", start=8, scale=0.02)
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    write_virtual_dataset(session, open_virtual(first.as_uri()))
    session.commit("first")
    session = repo.writable_session()
    with pytest.raises(InvalidInputError, match="whole number of chunks"):
        write_virtual_dataset(session, open_virtual(repacked.as_uri()), append_dim="time")
    assert not session.has_uncommitted_changes()
    with pytest.raises(InvalidInputError, match="not a dimension"):
        write_virtual_dataset(session, open_virtual(repacked.as_uri()), append_dim="depth")
    whole = write_netcdf4(data_dir / "c.nc", days=8)
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    write_virtual_dataset(session, open_virtual(whole.as_uri()))
    session.commit("first")
    session = repo.writable_session()
    with pytest.raises(InvalidInputError, match="scale_factor"):
        write_virtual_dataset(session, open_virtual(repacked.as_uri()), append_dim="time")
    narrow = write_netcdf4(data_dir / "d.nc", start=8, lats=3)
    with pytest.raises(InvalidInputError, match=r"differs|does not match"):
        write_virtual_dataset(session, open_virtual(narrow.as_uri()), append_dim="time")
    assert not session.has_uncommitted_changes()
    with pytest.raises(AlreadyExistsError):
        write_virtual_dataset(session, open_virtual(whole.as_uri()))


def test_to_repository_hands_a_virtual_dataset_over(make_repo: RepoFactory, data_dir: Path) -> None:
    path = write_netcdf3(data_dir / "obs.nc")
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    to_repository(open_virtual(path.as_uri()), session, group="obs")
    session.commit("virtual")
    node = repo.readonly_session("main").get_node("/obs/tas")
    assert node.type == "array"
    xr.testing.assert_identical(ours(repo, "obs"), opened(path))
    refs = repo.readonly_session("main").get_chunk_ref("/obs/tas", (0, 0))
    assert refs is not None and refs.virtual_path == path.as_uri()


def test_auto_refuses_what_it_cannot_name(tmp_path: Path) -> None:
    hdf4 = tmp_path / "old.hdf"
    hdf4.write_bytes(b"\x0e\x03\x13\x01" + bytes(12))
    with pytest.raises(InvalidInputError, match="HDF4"):
        detect_parser(hdf4.as_uri())
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(InvalidInputError, match="cannot tell"):
        detect_parser(text.as_uri())
    with pytest.raises(NotFoundError):
        detect_parser((tmp_path / "nothing.nc").as_uri())


def test_without_virtualizarr_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "virtualizarr", None)  # import raises ImportError
    with pytest.raises(InvalidInputError, match=r"icechunk-spark\[virtualizarr\]"):
        open_virtual((tmp_path / "a.nc").as_uri(), parser="hdf5")


@pytest.mark.parametrize("missing", [False, True])
def test_manifest_paths_come_one_entry_per_file(
    monkeypatch: pytest.MonkeyPatch, missing: bool
) -> None:
    """A ChunkManifest's paths become a dictionary column (one URL per file, an int32 per
    chunk), slice by slice, with the chunks a manifest lacks left out."""
    from virtualizarr.manifests import ChunkManifest

    from icechunk_spark.virtual import vds_refs

    monkeypatch.setattr(vds_refs, "PATH_SLICE", 4)  # several slices, files across them
    names = np.array(["file:///d/a.nc", "file:///d/b.nc", "file:///d/c.nc"], dtype=object)
    paths = names[np.arange(30) // 7 % 3].reshape(5, 6)
    if missing:
        paths[1, 2] = paths[4, 0] = ""
    manifest = ChunkManifest.from_arrays(
        paths=paths.astype(np.dtypes.StringDType()),
        offsets=np.arange(30, dtype=np.uint64).reshape(5, 6),
        lengths=np.full((5, 6), 3, dtype=np.uint64),
        validate_paths=False,
    )
    coords, table = vds_refs.manifest_coords_and_refs(manifest, 2)
    present = paths.reshape(-1) != ""
    urls = table.column("virtual_path").combine_chunks()
    assert pa.types.is_dictionary(urls.type)
    assert sorted(urls.dictionary.to_pylist()) == sorted(names.tolist())
    assert urls.to_pylist() == paths.reshape(-1)[present].tolist()
    assert coords.tolist() == np.argwhere(paths != "").tolist()
    assert table.column("offset").to_pylist() == np.arange(30)[present].tolist()


def test_a_whole_grid_s_coords_are_laid_out_as_the_coord_codec_encodes_them() -> None:
    from icechunk_spark.format.coords import encode_coords
    from icechunk_spark.virtual.vds_refs import grid_coords

    coords = grid_coords((3, 4, 2))
    assert coords.tolist() == np.argwhere(np.ones((3, 4, 2), bool)).tolist()
    assert not coords.flags.writeable
    encoded = encode_coords(coords)  # shares the coords: read-only, so they cannot change
    assert np.frombuffer(encoded.buffers()[2], np.uint8).ctypes.data == coords.ctypes.data

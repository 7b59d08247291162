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

from icechunk_spark import InvalidInputError, NotFoundError, Repository
from icechunk_spark.cli import main
from icechunk_spark.virtual import import_netcdf
from tests.support.helpers import loaded_files

from .conftest import NUMCODECS_WARNING, RepoFactory
from .netcdf_data import write_awkward_files

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
    opened = loaded_files(paths)
    if len(opened) == 1:
        return opened[0]
    choices = {  # ours, explicit (docs/format.md): xarray warns its defaults will change
        "data_vars": "minimal",
        "coords": "minimal",
        "join": "outer",
        "compat": "no_conflicts",
        "combine_attrs": "override",
    }
    combined = xr.combine_by_coords(opened, **{**choices, **combine})
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


# -- 2. decoding attributes compared across files --------------------------------------------
def _timed(ds: netCDF4.Dataset, k: int, length: int = 2) -> None:
    """A ``time`` coordinate of ``length`` days, continuing file ``k - 1``."""
    ds.createDimension("time", None)
    time = ds.createVariable("time", "f8", ("time",))
    time.units = "days since 2000-01-01"
    time[:] = np.arange(length) + k * length


def _packed(scales: list[float], offsets: list[float]) -> Writer:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        tas = ds.createVariable("tas", "i2", ("time",), chunksizes=(2,), fill_value=-1)
        tas.set_auto_maskandscale(False)
        tas.scale_factor, tas.add_offset = np.float32(scales[k]), np.float32(offsets[k])
        tas[:] = np.array([1, 2], "i2") + 14 * k  # raw 1, 2 then 15, 16

    return write


def test_different_packing_reads_like_xarray(data_dir: Path, make_repo: RepoFactory) -> None:
    paths = write_files(data_dir, 2, _packed([1.0, 10.0], [0.0, 0.0]))
    repo = imported(make_repo, data_dir, paths)
    ours, theirs = our_reading(repo), xarray_reading(paths)
    np.testing.assert_array_equal(theirs["tas"].values, [1, 2, 150, 160])
    assert_same_values(ours, theirs)


def test_identical_packing_stays_virtual(data_dir: Path, make_repo: RepoFactory) -> None:
    paths = write_files(data_dir, 2, _packed([0.5, 0.5], [100.0, 100.0]))
    repo = imported(make_repo, data_dir, paths, inline_threshold=0)
    assert_same_values(our_reading(repo), xarray_reading(paths))
    ref = repo.readonly_session("main").get_chunk_ref("/tas", (1,))
    assert ref is not None and ref.kind == "virtual"


def test_different_fill_values_read_like_xarray(data_dir: Path, make_repo: RepoFactory) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        tas = ds.createVariable("tas", "f4", ("time",), chunksizes=(2,), fill_value=-999 - k)
        tas.set_auto_mask(False)
        tas[:] = [-999 - k, 5 + k]

    paths = write_files(data_dir, 2, write)
    ours, theirs = our_reading(imported(make_repo, data_dir, paths)), xarray_reading(paths)
    np.testing.assert_array_equal(theirs["tas"].values, [np.nan, 5, np.nan, 6])
    assert_same_values(ours, theirs)


def test_different_packing_over_the_limit_is_refused(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    paths = write_files(data_dir, 2, _packed([1.0, 10.0], [0.0, 0.0]))
    with pytest.raises(InvalidInputError, match="scale_factor") as caught:
        imported(make_repo, data_dir, paths, materialize_max_bytes=4)
    assert paths[0].name in str(caught.value) and paths[1].name in str(caught.value)


def test_different_units_are_refused(data_dir: Path, make_repo: RepoFactory) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        tas = ds.createVariable("tas", "f4", ("time",), chunksizes=(2,))
        tas.units = ["K", "degC"][k]
        tas[:] = [1, 2]

    paths = write_files(data_dir, 2, write)
    with pytest.raises(InvalidInputError, match="units") as caught:
        imported(make_repo, data_dir, paths)
    assert paths[0].name in str(caught.value) and paths[1].name in str(caught.value)


# -- 3. CF bounds follow their time variable -------------------------------------------------
@pytest.mark.parametrize("link", ["bounds", "climatology"])
def test_time_bounds_are_rebased_with_time(
    data_dir: Path, make_repo: RepoFactory, link: str
) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        ds.createDimension("time", None)
        ds.createDimension("nv", 2)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = f"days since 2000-01-{2 * k + 1:02d}"  # each file's own start
        time.calendar = "standard"
        setattr(time, link, "time_bnds")
        time[:] = [0, 1]
        bounds = ds.createVariable("time_bnds", "f8", ("time", "nv"), chunksizes=(2, 2))
        bounds[:] = [[0, 1], [1, 2]]
        tas = ds.createVariable("tas", "f4", ("time",), chunksizes=(2,))
        tas[:] = [k, k]

    paths = write_files(data_dir, 2, write)
    ours, theirs = our_reading(imported(make_repo, data_dir, paths)), xarray_reading(paths)
    if link == "bounds":
        starts = theirs["time_bnds"].values[:, 0].astype("datetime64[D]").astype(str)
        assert list(starts) == ["2000-01-01", "2000-01-02", "2000-01-03", "2000-01-04"]
        assert_same_values(ours, theirs)
    else:  # xarray decodes only `bounds`; CF says climatology bounds inherit units too
        days = [[0, 1], [1, 2], [2, 3], [3, 4]]  # in the first file's units
        np.testing.assert_array_equal(ours["time_bnds"].values, days)
        np.testing.assert_array_equal(ours["time"].values, theirs["time"].values)


# -- 4. variables missing from some files, coordinates that differ ---------------------------
@pytest.mark.parametrize("masked", [True, False])
def test_variables_only_in_later_files_are_kept(
    data_dir: Path, make_repo: RepoFactory, masked: bool
) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        ds.createVariable("tas", "f4", ("time",), chunksizes=(2,))[:] = [k, k]
        if k >= 1:
            fill = -1.0 if masked else None
            pr = ds.createVariable("pr", "f4", ("time",), chunksizes=(2,), fill_value=fill)
            pr[:] = [10 * k, 10 * k + 1]

    paths = write_files(data_dir, 3, write)
    ours, theirs = our_reading(imported(make_repo, data_dir, paths)), xarray_reading(paths)
    assert sorted(theirs.data_vars) == ["pr", "tas"]
    np.testing.assert_array_equal(theirs["pr"].values, [np.nan, np.nan, 10, 11, 20, 21])
    assert_same_values(ours, theirs)


def test_a_differing_coordinate_is_refused(data_dir: Path, make_repo: RepoFactory) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        ds.createDimension("lat", 3)
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(3) + 10 * k
        ds.createVariable("tas", "f4", ("time", "lat"), chunksizes=(2, 3))[:] = np.ones((2, 3))

    paths = write_files(data_dir, 2, write)
    with pytest.raises(InvalidInputError, match="'lat'") as caught:
        imported(make_repo, data_dir, paths)
    assert paths[0].name in str(caught.value) and paths[1].name in str(caught.value)


def test_equal_coordinates_are_accepted(data_dir: Path, make_repo: RepoFactory) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        ds.createDimension("lat", 3)
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(3) + 10
        ds.createVariable("tas", "f4", ("time", "lat"), chunksizes=(2, 3))[:] = np.ones((2, 3))

    paths = write_files(data_dir, 2, write)
    ours, theirs = our_reading(imported(make_repo, data_dir, paths)), xarray_reading(paths)
    assert_same_values(ours, theirs)


# -- 5. small files (all chunks inlined) are recognised as imported --------------------------
def cli(*args: str) -> dict[str, Any]:
    """``icechunk-spark ... --json`` in this process; its JSON output."""
    import contextlib
    import io
    import json

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--json"])
    assert code == 0, err.getvalue()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_reimport_of_small_files_commits_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    paths = write_files(data, 3, lambda ds, k: _tiny(ds, k))
    url = (tmp_path / "repo").as_uri()
    first = cli("import", url, str(data / "f[01].nc"))
    assert (first["new_files"], first["committed"]) == (2, True)
    assert cli("import", url, str(data / "f[01].nc"))["committed"] is False
    # f0 leaves the glob, f2 arrives: the dataset keeps f0 (it was imported) and adds f2.
    third = cli("import", url, str(data / "f[12].nc"))
    assert (third["new_files"], third["files"]) == (1, 3)
    repo = Repository.open(url, authorize_virtual=[data.as_uri() + "/"])
    assert_same_values(our_reading(repo), xarray_reading(paths))


def _tiny(ds: netCDF4.Dataset, k: int) -> None:
    _timed(ds, k)
    ds.createVariable("tas", "f4", ("time",), chunksizes=(2,))[:] = [k, k]  # 8 bytes: inlined


# -- 7. an import never leaves its container -------------------------------------------------
@pytest.fixture
def planted(tmp_path: Path, data_dir: Path) -> dict[str, Path]:
    """A small NetCDF file outside the container, reachable through symlinks inside it."""
    outside = tmp_path / "secret"
    outside.mkdir()
    (secret,) = write_files(outside, 1, _tiny, name="secret")
    (data_dir / "link.nc").symlink_to(secret)
    (data_dir / "sub").symlink_to(outside, target_is_directory=True)
    return {"file": data_dir / "link.nc", "dir": data_dir / "sub" / "secret0.nc"}


@pytest.mark.parametrize("via", ["file", "dir"])
def test_import_refuses_symlinks_out_of_the_container(
    data_dir: Path, make_repo: RepoFactory, planted: dict[str, Path], via: str
) -> None:
    from icechunk_spark.virtual import VirtualRefRefusedError

    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    with pytest.raises(VirtualRefRefusedError, match="outside the container"):
        import_netcdf(session, [planted[via].as_uri()], concat_dim=None)
    assert session.list_nodes() == [] or [n.path for n in session.list_nodes()] == ["/"]


def test_kerchunk_refs_through_a_symlink_are_refused_at_import(
    data_dir: Path, make_repo: RepoFactory, planted: dict[str, Path]
) -> None:
    from icechunk_spark.virtual import VirtualRefRefusedError, import_kerchunk

    refs = {
        "version": 1,
        "refs": {
            ".zgroup": '{"zarr_format": 2}',
            "v/.zarray": '{"shape": [4], "chunks": [4], "dtype": "|u1", "fill_value": 0, '
            '"order": "C", "filters": null, "compressor": null, "zarr_format": 2}',
            "v/0": [planted["file"].as_uri(), 0, 4],
        },
    }
    session = make_repo([data_dir.as_uri() + "/"]).writable_session()
    with pytest.raises(VirtualRefRefusedError, match="outside the container"):
        import_kerchunk(session, refs, checksums=False)


def test_cli_import_refuses_a_planted_symlink(
    tmp_path: Path, data_dir: Path, planted: dict[str, Path]
) -> None:
    import contextlib
    import io

    url = (tmp_path / "repo").as_uri()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["import", url, str(data_dir / "*.nc")]) == 1
    assert "outside the container" in err.getvalue()
    assert not Repository.exists(url)  # refused before the repository is created


# -- 8. paths: spaces, non-ASCII, percent-encoding, scheme-less refs -------------------------
def test_cli_import_of_a_folder_with_spaces_and_accents(tmp_path: Path) -> None:
    data = tmp_path / "données du jour"
    data.mkdir()
    paths = write_files(data, 2, _tiny, name="jour ")
    url = (tmp_path / "repo").as_uri()
    assert cli("import", url, str(data / "*.nc"))["new_files"] == 2
    assert cli("import", url, str(data / "*.nc"))["committed"] is False
    for container in (data.as_uri() + "/", f"file://{data}/"):  # either spelling authorizes
        repo = Repository.open(url, authorize_virtual=[container])
        assert_same_values(our_reading(repo), xarray_reading(paths))


def test_percent_encoded_and_plain_file_urls_are_one_file(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    from icechunk_spark.core.containers import resolve_url

    folder = data_dir / "a b%"
    folder.mkdir()
    (path,) = write_files(folder, 1, _tiny)
    container = data_dir.as_uri() + "/"
    plain = f"file://{path}"
    assert resolve_url(path.as_uri(), [container]) == (plain, f"file://{data_dir}/")
    assert resolve_url(str(path), [container])[0] == plain  # "/abs": a local path, always
    repo = imported(make_repo, folder, [path], concat_dim=None, inline_threshold=0)
    ref = repo.readonly_session().get_chunk_ref("/tas", (0,))
    assert ref is not None and ref.virtual_path == plain
    assert_same_values(our_reading(repo), xarray_reading([path]))


def test_scheme_less_absolute_refs_are_local_paths(data_dir: Path, make_repo: RepoFactory) -> None:
    (data_dir / "v.bin").write_bytes(b"0123456789")
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", (1,), (1,), "uint8")
    session.set_virtual_ref("/a", (0,), str(data_dir / "v.bin"), 2, 1)
    ref = session.get_chunk_ref("/a", (0,))
    assert ref is not None and ref.virtual_path == f"file://{data_dir}/v.bin"
    session.commit("abs")
    assert repo.readonly_session().get_chunk("/a", (0,)) == b"2"


@pytest.mark.parametrize("url", ["file://host/data/x.nc", "file:///data/a%3Fb.nc"])
def test_file_urls_with_a_host_or_encoded_separators_are_refused(url: str) -> None:
    from icechunk_spark.core.containers import resolve_url
    from icechunk_spark.virtual import VirtualRefRefusedError

    with pytest.raises(VirtualRefRefusedError, match=r"host|not allowed"):
        resolve_url(url, ["file:///data/"])


# -- 9. variables that crashed: scalars, variable-length strings -----------------------------
def _scalar_and_strings(ds: netCDF4.Dataset, k: int) -> None:
    ds.createDimension("station", 3)
    scalar = ds.createVariable("height", "f8", ())
    scalar.units = "m"
    scalar.assignValue(2.5)
    names = ds.createVariable("name", str, ("station",))
    names[:] = np.array(["Zürich", "Genève", "a much longer station name"], dtype=object)
    ds.createVariable("tas", "f4", ("station",))[:] = [1, 2, 3]


@pytest.mark.parametrize("inline_threshold", [0, 500])
def test_scalars_and_vlen_strings_read_like_xarray(
    data_dir: Path, make_repo: RepoFactory, inline_threshold: int
) -> None:
    paths = write_files(data_dir, 1, _scalar_and_strings)
    repo = imported(make_repo, data_dir, paths, concat_dim=None, inline_threshold=inline_threshold)
    ours, theirs = our_reading(repo), xarray_reading(paths)
    assert ours["height"].shape == () and float(ours["height"]) == 2.5
    assert_same_values(ours, theirs)


# -- 10. clear errors -------------------------------------------------------------------------
def test_a_ref_past_the_end_of_its_file_names_the_file(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    from icechunk_spark.errors import VirtualRangeError

    (data_dir / "short.bin").write_bytes(b"0123456789")
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", (2,), (1,), "uint64", dimension_names=["x"])
    url = f"file://{data_dir}/short.bin"
    session.set_virtual_ref("/a", (0,), url, 0, 8)
    session.set_virtual_ref("/a", (1,), url, 6, 8)  # 4 bytes past the end
    session.commit("short")
    reader = repo.readonly_session()
    assert reader.get_chunk("/a", (0,)) == b"01234567"
    pattern = r"short\.bin.*offset 6.*length 8.*10 bytes"
    with pytest.raises(VirtualRangeError, match=pattern):
        reader.get_chunk("/a", (1,))
    with pytest.raises(VirtualRangeError, match=pattern):
        xr.open_zarr(reader.store, consolidated=False)["a"].values  # noqa: B018


def test_importing_a_file_that_is_not_netcdf4_names_it_and_creates_nothing(
    tmp_path: Path, data_dir: Path, make_repo: RepoFactory
) -> None:
    import contextlib
    import io

    write_files(data_dir, 1, _tiny)
    (data_dir / "notes.nc").write_text("not a NetCDF file at all\n")
    url = (tmp_path / "new-repo").as_uri()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["import", url, str(data_dir / "*.nc")]) == 1
    assert "notes.nc" in err.getvalue() and "NetCDF4/HDF5" in err.getvalue()
    assert not Repository.exists(url)
    session = make_repo([data_dir.as_uri() + "/"]).writable_session()
    with pytest.raises(InvalidInputError, match=r"notes\.nc.*NetCDF4/HDF5"):
        import_netcdf(session, [(data_dir / "notes.nc").as_uri()], concat_dim=None)


# -- 9. as_of and create_array ------------------------------------------------------------
def test_as_of_accepts_iso_strings_and_refuses_garbage(tmp_path: Path) -> None:
    repo = Repository.create((tmp_path / "r").as_uri())
    session = repo.writable_session()
    session.create_group("/", attributes={"v": 1})
    first = session.commit("one")
    from datetime import UTC, datetime, timedelta

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert repo.readonly_session("main", as_of=later).snapshot_id == first
    assert repo.readonly_session("main", as_of=later[:10]).snapshot_id == first
    with pytest.raises(NotFoundError):
        repo.readonly_session("main", as_of="2020-01-01")
    with pytest.raises(InvalidInputError, match="ISO 8601"):
        repo.readonly_session("main", as_of="yesterday")


@pytest.mark.parametrize(
    ("dtype", "codecs"),
    [("float", None), ("float32", [{"name": "no-such-codec"}]), ("int8", [{"name": "gzip"}])],
)
def test_create_array_validates_through_zarr(
    tmp_path: Path, dtype: str, codecs: list[dict[str, Any]] | None
) -> None:
    repo = Repository.create((tmp_path / "r").as_uri())
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/ok", (4,), (2,), "float32", dimension_names=["x"])
    with pytest.raises(InvalidInputError, match="/bad"):
        session.create_array("/bad", (4,), (2,), dtype, codecs=codecs, dimension_names=["x"])
    session.commit("only valid arrays")
    xr.open_zarr(repo.readonly_session().store, consolidated=False).load()  # opens


def test_cli_refuses_negative_counts_and_finds_relative_paths(tmp_path: Path) -> None:
    import contextlib
    import io

    url = (tmp_path / "r").as_uri()
    repo = Repository.create(url)
    session = repo.writable_session()
    session.create_group("/")
    session.create_group("/a")
    session.commit("a group")
    for argv in (
        ["gc", url, "--days", "-1"],
        ["expire", url, "--days", "-1"],
        ["log", url, "-n", "-1"],
    ):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and "negative" in err.getvalue(), argv
    assert [row["path"] for row in cli("ls", url, "a")] == ["/a"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["ls", url, "nothing/here"]) == 1
    assert "/nothing/here" in err.getvalue()


def test_zarr_v2_writes_say_only_v3_and_unnamed_dataarrays_round_trip(tmp_path: Path) -> None:
    repo = Repository.create((tmp_path / "r").as_uri())
    session = repo.writable_session()
    data = xr.DataArray(np.arange(4.0), dims=["x"])  # no name
    with pytest.raises(InvalidInputError, match="only Zarr v3"):
        data.to_dataset(name="v").to_zarr(session.store, zarr_format=2, consolidated=False)
    session = repo.writable_session()
    data.to_zarr(session.store, zarr_format=3, consolidated=False)
    session.commit("unnamed")
    back = xr.open_dataarray(repo.readonly_session().store, engine="zarr", consolidated=False)
    np.testing.assert_array_equal(back.values, data.values)


# -- all of it at once, through the CLI (the Spark job: tests/test_jobs.py) -------------------
def test_awkward_files_through_the_cli_read_like_xarray(tmp_path: Path) -> None:
    paths = write_awkward_files(tmp_path)
    url = (tmp_path / "repo").as_uri()
    pattern = str(paths[0].parent / "*.nc")
    assert cli("import", url, pattern)["new_files"] == len(paths)
    assert cli("import", url, pattern)["committed"] is False
    repo = Repository.open(url, authorize_virtual=[paths[0].parent.as_uri() + "/"])
    ours, theirs = our_reading(repo), xarray_reading(paths)
    assert sorted(theirs.data_vars) == ["late", "packed", "sparse", "time_bnds"]
    assert_same_values(ours, theirs)


def test_bulk_refs_of_a_scalar_array(data_dir: Path, make_repo: RepoFactory) -> None:
    (data_dir / "v.bin").write_bytes(np.float64(2.5).tobytes())
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/s", (), (), "float64")
    refs = {
        "coord": np.zeros((1, 0), np.int64),
        "virtual_path": [f"file://{data_dir}/v.bin"],
        "offset": [0],
        "length": [8],
    }
    assert session.set_chunk_refs("/s", refs) == 1
    session.commit("scalar")
    assert np.frombuffer(repo.readonly_session().get_chunk("/s", ()) or b"", "<f8")[0] == 2.5


def test_a_time_variable_only_in_later_files_is_rebased(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    def write(ds: netCDF4.Dataset, k: int) -> None:
        _timed(ds, k)
        ds.createVariable("tas", "f4", ("time",))[:] = [k, k]
        if k >= 1:
            issued = ds.createVariable("issued", "f8", ("time",))
            issued.units = f"hours since 2000-02-{k + 1:02d}"  # each file's own
            issued[:] = [0, 6]

    paths = write_files(data_dir, 3, write)
    ours, theirs = our_reading(imported(make_repo, data_dir, paths)), xarray_reading(paths)
    assert str(theirs["issued"].values[4])[:13] == "2000-02-03T00"
    assert_same_values(ours, theirs)

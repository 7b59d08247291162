"""Refs back out (issue 31 item 4): a snapshot exported as a kerchunk reference set reads, through
fsspec's ReferenceFileSystem and xarray, exactly as the repository reads it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import numpy as np
import pytest
import xarray as xr
from fsspec.implementations.reference import LazyReferenceMapper
from kerchunk.utils import refs_as_store

from icechunk_spark import AlreadyExistsError, InvalidInputError, Repository
from icechunk_spark.cli import main
from icechunk_spark.core import BaseSession, Session
from icechunk_spark.virtual import import_kerchunk, import_netcdf
from icechunk_spark.virtual.export_refs import export_refs

from ..test_cli import run as cli
from .conftest import NUMCODECS_WARNING, RepoFactory
from .netcdf_data import MonthlyFiles

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)

# (format, zarr_format): every layout export_refs writes.
LAYOUTS = [("kerchunk-json", 2), ("kerchunk-json", 3), ("kerchunk-parquet", 2)]
# Transposed (F order), big-endian, blosc, a checksum: every codec mapping of metadata_v2.
PACKED_CODECS = [
    {"name": "transpose", "configuration": {"order": [1, 0]}},
    {"name": "bytes", "configuration": {"endian": "big"}},
    {
        "name": "blosc",
        "configuration": {
            "cname": "zstd",
            "clevel": 3,
            "shuffle": "shuffle",
            "typesize": 4,
            "blocksize": 0,
        },
    },
    {"name": "crc32c"},
]


def repo_dataset(session: BaseSession, group: str | None = None) -> xr.Dataset:
    dataset: xr.Dataset = xr.open_zarr(session.store, group=group, consolidated=False).load()
    return dataset


def open_refs(dest: Path, layout: tuple[str, int], group: str | None = None) -> xr.Dataset:
    """The export read as a kerchunk user would: fsspec's reference file system under xarray.

    zarr >= 3 lists a nested group of a reference file system as empty (it asks for
    ``/group``): v2 exports carry consolidated metadata, so xarray's default finds it; a v3
    export is opened at the group itself (``reference://group``).
    """
    fmt, zarr_format = layout
    if fmt == "kerchunk-parquet":
        # fsspec reads Parquet refs with fastparquet unless handed a mapper: we have pyarrow.
        # remote_protocol: else fsspec looks for one through every field, groups too, and
        # fails on a nested group's (it has no .zarray).
        mapper = LazyReferenceMapper(str(dest), fs=fsspec.filesystem("file"), engine="pyarrow")
        opened = xr.open_zarr(refs_as_store(mapper, remote_protocol="file"), group=group)
    elif zarr_format == 2:
        opened = xr.open_zarr("reference://", storage_options={"fo": str(dest)}, group=group)
    else:
        opened = xr.open_zarr(
            f"reference://{group or ''}", storage_options={"fo": str(dest)}, consolidated=False
        )
    dataset: xr.Dataset = opened.load()
    return dataset


@dataclass(frozen=True, slots=True)
class January:
    """One NetCDF file imported as virtual refs, with what the repository and the file read."""

    reader: Session
    read: xr.Dataset
    original: xr.Dataset
    container: str


@pytest.fixture(scope="module")
def january(monthly: MonthlyFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[January]:
    """Module-wide: reading 155 virtual chunks through the repository is the slow part."""
    repo = Repository.create(
        tmp_path_factory.mktemp("january").as_uri(),
        config={"virtual_chunk_containers": {monthly.container: {}}},
        authorize_virtual=[monthly.container],
    )
    session = repo.writable_session()
    import_netcdf(session, monthly.urls[:1], concat_dim="time")
    session.commit("January, virtual")
    reader = repo.readonly_session("main")
    with xr.open_dataset(monthly.paths[0]) as original:
        yield January(reader, repo_dataset(reader), original.load(), monthly.container)
    repo.close()
    repo.handle.virtual_reader.close()


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{f}-v{z}" for f, z in LAYOUTS])
def test_virtual_netcdf_refs_read_as_the_repository_and_the_file(
    january: January, make_repo: RepoFactory, tmp_path: Path, layout: tuple[str, int]
) -> None:
    dest = tmp_path / "refs"

    summary = export_refs(january.reader, str(dest), format=layout[0], zarr_format=layout[1])

    assert summary.virtual_chunks == 31 * 4 + 31  # tas: 2x2 chunks a day; pr: one
    assert summary.inline_chunks == 3  # time, lat, lon: copied values, small
    got = open_refs(dest, layout)
    xr.testing.assert_identical(got, january.read)
    xr.testing.assert_identical(got, january.original)
    ref = january.reader.get_chunk_ref("/tas", (5, 1, 0))
    assert ref is not None and ref.kind == "virtual"
    if layout == ("kerchunk-json", 2):
        refs = json.loads(dest.read_text())["refs"]
        assert refs["tas/5.1.0"] == [ref.virtual_path, ref.offset, ref.length]
        by_engine = xr.open_dataset(str(dest), engine="kerchunk").load()
        xr.testing.assert_identical(by_engine, got)
    if layout[1] == 2:  # and back in: import_kerchunk reads what export_refs wrote
        again = make_repo([january.container]).writable_session()
        import_kerchunk(again, str(dest))
        assert again.get_chunk_ref("/tas", (5, 1, 0)) == ref


def native_and_inline(make_repo: RepoFactory) -> Repository:
    """Native chunks (random floats), inline ones (small coords), a nested group holding an
    array with a chunk missing and one whose codecs exercise every v2 mapping."""
    repo = make_repo([], inline_chunk_threshold_bytes=64)
    session = repo.writable_session()
    rng = np.random.default_rng(31)
    root = xr.Dataset(
        {"t": (("time", "x"), rng.random((6, 40)), {"units": "K"})},
        coords={"time": np.arange(6), "x": np.linspace(0, 1, 40)},
        attrs={"title": "native and inline"},
    )
    root.to_zarr(
        session.store, zarr_format=3, consolidated=False, encoding={"t": {"chunks": (2, 40)}}
    )
    inner = xr.Dataset({"u": ("y", np.arange(4, dtype="int16"))}, attrs={"level": 2})
    inner.to_zarr(session.store, group="inner", zarr_format=3, consolidated=False)
    # Fill 0 and no _FillValue: the missing chunk reads 0 in v2 (null fill) as in v3.
    session.create_array("/inner/sparse", (4,), (2,), "int16", dimension_names=["y"])
    session.set_chunk_values("/inner/sparse", (1,), np.array([7, 8], dtype="int16"))
    session.create_array(
        "/inner/packed", (4, 6), (2, 3), "int32", dimension_names=["y", "z"], codecs=PACKED_CODECS
    )
    for coord in np.ndindex(2, 2):
        values = np.arange(6, dtype="int32").reshape(2, 3) + 100 * coord[0] + 10 * coord[1]
        session.set_chunk_values("/inner/packed", coord, values)
    session.commit("native and inline")
    return repo


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{f}-v{z}" for f, z in LAYOUTS])
def test_native_and_inline_chunks_read_as_the_repository(
    make_repo: RepoFactory, tmp_path: Path, layout: tuple[str, int]
) -> None:
    repo = native_and_inline(make_repo)
    reader = repo.readonly_session("main")
    dest = tmp_path / "out" / "refs"  # a folder that does not exist yet

    summary = export_refs(reader, str(dest), format=layout[0], zarr_format=layout[1])

    assert summary.native_chunks >= 3 and summary.inline_chunks >= 2
    assert summary.virtual_chunks == 0
    for group in (None, "inner"):
        xr.testing.assert_identical(open_refs(dest, layout, group), repo_dataset(reader, group))
    if layout[0] == "kerchunk-json":
        ref = reader.get_chunk_ref("/t", (1, 0))
        assert ref is not None and ref.kind == "native" and ref.chunk_id is not None
        key = "t/1.0" if layout[1] == 2 else "t/c/1/0"
        chunk_file = Path(str(repo.storage.url).removeprefix("file://")) / "c" / ref.chunk_id
        assert json.loads(dest.read_text())["refs"][key] == [
            f"file://{chunk_file}",
            ref.offset,
            ref.length,
        ]


def test_v2_refuses_a_fill_it_cannot_keep_and_v3_keeps_it(
    make_repo: RepoFactory, tmp_path: Path
) -> None:
    """A NaN fill without _FillValue: v3 reads the missing chunk as NaN, v2 (whose fill is what
    xarray masks) could not."""
    repo = make_repo([])
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/gappy", (4,), (2,), "float64", fill_value="NaN", dimension_names=["x"])
    session.set_chunk_values("/gappy", (0,), np.array([1.0, 2.0]))
    session.commit("a chunk missing")
    reader = repo.readonly_session("main")
    with pytest.raises(InvalidInputError, match=r"/gappy: a missing chunk.*--zarr-format 3"):
        export_refs(reader, str(tmp_path / "v2.json"))
    assert not (tmp_path / "v2.json").exists()
    export_refs(reader, str(tmp_path / "v3.json"), zarr_format=3)
    got = open_refs(tmp_path / "v3.json", ("kerchunk-json", 3))
    assert np.isnan(got["gappy"].values[2:]).all()
    xr.testing.assert_identical(got, repo_dataset(reader))


def test_refuses_bad_input_and_an_existing_destination(
    make_repo: RepoFactory, tmp_path: Path
) -> None:
    reader = native_and_inline(make_repo).readonly_session("main")
    with pytest.raises(InvalidInputError, match="unknown format 'zarr': use kerchunk-json or"):
        export_refs(reader, str(tmp_path / "a"), format="zarr")
    with pytest.raises(InvalidInputError, match="kerchunk-parquet keys are Zarr v2 only"):
        export_refs(reader, str(tmp_path / "a"), format="kerchunk-parquet", zarr_format=3)
    assert not (tmp_path / "a").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep").write_text("mine")
    for fmt in ("kerchunk-json", "kerchunk-parquet"):
        with pytest.raises(AlreadyExistsError, match="exists already"):
            export_refs(reader, str(taken), format=fmt)
    assert [p.name for p in taken.iterdir()] == ["keep"]  # not deleted, not written into
    in_memory = Repository.create(
        "memory://export-refs", config={"inline_chunk_threshold_bytes": 0}
    )
    session = in_memory.writable_session()
    session.create_array("/a", (4,), (4,), "float64", dimension_names=["x"])
    session.set_chunk_values("/a", (0,), np.arange(4.0))
    session.commit("native, in memory")
    with pytest.raises(InvalidInputError, match="only this process can read"):
        export_refs(in_memory.readonly_session("main"), str(tmp_path / "m.json"))


def test_cli_exports_refs_and_refuses_cleanly(
    make_repo: RepoFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = native_and_inline(make_repo)
    snapshot = repo.readonly_session("main").snapshot_id
    repo.create_tag("v1", snapshot)
    dest = tmp_path / "refs.parq"
    args = [repo.storage.url, str(dest), "--format", "kerchunk-parquet", "--snapshot", "v1"]
    done = json.loads(cli("export-refs", *args, "--json").stdout)  # as a user runs it
    assert done["snapshot"] == snapshot and done["format"] == "kerchunk-parquet"
    assert done["chunks"] == done["native_chunks"] + done["inline_chunks"] > 0
    reader = repo.readonly_session(tag="v1")
    xr.testing.assert_identical(open_refs(dest, ("kerchunk-parquet", 2)), repo_dataset(reader))
    # Refusals in-process (a subprocess costs a second each): one line, exit status 1.
    url = repo.storage.url
    for argv, message in (
        ([url, str(dest)], "exists already"),
        ([url, str(tmp_path / "x"), "--format", "zarr"], "unknown format 'zarr'"),
        ([url, str(tmp_path / "x"), "--snapshot", "0" * 20], "is not a branch, tag or snapshot"),
    ):
        assert main(["export-refs", *argv]) == 1
        err = capsys.readouterr().err
        assert err.startswith("icechunk-spark: error: ") and message in err
        assert err.count("\n") == 1
    assert not (tmp_path / "x").exists()

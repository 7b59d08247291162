"""Importing real NetCDF4 files (and kerchunk reference sets of them) as virtual datasets."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr

from icechunk_spark import AlreadyExistsError, InvalidInputError, Repository
from icechunk_spark.virtual import (
    VirtualRefRefusedError,
    import_kerchunk,
    import_netcdf,
    load_reference_set,
    scan_netcdf,
)
from tests.support.helpers import loaded_files

from ..conftest import Backend
from .conftest import NUMCODECS_WARNING, RepoFactory
from .netcdf_data import MonthlyFiles

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)


def expected(monthly: MonthlyFiles) -> xr.Dataset:
    """What ``xr.open_mfdataset(files)`` gives, without dask: its by-coords combine step."""
    combined = xr.combine_by_coords(loaded_files(monthly.paths))
    assert isinstance(combined, xr.Dataset)
    return combined.load()


def open_repo_dataset(repo: Repository, group: str | None = None) -> xr.Dataset:
    store = repo.readonly_session("main").store
    dataset: xr.Dataset = xr.open_zarr(store, group=group, consolidated=False).load()
    return dataset


def test_twelve_months_import_as_one_virtual_dataset(
    monthly: MonthlyFiles, backend: Backend
) -> None:
    repo = Repository.create(
        backend.url,
        storage_options=backend.options,
        config={"virtual_chunk_containers": {monthly.container: {}}},
        authorize_virtual=[monthly.container],
    )
    session = repo.writable_session("main")
    summary = import_netcdf(session, monthly.urls, concat_dim="time")
    session.commit("2022 as one virtual dataset")

    assert summary.arrays == ("/lat", "/lon", "/pr", "/tas", "/time")
    assert summary.files == 12
    assert summary.virtual_refs == 365 * 2 * 2 + 365  # tas: 2x2 chunks a day; pr: 1 a day
    assert len(list(repo.ancestry(branch="main"))) == 2  # one commit for all twelve files
    xr.testing.assert_identical(open_repo_dataset(repo), expected(monthly))

    reader = repo.readonly_session("main")
    tas_ref = reader.get_chunk_ref("/tas", (40, 1, 0))
    assert tas_ref is not None and tas_ref.kind == "virtual"
    assert tas_ref.virtual_path == monthly.urls[1]  # day 40 is in February
    assert tas_ref.checksum is not None and tas_ref.checksum.startswith("mtime:")
    time_ref = reader.get_chunk_ref("/time", (0,))
    assert time_ref is not None and time_ref.kind in ("inline", "native")  # copied values


def test_raw_chunks_decode_with_numcodecs(monthly: MonthlyFiles, make_repo: RepoFactory) -> None:
    """The same check without the zarr store: session.get_chunk bytes through numcodecs."""
    import numcodecs

    repo = make_repo([monthly.container])
    session = repo.writable_session()
    import_netcdf(session, monthly.urls, concat_dim="time")
    data = session.get_chunk("/tas", (31 + 5, 0, 1))  # 6 February, lat chunk 0, lon chunk 1
    assert data is not None
    raw = numcodecs.Shuffle(elementsize=4).decode(numcodecs.Zlib().decode(data))
    chunk = np.frombuffer(raw, dtype="<f4").reshape(9, 18)
    with netCDF4.Dataset(monthly.paths[1]) as ds:
        ds.set_auto_mask(False)
        np.testing.assert_array_equal(chunk, ds["tas"][5, 0:9, 18:36])


@pytest.mark.parametrize("form", ["dict", "json-file", "parquet"])
def test_kerchunk_reference_sets_import(
    monthly: MonthlyFiles,
    make_repo: RepoFactory,
    tmp_path: Path,
    form: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kerchunk.combine import MultiZarrToZarr

    singles = [scan_netcdf(url) for url in monthly.urls]
    combined = MultiZarrToZarr(
        singles, concat_dims=["time"], identical_dims=["lat", "lon"]
    ).translate()
    source: Any = combined
    if form == "json-file":
        source = tmp_path / "refs.json"
        source.write_text(json.dumps(combined))
    elif form == "parquet":
        source = tmp_path / "refs.parq"
        write_parquet_refs(combined, source, monkeypatch)
    repo = make_repo([monthly.container])
    session = repo.writable_session()
    summary = import_kerchunk(session, source, group="/climate")
    session.commit(f"kerchunk {form}")

    assert summary.virtual_refs == 365 * 4 + 365
    assert "/climate" in summary.groups
    xr.testing.assert_identical(open_repo_dataset(repo, "climate"), expected(monthly))


def write_parquet_refs(refs: dict[str, Any], path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kerchunk.df.refs_to_dataframe, writing with pyarrow (it defaults to fastparquet)."""
    from fsspec.implementations.reference import LazyReferenceMapper
    from kerchunk.df import refs_to_dataframe

    create = LazyReferenceMapper.create
    monkeypatch.setattr(
        LazyReferenceMapper, "create", staticmethod(functools.partial(create, engine="pyarrow"))
    )
    refs_to_dataframe(refs, str(path), record_size=500)


def test_parquet_reference_set_parses_like_json(
    monthly: MonthlyFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kerchunk.combine import MultiZarrToZarr

    combined = MultiZarrToZarr(
        [scan_netcdf(u) for u in monthly.urls[:2]],
        concat_dims=["time"],
        identical_dims=["lat", "lon"],
    ).translate()
    write_parquet_refs(combined, tmp_path / "p", monkeypatch)
    from_json = load_reference_set(combined)
    from_parquet = load_reference_set(tmp_path / "p")
    assert from_json.arrays.keys() == from_parquet.arrays.keys()
    for name, array in from_json.arrays.items():
        other = from_parquet.arrays[name]
        assert array.doc == other.doc
        order_a = np.lexsort(array.coords.T[::-1])
        order_b = np.lexsort(other.coords.T[::-1])
        np.testing.assert_array_equal(array.coords[order_a], other.coords[order_b])
        assert array.refs.take(order_a).equals(other.refs.take(order_b))


def test_import_checks_containers_before_opening_files(
    monthly: MonthlyFiles, make_repo: RepoFactory, tmp_path: Path
) -> None:
    repo = make_repo([(tmp_path / "elsewhere").as_uri() + "/"])
    session = repo.writable_session()
    missing = (tmp_path / "no-such-file.nc").as_uri()
    with pytest.raises(VirtualRefRefusedError, match="outside every virtual chunk container"):
        import_netcdf(session, [monthly.urls[0], missing])  # refused, not "file not found"
    assert not session.has_uncommitted_changes()


def test_kerchunk_refs_outside_containers_are_refused(
    monthly: MonthlyFiles, make_repo: RepoFactory
) -> None:
    refs = scan_netcdf(monthly.urls[0])
    refs["refs"]["tas/0.0.0"] = ["file:///etc/passwd", 0, 100]
    session = make_repo([monthly.container]).writable_session()
    with pytest.raises(VirtualRefRefusedError):
        import_kerchunk(session, refs)


def test_existing_arrays_need_overwrite(monthly: MonthlyFiles, make_repo: RepoFactory) -> None:
    session = make_repo([monthly.container]).writable_session()
    import_netcdf(session, monthly.urls[:1], concat_dim="time")
    with pytest.raises(AlreadyExistsError):
        import_netcdf(session, monthly.urls[1:2], concat_dim="time")
    import_netcdf(session, monthly.urls[1:2], concat_dim="time", overwrite=True)
    assert session.get_node("/tas").meta is not None
    assert session.get_node("/tas").meta.shape == (28, 18, 36)  # type: ignore[union-attr]


def write_files(directory: Path, lengths: list[int], chunk: int | None) -> list[str]:
    urls = []
    start = 0
    for k, n in enumerate(lengths):
        path = directory / f"part{k}.nc"
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", 4)
            time = ds.createVariable("time", "i4", ("time",))
            time[:] = np.arange(start, start + n)
            v = ds.createVariable("v", "f4", ("time", "x"), zlib=True, chunksizes=(chunk or n, 4))
            v[:] = np.arange(start * 4, (start + n) * 4, dtype="f4").reshape(n, 4)
        urls.append(path.as_uri())
        start += n
    return urls


def test_misaligned_chunks_are_materialized_when_small(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    urls = write_files(data_dir, [3, 5, 2], chunk=None)  # each file one chunk of its length
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    summary = import_netcdf(session, urls, concat_dim="time")
    session.commit("misaligned")
    assert summary.virtual_refs == 0
    ds = open_repo_dataset(repo)
    np.testing.assert_array_equal(ds["v"].values, np.arange(40, dtype="f4").reshape(10, 4))
    np.testing.assert_array_equal(ds["time"].values, np.arange(10))


def test_misaligned_chunks_over_the_limit_are_refused(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    urls = write_files(data_dir, [3, 5], chunk=2)
    session = make_repo([data_dir.as_uri() + "/"]).writable_session()
    with pytest.raises(InvalidInputError, match="whole chunks along 'time'"):
        import_netcdf(session, urls, concat_dim="time", materialize_max_bytes=0)


def test_aligned_files_of_unequal_length_stay_virtual(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    urls = write_files(data_dir, [4, 2, 3], chunk=2)  # only the last file ends mid-chunk
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    summary = import_netcdf(session, urls, concat_dim="time", inline_threshold=0)
    session.commit("aligned")
    assert summary.virtual_refs == 2 + 1 + 2
    ds = open_repo_dataset(repo)
    np.testing.assert_array_equal(ds["v"].values, np.arange(36, dtype="f4").reshape(9, 4))


def test_files_of_another_dtype_are_decoded_or_refused(
    data_dir: Path, make_repo: RepoFactory
) -> None:
    """A dtype that differs is copied decoded (as xarray promotes it) within the limit."""
    urls = write_files(data_dir, [2, 2], chunk=2)
    odd = data_dir / "odd.nc"
    with netCDF4.Dataset(odd, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 4)
        ds.createVariable("time", "i4", ("time",))[:] = [4, 5]
        ds.createVariable("v", "f8", ("time", "x"), chunksizes=(2, 4))[:] = np.zeros((2, 4))
    session = make_repo([data_dir.as_uri() + "/"]).writable_session()
    with pytest.raises(InvalidInputError, match=r"dtype differs between .*part0\.nc.*odd\.nc"):
        import_netcdf(session, [*urls, odd.as_uri()], concat_dim="time", materialize_max_bytes=0)
    import_netcdf(session, [*urls, odd.as_uri()], concat_dim="time")
    session.commit("promoted")
    ds = open_repo_dataset(Repository(session.handle))
    assert ds["v"].dtype == np.float64
    np.testing.assert_array_equal(ds["v"].values[4:], np.zeros((2, 4)))


def test_netcdf_on_s3(monthly: MonthlyFiles, s3_endpoint: str, tmp_path: Path) -> None:
    """Virtual refs into S3 objects: ETag checksums, reads through s3fs."""
    import s3fs

    from ..conftest import S3_BUCKET, s3_options

    options = s3_options(s3_endpoint)
    fs = s3fs.S3FileSystem(
        key=options["key"],
        secret=options["secret"],
        client_kwargs={"endpoint_url": s3_endpoint},
        skip_instance_cache=True,
    )
    prefix = f"{S3_BUCKET}/virtual-netcdf"
    for path in monthly.paths[:2]:
        fs.put_file(str(path), f"{prefix}/{path.name}")
    container = f"s3://{prefix}/"
    reader_options = {
        "key": options["key"],
        "secret": options["secret"],
        "client_kwargs": {"endpoint_url": s3_endpoint},
    }
    repo = Repository.create(
        (tmp_path / "repo").as_uri(),
        config={"virtual_chunk_containers": {container: reader_options}},
        authorize_virtual=[container],
    )
    session = repo.writable_session()
    urls = [f"{container}{p.name}" for p in monthly.paths[:2]]
    import_netcdf(session, urls, concat_dim="time", storage_options=reader_options)
    session.commit("s3")
    ref = repo.readonly_session().get_chunk_ref("/tas", (0, 0, 0))
    assert ref is not None and ref.checksum is not None and ref.checksum.startswith("etag:")
    want = xr.combine_by_coords(loaded_files(monthly.paths[:2]))
    xr.testing.assert_identical(open_repo_dataset(repo), want)


def test_a_changed_netcdf_file_is_noticed(
    monthly: MonthlyFiles, make_repo: RepoFactory, tmp_path: Path
) -> None:
    import os
    import shutil

    from icechunk_spark.virtual import SourceChangedError

    copy = tmp_path / "copy"
    copy.mkdir()
    path = Path(shutil.copy(monthly.paths[0], copy / monthly.paths[0].name))
    container = copy.as_uri() + "/"
    repo = make_repo([container])
    session = repo.writable_session()
    import_netcdf(session, [path.as_uri()], concat_dim="time")
    session.commit("january")
    [want] = loaded_files([path])
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # "rewritten"
    with pytest.raises(SourceChangedError, match="changed since the ref was written"):
        open_repo_dataset(repo)
    relaxed = Repository.open(
        repo.storage.url, config={"verify_virtual_checksums": False}, authorize_virtual=[container]
    )
    xr.testing.assert_identical(open_repo_dataset(relaxed), want)

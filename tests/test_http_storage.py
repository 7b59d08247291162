"""A repository published on a plain web server (Python's http.server on 127.0.0.1): it opens
and reads over HTTP, virtual chunks included, and every write says the storage is read-only."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr

from icechunk_spark import NotFoundError, ReadOnlyError, ReadOnlyStorageError, Repository
from icechunk_spark.storage import HTTPStorage, open_storage
from tests.support.http_server import serve_folder

VALUES = np.arange(24, dtype="uint16").reshape(4, 6)


@dataclass(frozen=True)
class Published:
    url: str  # the repository over HTTP
    data: str  # the folder of virtual chunk files over HTTP, a virtual chunk container
    folder: Path  # the repository on disk, as the web server serves it
    snapshot: str


def publish(site: Path, base: str) -> Published:
    """Write a repository (native, inline and virtual chunks) into ``site``, served at ``base``."""
    data = site / "data"
    data.mkdir()
    for i in range(3):
        (data / f"{i}.bin").write_bytes(b"\xff" * 4 + bytes([i]) * 8)
    container = f"{base}/data/"
    repo = Repository.create(
        (site / "repo").as_uri(),
        config={"virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    session = repo.writable_session("main")
    session.create_group("/")
    array = zarr.create_array(session.store, name="grid", shape=(4, 6), chunks=(2, 3), dtype="u2")
    array[:] = VALUES
    session.create_array("/virtual", shape=(24,), chunk_shape=(8,), dtype="uint8")
    for i in range(3):
        session.set_virtual_ref("/virtual", (i,), f"{container}{i}.bin", offset=4, length=8)
    snapshot = session.commit("published")
    repo.create_tag("v1", snapshot)
    return Published(f"{base}/repo", container, site / "repo", snapshot)


@pytest.fixture
def published(tmp_path: Path) -> Iterator[Published]:
    with serve_folder(tmp_path) as base:
        yield publish(tmp_path, base)


@pytest.fixture
def published_without_ranges(tmp_path: Path) -> Iterator[Published]:
    # A server that ignores Range answers with whole objects; reads must come out the same.
    with serve_folder(tmp_path, ranges=False) as base:
        yield publish(tmp_path, base)


@pytest.mark.parametrize("server", ["published", "published_without_ranges"])
def test_a_published_repository_reads_over_http(
    server: str, request: pytest.FixtureRequest
) -> None:
    published: Published = request.getfixturevalue(server)
    repo = Repository.open(published.url, authorize_virtual=[published.data])
    assert isinstance(repo.storage, HTTPStorage)
    assert next(repo.ancestry(branch="main")).id == published.snapshot
    assert repo.lookup_tag("v1") == published.snapshot
    session = repo.readonly_session(tag="v1")
    np.testing.assert_array_equal(zarr.open_array(session.store, path="grid", mode="r")[:], VALUES)
    virtual = zarr.open_array(session.store, path="virtual", mode="r")[:]
    np.testing.assert_array_equal(virtual, np.repeat(np.arange(3, dtype="uint8"), 8))


@pytest.mark.parametrize("server", ["published", "published_without_ranges"])
def test_ranged_reads_and_missing_objects(server: str, request: pytest.FixtureRequest) -> None:
    published: Published = request.getfixturevalue(server)
    storage = open_storage(published.url)
    whole = storage.get("icechunk.json")
    assert storage.get_range("icechunk.json", 3, 11) == whole[3:11]
    assert storage.get_range("icechunk.json", len(whole) - 2, len(whole) + 50) == whole[-2:]
    with pytest.raises(NotFoundError, match="not found"):
        storage.get("t/99999999999999999999")
    assert storage.exists("icechunk.json") and not storage.exists("nope")


def test_without_the_hint_the_state_is_found_through_the_folder_index(
    published: Published,
) -> None:
    # A reader lists t/ when icechunk.json is missing; http.server serves folder indexes.
    (published.folder / "icechunk.json").unlink()
    repo = Repository.open(published.url, authorize_virtual=[published.data])
    assert repo.lookup_branch("main") == published.snapshot
    sizes = {info.key: info.size for info in repo.storage.list("t/")}
    assert sizes == {f"t/{p.name}": p.stat().st_size for p in (published.folder / "t").iterdir()}


def test_every_write_says_the_storage_is_read_only(published: Published) -> None:
    repo = Repository.open(published.url, authorize_virtual=[published.data])
    session = repo.writable_session("main")
    session.delete_chunk("/grid", (0, 0))
    with pytest.raises(ReadOnlyStorageError, match="read-only storage"):
        session.commit("over http")
    with pytest.raises(ReadOnlyError, match="read-only storage"):  # the family a caller knows
        repo.create_branch("dev", published.snapshot)
    with pytest.raises(ReadOnlyStorageError, match="read-only storage"):
        Repository.create(published.url.replace("/repo", "/another"))
    storage = repo.storage
    for write in (
        lambda: storage.put("x", b""),
        lambda: storage.put_if_absent("x", b""),
        lambda: storage.delete(["icechunk.json"]),
    ):
        with pytest.raises(ReadOnlyStorageError, match=r"plain HTTP\). Open the repository"):
            write()
    # Nothing changed on the server.
    assert Repository.open(published.url).lookup_branch("main") == published.snapshot


def test_a_folder_that_is_no_repository(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with serve_folder(tmp_path) as base, pytest.raises(NotFoundError, match="no repository"):
        Repository.open(f"{base}/empty")


def test_a_copied_folder_is_the_same_repository(tmp_path: Path) -> None:
    # Publishing is copying the folder (rsync, aws s3 sync, ...): no absolute path inside.
    with serve_folder(tmp_path) as base:
        published = publish(tmp_path, base)
        shutil.copytree(published.folder, tmp_path / "mirror")
        mirror = Repository.open(f"{base}/mirror", authorize_virtual=[published.data])
        assert mirror.lookup_branch("main") == published.snapshot


def test_the_cli_reads_over_http_and_refuses_to_write(published: Published) -> None:
    log = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "log", published.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert log.returncode == 0, log.stderr
    assert published.snapshot in log.stdout
    gc = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "gc", published.url, "--days", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gc.returncode == 1
    assert "read-only storage" in gc.stderr and gc.stderr.count("\n") == 1

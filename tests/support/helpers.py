"""Small helpers shared by tests."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from icechunk_spark import Repository


def create_repo(backend: Any, **kwargs: Any) -> Repository:
    return Repository.create(backend.url, storage_options=backend.options, **kwargs)


def open_repo(backend: Any, **kwargs: Any) -> Repository:
    return Repository.open(backend.url, storage_options=backend.options, **kwargs)


def hints_written(repo: Repository) -> None:
    """Wait until the hints of ``repo``'s commits are written (they follow each commit on
    its I/O threads): a test that damages or plants a hint must not race a late one."""
    assert repo.handle.hints.wait(30), "a hint write is stuck"


def repo_with_byte_array(backend: Any, length: int) -> Repository:
    """A new repository whose first commit holds ``/a``: ``length`` one-byte chunks."""
    repo = create_repo(backend)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", shape=(length,), chunk_shape=(1,), dtype="uint8")
    session.commit("array")
    return repo


def make_array(
    session: Any,
    path: str = "/a",
    shape: tuple[int, ...] = (10, 10),
    chunks: tuple[int, ...] = (5, 5),
) -> None:
    if path.rsplit("/", 1)[0] in ("", "/"):
        try:
            session.get_node("/")
        except KeyError:
            session.create_group("/")
    session.create_array(path, shape=shape, chunk_shape=chunks, dtype="int32")


def cutoff_after_writes(backend: Any) -> datetime:
    """A cut-off later than every object written so far, as the storage's clock will see it."""
    # S3 and Azure listings report whole seconds, which GC reads as the end of that second.
    time.sleep(1.05 if backend.name in ("s3", "azure") else 0.02)
    return datetime.now(UTC)


def loaded_files(paths: Iterable[Any], **open_kwargs: Any) -> list[Any]:
    """Each file as ``xr.open_dataset`` reads it, loaded whole and closed: a dataset left
    open holds its file until the collector runs, and warns then wherever that happens."""
    import xarray as xr

    datasets = []
    for path in paths:
        with xr.open_dataset(path, **open_kwargs) as opened:
            datasets.append(opened.load())
    return datasets

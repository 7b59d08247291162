"""Small helpers shared by tests."""

from __future__ import annotations

from typing import Any

from icechunk_spark import Repository


def create_repo(backend: Any, **kwargs: Any) -> Repository:
    return Repository.create(backend.url, storage_options=backend.options, **kwargs)


def open_repo(backend: Any, **kwargs: Any) -> Repository:
    return Repository.open(backend.url, storage_options=backend.options, **kwargs)


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

"""Writing and reading Zarr keys straight through a session, bypassing the store under test.

zarr's ``StoreTests`` needs raw ``set``/``get`` helpers. Our repository holds only metadata and
chunks, so a raw chunk write first creates an array whose chunk key encoding spells that key:
``c/0`` makes a 1-d root array (default encoding), ``foo/0/0`` a 2-d array ``/foo`` (v2, ``/``),
``foo/c/0.0`` a 2-d array ``/foo/c`` (v2, ``.``), ``a/c.1.2`` a 2-d array ``/a`` (default, ``.``).
"""

from __future__ import annotations

import json
from typing import Any

from icechunk_spark import NotFoundError, Session

GRID = 64  # chunks per dimension of the arrays made for raw chunk keys


def group_doc(**attributes: Any) -> bytes:
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()


def array_doc(ndim: int, encoding: str = "default", separator: str = "/") -> bytes:
    """A uint8 array with one-element chunks, ``GRID`` chunks along each dimension."""
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [GRID] * ndim,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1] * ndim}},
        "chunk_key_encoding": {"name": encoding, "configuration": {"separator": separator}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    return json.dumps(doc).encode()


def spell(key: str) -> tuple[str, str, str, tuple[int, ...]]:
    """(array path, encoding, separator, coord) of an array whose chunk ``key`` names."""
    segments = key.split("/")
    last = segments[-1]
    if last == "c" or last.startswith("c."):
        return _path(segments[:-1]), "default", ".", _ints(last.split(".")[1:])
    if "." in last:
        return _path(segments[:-1]), "v2", ".", _ints(last.split("."))
    run = 0
    while run < len(segments) and segments[-1 - run].isdigit():
        run += 1
    if run == 0:
        raise ValueError(f"{key!r} cannot be spelled as a chunk key")
    coord = _ints(segments[len(segments) - run :])
    if run < len(segments) and segments[-1 - run] == "c":
        return _path(segments[: -run - 1]), "default", "/", coord
    return _path(segments[:-run]), "v2", "/", coord


def write_raw(session: Session, key: str, data: bytes) -> None:
    if key.rsplit("/", 1)[-1] == "zarr.json":
        session.set_node_metadata(_path(key.split("/")[:-1]), data)
        return
    path, encoding, separator, coord = spell(key)
    try:
        session.get_node(path)
    except NotFoundError:
        session.set_node_metadata(path, array_doc(len(coord), encoding, separator))
    session.set_chunk(path, coord, data)


def read_raw(session: Session, key: str) -> bytes | None:
    if key.rsplit("/", 1)[-1] == "zarr.json":
        try:
            return session.get_node(_path(key.split("/")[:-1])).zarr_json
        except NotFoundError:
            return None
    path, _, _, coord = spell(key)
    if session.get_node(path).meta.ndim == 0:  # type: ignore[union-attr]
        coord = ()  # "0" also spells the one chunk of a 0-d v2 array
    return session.get_chunk(path, coord)


def _path(segments: list[str]) -> str:
    return "/" + "/".join(segments)


def _ints(parts: list[str]) -> tuple[int, ...]:
    return tuple(int(p) for p in parts)

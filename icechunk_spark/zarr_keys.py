"""How Zarr keys map onto a repository's tree, both ways: resolving a key, listing the keys.

The key grammar is drawn in zarr_store.py's docstring, the store's public face: ``zarr.json``
documents of nodes and chunks of arrays, in the array's chunk key encoding. A key that is
neither cannot hold a value: ``resolve_key`` raises ``InvalidInputError`` and
``resolve_key_or_none`` returns ``None``. zarr_values.py reads and writes what a key names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .errors import InvalidInputError
from .format.paths import path_problem
from .format.structure import ArrayMeta, Node

if TYPE_CHECKING:
    # A session, or a fork of one: both read and write chunks the same way.
    from .core import BaseSession as AnySession

METADATA_KEY = "zarr.json"
_V2_METADATA = frozenset({".zgroup", ".zarray", ".zattrs", ".zmetadata"})


@dataclass(frozen=True, slots=True)
class MetadataKey:
    """A key naming the ``zarr.json`` of the node at ``path``."""

    path: str


@dataclass(frozen=True, slots=True)
class ChunkKey:
    """A key naming chunk ``coord`` of the array at ``path``; ``node`` is the array as the
    key was resolved, so a read need not look it up again."""

    path: str
    coord: tuple[int, ...]
    node: Node = field(compare=False, repr=False)

    def inside_grid(self) -> bool:
        """Whether the coord is inside the array's chunk grid (as resolved)."""
        meta = self.node.meta
        assert meta is not None  # only arrays own chunk keys
        return all(c < n for c, n in zip(self.coord, meta.grid_shape, strict=True))


def node_dir(path: str) -> str:
    """The key prefix of the node at ``path``: ``''`` for the root, ``'a/b/'`` for ``/a/b``."""
    return "" if path == "/" else path[1:] + "/"


def encode_chunk_key(meta: ArrayMeta, coord: Sequence[int]) -> str:
    """The key of a chunk, relative to its array, as zarr writes it."""
    sep = meta.separator
    if meta.key_encoding == "default":
        return sep.join(["c", *map(str, coord)])
    if meta.key_encoding == "v2":
        return sep.join(map(str, coord)) or "0"
    raise InvalidInputError(
        f"chunk key encoding {meta.key_encoding!r} is not supported; use 'default' or 'v2'"
    )


def decode_chunk_key(meta: ArrayMeta, relative: str) -> tuple[int, ...] | None:
    """The coord named by ``relative`` (a key relative to the array), or ``None``."""
    sep = meta.separator
    if meta.key_encoding == "default":
        if relative == "c":
            parts = []
        elif relative.startswith("c" + sep):
            parts = relative[2:].split(sep)
        else:
            return None
    elif meta.key_encoding == "v2":
        parts = relative.split(sep) if meta.ndim else []
    else:
        return None
    if len(parts) != meta.ndim or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    coord = tuple(int(p) for p in parts)
    # Only the exact spelling zarr writes ("1", not "01") names a chunk, so listing round-trips.
    return coord if encode_chunk_key(meta, coord) == relative else None


@dataclass(frozen=True, slots=True)
class NotAKey:
    """Why a key cannot hold a value (reads answer ``None``, writes raise the reason)."""

    reason: str


def resolve_key(session: AnySession, key: str) -> MetadataKey | ChunkKey:
    """What ``key`` names. Raises ``InvalidInputError`` when it cannot hold a value."""
    target = classify_key(session, key)
    if isinstance(target, NotAKey):
        raise InvalidInputError(target.reason)
    return target


def resolve_key_or_none(session: AnySession, key: str) -> MetadataKey | ChunkKey | None:
    """What ``key`` names, or ``None`` when such a key holds nothing (no exception raised:
    zarr probes keys that do not exist all the time)."""
    target = classify_key(session, key)
    return None if isinstance(target, NotAKey) else target


def classify_key(session: AnySession, key: str) -> MetadataKey | ChunkKey | NotAKey:
    """What ``key`` names, or why it names nothing."""
    segments = key.split("/")
    if not key or "" in segments:
        return NotAKey(f"invalid key {key!r}: keys are '/'-separated names, never empty")
    problem = path_problem(key)
    if problem is not None:
        return NotAKey(problem)
    # The segments are valid and none is empty: each prefix of them is a normalized path.
    if segments[-1] == METADATA_KEY:
        return MetadataKey(_path_of(segments[:-1]))
    if segments[-1] in _V2_METADATA:
        return NotAKey(
            f"key {key!r} is Zarr v2 metadata: repositories hold only Zarr v3 "
            "(write with zarr_format=3, the default, e.g. ds.to_zarr(store, zarr_format=3))"
        )
    # The deepest node above the key owns it; only arrays own keys besides zarr.json.
    for depth in range(len(segments) - 1, -1, -1):
        path = _path_of(segments[:depth])
        node = session.find_node(path)
        if node is None:
            continue
        if node.meta is None:
            return NotAKey(
                f"key {key!r} is not a Zarr key: {path!r} is a group, which holds only zarr.json"
            )
        meta = node.meta
        coord = decode_chunk_key(meta, "/".join(segments[depth:]))
        if coord is None:
            first = node_dir(path) + encode_chunk_key(meta, [0] * meta.ndim)
            return NotAKey(
                f"key {key!r} is not a chunk key of array {path!r}: it has {meta.ndim} dimensions "
                f"and chunk key encoding {meta.key_encoding!r} with separator {meta.separator!r}, "
                f"so its first chunk is {first!r}"
            )
        return ChunkKey(path, coord, node)
    return NotAKey(
        f"key {key!r} is not a Zarr key: there is no array above it; the store holds only "
        "zarr.json documents and chunks of arrays (write the array's zarr.json first)"
    )


def _path_of(segments: list[str]) -> str:
    return "/" + "/".join(segments)


# -- listing ------------------------------------------------------------------------------
def chunk_keys(session: AnySession, node: Node) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(key, coord) of every chunk the array holds inside its current chunk grid."""
    assert node.meta is not None
    if node.meta.ndim == 0:  # chunk_coords cannot decode 0-d coords yet (format.coords)
        coords = np.zeros((0 if session.get_chunk_ref(node.path, ()) is None else 1, 0), np.int64)
    else:
        coords = session.chunk_coords(node.path)
    # Chunks left outside a shrunk grid cannot be read (zarr deletes them before shrinking).
    inside = np.all(coords < np.asarray(node.meta.grid_shape, dtype=np.int64), axis=1)
    prefix = node_dir(node.path)
    for coord in coords[inside].tolist():
        yield prefix + encode_chunk_key(node.meta, coord), tuple(coord)


def iter_keys(session: AnySession, prefix: str) -> Iterator[str]:
    """Every key starting with ``prefix``: metadata keys first (cheap), then chunk keys."""
    nodes = session.list_nodes()
    for node in nodes:
        key = node_dir(node.path) + METADATA_KEY
        if key.startswith(prefix):
            yield key
    for node in nodes:
        here = node_dir(node.path)
        if node.meta is not None and (here.startswith(prefix) or prefix.startswith(here)):
            for key, _ in chunk_keys(session, node):
                if key.startswith(prefix):
                    yield key


def keys_with_prefix(session: AnySession, prefix: str) -> list[str]:
    return list(iter_keys(session, prefix))


def names_in_dir(session: AnySession, prefix: str) -> list[str]:
    """Names one level below ``prefix``, as zarr's MemoryStore lists them."""
    prefix = prefix.rstrip("/")
    under = prefix + "/" if prefix else ""
    names: set[str] = set()
    for node in session.list_nodes():
        here = node_dir(node.path)
        if here.startswith(under):
            # The node's first segment below the prefix; deeper chunks share that segment.
            names.add((here + METADATA_KEY)[len(under) :].split("/", 1)[0])
        if node.meta is not None and under.startswith(here):
            # The listed directory is this array's own, or one of its chunk directories.
            names.update(
                key[len(under) :].split("/", 1)[0]
                for key, _ in chunk_keys(session, node)
                if key.startswith(under)
            )
    return sorted(names)

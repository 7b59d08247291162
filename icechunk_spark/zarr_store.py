"""A Zarr v3 store over a session, so zarr and xarray read and write a repository.

Keys map onto the repository's tree; nothing else can be stored::

    zarr.json, a/b/zarr.json     the node's metadata document (its exact bytes are kept)
    a/b/c/1/2, a/b/c.1.2         chunk (1, 2) of array /a/b, "default" chunk key encoding
    a/b/1.2, a/b/1/2             chunk (1, 2) of array /a/b, "v2" chunk key encoding
    a/b/c, a/b/0                 the chunk of a 0-d array (default, v2)

A key that is neither (``foo``, ``group/c/0``, ``array/c/x``) cannot hold a value: ``set``
raises ``InvalidInputError``, ``get`` returns ``None``, ``exists`` is false and ``delete`` does
nothing.

>>> session = repo.writable_session("main")                        # doctest: +SKIP
>>> ds.to_zarr(session.store, mode="w", consolidated=False)         # doctest: +SKIP
>>> session.commit("write the cube")                               # doctest: +SKIP
>>> xr.open_zarr(repo.readonly_session("main").store, consolidated=False)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from .core.chunk_reads import naming_chunk
from .core.snapshot import ChunkRef
from .errors import (
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyStoreError,
)
from .format.paths import normalize_path
from .format.structure import ArrayMeta, Node, make_node

if TYPE_CHECKING:
    from .core.forks import ForkSession
    from .core.repository import Repository
    from .core.session import Session

    # A session, or a fork of one (core/forks.py): both read and write chunks the same way.
    AnySession: TypeAlias = Session | ForkSession

METADATA_KEY = "zarr.json"
_V2_METADATA = frozenset({".zgroup", ".zarray", ".zattrs", ".zmetadata"})

__all__ = ["IcechunkStore", "ReadOnlyStoreError"]


@dataclass(frozen=True, slots=True)
class MetadataKey:
    """A key naming the ``zarr.json`` of the node at ``path``."""

    path: str


@dataclass(frozen=True, slots=True)
class ChunkKey:
    """A key naming chunk ``coord`` of the array at ``path``."""

    path: str
    coord: tuple[int, ...]


class IcechunkStore(Store):
    """A ``zarr.abc.store.Store`` over one session: reads its snapshot, writes its change set.

    Get one from ``session.store`` (or ``fork.store``). Writes need a writable session and are
    published by ``session.commit``. A store over a read-only session pickles as its
    repository and snapshot id; one over a writable session pickles as a store over a new fork
    of it (``Session.fork``), which sees the session's changes and whose writes must come back
    to be merged (``session.merge``), or the session's commit stops and says so.

    Raises:
        ReadOnlyStoreError: a write through a read-only store, or ``read_only=False`` over a
            read-only session.
        InvalidInputError: ``set`` of a key that is neither metadata nor a chunk of an array,
            or of a malformed ``zarr.json``.
    """

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    def __init__(self, session: AnySession, *, read_only: bool | None = None) -> None:
        if read_only is None:
            read_only = session.read_only
        if not read_only and session.read_only:
            raise ReadOnlyStoreError("a read-only session cannot back a writable store")
        super().__init__(read_only=read_only)
        self._session = session

    @property
    def session(self) -> AnySession:
        """The session (or fork) this store reads and writes."""
        return self._session

    @property
    def read_only(self) -> bool:
        # A session turns read-only when it commits; the store follows it.
        return self._read_only or self.session.read_only

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError()

    def with_read_only(self, read_only: bool = False) -> IcechunkStore:
        """A store over the same session with another ``read_only`` setting."""
        return type(self)(self.session, read_only=read_only)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IcechunkStore) or self.read_only != other.read_only:
            return False
        mine, theirs = self.session, other.session
        if mine is theirs:
            return True
        # Two read-only views of one snapshot of one repository hold the same data.
        return (
            mine.read_only
            and theirs.read_only
            and mine.snapshot_id == theirs.snapshot_id
            and mine.repository.storage.url == theirs.repository.storage.url
        )

    def __repr__(self) -> str:
        return f"IcechunkStore({self.session!r}, read_only={self.read_only})"

    def __reduce__(self) -> tuple[Any, ...]:
        session = self.session
        if session.read_only:
            return (_open_snapshot_store, (session.repository, session.snapshot_id))
        # Pickling a writable session makes a fork of it; a fork pickles as itself.
        return (_store_over, (session, self._read_only))

    # -- reading --------------------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        _check_byte_range(byte_range)
        session = self.session
        target = _resolve_or_none(session, key)
        if isinstance(target, MetadataKey):
            node = session.find_node(target.path)
            if node is None:
                return None
            start, end = _byte_bounds(byte_range, len(node.zarr_json))
            data: bytes | None = node.zarr_json[start:end]
        elif isinstance(target, ChunkKey):
            # Manifest loads may hit storage: in a thread, so concurrent gets overlap.
            ref = await asyncio.to_thread(_chunk_ref_or_none, session, target)
            with naming_chunk(target.path, target.coord):
                data = None if ref is None else await _read_ref(session, ref, byte_range)
        else:
            return None
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        reads = (self.get(key, prototype, byte_range) for key, byte_range in key_ranges)
        return list(await asyncio.gather(*reads))

    async def exists(self, key: str) -> bool:
        session = self.session
        target = _resolve_or_none(session, key)
        if isinstance(target, MetadataKey):
            return session.find_node(target.path) is not None
        if isinstance(target, ChunkKey):
            return await asyncio.to_thread(_chunk_ref_or_none, session, target) is not None
        return False

    async def getsize(self, key: str) -> int:
        session = self.session
        target = _resolve_or_none(session, key)
        if isinstance(target, MetadataKey):
            node = session.find_node(target.path)
            if node is not None:
                return len(node.zarr_json)
        elif isinstance(target, ChunkKey):
            ref = await asyncio.to_thread(_chunk_ref_or_none, session, target)
            if ref is not None:
                return ref.length
        raise FileNotFoundError(key)

    # -- writing --------------------------------------------------------------------------
    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        data = _as_bytes(value)
        session = self.session
        target = _resolve(session, key)
        if isinstance(target, MetadataKey):
            # Metadata changes are in memory: done before the first await, so metadata and
            # chunks set concurrently (asyncio.gather) still apply metadata first.
            _set_metadata(session, target.path, data)
        elif len(data) <= session.repository.config.inline_chunk_threshold_bytes:
            session.set_chunk(target.path, target.coord, data)  # inline: no I/O
        else:
            await asyncio.to_thread(session.set_chunk, target.path, target.coord, data)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._check_writable()
        data = _as_bytes(value)
        session = self.session
        target = _resolve(session, key)
        if isinstance(target, MetadataKey):
            with contextlib.suppress(AlreadyExistsError):  # the session checks and sets atomically
                session.set_node_metadata(target.path, data, create_only=True)
            return

        def set_chunk_if_absent(chunk: ChunkKey) -> None:
            with _session_lock(session):  # no other set_if_not_exists between check and set
                if _chunk_ref_or_none(session, chunk) is None:
                    session.set_chunk(chunk.path, chunk.coord, data)

        await asyncio.to_thread(set_chunk_if_absent, target)

    async def delete(self, key: str) -> None:
        """Delete a chunk, or one node (not its children) for a ``zarr.json`` key.

        Deleting a key that holds nothing does nothing, as in zarr's own stores.
        """
        self._check_writable()
        session = self.session
        target = _resolve_or_none(session, key)
        if isinstance(target, MetadataKey):
            with contextlib.suppress(NotFoundError):
                session.delete_node(target.path, recursive=False)
        elif isinstance(target, ChunkKey):
            await asyncio.to_thread(_delete_chunk, session, target)

    async def delete_dir(self, prefix: str) -> None:
        # Whole nodes under the prefix go at once instead of key by key.
        self._check_writable()
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        await asyncio.to_thread(_delete_prefix, self.session, prefix)

    # -- listing --------------------------------------------------------------------------
    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(_list_prefix, self.session, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(_list_prefix, self.session, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in await asyncio.to_thread(_list_dir, self.session, prefix):
            yield name

    async def is_empty(self, prefix: str) -> bool:
        if prefix and not prefix.endswith("/"):
            prefix += "/"

        def empty() -> bool:
            return next(_iter_keys(self.session, prefix), None) is None

        return await asyncio.to_thread(empty)


def _open_snapshot_store(repo: Repository, snapshot_id: str) -> IcechunkStore:
    """Unpickling: a read-only store at the same snapshot of the (reopened) repository."""
    return IcechunkStore(repo.readonly_session(snapshot_id=snapshot_id))


def _store_over(session: AnySession, read_only: bool) -> IcechunkStore:
    """Unpickling a store over a writable session: the same store over a fork of it."""
    return IcechunkStore(session, read_only=read_only)


# -- keys ---------------------------------------------------------------------------------
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


def _resolve(session: AnySession, key: str) -> MetadataKey | ChunkKey:
    """What ``key`` names. Raises ``InvalidInputError`` when it cannot hold a value."""
    segments = key.split("/")
    if not key or "" in segments:
        raise InvalidInputError(f"invalid key {key!r}: keys are '/'-separated names, never empty")
    if segments[-1] == METADATA_KEY:
        return MetadataKey(normalize_path("/".join(segments[:-1])))
    if segments[-1] in _V2_METADATA:
        raise InvalidInputError(
            f"key {key!r} is Zarr v2 metadata: repositories hold only Zarr v3 "
            "(write with zarr_format=3, the default, e.g. ds.to_zarr(store, zarr_format=3))"
        )
    # The deepest node above the key owns it; only arrays own keys besides zarr.json.
    for depth in range(len(segments) - 1, -1, -1):
        path = normalize_path("/".join(segments[:depth]))
        node = session.find_node(path)
        if node is None:
            continue
        if node.meta is None:
            raise InvalidInputError(
                f"key {key!r} is not a Zarr key: {path!r} is a group, which holds only zarr.json"
            )
        meta = node.meta
        coord = decode_chunk_key(meta, "/".join(segments[depth:]))
        if coord is None:
            first = node_dir(path) + encode_chunk_key(meta, [0] * meta.ndim)
            raise InvalidInputError(
                f"key {key!r} is not a chunk key of array {path!r}: it has {meta.ndim} dimensions "
                f"and chunk key encoding {meta.key_encoding!r} with separator {meta.separator!r}, "
                f"so its first chunk is {first!r}"
            )
        return ChunkKey(path, coord)
    raise InvalidInputError(
        f"key {key!r} is not a Zarr key: there is no array above it; the store holds only "
        "zarr.json documents and chunks of arrays (write the array's zarr.json first)"
    )


def _resolve_or_none(session: AnySession, key: str) -> MetadataKey | ChunkKey | None:
    try:
        return _resolve(session, key)
    except InvalidInputError:
        return None  # such a key holds nothing


# -- values -------------------------------------------------------------------------------
def _as_bytes(value: Buffer) -> bytes:
    if not isinstance(value, Buffer):
        raise TypeError(f"IcechunkStore.set(): value must be a zarr Buffer, not {type(value)}")
    return value.to_bytes()


def _check_byte_range(byte_range: object) -> None:
    if byte_range is None:
        return
    if isinstance(byte_range, RangeByteRequest):
        valid = 0 <= byte_range.start <= byte_range.end
    elif isinstance(byte_range, OffsetByteRequest):
        valid = byte_range.offset >= 0
    elif isinstance(byte_range, SuffixByteRequest):
        valid = byte_range.suffix >= 0
    else:
        raise InvalidInputError(
            f"Unexpected byte_range, got {byte_range!r}; use RangeByteRequest, "
            "OffsetByteRequest or SuffixByteRequest from zarr.abc.store"
        )
    if not valid:
        raise InvalidInputError(f"invalid byte range {byte_range}: offsets and sizes must be >= 0")


def _byte_bounds(byte_range: ByteRequest | None, length: int) -> tuple[int, int]:
    """``[start, end)`` of a value of ``length`` bytes that ``byte_range`` asks for."""
    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, length), min(byte_range.end, length)
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, length), length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    return 0, length


def _set_metadata(session: AnySession, path: str, data: bytes) -> None:
    existing = session.find_node(path)
    if existing is not None and existing.zarr_json == data:
        return  # zarr rewrites unchanged metadata often; keep the change set (and conflicts) small
    new_type = make_node(0, path, data).type  # validates the document before changing anything
    if existing is not None and existing.type != new_type:
        # Setting a key replaces its value; the session wants the old node deleted first.
        session.delete_node(path, recursive=False)
    session.set_node_metadata(path, data)


def _chunk_ref_or_none(session: AnySession, key: ChunkKey) -> ChunkRef | None:
    try:
        return session.get_chunk_ref(key.path, key.coord)
    except (NotFoundError, InvalidInputError):
        return None  # array gone, or the coord left its (shrunk) grid


async def _read_ref(session: AnySession, ref: ChunkRef, byte_range: ByteRequest | None) -> bytes:
    # One lookup serves both the length (for suffix ranges) and the read.
    start, end = _byte_bounds(byte_range, ref.length)
    if ref.kind == "inline":
        assert ref.inline_data is not None
        return ref.inline_data[start:end]
    if ref.kind == "virtual":
        # Awaiting (not a thread each) lets every concurrent get join one coalesced batch.
        assert ref.virtual_path is not None
        reader = session.repository.virtual_reader
        return await reader.read_async(
            ref.virtual_path, ref.offset + start, end - start, ref.checksum
        )
    return await asyncio.to_thread(session.repository.read_ref, ref, (start, end))


def _delete_chunk(session: AnySession, key: ChunkKey) -> None:
    # A chunk never written needs no tombstone: zarr deletes fill-value chunks it never wrote.
    if _chunk_ref_or_none(session, key) is not None:
        session.delete_chunk(key.path, key.coord)


_session_locks: weakref.WeakKeyDictionary[AnySession, threading.Lock] = weakref.WeakKeyDictionary()
_session_locks_guard = threading.Lock()


def _session_lock(session: AnySession) -> threading.Lock:
    """One lock per session, shared by every store over it (``session.store`` makes new ones)."""
    with _session_locks_guard:
        return _session_locks.setdefault(session, threading.Lock())


# -- listing ------------------------------------------------------------------------------
def _chunk_keys(session: AnySession, node: Node) -> Iterator[tuple[str, tuple[int, ...]]]:
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


def _iter_keys(session: AnySession, prefix: str) -> Iterator[str]:
    """Every key starting with ``prefix``: metadata keys first (cheap), then chunk keys."""
    nodes = session.list_nodes()
    for node in nodes:
        key = node_dir(node.path) + METADATA_KEY
        if key.startswith(prefix):
            yield key
    for node in nodes:
        here = node_dir(node.path)
        if node.meta is not None and (here.startswith(prefix) or prefix.startswith(here)):
            for key, _ in _chunk_keys(session, node):
                if key.startswith(prefix):
                    yield key


def _list_prefix(session: AnySession, prefix: str) -> list[str]:
    return list(_iter_keys(session, prefix))


def _list_dir(session: AnySession, prefix: str) -> list[str]:
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
                for key, _ in _chunk_keys(session, node)
                if key.startswith(under)
            )
    return sorted(names)


def _delete_prefix(session: AnySession, prefix: str) -> None:
    for node in session.list_nodes():
        here = node_dir(node.path)
        if here.startswith(prefix):  # the node's zarr.json and chunks all lie under the prefix
            with contextlib.suppress(NotFoundError):
                session.delete_node(node.path, recursive=False)
        elif node.meta is not None and prefix.startswith(here):  # some chunks of the array
            for key, coord in list(_chunk_keys(session, node)):
                if key.startswith(prefix):
                    session.delete_chunk(node.path, coord)

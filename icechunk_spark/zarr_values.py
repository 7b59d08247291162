"""What a Zarr key names in a session, read, written and deleted in the caller's thread.

The store (zarr_store.py) calls these from its synchronous methods directly and from its async
ones in a thread where they wait on storage; zarr_keys.py says what a key names. Functions that
look at the session and then change it hold ``session_lock``: synchronous calls come from many
threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from typing import TYPE_CHECKING

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from .core import ChunkRef, naming_chunk
from .errors import AlreadyExistsError, InvalidInputError, NotFoundError
from .format.structure import make_node
from .zarr_keys import ChunkKey, MetadataKey, chunk_keys, node_dir

if TYPE_CHECKING:
    # A session, or a fork of one: both read and write chunks the same way.
    from .core import BaseSession as AnySession


# -- values and byte ranges ---------------------------------------------------------------
def as_bytes(value: Buffer) -> bytes:
    if not isinstance(value, Buffer):
        raise TypeError(f"IcechunkStore.set(): value must be a zarr Buffer, not {type(value)}")
    return value.to_bytes()


def check_byte_range(byte_range: object) -> None:
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


def byte_bounds(byte_range: ByteRequest | None, length: int) -> tuple[int, int]:
    """``[start, end)`` of a value of ``length`` bytes that ``byte_range`` asks for."""
    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, length), min(byte_range.end, length)
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, length), length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    return 0, length


def as_buffer(data: bytes | None, prototype: BufferPrototype | None) -> Buffer | None:
    if data is None:
        return None
    return (prototype or default_buffer_prototype()).buffer.from_bytes(data)


# -- reading ------------------------------------------------------------------------------
def read_metadata(
    session: AnySession, target: MetadataKey | None, byte_range: ByteRequest | None
) -> bytes | None:
    node = None if target is None else session.find_node(target.path)
    if node is None:
        return None
    start, end = byte_bounds(byte_range, len(node.zarr_json))
    return node.zarr_json[start:end]


def chunk_ref_or_none(session: AnySession, key: ChunkKey) -> ChunkRef | None:
    """The ref of the chunk ``key`` names, looked up in the array the key was resolved to."""
    if not key.inside_grid():
        return None  # zarr reads past a shrunk grid: such a key holds nothing
    return session.chunk_ref_at(key.node, key.coord)


def read_chunk(session: AnySession, key: ChunkKey, byte_range: ByteRequest | None) -> bytes | None:
    """The bytes of the chunk ``key`` names (a range of them), or ``None`` when it holds none."""
    ref = chunk_ref_or_none(session, key)
    if ref is None:
        return None
    with naming_chunk(key.path, key.coord):
        # One lookup serves both the length (for suffix ranges) and the read.
        return session.read_ref(ref, byte_bounds(byte_range, ref.length))


async def read_chunk_async(
    session: AnySession, key: ChunkKey, byte_range: ByteRequest | None
) -> bytes | None:
    """``read_chunk`` for the event loop: concurrent virtual reads join one coalesced batch."""
    # Manifest loads may hit storage: in a thread, so concurrent gets overlap.
    ref = await asyncio.to_thread(chunk_ref_or_none, session, key)
    if ref is None:
        return None
    with naming_chunk(key.path, key.coord):
        return await session.read_ref_async(ref, byte_bounds(byte_range, ref.length))


# -- writing ------------------------------------------------------------------------------
def writes_storage(session: AnySession, target: MetadataKey | ChunkKey, data: bytes) -> bool:
    """Whether the write puts a chunk file in storage; metadata and inline chunks are in memory."""
    threshold = session.handle.config.inline_chunk_threshold_bytes
    return isinstance(target, ChunkKey) and len(data) > threshold


def write_value(session: AnySession, target: MetadataKey | ChunkKey, data: bytes) -> None:
    if isinstance(target, MetadataKey):
        _set_metadata(session, target.path, data)
    else:
        session.set_chunk(target.path, target.coord, data)


def _set_metadata(session: AnySession, path: str, data: bytes) -> None:
    # Look, then change, under the session's lock: sync calls come from many threads at once,
    # and a delete of the node between our look and our delete would fail the replacement.
    with session_lock(session):
        existing = session.find_node(path)
        if existing is not None and existing.zarr_json == data:
            return  # zarr rewrites unchanged metadata often; keep the change set small
        new_type = make_node(0, path, data).type  # validates the document before any change
        if existing is not None and existing.type != new_type:
            # Setting a key replaces its value; the session wants the old node deleted first.
            session.delete_node(path, recursive=False)
        session.set_node_metadata(path, data)


def delete_value(session: AnySession, target: MetadataKey | ChunkKey | None) -> None:
    if isinstance(target, MetadataKey):
        with session_lock(session), contextlib.suppress(NotFoundError):
            session.delete_node(target.path, recursive=False)
    # A chunk never written needs no tombstone: zarr deletes fill-value chunks it never wrote.
    elif isinstance(target, ChunkKey) and chunk_ref_or_none(session, target) is not None:
        session.delete_chunk(target.path, target.coord)


def set_if_absent(session: AnySession, target: MetadataKey | ChunkKey, data: bytes) -> None:
    """Set ``target`` to ``data`` unless it holds a value already."""
    with session_lock(session):  # no other look-and-change of the session in between
        if isinstance(target, MetadataKey):
            with contextlib.suppress(AlreadyExistsError):
                session.set_node_metadata(target.path, data, create_only=True)
        elif chunk_ref_or_none(session, target) is None:
            session.set_chunk(target.path, target.coord, data)


def delete_prefix(session: AnySession, prefix: str) -> None:
    for node in session.list_nodes():
        here = node_dir(node.path)
        if here.startswith(prefix):  # the node's zarr.json and chunks all lie under the prefix
            with contextlib.suppress(NotFoundError):
                session.delete_node(node.path, recursive=False)
        elif node.meta is not None and prefix.startswith(here):  # some chunks of the array
            for key, coord in list(chunk_keys(session, node)):
                if key.startswith(prefix):
                    session.delete_chunk(node.path, coord)


# -- locking ------------------------------------------------------------------------------
_session_locks: weakref.WeakKeyDictionary[AnySession, threading.Lock] = weakref.WeakKeyDictionary()
_session_locks_guard = threading.Lock()


def session_lock(session: AnySession) -> threading.Lock:
    """One lock per session, shared by every store over it (``session.store`` makes new ones)."""
    with _session_locks_guard:
        return _session_locks.setdefault(session, threading.Lock())

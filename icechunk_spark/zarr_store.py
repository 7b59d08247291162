"""A Zarr v3 store over a session, so zarr and xarray read and write a repository.

Keys map onto the repository's tree; nothing else can be stored::

    zarr.json, a/b/zarr.json     the node's metadata document (its exact bytes are kept)
    a/b/c/1/2, a/b/c.1.2         chunk (1, 2) of array /a/b, "default" chunk key encoding
    a/b/1.2, a/b/1/2             chunk (1, 2) of array /a/b, "v2" chunk key encoding
    a/b/c, a/b/0                 the chunk of a 0-d array (default, v2)

A key that is neither (``foo``, ``group/c/0``, ``array/c/x``) cannot hold a value: ``set``
raises ``InvalidInputError``, ``get`` returns ``None``, ``exists`` is false and ``delete`` does
nothing. zarr_keys.py resolves and lists keys, zarr_values.py reads and writes what they name;
this module is zarr's ``Store`` over both.

zarr's ``Store`` is async. ``get_sync``, ``set_sync`` and ``delete_sync`` (zarr's
``SupportsGetSync``, ``SupportsSetSync``, ``SupportsDeleteSync``) do the same in the caller's
thread, for zarr's synchronous paths; either kind may be called from many threads at once.

>>> session = repo.writable_session("main")                        # doctest: +SKIP
>>> ds.to_zarr(session.store, mode="w", consolidated=False)         # doctest: +SKIP
>>> session.commit("write the cube")                               # doctest: +SKIP
>>> xr.open_zarr(repo.readonly_session("main").store, consolidated=False)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from .errors import ReadOnlyStoreError
from .zarr_keys import (
    ChunkKey,
    MetadataKey,
    iter_keys,
    keys_with_prefix,
    names_in_dir,
    resolve_key,
    resolve_key_or_none,
)
from .zarr_values import (
    as_buffer,
    as_bytes,
    check_byte_range,
    chunk_ref_or_none,
    delete_prefix,
    delete_value,
    read_chunk,
    read_chunk_async,
    read_metadata,
    set_if_absent,
    write_value,
    writes_storage,
)

if TYPE_CHECKING:
    # A session, or a fork of one: both read and write chunks the same way.
    from .core import BaseSession as AnySession

T = TypeVar("T")

__all__ = ["IcechunkStore", "ReadOnlyStoreError"]


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
            and mine.handle.storage.url == theirs.handle.storage.url
        )

    def __repr__(self) -> str:
        return f"IcechunkStore({self.session!r}, read_only={self.read_only})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A read-only session pickles as its snapshot, a writable one as a new fork of it, and
        # a fork as itself (core/session.py, core/forks.py).
        return (_store_over, (self.session, self._read_only))

    # -- reading --------------------------------------------------------------------------
    # Each *_sync method is zarr's synchronous protocol (SupportsGetSync, SupportsSetSync,
    # SupportsDeleteSync): the same work in the caller's thread. Its async twin does the same
    # through the same helpers, only moving waits on storage off the event loop.
    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """``get`` in the caller's thread, without an event loop."""
        check_byte_range(byte_range)
        session = self.session
        target = resolve_key_or_none(session, key)
        if not isinstance(target, ChunkKey):
            return as_buffer(read_metadata(session, target, byte_range), prototype)
        return as_buffer(read_chunk(session, target, byte_range), prototype)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        check_byte_range(byte_range)
        session = self.session
        target = resolve_key_or_none(session, key)
        if not isinstance(target, ChunkKey):
            return as_buffer(read_metadata(session, target, byte_range), prototype)
        return as_buffer(await read_chunk_async(session, target, byte_range), prototype)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        reads = (self.get(key, prototype, byte_range) for key, byte_range in key_ranges)
        return list(await asyncio.gather(*reads))

    async def exists(self, key: str) -> bool:
        session = self.session
        target = resolve_key_or_none(session, key)
        if isinstance(target, MetadataKey):
            return session.find_node(target.path) is not None
        if isinstance(target, ChunkKey):
            return await asyncio.to_thread(chunk_ref_or_none, session, target) is not None
        return False

    async def getsize(self, key: str) -> int:
        session = self.session
        target = resolve_key_or_none(session, key)
        if isinstance(target, MetadataKey):
            node = session.find_node(target.path)
            if node is not None:
                return len(node.zarr_json)
        elif isinstance(target, ChunkKey):
            ref = await asyncio.to_thread(chunk_ref_or_none, session, target)
            if ref is not None:
                return ref.length
        raise FileNotFoundError(key)

    # -- writing --------------------------------------------------------------------------
    def set_sync(self, key: str, value: Buffer) -> None:
        """``set`` in the caller's thread, without an event loop."""
        target, data = self._write_of(key, value)
        write_value(self.session, target, data)

    async def set(self, key: str, value: Buffer) -> None:
        target, data = self._write_of(key, value)
        # Metadata and inline chunks are set in memory before the first await, so metadata and
        # chunks set concurrently (asyncio.gather) still apply metadata first.
        session = self.session
        await _run(writes_storage(session, target, data), write_value, session, target, data)

    def _write_of(self, key: str, value: Buffer) -> tuple[MetadataKey | ChunkKey, bytes]:
        """What setting ``key`` to ``value`` writes; refused before anything is written."""
        self._check_writable()
        data = as_bytes(value)
        return resolve_key(self.session, key), data

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        target, data = self._write_of(key, value)
        await _run(isinstance(target, ChunkKey), set_if_absent, self.session, target, data)

    def delete_sync(self, key: str) -> None:
        """``delete`` in the caller's thread, without an event loop."""
        self._check_writable()
        delete_value(self.session, resolve_key_or_none(self.session, key))

    async def delete(self, key: str) -> None:
        """Delete a chunk, or one node (not its children) for a ``zarr.json`` key.

        Deleting a key that holds nothing does nothing, as in zarr's own stores.
        """
        self._check_writable()
        session = self.session
        target = resolve_key_or_none(session, key)
        # Deleting a node is in memory; deleting a chunk may load its manifest.
        await _run(isinstance(target, ChunkKey), delete_value, session, target)

    async def delete_dir(self, prefix: str) -> None:
        # Whole nodes under the prefix go at once instead of key by key.
        self._check_writable()
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        await asyncio.to_thread(delete_prefix, self.session, prefix)

    # -- listing --------------------------------------------------------------------------
    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(keys_with_prefix, self.session, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(keys_with_prefix, self.session, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in await asyncio.to_thread(names_in_dir, self.session, prefix):
            yield name

    async def is_empty(self, prefix: str) -> bool:
        if prefix and not prefix.endswith("/"):
            prefix += "/"

        def empty() -> bool:
            return next(iter_keys(self.session, prefix), None) is None

        return await asyncio.to_thread(empty)


def _store_over(session: AnySession, read_only: bool) -> IcechunkStore:
    """Unpickling: a store over the session as it unpickled (the same snapshot, or a fork)."""
    return IcechunkStore(session, read_only=read_only)


async def _run(in_thread: bool, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``: in a thread when it waits on storage, so the event loop keeps going."""
    return await asyncio.to_thread(work, *args) if in_thread else work(*args)

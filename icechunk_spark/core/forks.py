"""Forks: writable, picklable children of a session, and merging them back (``Session.merge``).

``session.fork()`` makes one. A fork reads what its session read when the fork was made (the
base snapshot plus a copy of the session's changes then) and records chunk writes of its own:
``set_chunk``, ``set_chunk_values``, ``set_virtual_ref``, ``delete_chunk``,
``set_chunk_refs``, or zarr writing chunks through ``fork.store``. It pickles with its writes,
so it can go to any thread or process (Dask workers, a ``ProcessPoolExecutor``) and come back.
It never commits and never changes a group or array: those belong to the session.

``session.merge(*forks)`` checks everything first, then applies all the forks or none:

* each is a fork of this session's change set (not of another session, nor of changes
  discarded since), passed once, and not merged before (nor a copy of one merged before);
* the session still reads the snapshot the fork was made from;
* each array a fork wrote still exists (the same node), with the same chunk shape, and every
  chunk written lies inside its grid;
* no chunk is written by two of the forks, nor by the session (or a fork merged earlier) after
  the fork was made. Overwriting what the session wrote *before* forking is fine: the fork saw
  it.

Merged writes are the session's own from then on: its commit checks them against concurrent
commits (conflicts, rebase) and garbage collection exactly like writes made in the session.

A fork that is never merged leaves only unreachable chunk files, which garbage collection
deletes once they are older than its cut-off.

Pickling a writable session or its zarr store also makes a fork (an *implicit* one): that is
how ``ds.to_zarr(session.store)`` reaches Dask workers. Its writes stay in the worker unless
someone returns it and merges it, so an implicit fork leaves a marker
(``staging/forks/<session>/<writer>``) when it first writes, and the session's commit refuses
while a marked writer was never merged, instead of silently dropping those writes.

A repository in ``memory://`` storage lives in one process's memory: a fork unpickled in
another process cannot reach it (and its chunk files would vanish with that process), so it
refuses to be used there, saying why.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa

from ..chunks.stats import StatsLog
from ..errors import ForkError, NotFoundError
from ..format.coords import encode_coord
from ..format.ids import new_object_id
from ..format.keys import fork_marker_key, fork_markers_prefix, object_id
from ..format.manifest import attach_stats
from ..format.merge import merge_refs
from ..format.structure import Node
from ..storage import Storage
from . import overlay
from .base_session import BaseSession
from .changes import ChangeSet
from .handle import RepoHandle
from .manifest_cache import ChunkRef
from .snapshot import SnapshotView

if TYPE_CHECKING:
    from ..zarr_store import IcechunkStore

_NODES_BELONG_TO_THE_SESSION = (
    "a fork writes chunks only: create, update or delete groups and arrays in the parent "
    "session before forking"
)


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork comes from; it travels with the fork."""

    session: str  # the token of the session's change set (ForkLedger.token)
    snapshot_id: str  # the snapshot the session read when the fork was made
    branch: str | None
    pid: int  # the process that made the fork
    in_memory: str | None  # the memory:// URL when the repository lives in process ``pid``
    implicit: bool  # made by pickling a writable session or store, not by session.fork()


class ForkLedger:
    """A session's record of its forks: the token they carry, the writers merged so far, and
    whether implicit forks (made by pickling) exist, whose unmerged writes stop the commit.

    ``discard_changes`` starts a new ledger, so forks of the discarded changes are strangers.
    """

    def __init__(self) -> None:
        self.token = new_object_id()
        self.merged: set[str] = set()
        self.implicit = False
        self.lock = threading.Lock()


class ForkSession(BaseSession):
    """A writable, picklable fork of a session: writes chunks anywhere, merged by its session.

    >>> fork = session.fork()                                   # doctest: +SKIP
    >>> fork = pool.submit(write_region, fork).result()         # doctest: +SKIP
    >>> session.merge(fork)                                     # doctest: +SKIP
    >>> session.commit("written by a pool of processes")        # doctest: +SKIP

    It reads and writes chunks as a session does (core/base_session.py); it reads the base
    snapshot, then its session's changes when forked, then its own writes. The rules are in
    the module docstring and in ``docs/forks.md``.
    """

    def __init__(
        self,
        origin: ForkOrigin,
        inherited: ChangeSet,
        *,
        handle: RepoHandle | None = None,
        base: SnapshotView | None = None,
        handle_pickle: bytes | None = None,
        changes: ChangeSet | None = None,
        stats: StatsLog | None = None,
        carried: frozenset[str] = frozenset(),
    ) -> None:
        """Prefer ``session.fork()``."""
        super().__init__(
            changes if changes is not None else ChangeSet(),  # the fork's own writes
            stats if stats is not None else StatsLog(),
            origin.branch,
        )
        self._origin = origin
        self._inherited = inherited  # the session's changes when the fork was made (a copy)
        self._handle = handle  # opened on first use when the fork was unpickled
        self._handle_pickle = handle_pickle
        self._base = base
        # Each instance is a writer of its own: copies sent to two workers are two writers.
        self._writer = new_object_id()
        self._carried = set(carried)  # the writers whose changes self._changes holds
        self._marked = False
        self._lock = threading.Lock()

    # -- what a fork decides (core/base_session.py) ---------------------------------------
    @property
    def snapshot_id(self) -> str:
        """The snapshot this fork reads (its session's when the fork was made)."""
        return self._origin.snapshot_id

    @property
    def handle(self) -> RepoHandle:
        """The repository handle, opened again on first use in a process the fork was sent to.

        Raises:
            ForkError: the repository is in ``memory://`` storage of another process.
        """
        self._check_process()
        with self._lock:
            if self._handle is None:
                assert self._handle_pickle is not None
                self._handle = _reopen(self._handle_pickle)
            return self._handle

    def _view(self) -> SnapshotView:
        handle = self.handle
        with self._lock:
            if self._base is None:
                self._base = handle.snapshot_view(self._origin.snapshot_id)
            return self._base

    def _node_layer(self) -> ChangeSet:
        return self._inherited  # a fork changes no node: its session's, when forked

    def _chunk_ref(self, node: Node, coord: tuple[int, ...]) -> ChunkRef | None:
        with self._changes.lock:
            own = self._changes.chunks.get(node.id)
            found, ref = own.lookup(encode_coord(coord)) if own is not None else (False, None)
        return ref if found else super()._chunk_ref(node, coord)

    def _array_refs(self, node: Node) -> pa.Table:
        assert node.meta is not None
        storage = self.handle.storage
        seen = overlay.array_refs(self._view(), self._inherited, StatsLog(), node, storage)
        with self._changes.lock:
            own = self._changes.chunks.get(node.id)
            written = self._stats.table(node.id)
            layers = [attach_stats(t, written) for t in own.layers(node.id)] if own else []
        return merge_refs([seen, *layers], node.meta.ndim)

    def _mark_written(self) -> None:
        """Count this instance among the writers; an implicit fork leaves its marker once."""
        with self._lock:
            self._carried.add(self._writer)
            if not self._origin.implicit or self._marked:
                return
            self._marked = True
        marker = {"pid": os.getpid(), "host": socket.gethostname()}
        key = fork_marker_key(self._origin.session, self._writer)
        self.handle.storage.put(key, json.dumps(marker).encode())

    @property
    def store(self) -> IcechunkStore:
        """A writable zarr store over this fork: zarr writes chunks through it."""
        from ..zarr_store import IcechunkStore

        return IcechunkStore(self)

    def _check_process(self) -> None:
        origin = self._origin
        if origin.in_memory is not None and os.getpid() != origin.pid:
            raise ForkError(
                f"this fork of a session on {origin.in_memory} was sent to process "
                f"{os.getpid()}, but memory:// storage lives only in the memory of process "
                f"{origin.pid}: this process cannot read the repository, and chunks it wrote "
                "would vanish with it. Use file:// or s3:// storage to write from other "
                "processes, or use threads (e.g. Dask's threaded scheduler)"
            )

    # -- what a fork may not do -----------------------------------------------------------
    def set_node_metadata(self, path: str, zarr_json: bytes, *, create_only: bool = False) -> Node:
        """Refused: ``ForkError`` (nodes belong to the session)."""
        raise ForkError(f"cannot write the metadata of {path!r}: {_NODES_BELONG_TO_THE_SESSION}")

    def delete_node(self, path: str, *, recursive: bool = True) -> None:
        """Refused: ``ForkError`` (nodes belong to the session)."""
        raise ForkError(f"cannot delete {path!r}: {_NODES_BELONG_TO_THE_SESSION}")

    def create_group(self, path: str = "/", attributes: Any = None) -> NoReturn:
        """Refused: ``ForkError`` (nodes belong to the session)."""
        raise ForkError(f"cannot create group {path!r}: {_NODES_BELONG_TO_THE_SESSION}")

    def create_array(self, path: str, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: ``ForkError`` (nodes belong to the session)."""
        raise ForkError(f"cannot create array {path!r}: {_NODES_BELONG_TO_THE_SESSION}")

    def commit(self, message: str, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: ``ForkError``. The session merges its forks and commits once."""
        raise ForkError(
            "a fork does not commit: return it to the process that made it and call "
            "session.merge(fork) there, then session.commit(...)"
        )

    def fork(self) -> NoReturn:
        """Refused: ``ForkError``. Fork the session instead, as many times as needed."""
        raise ForkError("a fork cannot fork: call session.fork() on its session once per writer")

    def merge(self, *forks: ForkSession) -> NoReturn:
        """Refused: ``ForkError``. Merge every fork into the session that made it."""
        raise ForkError("merge forks into the session whose fork() made them, not into a fork")

    # -- pickling -------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        with self._lock:
            if self._handle_pickle is None:
                self._handle_pickle = pickle.dumps(self._handle)
            carried = frozenset(self._carried)
        return (
            _restore,
            (
                self._origin,
                self._handle_pickle,
                self._inherited,
                self._changes,
                self._stats,
                carried,
            ),
        )

    def __repr__(self) -> str:
        origin = self._origin
        return (
            f"<ForkSession {self._writer} of session {origin.session} branch={origin.branch!r} "
            f"snapshot={origin.snapshot_id}>"
        )


def _restore(
    origin: ForkOrigin,
    handle_pickle: bytes,
    inherited: ChangeSet,
    changes: ChangeSet,
    stats: StatsLog,
    carried: frozenset[str],
) -> ForkSession:
    """Unpickling: the same fork as a new writer; the repository opens on first use (here a
    ``memory://`` one of another process is refused there, not while unpickling, which a
    process pool could only report as a broken pool)."""
    return ForkSession(
        origin,
        inherited,
        handle_pickle=handle_pickle,
        changes=changes,
        stats=stats,
        carried=carried,
    )


@functools.lru_cache(maxsize=8)
def _reopen(handle_pickle: bytes) -> RepoHandle:
    """One repository handle per process for all the forks unpickled there."""
    handle: RepoHandle = pickle.loads(handle_pickle)
    return handle


def make_fork(
    handle: RepoHandle,
    base: SnapshotView,
    branch: str | None,
    changes: ChangeSet,
    ledger: ForkLedger,
    *,
    implicit: bool,
) -> ForkSession:
    """A fork of the session whose state these are (``Session.fork`` and its pickling)."""
    if implicit:
        with ledger.lock:
            ledger.implicit = True
    url = handle.storage.url
    origin = ForkOrigin(
        session=ledger.token,
        snapshot_id=base.snapshot_id,
        branch=branch,
        pid=os.getpid(),
        in_memory=url if url.startswith("memory://") else None,
        implicit=implicit,
    )
    return ForkSession(origin, changes.copy(), handle=handle, base=base)


# -- implicit forks that never came back ----------------------------------------------------
def check_forks_merged(storage: Storage, ledger: ForkLedger) -> None:
    """Refuse to commit while an implicit fork wrote and was never merged.

    Raises:
        ForkError: naming how many writers, in which processes, and what to do instead.
    """
    with ledger.lock:
        if not ledger.implicit:
            return  # no implicit fork exists: nothing to list
        merged = set(ledger.merged)
    prefix = fork_markers_prefix(ledger.token)
    lost = [i.key for i in storage.list(prefix) if object_id(i.key, prefix) not in merged]
    if not lost:
        return
    where = sorted({_describe_marker(storage, key) for key in lost[:5]})
    raise ForkError(
        f"{len(lost)} writer(s) that received this session or its store by pickling (e.g. "
        "ds.to_zarr(session.store) computed on Dask workers or in a process pool) wrote "
        f"chunks in {', '.join(where)} that were never merged: committing would silently "
        "drop those writes, so nothing was committed. Write Dask-backed data with "
        "icechunk_spark.xarray.to_repository(ds, session), or send session.fork() to each "
        "worker, return it and call session.merge(*forks); then write again in a new session"
    )


def _describe_marker(storage: Storage, key: str) -> str:
    try:
        info = json.loads(storage.get(key))
        return f"process {info['pid']} on {info['host']}"
    except (NotFoundError, ValueError, KeyError, TypeError):
        return "another process"

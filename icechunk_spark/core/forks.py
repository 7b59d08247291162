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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.codec import chunk_codec
from ..chunks.stats import ChunkStats, StatsLog
from ..errors import ForkConflictError, ForkError, InvalidInputError, NotFoundError
from ..format.coords import coord_keys, decode_coord, decode_coords, encode_coord
from ..format.ids import new_object_id
from ..format.keys import fork_marker_key, fork_markers_prefix, object_id
from ..format.manifest import attach_stats
from ..format.merge import merge_refs
from ..format.paths import normalize_path
from ..format.structure import Node
from ..storage import Storage
from . import overlay
from .changes import ChangeSet, ChangeSummary
from .chunk_reads import naming_chunk
from .chunk_writes import store_chunk, virtual_ref, write_statistics
from .ref_tables import check_coord, ref_table
from .snapshot import ChunkRef, SnapshotView

if TYPE_CHECKING:
    from ..zarr_store import IcechunkStore
    from .repository import Repository

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


class ForkSession:
    """A writable, picklable fork of a session: writes chunks anywhere, merged by its session.

    >>> fork = session.fork()                                   # doctest: +SKIP
    >>> fork = pool.submit(write_region, fork).result()         # doctest: +SKIP
    >>> session.merge(fork)                                     # doctest: +SKIP
    >>> session.commit("written by a pool of processes")        # doctest: +SKIP

    The rules are in the module docstring and in ``docs/forks.md``.
    """

    def __init__(
        self,
        origin: ForkOrigin,
        inherited: ChangeSet,
        *,
        repo: Repository | None = None,
        base: SnapshotView | None = None,
        repo_pickle: bytes | None = None,
        changes: ChangeSet | None = None,
        stats: StatsLog | None = None,
        carried: frozenset[str] = frozenset(),
    ) -> None:
        """Prefer ``session.fork()``."""
        self._origin = origin
        self._inherited = inherited  # the session's changes when the fork was made (a copy)
        self._repo = repo  # opened on first use when the fork was unpickled
        self._repo_pickle = repo_pickle
        self._base = base
        self._changes = changes if changes is not None else ChangeSet()  # the fork's own
        self._stats = stats if stats is not None else StatsLog()
        # Each instance is a writer of its own: copies sent to two workers are two writers.
        self._writer = new_object_id()
        self._carried = set(carried)  # the writers whose changes self._changes holds
        self._marked = False
        self._lock = threading.Lock()

    # -- identity -------------------------------------------------------------------------
    @property
    def branch(self) -> str | None:
        """The branch of the session this fork came from."""
        return self._origin.branch

    @property
    def snapshot_id(self) -> str:
        """The snapshot this fork reads (its session's when the fork was made)."""
        return self._origin.snapshot_id

    @property
    def read_only(self) -> bool:
        """Always ``False``: a fork exists to write."""
        return False

    @property
    def repository(self) -> Repository:
        """The repository, opened again on first use in a process the fork was sent to.

        Raises:
            ForkError: the repository is in ``memory://`` storage of another process.
        """
        self._check_process()
        with self._lock:
            if self._repo is None:
                assert self._repo_pickle is not None
                self._repo = _reopen(self._repo_pickle)
            return self._repo

    @property
    def store(self) -> IcechunkStore:
        """A writable zarr store over this fork: zarr writes chunks through it."""
        from ..zarr_store import IcechunkStore

        return IcechunkStore(self)

    def has_uncommitted_changes(self) -> bool:
        """Whether this fork wrote or deleted any chunk."""
        return not self._changes.is_empty()

    def _view(self) -> SnapshotView:
        repo = self.repository
        with self._lock:
            if self._base is None:
                self._base = repo.snapshot_view(self._origin.snapshot_id)
            return self._base

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

    # -- reading: the base snapshot, the session's changes when forked, then our own -------
    def get_node(self, path: str) -> Node:
        """The group or array at ``path``. Raises ``NotFoundError``."""
        return overlay.node_at(self._view(), self._inherited, normalize_path(path))

    def find_node(self, path: str) -> Node | None:
        """The group or array at ``path``, or ``None`` when there is none."""
        return overlay.find_node_at(self._view(), self._inherited, normalize_path(path))

    def list_nodes(self) -> list[Node]:
        """Every node, sorted by path."""
        nodes = self._nodes()
        return [nodes[p] for p in sorted(nodes)]

    def _nodes(self) -> dict[str, Node]:
        view = self._view()
        with self._inherited.lock:
            return overlay.current_nodes(view, self._inherited)

    def _array(self, path: str) -> Node:
        node = self.get_node(path)
        if node.type != "array":
            raise InvalidInputError(f"{node.path!r} is a group, not an array")
        return node

    def get_chunk_ref(self, path: str, coord: Sequence[int]) -> ChunkRef | None:
        """Where the chunk's bytes are, or ``None`` when it was never written."""
        node = self._array(path)
        coord = check_coord(node, coord)
        with self._changes.lock:
            own = self._changes.chunks.get(node.id)
            found, ref = own.lookup(encode_coord(coord)) if own is not None else (False, None)
        if found:
            return ref
        storage = self.repository.storage
        return overlay.chunk_ref(self._view(), self._inherited, node, coord, storage)

    def get_chunk(
        self, path: str, coord: Sequence[int], byte_range: tuple[int, int | None] | None = None
    ) -> bytes | None:
        """The chunk's bytes (``[start, end)`` of them with ``byte_range``), or ``None``."""
        ref = self.get_chunk_ref(path, coord)
        with naming_chunk(path, coord):
            return None if ref is None else self.repository.read_ref(ref, byte_range)

    def chunk_refs(self, path: str) -> pa.Table:
        """Every ref of the array this fork sees, sorted by coord."""
        node = self._array(path)
        assert node.meta is not None
        storage = self.repository.storage
        seen = overlay.array_refs(self._view(), self._inherited, StatsLog(), node, storage)
        with self._changes.lock:
            own = self._changes.chunks.get(node.id)
            written = self._stats.table(node.id)
            layers = [attach_stats(t, written) for t in own.layers(node.id)] if own else []
        return merge_refs([seen, *layers], node.meta.ndim)

    def chunk_coords(self, path: str) -> np.ndarray:
        """The coords of every chunk the array holds, as an ``(n, ndim)`` array, sorted."""
        node = self._array(path)
        assert node.meta is not None
        return decode_coords(self.chunk_refs(path).column("coord"), node.meta.ndim)

    def status(self) -> ChangeSummary:
        """What this fork wrote so far (chunks per array; a fork changes no node)."""
        paths = {n.id: p for p, n in self._nodes().items()}
        with self._changes.lock:
            return self._changes.summary(paths)

    # -- writing chunks -------------------------------------------------------------------
    def set_chunk(self, path: str, coord: Sequence[int], data: bytes) -> None:
        """Store one chunk's encoded bytes (inline when small, else a chunk file in ``c/``).

        Raises:
            InvalidInputError: no array at ``path``, or ``coord`` outside its chunk grid.
            ForkError: the repository is in ``memory://`` storage of another process.
        """
        node = self._array(path)
        coord = check_coord(node, coord)
        data = bytes(data)
        stats = write_statistics(self.repository.config, node, coord, encoded=data)
        self._store_chunk(node, coord, data, stats)

    def set_chunk_values(self, path: str, coord: Sequence[int], values: np.ndarray) -> None:
        """Encode a full chunk of values with the array's codecs and store it."""
        node = self._array(path)
        coord = check_coord(node, coord)
        values = np.asarray(values)
        data = chunk_codec(node.zarr_json).encode(values)
        stats = write_statistics(self.repository.config, node, coord, values=values)
        self._store_chunk(node, coord, data, stats)

    def set_virtual_ref(
        self,
        path: str,
        coord: Sequence[int],
        url: str,
        offset: int,
        length: int,
        checksum: str | None = None,
    ) -> None:
        """Point one chunk at bytes of another file; as ``Session.set_virtual_ref``."""
        node = self._array(path)
        coord = check_coord(node, coord)
        containers = self.repository.config.virtual_chunk_containers
        ref = virtual_ref(node, coord, url, offset, length, checksum, containers)
        self._record(node, encode_coord(coord), ref, None)

    def delete_chunk(self, path: str, coord: Sequence[int]) -> None:
        """Delete one chunk: readers see the array's fill value there."""
        node = self._array(path)
        coord = check_coord(node, coord)
        self._record(node, encode_coord(coord), None, None)

    def set_chunk_refs(self, path: str, refs: pa.Table | Mapping[str, Any]) -> int:
        """Bulk-set chunk refs of one array; as ``Session.set_chunk_refs``."""
        node = self._array(path)
        table = ref_table(refs, node, self.repository.config.virtual_chunk_containers)
        self._mark_written()
        with self._changes.lock:
            self._changes.array_changes(node).add_table(table)
        return int(table.num_rows)

    def _store_chunk(
        self, node: Node, coord: tuple[int, ...], data: bytes, stats: ChunkStats | None
    ) -> None:
        self._mark_written()  # before the chunk file: a writer that dies after it is marked
        repo = self.repository
        self._record(node, encode_coord(coord), store_chunk(repo.storage, repo.config, data), stats)

    def _record(
        self, node: Node, key: bytes, ref: ChunkRef | None, stats: ChunkStats | None
    ) -> None:
        self._mark_written()
        with self._changes.lock:
            self._changes.array_changes(node).set(key, ref)
            if stats is not None and ref is not None:
                self._stats.record(node.id, key, ref.chunk_id, ref.inline_data, stats)

    def _mark_written(self) -> None:
        """Count this instance among the writers; an implicit fork leaves its marker once."""
        with self._lock:
            self._carried.add(self._writer)
            if not self._origin.implicit or self._marked:
                return
            self._marked = True
        marker = {"pid": os.getpid(), "host": socket.gethostname()}
        key = fork_marker_key(self._origin.session, self._writer)
        self.repository.storage.put(key, json.dumps(marker).encode())

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
            if self._repo_pickle is None:
                self._repo_pickle = pickle.dumps(self._repo)
            carried = frozenset(self._carried)
        return (
            _restore,
            (self._origin, self._repo_pickle, self._inherited, self._changes, self._stats, carried),
        )

    def __repr__(self) -> str:
        origin = self._origin
        return (
            f"<ForkSession {self._writer} of session {origin.session} branch={origin.branch!r} "
            f"snapshot={origin.snapshot_id}>"
        )


def _restore(
    origin: ForkOrigin,
    repo_pickle: bytes,
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
        repo_pickle=repo_pickle,
        changes=changes,
        stats=stats,
        carried=carried,
    )


@functools.lru_cache(maxsize=8)
def _reopen(repo_pickle: bytes) -> Repository:
    """One repository handle per process for all the forks unpickled there."""
    repo: Repository = pickle.loads(repo_pickle)
    return repo


def make_fork(
    repo: Repository,
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
    url = repo.storage.url
    origin = ForkOrigin(
        session=ledger.token,
        snapshot_id=base.snapshot_id,
        branch=branch,
        pid=os.getpid(),
        in_memory=url if url.startswith("memory://") else None,
        implicit=implicit,
    )
    return ForkSession(origin, changes.copy(), repo=repo, base=base)


# -- merging ------------------------------------------------------------------------------
def merge_forks(
    ledger: ForkLedger,
    base: SnapshotView,
    changes: ChangeSet,
    stats: StatsLog,
    forks: Sequence[ForkSession],
) -> None:
    """Apply the writes of ``forks`` to a session's ``changes`` and ``stats``, all or none.

    Raises:
        ForkError: a fork of another session, passed twice or merged already, made from
            another snapshot, or writing to an array deleted or reshaped since.
        ForkConflictError: a chunk written by two forks, or by a fork and by the session
            after the fork was made.
        InvalidInputError: something that is not a fork.
    """
    for fork in forks:
        if not isinstance(fork, ForkSession):
            raise InvalidInputError(
                f"merge takes forks made by session.fork(), not {type(fork).__name__}"
            )
    with changes.lock, ledger.lock:
        _check_identities(ledger, base, forks)
        nodes = {n.id: n for n in overlay.current_nodes(base, changes).values()}
        written = [_written_arrays(fork, base, nodes) for fork in forks]
        _check_overlaps(forks, written, changes)
        _apply(forks, changes, stats, nodes)
        for fork in forks:
            ledger.merged |= fork._carried | {fork._writer}


@dataclass(frozen=True, slots=True)
class _Written:
    """The chunks one fork wrote to one array: the array now, and the coords (sorted)."""

    node: Node
    coords: pa.Array


def _check_identities(ledger: ForkLedger, base: SnapshotView, forks: Sequence[ForkSession]) -> None:
    seen: set[str] = set()
    for fork in forks:
        origin = fork._origin
        if origin.session != ledger.token:
            raise ForkError(
                f"{fork!r} is a fork of another session, or of changes this session "
                "discarded since: merge a fork into the session whose fork() made it"
            )
        writers = fork._carried | {fork._writer}
        if writers & seen:
            raise ForkError(f"{fork!r} (or a copy of it) is passed more than once")
        seen |= writers
        if writers & ledger.merged:
            raise ForkError(
                f"{fork!r} was merged already (or it is a copy of a fork merged already, "
                "carrying the same writes): each fork's writes merge once"
            )
        if origin.snapshot_id != base.snapshot_id:
            raise ForkError(
                f"{fork!r} was made from snapshot {origin.snapshot_id}, but this session now "
                f"reads {base.snapshot_id} (a failed commit rebased it): the fork's writes were "
                "never checked against the commits in between. Fork again and redo them"
            )


def _written_arrays(
    fork: ForkSession, base: SnapshotView, nodes: Mapping[int, Node]
) -> dict[int, _Written]:
    """The arrays ``fork`` wrote, each checked against the session's current node."""
    out: dict[int, _Written] = {}
    own = fork._changes
    with own.lock:
        arrays = {i: c.changed_coords() for i, c in own.chunks.items() if len(c)}
        attached = bool(own.attached)
    assert not attached, "forks cannot attach manifests"
    if not arrays:
        return out
    # The fork read the session's base (checked equal) plus the session's changes then.
    with fork._inherited.lock:
        seen = {n.id: n for n in overlay.current_nodes(base, fork._inherited).values()}
    for node_id, coords in arrays.items():
        then = seen[node_id]
        now = nodes.get(node_id)
        if now is None or now.meta is None:
            raise ForkError(
                f"{fork!r} wrote chunks of {then.path!r}, which this session deleted (or "
                "replaced by a new node) after the fork was made"
            )
        assert then.meta is not None
        if now.meta.chunk_shape != then.meta.chunk_shape:
            raise ForkError(
                f"{fork!r} wrote chunks of {now.path!r} with chunk shape {then.meta.chunk_shape}, "
                f"which this session changed to {now.meta.chunk_shape} after the fork was made"
            )
        if now.meta.ndim and np.any(
            decode_coords(coords, now.meta.ndim) >= np.asarray(now.meta.grid_shape)
        ):
            raise ForkError(
                f"{fork!r} wrote chunks of {now.path!r} outside its chunk grid "
                f"{now.meta.grid_shape}: this session resized it after the fork was made"
            )
        out[node_id] = _Written(now, coords)
    return out


def _check_overlaps(
    forks: Sequence[ForkSession], written: Sequence[Mapping[int, _Written]], changes: ChangeSet
) -> None:
    both: list[tuple[str, tuple[int, ...]]] = []
    for node, coords in _between_forks(written):
        both.extend((node.path, c) for c in coords)
    if both:
        raise ForkConflictError(both, "two of the forks merged wrote the same chunk")
    for fork, arrays in zip(forks, written, strict=True):
        later = list(_written_since_fork(fork, arrays, changes))
        if later:
            raise ForkConflictError(
                later,
                f"{fork!r} and this session (itself, or a fork merged earlier) both wrote "
                "the same chunk after the fork was made",
            )


def _between_forks(
    written: Sequence[Mapping[int, _Written]],
) -> Iterator[tuple[Node, list[tuple[int, ...]]]]:
    """Per array, the coords that more than one fork wrote (one sort, not pairs of forks)."""
    by_array: dict[int, list[_Written]] = {}
    for arrays in written:
        for node_id, w in arrays.items():
            by_array.setdefault(node_id, []).append(w)
    for writes in by_array.values():
        if len(writes) < 2:
            continue
        node = writes[0].node
        assert node.meta is not None
        keys = np.concatenate([coord_keys(w.coords, node.meta.ndim) for w in writes])
        keys.sort()
        twice = np.unique(keys[1:][keys[1:] == keys[:-1]])
        if len(twice):
            yield node, [decode_coord(k) for k in _key_bytes(twice, node.meta.ndim)]


def _key_bytes(keys: np.ndarray, ndim: int) -> list[bytes]:
    width = 4 * ndim
    raw = np.ascontiguousarray(keys).tobytes()
    return [raw[i * width : (i + 1) * width] for i in range(len(keys))] if width else [b""]


def _written_since_fork(
    fork: ForkSession, arrays: Mapping[int, _Written], changes: ChangeSet
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Chunks the fork wrote whose ref in the session changed after the fork was made."""
    for node_id, w in arrays.items():
        ours = changes.chunks.get(node_id)
        if ours is None or not len(ours):
            continue
        mine = w.coords
        overlap = mine.filter(pc.is_in(mine, ours.changed_coords()))
        then = fork._inherited.chunks.get(node_id)
        for key in overlap.to_pylist():
            seen = then.lookup(key) if then is not None else (False, None)
            if ours.lookup(key) != seen:
                yield w.node.path, decode_coord(key)


def _apply(
    forks: Sequence[ForkSession], changes: ChangeSet, stats: StatsLog, nodes: Mapping[int, Node]
) -> None:
    """Add the forks' writes to ``changes``: one layer per array for all the forks together
    (they are disjoint, checked), so a thousand forks do not make a thousand layers."""
    layers: dict[int, list[pa.Table]] = {}
    for fork in forks:
        own = fork._changes
        with own.lock:
            for node_id, written in own.chunks.items():
                if len(written):
                    layers.setdefault(node_id, []).extend(written.layers(node_id))
        stats.extend(fork._stats)
    for node_id, tables in layers.items():
        combined = pa.concat_tables(tables, promote_options="permissive")
        changes.array_changes(nodes[node_id]).add_table(combined)


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

"""Garbage collection: delete files that no listed snapshot needs and that are old enough.

An object under ``c/``, ``m/``, ``s/``, ``a/`` or ``x/`` is deleted when both hold:

* it is **unreachable** from every snapshot listed in the latest state: a snapshot needs its
  structure file (``s/``), the attribute files its structure rows point to (``a/``), its
  transaction log (``x/<snapshot id>``), the manifests its nodes reference (``m/``) and the chunk
  files those manifests reference (``c/``, the ``chunk_id`` column);
* its modification time is **older than the cut-off** ``delete_object_older_than``.

State files ``t/<generation>`` are never reachable; one is deleted when it is older than the
cut-off and its generation is below both the latest generation and the generation copied in
``icechunk.json``. Readers start from that copy and probe ``t/<g+1>``, ``t/<g+2>``… so every
state file above it must stay. They are deleted one at a time, oldest first, so the ones left
are always the newest: a reader whose probe missed checks that the state before the miss is
still there, and lists ``t/`` when it is not (``core.refs``). That covers a writer stalled
between creating ``t/<g>`` and replacing the hint, who puts back an older hint, and GC
deleting past a slow reader.

Abandoned write areas go too: objects under ``staging/<write id>/`` (Spark writes that never
committed or cleaned up) and local temporary files (``.tmp-*`` of interrupted writes), when
older than the cut-off.

Why no commit ever publishes an object GC deleted — the **fence**:

1. Before listing objects, GC records its cut-off in the state (``gc-fence``), with the same
   compare-and-swap as commits, and takes as its cut-off in effect the earlier of the requested
   one and the moment that state file was written (the storage's clock). So an object written
   after the fence is never deleted by this run.
2. A commit publishes only on a state it read. If that state carries a fence newer than the
   state the session started from, the session's objects may predate the cut-off: the commit
   copies the chunk files it references to new ids (written after the fence, so kept) and
   rebuilds its manifests and structure; a chunk file already deleted stops the commit with
   ``StaleSessionError`` before anything is published. A session that started after the
   cut-off skips the copy (its objects are younger than the cut-off).
3. The objects a commit reuses come from its parent, its branch's tip when the commit lands.
   Tips are never expired and an expired snapshot never comes back, so the parent was listed
   when GC read the state, and everything it reaches is kept — or it is a commit landed after
   the fence, kept by 1 and 2. GC also reads the state again right before deleting and keeps
   what the snapshots listed then reach.

So a cut-off of "now" is safe for the data; it only makes in-flight sessions older than the
cut-off copy their chunk files, or fail, at commit. The CLI and the maintenance job default to
a week ago. A dry run writes nothing (no fence).

Objects are compared by the storage's modification time (the storage's clock, not ours). S3
listings report whole seconds (``Storage.mtime_resolution_ms``), so such a time is taken as the
end of its second; local and memory times are exact to the millisecond.

Run one maintenance operation (expiry, GC) at a time; commits and reads may go on meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ..core import ensure_writable, read_hint, read_latest_state, update_state
from ..errors import FormatError, InvalidInputError, NotFoundError
from ..format.keys import (
    ATTRIBUTES_PREFIX,
    CHUNKS_PREFIX,
    MANIFESTS_PREFIX,
    STAGING_PREFIX,
    STATE_PREFIX,
    STRUCTURES_PREFIX,
    TXLOGS_PREFIX,
    attributes_key,
    chunk_key,
    manifest_key,
    state_key,
    structure_key,
    txlog_key,
)
from ..format.parquet import read_parquet_bytes
from ..format.state import GCFence, SnapshotInfo, State
from ..format.structure_decode import StructureRow, decode_structure
from ..progress import Progress, track
from ..storage import TEMP_PREFIX, ObjectInfo, Storage
from .history import utc_ms

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ..core import RepoHandle

# Prefix -> the GCSummary field counting deletions under it.
_KINDS = {
    CHUNKS_PREFIX: "chunks_deleted",
    MANIFESTS_PREFIX: "manifests_deleted",
    STRUCTURES_PREFIX: "structures_deleted",
    ATTRIBUTES_PREFIX: "attributes_deleted",
    TXLOGS_PREFIX: "transaction_logs_deleted",
    STATE_PREFIX: "state_files_deleted",
    STAGING_PREFIX: "staging_files_deleted",
}
_DELETE_BATCH = 1000  # S3 DeleteObjects' limit; also the step of the progress report


@dataclass(frozen=True, slots=True)
class GCSummary:
    """What garbage collection deleted (or, on a dry run, would delete)."""

    chunks_deleted: int = 0
    manifests_deleted: int = 0
    structures_deleted: int = 0
    attributes_deleted: int = 0
    transaction_logs_deleted: int = 0
    state_files_deleted: int = 0
    staging_files_deleted: int = 0
    temporary_files_deleted: int = 0
    bytes_deleted: int = 0

    @property
    def objects_deleted(self) -> int:
        return (
            self.chunks_deleted
            + self.manifests_deleted
            + self.structures_deleted
            + self.attributes_deleted
            + self.transaction_logs_deleted
            + self.state_files_deleted
            + self.staging_files_deleted
            + self.temporary_files_deleted
        )


@dataclass
class _Reachable:
    """Keys of the objects the listed snapshots need, and which snapshots were walked."""

    keys: set[str] = field(default_factory=set)
    snapshots: set[str] = field(default_factory=set)


def garbage_collect(
    handle: RepoHandle,
    delete_object_older_than: datetime,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    as_if: Callable[[State], State | None] | None = None,
) -> GCSummary:
    """Delete objects unreachable from every listed snapshot and older than the cut-off.

    Expire snapshots first (``expire_snapshots``) to make their files unreachable. A naive
    ``delete_object_older_than`` is taken as UTC. With ``dry_run`` nothing is deleted and the
    summary says what would be; ``as_if`` (dry runs only) is a change of the state that the real
    run would make first, such as an expiry (``history.expire_state``), so the summary says what
    GC would delete after it. ``progress`` hears the stages: reading snapshots, reading
    manifests, listing objects, deleting objects.

    >>> cutoff = datetime.now(UTC) - timedelta(days=1)                 # doctest: +SKIP
    >>> summary = garbage_collect(repo.handle, cutoff)                 # doctest: +SKIP
    >>> summary.bytes_deleted                                          # doctest: +SKIP

    Raises:
        InvalidInputError: the cut-off is not a datetime, or ``as_if`` without ``dry_run``.
        FormatError: a listed snapshot's structure file or manifest is missing or corrupt
            (nothing is deleted then: reachability would be incomplete).
    """
    cutoff_ms = utc_ms(delete_object_older_than, "delete_object_older_than")
    if as_if is not None and not dry_run:
        raise InvalidInputError("as_if is for dry runs: apply the change itself, then collect")
    storage = handle.storage
    current = read_latest_state(storage)
    if not dry_run:
        ensure_writable(current, storage.url)  # before the (long) mark; the fence checks again
    state = _planned(current, as_if)
    reachable = _Reachable()
    _mark(storage, handle.pool, state.snapshots.values(), reachable, progress)
    if dry_run:
        # Report what a real run would delete: its fence would become the newest state (and
        # the hint), putting the state file read now below it.
        keep_states_from = state.generation + 1
    else:
        # Only now, when reachability is known to be complete, does GC write anything.
        fence, cutoff_ms = _publish_fence(storage, cutoff_ms)
        keep_states_from = min(fence.generation, _hint_generation(storage, fence))

    listings = [*_KINDS, None]  # None: the storage's leftover temporary files
    garbage: list[ObjectInfo] = []
    kept_states: list[int] = []
    for prefix in track(progress, "listing objects", listings, len(listings)):
        for info in storage.list(prefix) if prefix else storage.list_temporary():
            if _is_garbage(
                info, reachable, cutoff_ms, keep_states_from, storage.mtime_resolution_ms
            ):
                garbage.append(info)
            elif (generation := _state_generation(info.key)) is not None:
                kept_states.append(generation)
    # Readers need the state files left to be the newest ones (see _delete): a state file kept
    # for its age keeps every newer one too, should the storage's clock have stepped back.
    oldest_kept = min(kept_states, default=keep_states_from)
    garbage = [i for i in garbage if _below(_state_generation(i.key), oldest_kept)]

    # Commits may have landed while we listed; they may reference objects their sessions wrote
    # before the cut-off. Keep whatever the snapshots listed now reach (see the docstring, 3.).
    latest = _planned(read_latest_state(storage), as_if)
    _mark(storage, handle.pool, latest.snapshots.values(), reachable, progress)
    garbage = [info for info in garbage if info.key not in reachable.keys]

    if not dry_run:
        _delete(storage, [info.key for info in garbage], progress)
    return _summarize(garbage)


def _planned(state: State, change: Callable[[State], State | None] | None) -> State:
    proposed = change(state) if change is not None else None
    return state if proposed is None else proposed


def _publish_fence(storage: Storage, cutoff_ms: int) -> tuple[State, int]:
    """Record the cut-off in the state; returns that state and the cut-off in effect.

    The cut-off in effect is never later than the moment the fence's state file was written
    (by the storage's clock), so nothing a session writes after seeing the fence qualifies.
    """

    def fenced(state: State) -> State:
        return state.next(gc_fence=GCFence(state.generation + 1, cutoff_ms))

    state = update_state(storage, fenced)
    key = state_key(state.generation)
    written = next((i.modified_ms for i in storage.list(key) if i.key == key), 0)
    return state, min(cutoff_ms, written)


def _delete(storage: Storage, keys: Sequence[str], progress: Progress | None) -> None:
    """Delete ``keys``: state files one at a time, oldest first, after everything else.

    A reader probing ``t/<g+1>``, ``t/<g+2>``… takes a miss for the end of the history only while
    the state file before it still exists (``core.refs.read_latest_state``). That holds only if
    no newer state file is ever gone while an older one is left: hence one at a time, in order.
    """
    generations = {k: g for k in keys if (g := _state_generation(k)) is not None}
    others = [k for k in keys if k not in generations]
    batches = [others[i : i + _DELETE_BATCH] for i in range(0, len(others), _DELETE_BATCH)]
    batches += [[key] for key in sorted(generations, key=generations.__getitem__)]
    for batch in track(progress, "deleting objects", batches, len(keys), steps=len):
        storage.delete(batch)


def _below(generation: int | None, oldest_kept: int) -> bool:
    return generation is None or generation < oldest_kept


def _state_generation(key: str) -> int | None:
    """The generation of state file ``key``; ``None`` for any other key."""
    name = key[len(STATE_PREFIX) :]
    return int(name) if key.startswith(STATE_PREFIX) and name.isdigit() else None


def _hint_generation(storage: Storage, latest: State) -> int:
    hinted = read_hint(storage)
    # Without a readable hint, readers list t/ and start from the newest.
    return latest.generation if hinted is None else hinted.generation


def _mark(
    storage: Storage,
    pool: Executor,
    snapshots: Iterable[SnapshotInfo],
    reachable: _Reachable,
    progress: Progress | None,
) -> None:
    """Add what ``snapshots`` reach to ``reachable``; snapshots walked before are skipped."""
    todo = [s for s in snapshots if s.id not in reachable.snapshots]
    manifests: set[str] = set()
    structures = pool.map(lambda s: _structure_rows(storage, s), todo)
    for info, rows in track(
        progress, "reading snapshots", zip(todo, structures, strict=True), len(todo)
    ):
        reachable.snapshots.add(info.id)
        reachable.keys.update((structure_key(info.structure_file), txlog_key(info.id)))
        for row in rows:
            if row.attrs_ref is not None:
                reachable.keys.add(attributes_key(row.attrs_ref.attrs_file))
            manifests.update(m.manifest_id for m in row.manifests)
    # A manifest is shared by many snapshots: read each once, and only its chunk_id column.
    new = sorted(m for m in manifests if manifest_key(m) not in reachable.keys)
    chunk_id_lists = pool.map(lambda m: _chunk_ids(storage, m), new)
    for chunk_ids in track(progress, "reading manifests", chunk_id_lists, len(new)):
        reachable.keys.update(chunk_key(c) for c in chunk_ids)
    reachable.keys.update(manifest_key(m) for m in new)


def _structure_rows(storage: Storage, info: SnapshotInfo) -> list[StructureRow]:
    key = structure_key(info.structure_file)
    return decode_structure(_get_needed(storage, key, info.id), key)


def _chunk_ids(storage: Storage, manifest_id: str) -> Iterator[str]:
    key = manifest_key(manifest_id)
    data = _get_needed(storage, key, None)
    try:
        column = read_parquet_bytes(data, columns=["chunk_id"]).column("chunk_id")
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise FormatError(
            f"garbage collection stopped, nothing deleted: manifest {key!r} is unreadable: {exc}"
        ) from exc
    return (c for c in column.unique().to_pylist() if c is not None)


def _get_needed(storage: Storage, key: str, snapshot_id: str | None) -> bytes:
    try:
        return storage.get(key)
    except NotFoundError:
        whose = f" of snapshot {snapshot_id}" if snapshot_id else ""
        raise FormatError(
            f"garbage collection stopped, nothing deleted: {key!r}{whose} is missing, so "
            "the repository is damaged and reachability cannot be computed"
        ) from None


def _is_garbage(
    info: ObjectInfo,
    reachable: _Reachable,
    cutoff_ms: int,
    keep_states_from: int,
    resolution_ms: int,
) -> bool:
    # A listed time t stands for [t, t + resolution): the object may be that much younger.
    latest_possible_ms = info.modified_ms + resolution_ms - 1
    if info.modified_ms <= 0 or latest_possible_ms >= cutoff_ms:
        return False  # fresh (or of unknown age): maybe a session's that has not committed yet
    name = info.key.rsplit("/", 1)[-1]
    if name.startswith(TEMP_PREFIX):
        return True
    if info.key.startswith(STATE_PREFIX):
        return name.isdigit() and int(name) < keep_states_from
    if info.key.startswith(STAGING_PREFIX):
        return True  # an abandoned write's area: a live write would be younger than the cut-off
    return info.key not in reachable.keys


def _summarize(garbage: Iterable[ObjectInfo]) -> GCSummary:
    counts = dict.fromkeys(_KINDS.values(), 0)
    temporary = size = 0
    for info in garbage:
        size += info.size
        if info.key.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            temporary += 1
        else:
            counts[_KINDS[info.key[: info.key.index("/") + 1]]] += 1
    return GCSummary(**counts, temporary_files_deleted=temporary, bytes_deleted=size)


__all__ = ["GCSummary", "garbage_collect"]

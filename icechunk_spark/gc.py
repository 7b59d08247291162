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
state file above it must stay. (A writer stalled between creating ``t/<g>`` and replacing the
hint could later put back an older hint; were the state files above it deleted meanwhile,
readers would miss them. That needs a stall longer than the age of the cut-off: one more reason
to choose a cut-off well in the past.) Leftover ``.tmp-`` files older than the cut-off go too,
when a storage lists them (local storage currently hides them).

Why a commit racing with GC stays readable:

1. The objects a commit reuses come from its parent, which is its branch's tip when the commit
   lands. Tips are never expired, and a snapshot dropped from the state never comes back, so a
   parent that existed before GC read the state was listed in that state, and everything it
   reaches is kept. A parent committed after GC read the state is itself such a commit
   (induction down to a snapshot listed when GC started).
2. The objects a commit writes itself (chunks, manifests, structure, attributes, transaction
   log) were written after its session started. If the cut-off is older than the start of every
   in-flight session, they are too fresh to delete. That is the contract (Icechunk's too):
   **choose a cut-off older than the oldest session still writing**, e.g. a day ago.
3. With a later cut-off (say "now"), GC still keeps a session's objects when the session commits
   while GC runs: after listing, GC reads the latest state again, right before deleting, and
   keeps everything reachable from snapshots that appeared since it started. A session that
   wrote objects before such a cut-off and commits after that second read is not protected:
   only a cut-off older than its start is.

Objects are compared by the storage's modification time (the storage's clock, not ours). S3
listings report whole seconds (``Storage.mtime_resolution_ms``), so such a time is taken as the
end of its second; local and memory times are exact to the millisecond.

Run one maintenance operation (expiry, GC) at a time; commits and reads may go on meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from .errors import FormatError, NotFoundError
from .format.parquet import read_parquet_bytes
from .format.state import SnapshotInfo, State, decode_state
from .format.structure import StructureRow, decode_structure
from .history import utc_ms
from .progress import Progress, track
from .refs import HINT_KEY, STATE_PREFIX, read_latest_state
from .snapshot import attributes_key, chunk_key, manifest_key, structure_key, txlog_key
from .storage import ObjectInfo, Storage

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from .repository import Repository

# Prefix -> the GCSummary field counting deletions under it.
_KINDS = {
    "c/": "chunks_deleted",
    "m/": "manifests_deleted",
    "s/": "structures_deleted",
    "a/": "attributes_deleted",
    "x/": "transaction_logs_deleted",
    STATE_PREFIX: "state_files_deleted",
}
_TEMP_PREFIX = ".tmp-"
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
            + self.temporary_files_deleted
        )


@dataclass
class _Reachable:
    """Keys of the objects the listed snapshots need, and which snapshots were walked."""

    keys: set[str] = field(default_factory=set)
    snapshots: set[str] = field(default_factory=set)


def garbage_collect(
    repo: Repository,
    delete_object_older_than: datetime,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GCSummary:
    """Delete objects unreachable from every listed snapshot and older than the cut-off.

    Expire snapshots first (``expire_snapshots``) to make their files unreachable. A naive
    ``delete_object_older_than`` is taken as UTC. With ``dry_run`` nothing is deleted and the
    summary says what would be. ``progress`` hears the stages: reading snapshots, reading
    manifests, listing objects, deleting objects.

    >>> summary = garbage_collect(repo, datetime.now(UTC) - timedelta(days=1))  # doctest: +SKIP
    >>> summary.bytes_deleted                                                  # doctest: +SKIP

    Raises:
        InvalidInputError: the cut-off is not a datetime.
        FormatError: a listed snapshot's structure file or manifest is missing or corrupt
            (nothing is deleted then: reachability would be incomplete).
    """
    cutoff_ms = utc_ms(delete_object_older_than, "delete_object_older_than")
    storage = repo.storage
    state = read_latest_state(storage)
    keep_states_from = min(state.generation, _hint_generation(storage, state))
    reachable = _Reachable()
    _mark(storage, repo.pool, state.snapshots.values(), reachable, progress)

    garbage = [
        info
        for prefix in track(progress, "listing objects", _KINDS, len(_KINDS))
        for info in storage.list(prefix)
        if _is_garbage(info, reachable, cutoff_ms, keep_states_from, storage.mtime_resolution_ms)
    ]

    # Commits may have landed while we listed; they may reference objects their sessions wrote
    # before the cut-off. Keep whatever the snapshots listed now reach (see the docstring, 3.).
    latest = read_latest_state(storage)
    _mark(storage, repo.pool, latest.snapshots.values(), reachable, progress)
    garbage = [info for info in garbage if info.key not in reachable.keys]

    if not dry_run:
        _delete(storage, [info.key for info in garbage], progress)
    return _summarize(garbage)


def _delete(storage: Storage, keys: Sequence[str], progress: Progress | None) -> None:
    batches = (keys[i : i + _DELETE_BATCH] for i in range(0, len(keys), _DELETE_BATCH))
    for batch in track(progress, "deleting objects", batches, len(keys), steps=len):
        storage.delete(batch)


def _hint_generation(storage: Storage, latest: State) -> int:
    try:
        return decode_state(storage.get(HINT_KEY), HINT_KEY).generation
    except NotFoundError:
        return latest.generation  # readers list t/ and start from the newest


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
    if name.startswith(_TEMP_PREFIX):
        return True
    if info.key.startswith(STATE_PREFIX):
        return name.isdigit() and int(name) < keep_states_from
    return info.key not in reachable.keys


def _summarize(garbage: Iterable[ObjectInfo]) -> GCSummary:
    counts = dict.fromkeys(_KINDS.values(), 0)
    temporary = size = 0
    for info in garbage:
        size += info.size
        if info.key.rsplit("/", 1)[-1].startswith(_TEMP_PREFIX):
            temporary += 1
        else:
            counts[_KINDS[info.key[: info.key.index("/") + 1]]] += 1
    return GCSummary(**counts, temporary_files_deleted=temporary, bytes_deleted=size)


__all__ = ["GCSummary", "garbage_collect"]

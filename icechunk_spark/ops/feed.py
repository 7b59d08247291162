"""The change feed: what each snapshot of a branch's history changed, as rows.

**History and positions.** A branch's history is its first-parent ancestry, oldest first; a
snapshot's *seq* is its index there (the oldest listed snapshot has seq 0). A ``Position``
names the last snapshot already read, or none (``BEFORE_HISTORY``: nothing read yet). The
changes between a position and an end snapshot are those of the snapshots in
``(position, end]``, git's ``A..B``: the position itself is excluded, the end included. Both
the Spark stream (offsets are positions) and the ``changes`` table (``from``/``to``) use
``steps_after``, so they list the same snapshots.

**Rows of one snapshot** come from its transaction log (docs/format.md), and, for chunks, the
refs of the snapshot and of its parent:

* node entries ``new_group``, ``new_array``, ``update_metadata``, ``delete_node``: one row
  each, ``change`` the entry's kind, ``coord`` null. A deleted node's chunks get no rows of
  their own: its ``delete_node`` row says they are gone.
* chunk coords: where the log says to look (the coords a session lists; for
  ``write_chunk_range``, a staged Spark write, a box of coords; for ``replace_chunks``,
  attached manifests, the whole array), the refs are compared with the parent snapshot's.
  Refs that are new or point at other bytes (``history.same_refs``) are ``set``; coords the
  parent had a ref for and the snapshot has not are ``delete``. Comparing listed coords too
  keeps both paths alike: a session's rewrite of an inline chunk with the same bytes is no
  change, as a Spark one is. The comparing is ``feed_refs``.

**Expired history** is refused, not skipped (``refuse_expired_gaps``): a kept snapshot whose
parent link expiry re-linked no longer has a log of everything since its listed parent.

Pure of Spark: the data source in ``spark/changes.py`` plans ``Step``s on the driver and calls
``snapshot_changes`` on executors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import ManifestCache, SnapshotView, raise_if_collected, walk
from ..errors import (
    HistoryExpiredError,
    HistoryRewrittenError,
    InvalidInputError,
    NotFoundError,
)
from ..format.coords import decode_coords
from ..format.keys import txlog_key
from ..format.manifest import is_tombstone
from ..format.merge import merge_refs
from ..format.state import SnapshotInfo, State
from ..format.structure import Node
from ..format.txlog import ChangeKind, TransactionLog, decode_txlog
from ..storage import Storage
from .feed_refs import ParentView, listed_changes, range_layer

CHANGES = pa.schema(
    [
        ("snapshot", pa.string()),
        ("seq", pa.int64()),
        ("time", pa.timestamp("us", tz="UTC")),
        ("change", pa.string()),
        ("path", pa.string()),
        ("coord", pa.list_(pa.field("element", pa.int64()))),
        ("kind", pa.string()),
        ("location", pa.string()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
    ]
)
SET = "set"
DELETE = "delete"
# Node entries that become rows of their own; the other two kinds become chunk rows.
NODE_ROW_KINDS = frozenset(
    {
        ChangeKind.NEW_GROUP,
        ChangeKind.NEW_ARRAY,
        ChangeKind.UPDATE_METADATA,
        ChangeKind.DELETE_NODE,
        ChangeKind.MOVE_NODE,  # ``location``: the path it moved from
    }
)
_RANGE_KINDS = frozenset({ChangeKind.WRITE_CHUNK_RANGE, ChangeKind.REPLACE_CHUNKS})


@dataclass(frozen=True, slots=True)
class Position:
    """Where a feed has read up to: the last snapshot read (``None``: none yet) and its seq."""

    snapshot_id: str | None
    seq: int

    def to_offset(self) -> dict[str, Any]:
        """As a Spark streaming offset (JSON-able)."""
        return {"snapshot": self.snapshot_id, "seq": self.seq}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Position:
        """Back from ``to_offset``.

        Raises:
            InvalidInputError: not an offset of this feed (a checkpoint of another source).
        """
        snapshot, seq = offset.get("snapshot"), offset.get("seq")
        if not (snapshot is None or isinstance(snapshot, str)) or not isinstance(seq, int):
            raise InvalidInputError(
                f"offset {dict(offset)!r} is not an icechunk change feed offset "
                '({"snapshot": id, "seq": n}); was the checkpoint written by another source?'
            )
        return cls(snapshot, seq)


BEFORE_HISTORY = Position(None, -1)


@dataclass(frozen=True, slots=True)
class Step:
    """One snapshot whose changes the feed reads, with the files needed to read them."""

    snapshot_id: str
    seq: int
    timestamp_ms: int
    structure_file: str
    parent_structure_file: str | None  # None: the oldest listed snapshot
    parent_id: str | None = None  # the listed parent, whose files the rows are read against


def lineage(state: State, tip: str) -> list[SnapshotInfo]:
    """The first-parent ancestry of ``tip``, oldest first (index = seq).

    Raises:
        HistoryRewrittenError: ``tip`` is not listed (expired, or never was).
    """
    if tip not in state.snapshots:
        raise HistoryRewrittenError(
            f"snapshot {tip!r} is no longer in the repository (expired): its changes cannot be "
            "read. Start again from a snapshot that is still listed"
        )
    return list(reversed(list(walk(state, tip))))


def position_of(line: list[SnapshotInfo], snapshot_id: str, where: str) -> Position:
    """The position of ``snapshot_id`` in ``line``.

    Raises:
        HistoryRewrittenError: it is not there (``where`` names the history, for the message).
    """
    for seq, info in enumerate(line):
        if info.id == snapshot_id:
            return Position(snapshot_id, seq)
    raise HistoryRewrittenError(
        f"snapshot {snapshot_id!r} is no longer in the history of {where}: it was reset to "
        "other history, or the snapshot expired. Changes after it can be neither listed "
        "without gaps nor skipped without loss; restart the stream with a new checkpoint and "
        "option 'starting', or read the changes table between snapshots still in the history"
    )


def steps_after(state: State, start: Position, end_id: str, where: str = "") -> list[Step]:
    """The snapshots in ``(start, end]`` along ``end``'s first parents, oldest first.

    Raises:
        HistoryRewrittenError: ``end`` is not listed, or ``start`` is not one of its ancestors.
        HistoryExpiredError: snapshots in ``(start, end]`` expired (``refuse_expired_gaps``).
    """
    line = lineage(state, end_id)
    first = 0
    if start.snapshot_id is not None:
        first = position_of(line, start.snapshot_id, where or f"snapshot {end_id}").seq + 1
    refuse_expired_gaps(line, first)
    return [
        Step(
            snapshot_id=line[seq].id,
            seq=seq,
            timestamp_ms=line[seq].timestamp_ms,
            structure_file=line[seq].structure_file,
            parent_structure_file=line[seq - 1].structure_file if seq > 0 else None,
            parent_id=line[seq - 1].id if seq > 0 else None,
        )
        for seq in range(first, len(line))
    ]


def refuse_expired_gaps(line: list[SnapshotInfo], first: int) -> None:
    """Refuse to read ``line[first:]`` across a parent link that expiry re-linked.

    ``expire_snapshots`` links a kept snapshot to its nearest kept ancestor and marks it
    ``parent_relinked``: the snapshots skipped there are gone with their transaction logs, so
    the snapshot's own log no longer says everything that changed since its listed parent.
    The oldest listed snapshot's link is exempt: history starts there (``earliest``).

    Raises:
        HistoryExpiredError: naming the listed snapshots on either side of the first gap,
            and the snapshot to start again after (the last gap's).
    """
    gaps = [seq for seq in range(max(first, 1), len(line)) if line[seq].parent_relinked]
    if not gaps:
        return
    before, after, last = line[gaps[0] - 1], line[gaps[0]], line[gaps[-1]]
    more = f" (and {len(gaps) - 1} more such gaps up to snapshot {last.id})" if gaps[1:] else ""
    raise HistoryExpiredError(
        f"the snapshots between snapshot {before.id} ({_when(before)}) and snapshot "
        f"{after.id} ({_when(after)}) expired{more}: their changes are gone, so the changes "
        f"up to snapshot {line[-1].id} cannot be listed without a gap. Read the state at "
        f"snapshot {last.id} afresh (e.g. the chunks table with option snapshot), then follow "
        f"the changes after it (a new checkpoint with option starting={last.id}, or from)"
    )


def _when(info: SnapshotInfo) -> str:
    return datetime.fromtimestamp(info.timestamp_ms / 1000, UTC).isoformat(timespec="seconds")


# -- the rows of one snapshot -------------------------------------------------------------


def snapshot_changes(
    storage: Storage,
    manifests: ManifestCache,
    step: Step,
    shard: int = 0,
    shards: int = 1,
) -> pa.Table:
    """The change rows (schema ``CHANGES``) of one snapshot: node rows in log order, then chunk
    rows by path and coord. Only nodes with ``node_id % shards == shard``, so several tasks
    can share one big snapshot.

    Raises:
        NotFoundError: the snapshot's transaction log is missing (it is not the first one).
    """
    tables = list(iter_snapshot_changes(storage, manifests, step, shard, shards))
    return pa.concat_tables(tables) if tables else CHANGES.empty_table()


def iter_snapshot_changes(
    storage: Storage,
    manifests: ManifestCache,
    step: Step,
    shard: int = 0,
    shards: int = 1,
) -> Iterator[pa.Table]:
    """``snapshot_changes`` one table at a time (node rows, then one array's chunk rows), so
    a reader holds the refs of one array at a time.

    Raises:
        SnapshotCollectedError: the step's snapshot or its parent left the history (expired,
            or replaced by an amend or squash), and GC deleted a file the rows are read
            from, since the step was planned.
    """
    try:
        yield from _changes_of(storage, manifests, step, shard, shards)
    except NotFoundError as missing:
        during = "while the change feed read its changes"
        advice = (
            "follow the feed again (from its checkpoint, or from a snapshot still in the "
            "history): it then names the expired gap (HistoryExpiredError)"
        )
        read = [i for i in (step.snapshot_id, step.parent_id) if i is not None]
        raise_if_collected(storage, read, missing, during, advice)
        raise


def _changes_of(
    storage: Storage, manifests: ManifestCache, step: Step, shard: int, shards: int
) -> Iterator[pa.Table]:
    log = _read_log(storage, step)
    if log is None:
        return
    new = SnapshotView.load(storage, step.snapshot_id, step.structure_file, manifests)
    parent = ParentView(storage, step.parent_structure_file, manifests)

    def mine(node_id: int) -> bool:
        return node_id % shards == shard

    yield _node_rows(step, log, mine)
    arrays = {n.id: n for n in new.nodes.values() if n.type == "array"}
    ranges = {c.node_id: c.extent for c in log.nodes if c.kind in _RANGE_KINDS and mine(c.node_id)}
    listed = {i: c for i, c in log.chunk_coords_by_node().items() if mine(i)}
    # A node deleted by this very snapshot has no refs to report (its delete_node row says it).
    changed = sorted((arrays[i] for i in set(ranges) | set(listed) if i in arrays), key=_path)
    for node in changed:
        assert node.meta is not None
        layers = []
        if node.id in listed:
            layers.append(listed_changes(new, parent, node, listed[node.id]))
        if node.id in ranges:
            layers.append(range_layer(new, parent, node, ranges[node.id]))
        refs = merge_refs(layers, node.meta.ndim, drop_tombstones=False)
        yield _chunk_rows(step, node.path, node.meta.ndim, refs)


def _path(node: Node) -> str:
    return node.path


def _read_log(storage: Storage, step: Step) -> TransactionLog | None:
    key = txlog_key(step.snapshot_id)
    try:
        data = storage.get(key)
    except NotFoundError:
        # The repository's initial (empty) snapshot is the one snapshot without a log; any
        # other missing log is damage, and skipping it would hide changes.
        if step.parent_structure_file is None:
            return None
        raise
    return decode_txlog(data, key)


def _constant(value: Any, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array([value] * n, type_) if n else pa.array([], type_)


def _node_rows(step: Step, log: TransactionLog, mine: Callable[[int], bool]) -> pa.Table:
    entries = [c for c in log.nodes if c.kind in NODE_ROW_KINDS and mine(c.node_id)]
    n = len(entries)
    columns = {
        "change": pa.array([str(c.kind) for c in entries], pa.string()),
        "path": pa.array([c.path for c in entries], pa.string()),
        "location": pa.array([c.from_path for c in entries], pa.string()),
    }
    return _table(step, n, columns)


def _chunk_rows(step: Step, path: str, ndim: int, refs: pa.Table) -> pa.Table:
    """Rows for one array's changed refs (tombstones: deletes), in the refs' coord order."""
    n = refs.num_rows
    deleted = is_tombstone(refs)
    inline = pc.is_valid(refs.column("inline_data"))
    coords = decode_coords(refs.column("coord"), ndim)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * ndim)
    kind = pc.if_else(
        inline,
        "inline",
        pc.if_else(pc.is_valid(refs.column("chunk_id")), "native", "virtual"),
    )
    columns = {
        "change": pc.if_else(deleted, DELETE, SET),
        "path": _constant(path, n, pa.string()),
        "coord": pa.ListArray.from_arrays(
            offsets, pa.array(coords.reshape(-1), pa.int64()), type=CHANGES.field("coord").type
        ),
        "kind": pc.if_else(deleted, pa.scalar(None, pa.string()), kind),
        "location": pc.coalesce(refs.column("chunk_id"), refs.column("virtual_path")),
        "offset": pc.if_else(
            pc.or_(inline, deleted),
            pa.scalar(None, pa.int64()),
            refs.column("offset").cast(pa.int64()),
        ),
        "length": pc.if_else(
            inline,
            pc.binary_length(refs.column("inline_data")).cast(pa.int64()),
            refs.column("length").cast(pa.int64()),
        ),
    }
    return _table(step, n, columns)


def _table(step: Step, n: int, columns: Mapping[str, Any]) -> pa.Table:
    """A ``CHANGES`` table of ``n`` rows of ``step``: given columns, the rest null."""
    fixed = {
        "snapshot": _constant(step.snapshot_id, n, pa.string()),
        "seq": _constant(step.seq, n, pa.int64()),
        "time": _constant(step.timestamp_ms * 1000, n, pa.int64()).cast(CHANGES.field("time").type),
    }
    arrays = []
    for field in CHANGES:
        value = fixed.get(field.name, columns.get(field.name))
        arrays.append(pa.nulls(n, field.type) if value is None else value.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=CHANGES)


__all__ = [
    "BEFORE_HISTORY",
    "CHANGES",
    "DELETE",
    "NODE_ROW_KINDS",
    "SET",
    "Position",
    "Step",
    "iter_snapshot_changes",
    "lineage",
    "position_of",
    "refuse_expired_gaps",
    "snapshot_changes",
    "steps_after",
]

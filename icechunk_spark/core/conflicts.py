"""Conflict detection between a session's changes and snapshots committed concurrently.

Changes that touch different nodes or different chunks rebase silently. Overlapping chunk writes
are conflicts a policy may resolve (``ours`` keeps our chunks, ``theirs`` drops them); overlapping
node changes never are:

* both created a node at one path; both rewrote one node's metadata;
* a metadata update or chunk write to a node deleted concurrently;
* chunk writes to an array whose refs a concurrent commit of an older version replaced whole
  (``replace_chunks`` in its transaction log: it attached prewritten manifests);
* a node created below a group deleted concurrently, or a subtree deleted while a node was
  created below it (either would leave an orphan);
* chunk writes that a concurrent resize puts outside the chunk grid, or whose meaning a
  concurrent change of chunk shape changed — in either direction (ours or theirs resized);
* a move (``move_node``) of a node the other side updated, deleted or moved, or to a path the
  other side filled, or of a group the other side created a node below. Chunk writes to a node
  moved concurrently are not a conflict: chunks are keyed by node id, so they follow it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CHUNK_CONFLICT, RANGE_CONFLICT, Conflict, InvalidInputError
from ..format.coords import decode_coords, encode_coord
from ..format.structure import Node
from ..format.txlog import ChangeKind, Extent, TransactionLog
from .changes import ChangeSet


class ConflictPolicy(StrEnum):
    """What a commit does with chunks that it and a concurrent commit both wrote."""

    FAIL = "fail"  # raise ConflictError (the default)
    OURS = "ours"  # keep our chunks
    THEIRS = "theirs"  # keep theirs, drop ours

    @classmethod
    def parse(cls, value: ConflictPolicy | str) -> ConflictPolicy:
        """``value`` as a policy; strings are accepted.

        Raises:
            InvalidInputError: ``value`` names no policy.
        """
        try:
            return cls(value)
        except ValueError:
            raise InvalidInputError(
                f"on_conflict must be 'fail', 'ours' or 'theirs', not {value!r}"
            ) from None


# A policy, or its name as a string.
OnConflict = ConflictPolicy | Literal["fail", "ours", "theirs"]

_CREATED = frozenset({ChangeKind.NEW_GROUP, ChangeKind.NEW_ARRAY})


@dataclass(frozen=True, slots=True)
class Theirs:
    """What the concurrent snapshots changed, merged over all their transaction logs."""

    node_kinds: Mapping[str, frozenset[ChangeKind]]
    node_ids_deleted: frozenset[int]
    node_ids_updated: frozenset[int]
    # All chunks replaced by attached manifests: only commits of older versions log these.
    node_ids_replaced: frozenset[int]
    chunks: Mapping[int, pa.Array]
    ranges: Mapping[int, tuple[Extent, ...]]  # chunks written somewhere in these (staged refs)
    node_ids_moved: frozenset[int] = frozenset()
    moved_from: frozenset[str] = frozenset()  # paths they moved a node away from
    moved_to: frozenset[str] = frozenset()  # paths they moved a node to

    @classmethod
    def from_logs(cls, logs: Iterable[TransactionLog]) -> Theirs:
        kinds: dict[str, set[ChangeKind]] = {}
        deleted: set[int] = set()
        updated: set[int] = set()
        replaced: set[int] = set()
        ranges: dict[int, list[Extent]] = {}
        chunks: dict[int, list[pa.Array]] = {}
        moved: set[int] = set()
        moved_from: set[str] = set()
        moved_to: set[str] = set()
        for log in logs:
            for change in log.nodes:
                kinds.setdefault(change.path, set()).add(change.kind)
                if change.kind is ChangeKind.MOVE_NODE:
                    moved.add(change.node_id)
                    moved_to.add(change.path)
                    moved_from.add(change.from_path or change.path)
                elif change.kind is ChangeKind.DELETE_NODE:
                    deleted.add(change.node_id)
                elif change.kind is ChangeKind.UPDATE_METADATA:
                    updated.add(change.node_id)
                elif change.kind is ChangeKind.REPLACE_CHUNKS:
                    replaced.add(change.node_id)
                elif change.kind is ChangeKind.WRITE_CHUNK_RANGE and change.extent is not None:
                    ranges.setdefault(change.node_id, []).append(change.extent)
            for node_id, coords in log.chunk_coords_by_node().items():
                chunks.setdefault(node_id, []).append(coords)
        return cls(
            {p: frozenset(k) for p, k in kinds.items()},
            frozenset(deleted),
            frozenset(updated),
            frozenset(replaced),
            {i: pa.concat_arrays(c) for i, c in chunks.items()},
            {i: tuple(r) for i, r in ranges.items()},
            frozenset(moved),
            frozenset(moved_from),
            frozenset(moved_to),
        )

    def chunks_changed(self, node_id: int) -> bool:
        """Whether they wrote chunks of the node, listed or in a range."""
        return node_id in self.chunks or node_id in self.ranges


@dataclass(frozen=True, slots=True)
class Found:
    conflicts: tuple[Conflict, ...]
    chunk_overlaps: Mapping[int, pa.Array]  # node id -> coords both sides wrote


def find_conflicts(
    ours: ChangeSet, theirs: Theirs, our_nodes: Mapping[int, Node], tip_nodes: Mapping[int, Node]
) -> Found:
    """Every overlap of ``ours`` with ``theirs``.

    ``our_nodes`` are the session's nodes (base plus changes), ``tip_nodes`` the branch tip's,
    both by node id.
    """
    paths_by_id = {i: n.path for i, n in our_nodes.items()}
    ndims = {i: n.meta.ndim for i, n in our_nodes.items() if n.meta is not None}
    conflicts = [
        *_node_conflicts(ours, theirs),
        *_tree_conflicts(ours, theirs),
        *_resize_conflicts(ours, theirs, our_nodes, tip_nodes),
        *_staged_node_conflicts(ours, theirs, paths_by_id, tip_nodes),
        *_move_conflicts(ours, theirs),
    ]
    overlaps: dict[int, pa.Array] = {}
    for node_id, coords in _staged_chunk_overlaps(ours, theirs, ndims).items():
        overlaps[node_id] = coords
        path = paths_by_id.get(node_id, f"<node {node_id}>")
        conflicts.append(Conflict(path, CHUNK_CONFLICT, _as_tuples(coords, ndims[node_id])))
    for node_id, changes in ours.chunks.items():
        if not len(changes):
            continue
        path = paths_by_id.get(node_id, f"<node {node_id}>")
        if node_id in theirs.node_ids_deleted:
            conflicts.append(Conflict(path, "chunks written to a node deleted concurrently"))
            continue
        if node_id in theirs.node_ids_replaced:
            conflicts.append(Conflict(path, "chunks written to an array replaced concurrently"))
            continue
        their_coords = theirs.chunks.get(node_id)
        their_ranges = theirs.ranges.get(node_id, ())
        if their_coords is None and not their_ranges:
            continue
        mine = changes.changed_coords()
        if their_ranges and _inside_any(mine, ndims[node_id], their_ranges).any():
            # Their coords in a range are not listed: any of ours inside it may overlap.
            conflicts.append(Conflict(path, RANGE_CONFLICT))
        if their_coords is None:
            continue
        both = mine.filter(pc.is_in(mine, their_coords))
        if len(both):
            overlaps[node_id] = both
            conflicts.append(Conflict(path, CHUNK_CONFLICT, _as_tuples(both, ndims[node_id])))
    return Found(tuple(conflicts), overlaps)


def _as_tuples(coords: pa.Array, ndim: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(i) for i in c) for c in decode_coords(coords, ndim))


def _inside_any(coords: pa.Array, ndim: int, extents: Sequence[Extent]) -> np.ndarray:
    """Per coord, whether it lies in one of the boxes ``extents``."""
    decoded = decode_coords(coords, ndim)
    inside = np.zeros(len(decoded), dtype=bool)
    for extent in extents:
        lo = np.array([d[0] for d in extent], dtype=np.int64)
        hi = np.array([d[1] for d in extent], dtype=np.int64)
        inside |= np.all((decoded >= lo) & (decoded < hi), axis=1)
    return inside


def _overlap(a: Extent, b: Extent) -> bool:
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=True))


def _staged_node_conflicts(
    ours: ChangeSet, theirs: Theirs, paths_by_id: Mapping[int, str], tip: Mapping[int, Node]
) -> list[Conflict]:
    """Staged refs (coords known only as a range) against what they did to the array."""
    conflicts = []
    for node_id in ours.staged:
        staged = ours.staged_refs(node_id)
        assert staged is not None
        path = paths_by_id.get(node_id, f"<node {node_id}>")
        extent = staged.extent()
        if node_id in theirs.node_ids_deleted:
            conflicts.append(Conflict(path, "refs staged for an array deleted concurrently"))
        elif node_id in theirs.node_ids_replaced:
            conflicts.append(Conflict(path, "refs staged for an array replaced concurrently"))
        elif any(_overlap(extent, r) for r in theirs.ranges.get(node_id, ())):
            conflicts.append(Conflict(path, RANGE_CONFLICT))
        node = tip.get(node_id)
        if node_id in theirs.node_ids_updated and node is not None and node.meta is not None:
            grid = node.meta.grid_shape
            if any(hi > g for (_, hi), g in zip(extent, grid, strict=True)):
                conflicts.append(
                    Conflict(path, "refs staged outside the grid of an array resized concurrently")
                )
    return conflicts


def _staged_chunk_overlaps(
    ours: ChangeSet, theirs: Theirs, ndims: Mapping[int, int]
) -> dict[int, pa.Array]:
    """Their listed chunk writes inside the range of our staged refs: maybe the same chunks.

    Staged coords are not read to check (they may be 100 M): inside the range counts as
    overlapping, so ``ours`` keeps our staged refs and ``theirs`` drops ours at those coords.
    """
    overlaps = {}
    for node_id in ours.staged:
        their_coords = theirs.chunks.get(node_id)
        staged = ours.staged_refs(node_id)
        if their_coords is None or staged is None or node_id not in ndims:
            continue
        inside = _inside_any(their_coords, ndims[node_id], [staged.extent()])
        if inside.any():
            overlaps[node_id] = their_coords.filter(pa.array(inside))
    return overlaps


def _node_conflicts(ours: ChangeSet, theirs: Theirs) -> list[Conflict]:
    conflicts = []
    for path in ours.created:
        kinds = theirs.node_kinds.get(path, frozenset())
        if kinds & _CREATED:
            conflicts.append(Conflict(path, "node created concurrently at the same path"))
    for path in ours.updated:
        kinds = theirs.node_kinds.get(path, frozenset())
        if ChangeKind.UPDATE_METADATA in kinds:
            conflicts.append(Conflict(path, "metadata updated concurrently"))
        if ChangeKind.DELETE_NODE in kinds:
            conflicts.append(Conflict(path, "metadata update of a node deleted concurrently"))
    for path, node in ours.deleted.items():
        if node.id in theirs.node_ids_updated or theirs.chunks_changed(node.id):
            conflicts.append(Conflict(path, "deleted a node changed concurrently"))
    return conflicts


def _move_conflicts(ours: ChangeSet, theirs: Theirs) -> list[Conflict]:
    """Moves on either side against what the other side did to the node or its paths."""
    conflicts = []
    for path, node in ours.updated.items():
        if node.id in theirs.node_ids_moved:
            conflicts.append(Conflict(path, "changed or moved a node moved concurrently"))
        elif path in ours.moved and (
            node.id in theirs.node_ids_updated or node.id in theirs.node_ids_deleted
        ):
            conflicts.append(Conflict(path, "moved a node changed concurrently"))
        if path in ours.moved and (
            path in theirs.moved_to or theirs.node_kinds.get(path, frozenset()) & _CREATED
        ):
            conflicts.append(Conflict(path, "moved to a path filled concurrently"))
    for path in ours.created:
        if path in theirs.moved_to:
            conflicts.append(Conflict(path, "node created where one was moved concurrently"))
        if any(a in theirs.moved_from for a in _ancestors(path)):
            conflicts.append(Conflict(path, "created below a group moved concurrently"))
    created_by_them = {p for p, k in theirs.node_kinds.items() if k & _CREATED} | theirs.moved_to
    for old in ours.moved.values():
        if any(p.startswith(old + "/") for p in created_by_them):
            conflicts.append(Conflict(old, "moved a group a node was created below concurrently"))
    for path, node in ours.deleted.items():
        if node.id in theirs.node_ids_moved:
            conflicts.append(Conflict(path, "deleted a node moved concurrently"))
    deleted_by_them = {p for p, k in theirs.node_kinds.items() if ChangeKind.DELETE_NODE in k}
    for new in ours.moved:
        if any(a in deleted_by_them for a in _ancestors(new)):
            conflicts.append(Conflict(new, "moved into a group deleted concurrently"))
    return conflicts


def _tree_conflicts(ours: ChangeSet, theirs: Theirs) -> list[Conflict]:
    """Changes that, rebased, would leave a node without its parent group."""
    deleted_by_them = {p for p, k in theirs.node_kinds.items() if ChangeKind.DELETE_NODE in k}
    created_by_them = {p for p, k in theirs.node_kinds.items() if k & _CREATED} | theirs.moved_to
    conflicts = []
    for path in ours.created:
        if any(a in deleted_by_them for a in _ancestors(path)):
            conflicts.append(Conflict(path, "created while its parent group deleted concurrently"))
    for path in ours.deleted:
        below = "/" if path == "/" else path + "/"
        if any(p == path or p.startswith(below) for p in created_by_them):
            conflicts.append(Conflict(path, "deleted while a node was created concurrently below"))
    return conflicts


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))] if path != "/" else []


def _resize_conflicts(
    ours: ChangeSet, theirs: Theirs, mine: Mapping[int, Node], tip: Mapping[int, Node]
) -> list[Conflict]:
    """Chunk writes on one side that the other side's new metadata puts off the grid."""
    conflicts = []
    for node_id, changes in ours.chunks.items():
        node, own = tip.get(node_id), mine.get(node_id)
        if not len(changes) or node_id not in theirs.node_ids_updated or node is None:
            continue
        written_under = own.meta.chunk_shape if own is not None and own.meta else None
        problem = _off_grid(node, changes.changed_coords(), written_under)
        if problem:
            conflicts.append(Conflict(node.path, f"chunks written {problem}"))
    for path, node in ours.updated.items():
        their_coords = theirs.chunks.get(node.id)
        old = tip.get(node.id)
        if old is None or old.meta is None:
            continue
        for extent in theirs.ranges.get(node.id, ()):
            corner = pa.array([encode_coord([hi - 1 for _, hi in extent])], pa.binary())
            problem = _off_grid(node, corner, old.meta.chunk_shape)
            if problem:
                conflicts.append(Conflict(path, f"metadata changed: a bulk write {problem}"))
        if their_coords is None:
            continue
        problem = _off_grid(node, their_coords, old.meta.chunk_shape)
        if problem:
            conflicts.append(Conflict(path, f"metadata changed: concurrent chunk writes {problem}"))
    return conflicts


def _off_grid(node: Node, coords: pa.Array, chunk_shape: tuple[int, ...] | None) -> str | None:
    """Why ``coords`` (written under ``chunk_shape``) do not fit ``node``'s grid, or None."""
    meta = node.meta
    if meta is None:
        return None
    if chunk_shape is not None and tuple(chunk_shape) != meta.chunk_shape:
        return "to an array whose chunk shape changed concurrently"
    if meta.ndim == 0 or not len(coords):
        return None
    grid = np.asarray(meta.grid_shape, dtype=np.int64)
    if np.any(decode_coords(coords, meta.ndim) >= grid):
        return "outside the chunk grid of an array resized concurrently"
    return None


def resolve(found: Found, ours: ChangeSet, policy: ConflictPolicy) -> Sequence[Conflict]:
    """Apply ``policy`` to chunk conflicts; returns the conflicts left unresolved."""
    if policy is ConflictPolicy.FAIL or not found.conflicts:
        return found.conflicts
    resolvable = (
        {CHUNK_CONFLICT, RANGE_CONFLICT} if policy is ConflictPolicy.OURS else {CHUNK_CONFLICT}
    )
    left = [c for c in found.conflicts if c.kind not in resolvable]
    if left:
        return left
    if policy is ConflictPolicy.THEIRS:
        for node_id, coords in found.chunk_overlaps.items():
            if node_id in ours.staged:
                ours.staged_drops.setdefault(node_id, []).append(coords)
            else:
                ours.chunks[node_id].drop_coords(coords)
    return ()

"""Conflict detection between a session's changes and snapshots committed concurrently.

Changes that touch different nodes or different chunks rebase silently. Overlapping chunk writes
are conflicts a policy may resolve (``ours`` keeps our chunks, ``theirs`` drops them); overlapping
node changes (both created a path, both rewrote metadata, a write to a deleted node) never are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from .changes import ChangeSet
from .errors import Conflict
from .format.coords import decode_coords
from .format.txlog import TransactionLog

OnConflict = Literal["fail", "ours", "theirs"]


@dataclass(frozen=True, slots=True)
class Theirs:
    """What the concurrent snapshots changed, merged over all their transaction logs."""

    node_kinds: Mapping[str, frozenset[str]]
    node_ids_deleted: frozenset[int]
    node_ids_updated: frozenset[int]
    node_ids_replaced: frozenset[int]  # all chunks replaced by attached manifests
    chunks: Mapping[int, pa.Array]

    @classmethod
    def from_logs(cls, logs: Iterable[TransactionLog]) -> Theirs:
        kinds: dict[str, set[str]] = {}
        deleted: set[int] = set()
        updated: set[int] = set()
        replaced: set[int] = set()
        chunks: dict[int, list[pa.Array]] = {}
        for log in logs:
            for change in log.nodes:
                kinds.setdefault(change.path, set()).add(change.kind)
                if change.kind == "delete_node":
                    deleted.add(change.node_id)
                elif change.kind == "update_metadata":
                    updated.add(change.node_id)
                elif change.kind == "replace_chunks":
                    replaced.add(change.node_id)
            for node_id, coords in log.chunk_coords_by_node().items():
                chunks.setdefault(node_id, []).append(coords)
        return cls(
            {p: frozenset(k) for p, k in kinds.items()},
            frozenset(deleted),
            frozenset(updated),
            frozenset(replaced),
            {i: pa.concat_arrays(c) for i, c in chunks.items()},
        )


@dataclass(frozen=True, slots=True)
class Found:
    conflicts: tuple[Conflict, ...]
    chunk_overlaps: Mapping[int, pa.Array]  # node id -> coords both sides wrote

    @property
    def only_chunks(self) -> bool:
        return all(c.kind == "chunk written concurrently" for c in self.conflicts)


def find_conflicts(
    ours: ChangeSet, theirs: Theirs, paths_by_id: Mapping[int, str], ndims: Mapping[int, int]
) -> Found:
    conflicts: list[Conflict] = []
    for path in ours.created:
        if "new_group" in theirs.node_kinds.get(path, ()) or "new_array" in theirs.node_kinds.get(
            path, ()
        ):
            conflicts.append(Conflict(path, "node created concurrently at the same path"))
    for path in ours.updated:
        kinds = theirs.node_kinds.get(path, frozenset())
        if "update_metadata" in kinds:
            conflicts.append(Conflict(path, "metadata updated concurrently"))
        if "delete_node" in kinds:
            conflicts.append(Conflict(path, "metadata update of a node deleted concurrently"))
    for path, node in ours.deleted.items():
        if node.id in theirs.node_ids_updated or node.id in theirs.chunks:
            conflicts.append(Conflict(path, "deleted a node changed concurrently"))
    for node_id in ours.attached:
        if node_id in theirs.chunks or node_id in theirs.node_ids_replaced:
            path = paths_by_id.get(node_id, f"<node {node_id}>")
            conflicts.append(Conflict(path, "all chunks replaced while changed concurrently"))
    overlaps: dict[int, pa.Array] = {}
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
        if their_coords is None:
            continue
        mine = changes.changed_coords()
        both = mine.filter(pc.is_in(mine, their_coords))
        if len(both):
            overlaps[node_id] = both
            coords = tuple(tuple(int(i) for i in c) for c in decode_coords(both, ndims[node_id]))
            conflicts.append(Conflict(path, "chunk written concurrently", coords))
    return Found(tuple(conflicts), overlaps)


def resolve(found: Found, ours: ChangeSet, policy: OnConflict) -> Sequence[Conflict]:
    """Apply ``policy`` to chunk conflicts; returns the conflicts left unresolved."""
    if policy == "fail" or not found.conflicts:
        return found.conflicts
    if not found.only_chunks:
        return [c for c in found.conflicts if c.kind != "chunk written concurrently"]
    if policy == "theirs":
        for node_id, coords in found.chunk_overlaps.items():
            ours.chunks[node_id].drop_coords(coords)
    return ()

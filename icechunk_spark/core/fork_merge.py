"""Merging forks back into their session (``Session.merge``): check everything, then apply the
writes of all the forks or of none (the rules are in core/forks.py and ``docs/forks.md``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.stats import StatsLog
from ..errors import ForkConflictError, ForkError, InvalidInputError
from ..format.coords import coord_keys, decode_coord, decode_coords
from ..format.locations import concat_refs
from ..format.structure import Node
from . import overlay
from .changes import ChangeSet
from .forks import ForkLedger, ForkSession
from .snapshot import SnapshotView


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
        combined = concat_refs(tables)
        changes.array_changes(nodes[node_id]).add_table(combined)

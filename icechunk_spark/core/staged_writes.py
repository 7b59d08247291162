"""Manifests of arrays whose refs are staged in files (``staged.py``), read as needed.

An unsplit array's staged refs fit one manifest: :class:`StagedReader` reads them whole.
A split array's pieces are :class:`PieceTask` values, each writable from storage alone, so a
``PieceRunner`` may write them on Spark executors (the driver API) instead of here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import pyarrow as pa

from ..errors import RepeatedCoordError
from ..format.keys import manifest_key
from ..format.manifest import decode_manifest, refs_of_array
from ..format.structure import ManifestRef, Node
from ..pools import bounded_map
from ..progress import Progress, track
from ..splitting import SplitSpec
from ..storage import Storage
from .changes import ChangeSet
from .coord_refs import CoordRefs
from .manifest_writes import write_refs_manifest
from .snapshot import SnapshotView
from .split_writes import kept_pieces
from .staged import StagedRefs, narrowed, read_staged_refs

# Manifests built from staged refs are written this many at a time in the committing process:
# each holds up to a set's max-manifest-size refs in memory while it is merged and encoded.
STAGED_CONCURRENCY = 2


class StagedReader:
    """Reads all staged refs of an unsplit array (small enough: it fits one manifest)."""

    def __init__(self, storage: Storage, base: SnapshotView, changes: ChangeSet) -> None:
        self._storage, self._base, self._changes = storage, base, changes

    def has(self, node_id: int) -> bool:
        return node_id in self._changes.staged

    def whole_array(self, node: Node) -> CoordRefs:
        staged = self._changes.staged_refs(node.id)
        assert staged is not None and node.meta is not None
        ndim = node.meta.ndim
        layers: list[CoordRefs] = []
        committed = self._base.committed(node)
        if committed is not None:
            layers.extend(CoordRefs(t, ndim) for t in self._base.array_refs(committed))
        drop = self._changes.staged_drop(node.id)
        committed_layers = len(layers)
        layers += [refs.without(drop) for refs in read_staged_refs(self._storage, staged)]
        refs = _merge_staged(layers, committed_layers, ndim, node.path)
        return refs.inside(node.meta.grid_shape)


@dataclass(frozen=True, slots=True, eq=False)
class PieceTask:
    """One manifest piece of a split array with staged refs, writable from storage alone.

    A plain value: a Spark job can run :func:`write_piece_task` on executors (the driver API)
    while the committing process runs it itself otherwise.
    """

    node_id: int
    path: str
    grid_shape: tuple[int, ...]
    set_name: str
    axis: int
    span: tuple[int, int]  # indices [lo, hi) along ``axis``
    old: tuple[str, ...]  # base manifests that may hold refs of the piece
    staged: StagedRefs
    drop: pa.Array | None  # coords left out of the staged refs


# Writes every task's piece (``write_piece_task``); yields one result a task, in task order.
PieceRunner = Callable[[Sequence[PieceTask]], Iterable[ManifestRef | None]]


def write_piece_task(storage: Storage, task: PieceTask) -> ManifestRef | None:
    """Old refs of the piece, then its staged rows (each write over the ones before): one
    manifest, or none.

    Raises:
        RepeatedCoordError: one write staged a coord of the piece twice.
    """
    ndim = len(task.grid_shape)
    layers = []
    for manifest_id in task.old:
        key = manifest_key(manifest_id)
        refs = refs_of_array(decode_manifest(storage.get(key), key), task.node_id)
        layers.append(CoordRefs(refs, ndim).within(task.axis, task.span))
    old = len(layers)
    staged = read_staged_refs(storage, task.staged, task.axis, task.span)
    layers += [refs.without(task.drop) for refs in staged]
    piece = _merge_staged(layers, old, ndim, task.path).inside(task.grid_shape)
    if piece.num_rows == 0:
        return None
    return write_refs_manifest(storage, task.node_id, piece, task.set_name)


def _merge_staged(layers: list[CoordRefs], first_staged: int, ndim: int, path: str) -> CoordRefs:
    """Committed layers merged with one layer per staged write (each unordered) over them.

    Raises:
        RepeatedCoordError: one write staged a coord twice.
    """
    try:
        return CoordRefs.merge(layers, ndim, unordered=range(first_staged, len(layers)))
    except RepeatedCoordError as repeated:
        raise repeated.for_array(path) from None


def _staged_piece_tasks(
    base: SnapshotView, changes: ChangeSet, node: Node, spec: SplitSpec
) -> tuple[list[ManifestRef], list[PieceTask]]:
    """(kept manifests, tasks for the touched pieces) of a split array with staged refs."""
    staged = changes.staged_refs(node.id)
    assert staged is not None and node.meta is not None
    axis = spec.axis
    base_node = base.committed(node)
    pieces = base_node.manifests if base_node is not None else ()
    touched = staged.pieces(axis, spec.chunks_per_split)
    grid_end = node.meta.grid_shape[axis]
    kept, rewritten = kept_pieces(pieces, spec, grid_end, touched, changes.repack_all)
    drop = changes.staged_drop(node.id)
    tasks = []
    for piece in sorted(touched):
        span = spec.piece_range(piece)
        old = tuple(
            m.manifest_id
            for m in rewritten
            if not m.extent or (m.extent[axis][0] < span[1] and span[0] < m.extent[axis][1])
        )
        tasks.append(
            PieceTask(
                node.id,
                node.path,
                node.meta.grid_shape,
                spec.set_name,
                axis,
                span,
                old,
                narrowed(staged, axis, span),
                drop,
            )
        )
    return kept, tasks


def local_runner(storage: Storage, pool: Executor) -> PieceRunner:
    def run(tasks: Sequence[PieceTask]) -> Iterable[ManifestRef | None]:
        return bounded_map(pool, lambda t: write_piece_task(storage, t), tasks, STAGED_CONCURRENCY)

    return run


def write_staged_pieces(
    runner: PieceRunner,
    base: SnapshotView,
    changes: ChangeSet,
    arrays: Mapping[int, Node],
    splits: Mapping[int, SplitSpec],
    written: list[str],
    progress: Progress | None,
) -> dict[int, list[ManifestRef]]:
    """The manifests of every split array with staged refs: kept pieces plus rewritten ones.

    All arrays' pieces go to the runner at once, so a Spark job runs them side by side.
    """
    kept: dict[int, list[ManifestRef]] = {}
    tasks: list[PieceTask] = []
    for node_id, spec in splits.items():
        kept[node_id], todo = _staged_piece_tasks(base, changes, arrays[node_id], spec)
        tasks += todo
    out = {node_id: list(refs) for node_id, refs in kept.items()}
    done = track(progress, "writing manifest pieces", runner(tasks), len(tasks))
    for task, ref in zip(tasks, done, strict=True):
        if ref is not None:
            out[task.node_id].append(ref)
            written.append(manifest_key(ref.manifest_id))
    return {node_id: sorted(refs, key=lambda m: m.extent) for node_id, refs in out.items()}

"""Building a new snapshot's files from a base snapshot plus a session's changes.

Everything written here is a new immutable object; nothing is visible until the state file
swap in ``Session.commit``. Building is repeatable: a rebase simply builds again on the new tip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ..errors import RepeatedCoordError
from ..format.ids import new_object_id
from ..format.keys import attributes_key, manifest_key, structure_key, txlog_key
from ..format.manifest import (
    attach_stats,
    conform_refs,
    decode_manifest,
    encode_manifest,
    refs_of_array,
    with_array_id,
)
from ..format.structure import ManifestRef, Node, encode_structure, make_node
from ..format.txlog import ChangeKind, NodeChange, chunk_changes, encode_txlog
from ..pools import bounded_map
from ..progress import Progress, track
from ..splitting import (
    ArrayStats,
    ExistingManifest,
    ManifestConfig,
    PlannedManifest,
    SplitSpec,
    plan_manifests,
    split_spec,
)
from ..storage import Storage
from .changes import ChangeSet
from .coord_refs import CoordRefs
from .overlay import current_nodes
from .snapshot import SnapshotView
from .staged import StagedRefs, narrowed, read_staged_refs

# Manifests built from staged refs are written this many at a time in the committing process:
# each holds up to a set's max-manifest-size refs in memory while it is merged and encoded.
STAGED_CONCURRENCY = 2


@dataclass(frozen=True, slots=True)
class BuiltSnapshot:
    snapshot_id: str
    structure_id: str
    nodes: Mapping[str, Node]
    written: tuple[str, ...]  # every key written, so an abandoned build can be cleaned up


def build_snapshot(
    storage: Storage,
    base: SnapshotView,
    changes: ChangeSet,
    manifest_config: ManifestConfig,
    pool: ThreadPoolExecutor,
    chunk_stats: Mapping[int, pa.Table] | None = None,
    progress: Progress | None = None,
    piece_runner: PieceRunner | None = None,
) -> BuiltSnapshot:
    """Write a snapshot's files; ``chunk_stats`` (node id -> statistics of chunks written in
    the session, see ``format.manifest.attach_stats``) become ``stat_*`` manifest columns.
    ``progress`` hears one stage per batch of manifests written. ``piece_runner`` writes the
    pieces of split arrays whose refs are staged (default: here, a few at a time)."""
    stats = chunk_stats or {}
    nodes = current_nodes(base, changes)
    arrays = {n.id: n for n in nodes.values() if n.type == "array"}
    base_arrays = {n.id: n for n in base.nodes.values() if n.type == "array"}
    modified = _modified_arrays(base_arrays, arrays, changes)
    splits = _split_arrays(base, changes, arrays, modified, manifest_config)
    # Attached and split arrays get manifests of their own, outside the set packing; to the
    # plan they look deleted, so any manifest they shared is rewritten without them.
    own = {i for i in changes.attached if i in arrays} | set(splits)
    merged = _merge_modified(base, changes, arrays, modified - own - set(changes.staged), stats)
    created = frozenset(n.id for n in changes.created.values() if n.type == "array")

    counts = {
        i: ArrayStats(
            i, n.path, n.meta.metadata_chunks if n.meta else 0, _ref_count(base, changes, n, merged)
        )
        for i, n in arrays.items()
        if i not in own
    }
    existing = _existing_manifests(base_arrays.values())
    plan = plan_manifests(counts, existing, modified, manifest_config, created - own)

    written: list[str] = []
    staged_reader = _StagedReader(storage, base, changes)
    new_refs = _write_manifests(
        storage, pool, plan.new_manifests, arrays, base, merged, staged_reader, written, progress
    )
    staged_splits = {i: spec for i, spec in splits.items() if i in changes.staged}
    if staged_splits:
        runner = piece_runner or _local_runner(storage, pool)
        new_refs |= _write_staged_pieces(
            runner, base, changes, arrays, staged_splits, written, progress
        )
    for node_id, spec in splits.items():
        if node_id in staged_splits:
            continue
        new_refs[node_id] = _write_split_array(
            storage,
            pool,
            base,
            changes,
            arrays[node_id],
            spec,
            written,
            stats.get(node_id),
            progress,
        )
    for node_id in own - set(splits):
        new_refs[node_id] = list(changes.attached[node_id])
    final = {}
    for path, node in nodes.items():
        if node.type == "array" and (node.id in plan.closure or node.id in own):
            node = make_node(node.id, path, node.zarr_json, tuple(new_refs.get(node.id, ())))
        final[path] = node

    snapshot_id = new_object_id()
    structure_id = new_object_id()
    attrs_id = new_object_id()
    structure, attrs, assigned = encode_structure(final.values(), attrs_id)
    final = {
        p: replace(n, attrs_ref=assigned[n.id]) if n.id in assigned else n for p, n in final.items()
    }
    txlog = encode_txlog(_node_changes(changes, arrays), _chunk_change_tables(changes, arrays))
    objects = [(structure_key(structure_id), structure), (txlog_key(snapshot_id), txlog)]
    if attrs is not None:
        objects.append((attributes_key(attrs_id), attrs))
    list(pool.map(lambda kv: storage.put(*kv), objects))
    written.extend(k for k, _ in objects)
    return BuiltSnapshot(snapshot_id, structure_id, final, tuple(written))


def write_array_manifest(
    storage: Storage, node_id: int, ndim: int, refs: pa.Table, set_name: str = "default"
) -> ManifestRef:
    """Write one manifest holding ``refs`` of one array; returns the structure's ref to it.

    ``refs`` are sorted by coord, one row a coord (as ``merge_refs`` returns them): merging
    again would copy a million-row table twice more for nothing.
    """
    return write_refs_manifest(storage, node_id, CoordRefs(refs, ndim), set_name)


def write_refs_manifest(
    storage: Storage, node_id: int, refs: CoordRefs, set_name: str
) -> ManifestRef:
    """``write_array_manifest`` of refs whose coords may be decoded already."""
    table = with_array_id(conform_refs(refs.table), node_id)
    manifest_id = new_object_id()
    storage.put(manifest_key(manifest_id), encode_manifest(table, presorted=True))
    return ManifestRef(manifest_id, refs.extent(), refs.num_rows, set_name)


def _modified_arrays(
    base_arrays: Mapping[int, Node], arrays: Mapping[int, Node], changes: ChangeSet
) -> set[int]:
    if changes.repack_all:
        return set(arrays) | set(base_arrays)
    modified = {i for i in changes.modified_array_ids() if i in arrays}
    modified |= {n.id for n in changes.created.values() if n.type == "array"}
    modified |= {i for i in base_arrays if i not in arrays}  # deleted arrays leave their manifests
    for node in changes.updated.values():
        old = base_arrays.get(node.id)
        if old is not None and old.meta != node.meta and node.id in arrays:
            modified.add(node.id)  # a resize may leave refs outside the new grid
    return modified


def _merge_modified(
    base: SnapshotView,
    changes: ChangeSet,
    arrays: Mapping[int, Node],
    modified: set[int],
    stats: Mapping[int, pa.Table],
) -> dict[int, CoordRefs]:
    """Committed refs overlaid with the session's, within the grid, of each array written."""
    out: dict[int, CoordRefs] = {}
    for node_id in modified:
        node = arrays.get(node_id)
        if node is None or node.meta is None:
            continue
        layers = []
        base_node = base.nodes.get(node.path)
        if base_node is not None and base_node.id == node_id:
            layers.extend(base.array_refs(base_node))
        array_changes = changes.chunks.get(node_id)
        if array_changes is not None:
            layers.extend(
                attach_stats(t, stats.get(node_id)) for t in array_changes.layers(node_id)
            )
        ndim = node.meta.ndim
        refs = CoordRefs.merge([CoordRefs(t, ndim) for t in layers], ndim)
        out[node_id] = refs.inside(node.meta.grid_shape)
    return out


def _ref_count(
    base: SnapshotView, changes: ChangeSet, node: Node, merged: Mapping[int, CoordRefs]
) -> int:
    refs = merged.get(node.id)
    if refs is not None:
        return refs.num_rows
    staged = changes.staged_refs(node.id)
    if staged is None:
        return node.ref_count
    # Not read until written: committed plus staged refs, an upper bound (a coord both hold
    # counts twice), so packing may leave a little room that exact counts would have filled.
    return _committed_count(base, node) + staged.count


def _committed_count(base: SnapshotView, node: Node) -> int:
    committed = base.nodes.get(node.path)
    return committed.ref_count if committed is not None and committed.id == node.id else 0


def _existing_manifests(base_arrays: Iterable[Node]) -> list[ExistingManifest]:
    members: dict[str, set[int]] = {}
    set_names: dict[str, str] = {}
    for node in base_arrays:
        for m in node.manifests:
            members.setdefault(m.manifest_id, set()).add(node.id)
            set_names[m.manifest_id] = m.set_name
    return [
        ExistingManifest(mid, set_names[mid], frozenset(ids))
        for mid, ids in sorted(members.items())
    ]


def _write_manifests(
    storage: Storage,
    pool: ThreadPoolExecutor,
    planned: Sequence[PlannedManifest],
    arrays: Mapping[int, Node],
    base: SnapshotView,
    merged: Mapping[int, CoordRefs],
    staged: _StagedReader,
    written: list[str],
    progress: Progress | None,
) -> dict[int, list[ManifestRef]]:
    def refs_for(node_id: int) -> CoordRefs:
        if node_id in merged:
            return merged[node_id]
        node = arrays[node_id]
        if staged.has(node_id):
            return staged.whole_array(node)
        # In the closure but unchanged: carry its refs over as they are.
        assert node.meta is not None
        ndim = node.meta.ndim
        return CoordRefs.merge(
            [CoordRefs(t, ndim) for t in base.array_refs(base.nodes[node.path])], ndim
        )

    def write_one(manifest: PlannedManifest) -> list[tuple[int, ManifestRef]]:
        manifest_id = new_object_id()
        tables, out = [], []
        for node_id in sorted(manifest.array_ids):
            refs = refs_for(node_id)
            if refs.num_rows == 0:
                continue
            tables.append(with_array_id(refs.table, node_id))
            ref = ManifestRef(manifest_id, refs.extent(), refs.num_rows, manifest.set_name)
            out.append((node_id, ref))
        if tables:
            # Arrays in id order, each sorted by coord (merge_refs): already the manifest order.
            data = encode_manifest(
                pa.concat_tables(tables, promote_options="permissive"), presorted=True
            )
            storage.put(manifest_key(manifest_id), data)
            written.append(manifest_key(manifest_id))
        return out

    result: dict[int, list[ManifestRef]] = {}
    limit = STAGED_CONCURRENCY if staged.any() else None
    done = bounded_map(pool, write_one, planned, limit)
    for pairs in track(progress, "writing manifests", done, len(planned)):
        for node_id, ref in pairs:
            result.setdefault(node_id, []).append(ref)
    return result


def _node_changes(changes: ChangeSet, arrays: Mapping[int, Node]) -> list[NodeChange]:
    out = [NodeChange(p, n.id, ChangeKind.DELETE_NODE) for p, n in changes.deleted.items()]
    out += [
        NodeChange(arrays[i].path, i, ChangeKind.REPLACE_CHUNKS)
        for i in changes.attached
        if i in arrays
    ]
    for node_id in changes.staged:
        staged = changes.staged_refs(node_id)
        if node_id in arrays and staged is not None:
            path = arrays[node_id].path
            out.append(NodeChange(path, node_id, ChangeKind.WRITE_CHUNK_RANGE, staged.extent()))
    out += [NodeChange(p, n.id, ChangeKind.created(n.type)) for p, n in changes.created.items()]
    out += [NodeChange(p, n.id, ChangeKind.UPDATE_METADATA) for p, n in changes.updated.items()]
    return out


def _chunk_change_tables(changes: ChangeSet, arrays: Mapping[int, Node]) -> list[pa.Table]:
    return [
        chunk_changes(node_id, c.changed_coords())
        for node_id, c in changes.chunks.items()
        if node_id in arrays and len(c)
    ]


# current_nodes lives in overlay.py; core/commit.py and core/session.py still import it from here.
__all__ = ["BuiltSnapshot", "build_snapshot", "current_nodes"]


def _split_arrays(
    base: SnapshotView,
    changes: ChangeSet,
    arrays: Mapping[int, Node],
    modified: set[int],
    config: ManifestConfig,
) -> dict[int, SplitSpec]:
    """The modified arrays to split over several manifests, decided on an upper bound of refs."""
    out = {}
    for node_id in modified:
        node = arrays.get(node_id)
        if node is None or node.meta is None or node_id in changes.attached:
            continue
        base_node = base.nodes.get(node.path)
        committed = base_node.ref_count if base_node is not None and base_node.id == node_id else 0
        array_changes = changes.chunks.get(node_id)
        estimate = committed + (len(array_changes) if array_changes is not None else 0)
        staged = changes.staged_refs(node_id)
        estimate += staged.count if staged is not None else 0
        stats = ArrayStats(node_id, node.path, node.meta.metadata_chunks, estimate)
        spec = split_spec(stats, node.meta.grid_shape, node.meta.dimension_names, config)
        if spec is not None:
            out[node_id] = spec
    return out


def _write_split_array(
    storage: Storage,
    pool: ThreadPoolExecutor,
    base: SnapshotView,
    changes: ChangeSet,
    node: Node,
    spec: SplitSpec,
    written: list[str],
    stats: pa.Table | None = None,
    progress: Progress | None = None,
) -> list[ManifestRef]:
    """Rewrite only the pieces the session touched; keep the others' manifests as they are."""
    assert node.meta is not None
    ndim, axis = node.meta.ndim, spec.axis
    base_node = base.nodes.get(node.path)
    pieces = base_node.manifests if base_node is not None and base_node.id == node.id else ()
    grid_shape = node.meta.grid_shape
    array_changes = changes.chunks.get(node.id)
    layers = (
        [CoordRefs(attach_stats(t, stats), ndim) for t in array_changes.layers(node.id)]
        if array_changes is not None
        else []
    )
    # The pieces of every coord the session wrote or deleted.
    touched = {spec.piece_of(int(i)) for i in np.unique(_indices(layers, axis))}
    kept, rewritten = _kept_pieces(pieces, spec, grid_shape[axis], touched, changes.repack_all)

    old = [(m, base.ref_index(base_node, m).table) for m in rewritten] if base_node else []
    sources = [(m.extent[axis], CoordRefs(t, ndim)) for m, t in old] + [(None, t) for t in layers]
    for _, refs in sources:
        refs.decode()  # once, here: the pieces are cut from them side by side in threads

    def piece_layers(piece: int) -> list[CoordRefs]:
        lo, hi = spec.piece_range(piece)
        return [
            refs.within(axis, (lo, hi))
            for extent, refs in sources
            if extent is None or (extent[0] < hi and lo < extent[1])
        ]

    def write_piece(piece: int) -> ManifestRef | None:
        refs = CoordRefs.merge(piece_layers(piece), ndim).inside(grid_shape)
        if refs.num_rows == 0:
            return None
        ref = write_refs_manifest(storage, node.id, refs, spec.set_name)
        written.append(manifest_key(ref.manifest_id))
        return ref

    done = pool.map(write_piece, sorted(touched))
    stage = f"writing manifests of {node.path}"
    new = [r for r in track(progress, stage, done, len(touched)) if r is not None]
    return sorted([*kept, *new], key=lambda m: m.extent)


def _kept_pieces(
    pieces: Sequence[ManifestRef],
    spec: SplitSpec,
    grid_end: int,
    touched: set[int],
    repack_all: bool,
) -> tuple[list[ManifestRef], list[ManifestRef]]:
    """(manifests kept as they are, manifests to rewrite) of a split array.

    Adds to ``touched`` every piece that must be rewritten besides those written to.
    """
    axis = spec.axis

    def aligned(m: ManifestRef) -> bool:
        lo, hi = m.extent[axis] if m.extent else (0, 0)
        same_piece = spec.piece_of(lo) == spec.piece_of(hi - 1)
        return m.set_name == spec.set_name and same_piece and hi <= grid_end

    if repack_all or not all(aligned(m) for m in pieces):
        # Laid out some other way before (unsplit, other piece size, or shrunk): re-cut it all.
        touched |= {p for m in pieces if m.extent for p in _pieces_of(spec, m.extent[axis])}
    kept = [m for m in pieces if aligned(m) and spec.piece_of(m.extent[axis][0]) not in touched]
    return kept, [m for m in pieces if m not in kept]


def _pieces_of(spec: SplitSpec, extent: tuple[int, int]) -> range:
    """Every piece an extent ``[lo, hi)`` along the split axis overlaps, not just its ends."""
    return range(spec.piece_of(extent[0]), spec.piece_of(extent[1] - 1) + 1)


def _indices(layers: Sequence[CoordRefs], axis: int) -> np.ndarray:
    """Every index along ``axis`` of the layers' coords."""
    return np.concatenate([refs.coords[:, axis] for refs in layers] or [np.empty(0, np.int64)])


# -- arrays whose refs are staged in files ----------------------------------------------------


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
    base_node = base.nodes.get(node.path)
    pieces = base_node.manifests if base_node is not None and base_node.id == node.id else ()
    touched = staged.pieces(axis, spec.chunks_per_split)
    grid_end = node.meta.grid_shape[axis]
    kept, rewritten = _kept_pieces(pieces, spec, grid_end, touched, changes.repack_all)
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


def _local_runner(storage: Storage, pool: Executor) -> PieceRunner:
    def run(tasks: Sequence[PieceTask]) -> Iterable[ManifestRef | None]:
        return bounded_map(pool, lambda t: write_piece_task(storage, t), tasks, STAGED_CONCURRENCY)

    return run


def _write_staged_pieces(
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


class _StagedReader:
    """Reads all staged refs of an unsplit array (small enough: it fits one manifest)."""

    def __init__(self, storage: Storage, base: SnapshotView, changes: ChangeSet) -> None:
        self._storage, self._base, self._changes = storage, base, changes

    def any(self) -> bool:
        return bool(self._changes.staged)

    def has(self, node_id: int) -> bool:
        return node_id in self._changes.staged

    def whole_array(self, node: Node) -> CoordRefs:
        staged = self._changes.staged_refs(node.id)
        assert staged is not None and node.meta is not None
        ndim = node.meta.ndim
        layers: list[CoordRefs] = []
        committed = self._base.nodes.get(node.path)
        if committed is not None and committed.id == node.id:
            layers.extend(CoordRefs(t, ndim) for t in self._base.array_refs(committed))
        drop = self._changes.staged_drop(node.id)
        committed_layers = len(layers)
        layers += [refs.without(drop) for refs in read_staged_refs(self._storage, staged)]
        refs = _merge_staged(layers, committed_layers, ndim, node.path)
        return refs.inside(node.meta.grid_shape)

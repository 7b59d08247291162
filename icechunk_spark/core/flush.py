"""Building a new snapshot's files from a base snapshot plus a session's changes.

Everything written here is a new immutable object; nothing is visible until the state file
swap in ``Session.commit``. Building is repeatable: a rebase simply builds again on the new tip.

The build plans which arrays share manifests (``splitting``), then writes: packed manifests
(``manifest_writes``), split arrays' touched pieces (``split_writes``), arrays whose refs are
staged in files (``staged_writes``), and last the transaction log and structure file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from ..format.ids import new_object_id
from ..format.keys import attributes_key, structure_key, txlog_key
from ..format.manifest import attach_stats
from ..format.structure import ManifestRef, Node
from ..format.structure_encode import (
    StructureTables,
    encode_attributes_table,
    encode_structure_table,
    structure_tables,
)
from ..format.txlog import ChangeKind, NodeChange, chunk_changes, encode_txlog
from ..progress import Progress
from ..splitting import ArrayStats, ExistingManifest, ManifestConfig, plan_manifests
from ..storage import Storage
from .bulk_refs import merge_pending_in_bulk, pending_chunk_changes
from .changes import ChangeSet
from .coord_refs import CoordRefs
from .manifest_writes import Carried, DeferredPuts, rewritten_for_a_few, write_packed_manifests
from .overlay import current_nodes
from .snapshot import SnapshotView
from .split_writes import split_arrays, write_split_array
from .staged_writes import (
    STAGED_CONCURRENCY,
    PieceRunner,
    StagedReader,
    local_runner,
    write_staged_pieces,
)

__all__ = ["BuiltSnapshot", "build_snapshot"]

# Manifests up to this many rows in all are written with the structure file, in one round.
DEFERRED_MANIFEST_ROWS = 1 << 20


@dataclass(frozen=True, slots=True)
class BuiltSnapshot:
    snapshot_id: str
    structure_id: str
    nodes: Mapping[str, Node]
    written: tuple[str, ...]  # every key written, so an abandoned build can be cleaned up
    base_id: str  # the snapshot it was built on: publishable only as that one's child
    structure: StructureTables  # what the structure file was encoded from, for the next build


def build_snapshot(
    storage: Storage,
    base: SnapshotView,
    changes: ChangeSet,
    manifest_config: ManifestConfig,
    pool: ThreadPoolExecutor,
    chunk_stats: Mapping[int, pa.Table] | None = None,
    progress: Progress | None = None,
    piece_runner: PieceRunner | None = None,
    base_structure: StructureTables | None = None,
    while_writing: Callable[[str, str], None] | None = None,
) -> BuiltSnapshot:
    """Write a snapshot's files; ``chunk_stats`` (node id -> statistics of chunks written in
    the session, see ``format.manifest.attach_stats``) become ``stat_*`` manifest columns.
    ``progress`` hears one stage per batch of manifests written. ``piece_runner`` writes the
    pieces of split arrays whose refs are staged (default: here, a few at a time).
    ``base_structure``: the tables ``base``'s structure file was written from, if at hand
    (unchanged nodes' rows are copied from them). ``while_writing`` runs while the last
    objects are written (the caller's reads, side by side with them), given the snapshot's
    and the structure file's ids."""
    stats = chunk_stats or {}
    nodes = current_nodes(base, changes)
    arrays = {n.id: n for n in nodes.values() if n.type == "array"}
    base_arrays = {n.id: n for n in base.nodes.values() if n.type == "array"}
    modified = _modified_arrays(base_arrays, arrays, changes)
    splits = split_arrays(base, changes, arrays, modified, manifest_config)
    # Split arrays get manifests of their own, outside the set packing; to the plan they
    # look deleted, so any manifest they shared is rewritten without them.
    own = set(splits)
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
    refs_for = _refs_source(base, arrays, merged, StagedReader(storage, base, changes))
    limit = STAGED_CONCURRENCY if changes.staged else None
    carried = Carried(_carried(base, arrays, merged, changes), base.manifest)
    deferred = DeferredPuts(storage, pool, DEFERRED_MANIFEST_ROWS)
    new_refs = write_packed_manifests(
        storage,
        pool,
        plan.new_manifests,
        refs_for,
        limit,
        written,
        progress,
        carried,
        deferred,
        lambda ids: _few_changed(base_arrays, changes, ids),
    )
    staged_splits = {i: spec for i, spec in splits.items() if i in changes.staged}
    if staged_splits:
        runner = piece_runner or local_runner(storage, pool)
        new_refs |= write_staged_pieces(
            runner, base, changes, arrays, staged_splits, written, progress
        )
    for node_id, spec in splits.items():
        if node_id in staged_splits:
            continue
        new_refs[node_id] = write_split_array(
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
    final = {}
    for path, node in nodes.items():
        if node.type == "array" and (node.id in plan.closure or node.id in own):
            # Not make_node: the document is parsed already (5,760 arrays: 0.3 s); nor
            # dataclasses.replace, which costs ~10 us a node (a small commit's arrays: 0.5 ms).
            # tuple() of a tuple is that tuple: refs the manifest writer shared stay shared.
            manifests = tuple(new_refs.get(node.id, ()))
            # The attribute ref stays: the document is where it was, only the manifests move.
            ref = node.attrs_ref
            node = Node(node.id, path, node.type, node.zarr_json, manifests, ref, node.meta)
        final[path] = node

    snapshot_id = new_object_id()
    structure_id = new_object_id()
    attrs_id = new_object_id()
    tables = structure_tables(final.values(), attrs_id, previous=base_structure)
    # The nodes as stored (with the attribute refs assigned), in path order as a read gives.
    final = {n.path: n for n in tables.written}
    base_docs = {n.id: n.zarr_json for n in base.nodes.values()}
    node_changes = _node_changes(changes, arrays, base_docs)
    changed_chunks = _chunk_change_tables(changes, arrays)
    objects = {
        structure_key(structure_id): lambda: encode_structure_table(tables.structure),
        txlog_key(snapshot_id): lambda: encode_txlog(node_changes, changed_chunks),
    }
    if tables.attributes is not None:
        attributes = tables.attributes
        objects[attributes_key(attrs_id)] = lambda: encode_attributes_table(attributes)
    for key, encode in objects.items():
        deferred.put(key, encode)
    deferred.start()  # the manifests held since write_packed_manifests too
    try:
        if while_writing is not None:
            while_writing(snapshot_id, structure_id)
    finally:
        deferred.wait()  # whatever happens, nothing is still being written on return
    for manifest_id, table in deferred.tables.items():
        base.manifest_cache.remember(manifest_id, table)
    written.extend(objects)  # manifests are listed already
    return BuiltSnapshot(snapshot_id, structure_id, final, tuple(written), base.snapshot_id, tables)


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
    bulk = {i for i in modified if _only_pending(base, changes, arrays.get(i), stats)}
    out = merge_pending_in_bulk(changes, arrays, bulk)
    for node_id in modified - bulk:
        node = arrays.get(node_id)
        if node is None or node.meta is None:
            continue
        layers = []
        base_node = base.committed(node)
        if base_node is not None:
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


def _few_changed(base_arrays: Mapping[int, Node], changes: ChangeSet, ids: Iterable[int]) -> bool:
    """``rewritten_for_a_few`` of a packed manifest of arrays ``ids``: committed when one of
    them was; its changed rows are the session's. Staged refs may be millions: never."""
    changed, committed = 0, False
    for i in ids:
        if i in changes.staged:
            return False
        node = base_arrays.get(i)
        committed = committed or (node is not None and bool(node.manifests))
        array_changes = changes.chunks.get(i)
        changed += len(array_changes) if array_changes is not None else 0
    return rewritten_for_a_few(committed, changed)


def _only_pending(
    base: SnapshotView, changes: ChangeSet, node: Node | None, stats: Mapping[int, pa.Table]
) -> bool:
    """A new array whose chunks were set one by one, without statistics: nothing to overlay."""
    if node is None or node.meta is None or node.id in stats:
        return False
    array_changes = changes.chunks.get(node.id)
    return (
        array_changes is not None
        and not array_changes.tables
        and bool(array_changes.pending)
        and base.committed(node) is None
    )


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
    committed = base.committed(node)
    return committed.ref_count if committed is not None else 0


def _unchanged(base: SnapshotView, node: Node) -> Node:
    committed = base.committed(node)
    assert committed is not None, f"{node.path} has no refs to carry over"
    return committed


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


def _carried(
    base: SnapshotView,
    arrays: Mapping[int, Node],
    merged: Mapping[int, CoordRefs],
    changes: ChangeSet,
) -> dict[int, ManifestRef]:
    """Arrays this commit did not change whose refs all sit in one old manifest."""
    out = {}
    for node_id, node in arrays.items():
        if node_id in merged or node_id in changes.staged:
            continue
        committed = base.committed(node)
        if committed is not None and len(committed.manifests) == 1:
            out[node_id] = committed.manifests[0]
    return out


def _refs_source(
    base: SnapshotView,
    arrays: Mapping[int, Node],
    merged: Mapping[int, CoordRefs],
    staged: StagedReader,
) -> Callable[[int], CoordRefs]:
    """Where each packed array's refs come from, read when its manifest is written."""

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
            [CoordRefs(t, ndim) for t in base.array_refs(_unchanged(base, node))], ndim
        )

    return refs_for


def _node_changes(
    changes: ChangeSet, arrays: Mapping[int, Node], base_docs: Mapping[int, bytes]
) -> list[NodeChange]:
    out = [NodeChange(p, n.id, ChangeKind.DELETE_NODE) for p, n in changes.deleted.items()]
    for node_id in changes.staged:
        staged = changes.staged_refs(node_id)
        if node_id in arrays and staged is not None:
            path = arrays[node_id].path
            out.append(NodeChange(path, node_id, ChangeKind.WRITE_CHUNK_RANGE, staged.extent()))
    out += [NodeChange(p, n.id, ChangeKind.created(n.type)) for p, n in changes.created.items()]
    for path, node in changes.updated.items():
        moved_from = changes.moved.get(path)
        if moved_from is not None:
            out.append(NodeChange(path, node.id, ChangeKind.MOVE_NODE, from_path=moved_from))
        if moved_from is None or node.zarr_json != base_docs.get(node.id):
            out.append(NodeChange(path, node.id, ChangeKind.UPDATE_METADATA))
    return out


def _chunk_change_tables(changes: ChangeSet, arrays: Mapping[int, Node]) -> list[pa.Table]:
    written = [i for i, c in changes.chunks.items() if i in arrays and len(c)]
    pending_only = [i for i in written if not changes.chunks[i].tables]
    rest = [i for i in written if changes.chunks[i].tables]
    return [
        *pending_chunk_changes(changes, pending_only),
        *(chunk_changes(i, changes.chunks[i].changed_coords()) for i in rest),
    ]

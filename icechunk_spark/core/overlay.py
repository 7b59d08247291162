"""What a session reads: its base snapshot with its own uncommitted changes laid over it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.stats import StatsLog
from ..errors import NotFoundError
from ..format.coords import encode_coord
from ..format.manifest import attach_stats
from ..format.merge import merge_refs
from ..format.structure import Node, make_node
from ..storage import Storage
from .changes import ChangeSet
from .manifest_cache import ChunkRef, row_ref
from .snapshot import SnapshotView
from .staged import read_staged


def current_nodes(base: SnapshotView, changes: ChangeSet) -> dict[str, Node]:
    """The node set after ``changes``: base nodes minus deleted and moved away, plus created
    and updated (moved ones included, at their new paths)."""
    gone = changes.deleted.keys() | changes.moved_away()
    nodes = {p: n for p, n in base.nodes.items() if p not in gone}
    for path, node in changes.updated.items():
        nodes[path] = _with_committed_manifests(base, path, node)
    nodes.update(changes.created)
    return nodes


def _with_committed_manifests(base: SnapshotView, path: str, node: Node) -> Node:
    """An updated (or moved) node at ``path`` with the base's manifests of the same node: the
    base may be newer than when the node was updated (a rebase), its refs are the base's."""
    committed = base.committed(node)
    manifests = committed.manifests if committed is not None else node.manifests
    return make_node(node.id, path, node.zarr_json, manifests)


def node_at(base: SnapshotView, changes: ChangeSet, path: str) -> Node:
    """The node at (normalized) ``path``. Raises ``NotFoundError``."""
    node = find_node_at(base, changes, path)
    if node is None:
        deleted = " (deleted in this session)" if path in changes.deleted else ""
        raise NotFoundError(
            f"no group or array at {path!r} in snapshot {base.snapshot_id}{deleted}"
        )
    return node


def find_node_at(base: SnapshotView, changes: ChangeSet, path: str) -> Node | None:
    """The node at (normalized) ``path``, or ``None``: no exception, since key resolution
    probes every ancestor path of a chunk key and most of them name nothing."""
    with changes.lock:
        if path in changes.created:
            return changes.created[path]
        if path in changes.updated:
            return _with_committed_manifests(base, path, changes.updated[path])
        if path in changes.deleted or path in changes.moved_away():
            return None
    return base.nodes.get(path)


def chunk_ref(
    base: SnapshotView, changes: ChangeSet, node: Node, coord: tuple[int, ...], storage: Storage
) -> ChunkRef | None:
    """The ref of one chunk of array ``node``: ours if we wrote or deleted it, else the base's."""
    key = encode_coord(coord)
    with changes.lock:
        ours = changes.chunks.get(node.id)
        if ours is not None:
            found, ref = ours.lookup(key)
            if found:
                return ref
        staged = _staged_layers(changes, node, storage, coord)
    if staged is not None:
        match = staged.filter(pc.equal(staged.column("coord"), pa.scalar(key, pa.binary())))
        if match.num_rows:
            return row_ref(match, match.num_rows - 1)  # the last staged row wins
    committed = base.committed(node)
    if committed is None:
        return None  # created (or re-created) in this session: the base's refs are not its
    return base.lookup(committed, coord, key)


def _staged_layers(
    changes: ChangeSet, node: Node, storage: Storage, coord: tuple[int, ...] | None = None
) -> pa.Table | None:
    """The array's staged rows (those at ``coord``'s first index, if given), oldest first."""
    staged = changes.staged_refs(node.id)
    if staged is None:
        return None
    span = (coord[0], coord[0] + 1) if coord else None
    layers = read_staged(storage, staged, 0 if span else None, span)
    drop = changes.staged_drop(node.id)
    table = pa.concat_tables(layers) if layers else None
    if table is None or drop is None:
        return table
    return table.filter(pc.invert(pc.is_in(table.column("coord"), drop)))


def array_refs(
    base: SnapshotView, changes: ChangeSet, stats: StatsLog, node: Node, storage: Storage
) -> pa.Table:
    """Every ref of array ``node``, committed and ours, sorted by coord."""
    assert node.meta is not None
    layers = []
    committed = base.committed(node)
    if committed is not None:
        layers.extend(base.array_refs(committed))
    with changes.lock:
        ours = changes.chunks.get(node.id)
        if ours is not None:
            written = stats.table(node.id)
            layers.extend(attach_stats(t, written) for t in ours.layers(node.id))
        staged = _staged_layers(changes, node, storage)
    if staged is not None:
        layers.append(staged)
    return merge_refs(layers, node.meta.ndim)

"""What a session reads: its base snapshot with its own uncommitted changes laid over it."""

from __future__ import annotations

import pyarrow as pa

from ..chunks.stats import StatsLog
from ..errors import NotFoundError
from ..format.coords import encode_coord
from ..format.manifest import attach_stats, merge_refs
from ..format.structure import Node, make_node
from .changes import ChangeSet
from .snapshot import ChunkRef, SnapshotView


def node_at(base: SnapshotView, changes: ChangeSet, path: str) -> Node:
    """The node at (normalized) ``path``. Raises ``NotFoundError``."""
    with changes.lock:
        if path in changes.created:
            return changes.created[path]
        if path in changes.updated:
            node = changes.updated[path]
            committed = base.nodes.get(path)
            manifests = committed.manifests if committed else ()
            return make_node(node.id, path, node.zarr_json, manifests)
        if path in changes.deleted:
            raise NotFoundError(f"no group or array at {path!r} (deleted in this session)")
    return base.node(path)


def chunk_ref(
    base: SnapshotView, changes: ChangeSet, node: Node, coord: tuple[int, ...]
) -> ChunkRef | None:
    """The ref of one chunk of array ``node``: ours if we wrote or deleted it, else the base's."""
    key = encode_coord(coord)
    with changes.lock:
        ours = changes.chunks.get(node.id)
        if ours is not None:
            found, ref = ours.lookup(key)
            if found:
                return ref
    committed = base.nodes.get(node.path)
    if committed is None or committed.id != node.id:
        return None  # created (or re-created) in this session: the base's refs are not its
    return base.lookup(committed, coord, key)


def array_refs(base: SnapshotView, changes: ChangeSet, stats: StatsLog, node: Node) -> pa.Table:
    """Every ref of array ``node``, committed and ours, sorted by coord."""
    assert node.meta is not None
    layers = []
    committed = base.nodes.get(node.path)
    if committed is not None and committed.id == node.id:
        layers.extend(base.array_refs(committed))
    with changes.lock:
        ours = changes.chunks.get(node.id)
        if ours is not None:
            written = stats.table(node.id)
            layers.extend(attach_stats(t, written) for t in ours.layers(node.id))
    return merge_refs(layers, node.meta.ndim)

"""Which refs of one array a snapshot changed: its refs compared with its parent's.

The change feed (``feed``) reports a chunk as ``set`` where the snapshot's ref is new or
points at other bytes than the parent's (``history.same_refs``), and ``delete`` where the
parent had a ref and the snapshot has none. A transaction log says where to look: the coords
it lists, or a range of them (``write_chunk_range``; ``replace_chunks``: the whole array).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..core import ManifestCache, SnapshotView
from ..format.coords import coord_keys, decode_coords
from ..format.manifest import conform_refs, empty_refs
from ..format.merge import merge_refs
from ..format.structure import ManifestRef, Node
from ..format.txlog import Extent
from ..storage import Storage
from .history import same_refs


class ParentView:
    """The parent snapshot (``structure_file``; ``None``: there is none), loaded only when a
    write needs its refs."""

    def __init__(
        self, storage: Storage, structure_file: str | None, manifests: ManifestCache
    ) -> None:
        self._storage = storage
        self._structure_file = structure_file
        self._manifests = manifests
        self._loaded: tuple[SnapshotView, dict[int, Node]] | None = None

    def array(self, like: Node) -> tuple[SnapshotView, Node] | None:
        """The parent's array with ``like``'s node id and dimensions, if it had one."""
        if self._structure_file is None:
            return None
        if self._loaded is None:
            view = SnapshotView.load(self._storage, "parent", self._structure_file, self._manifests)
            self._loaded = (view, {n.id: n for n in view.nodes.values() if n.type == "array"})
        view, arrays = self._loaded
        old = arrays.get(like.id)
        if old is None or old.meta is None or like.meta is None or old.meta.ndim != like.meta.ndim:
            return None
        return view, old


def range_layer(
    new: SnapshotView, parent: ParentView, node: Node, extent: Extent | None
) -> pa.Table:
    """The exact changes of a write logged as a range: refs compared with the parent's."""
    return _compared(new, parent, node, extent)


def listed_changes(new: SnapshotView, parent: ParentView, node: Node, coords: pa.Array) -> pa.Table:
    """The changes at the coords a log lists, compared with the parent's refs as a range's
    are: a session that wrote a chunk again with the same bytes listed it, but an inline ref
    with the same bytes (or a delete of a chunk that was never there) changed nothing."""
    assert node.meta is not None
    ndim = node.meta.ndim
    decoded = decode_coords(coords, ndim)
    box = (
        tuple((int(lo), int(hi) + 1) for lo, hi in zip(decoded.min(0), decoded.max(0), strict=True))
        if ndim and len(decoded)
        else None
    )
    return _compared(new, parent, node, box, np.unique(coord_keys(coords, ndim)))


def _compared(
    new: SnapshotView,
    parent: ParentView,
    node: Node,
    extent: Extent | None,
    listed: np.ndarray | None = None,
) -> pa.Table:
    """Refs inside ``extent`` (at the ``listed`` coord keys only, if given) that are new or
    differ from the parent's, and tombstones where the parent had one and ``new`` has none."""
    assert node.meta is not None
    ndim = node.meta.ndim
    found = parent.array(node)
    # Manifests are immutable and a coord lives in one manifest of a snapshot: a manifest that
    # both snapshots list for the array holds the same refs in both, so only the others are
    # read and compared (an append reads its new pieces, not the whole array).
    shared: frozenset[str] = frozenset()
    if found is not None:
        shared = frozenset(m.manifest_id for m in node.manifests) & frozenset(
            m.manifest_id for m in found[1].manifests
        )
    new_refs = refs_within(new, node, extent, shared)
    old_refs = empty_refs() if found is None else refs_within(*found, extent, shared)
    if listed is not None:
        new_refs, old_refs = _at(new_refs, listed, ndim), _at(old_refs, listed, ndim)
    return _range_changes(new_refs, old_refs, ndim)


def _at(refs: pa.Table, keys: np.ndarray, ndim: int) -> pa.Table:
    """The rows of ``refs`` whose coord key is one of ``keys``."""
    return refs.filter(pa.array(np.isin(coord_keys(refs.column("coord"), ndim), keys)))


def overlaps(a: Extent, b: Extent | None) -> bool:
    """Whether two extents share a chunk; an empty or missing extent is unbounded."""
    if not a or not b:
        return True
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=False))


def refs_within(
    view: SnapshotView, node: Node, extent: Extent | None, skip: frozenset[str] = frozenset()
) -> pa.Table:
    """The array's refs inside ``extent`` (``None``: all), sorted by coord, one per coord,
    from its manifests other than those in ``skip``."""
    assert node.meta is not None
    ndim = node.meta.ndim

    def wanted(m: ManifestRef) -> bool:
        return m.manifest_id not in skip and overlaps(m.extent, extent)

    refs = merge_refs(view.array_refs(node, wanted), ndim)
    if not extent or refs.num_rows == 0:
        return refs
    coords = decode_coords(refs.column("coord"), ndim)
    lo = np.array([d[0] for d in extent])
    hi = np.array([d[1] for d in extent])
    inside = np.all((coords >= lo) & (coords < hi), axis=1)
    return refs.filter(pa.array(inside))


def _tombstones(coords: pa.Array) -> pa.Table:
    """Ref rows saying "no ref here" (every location null) at ``coords``."""
    return conform_refs(pa.table({"coord": coords}))


def _range_changes(new: pa.Table, old: pa.Table, ndim: int) -> pa.Table:
    """Refs of ``new`` that ``old`` lacks or holds differently, and tombstones where ``old``
    has a ref and ``new`` has none. Both: sorted, one ref per coord (``refs_within``)."""
    keys_new = coord_keys(new.column("coord"), ndim)
    keys_old = coord_keys(old.column("coord"), ndim)
    _, idx_new, idx_old = np.intersect1d(
        keys_new, keys_old, assume_unique=True, return_indices=True
    )
    unchanged = np.zeros(len(keys_new), dtype=bool)
    if len(idx_new):
        same = same_refs(new.take(pa.array(idx_new)), old.take(pa.array(idx_old)))
        unchanged[idx_new[same]] = True
    gone = np.ones(len(keys_old), dtype=bool)
    gone[idx_old] = False
    return merge_refs(
        [_tombstones(old.column("coord").filter(pa.array(gone))), new.filter(pa.array(~unchanged))],
        ndim,
        drop_tombstones=False,
    )


__all__ = ["ParentView", "listed_changes", "overlaps", "range_layer", "refs_within"]

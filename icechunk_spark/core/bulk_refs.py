"""The refs of many new arrays merged at once (icechunk#2348: 5,760 arrays in one commit).

An array created in this session, whose chunks were all set one at a time (no ref tables,
no statistics), has nothing to overlay: its refs are its pending ones, less tombstones and
chunks beyond its grid, sorted by coord. Merging each such array alone costs a dozen Arrow
calls of fixed overhead (about 2 ms an array); here every array of one dimensionality goes
through one table, one sort and one filter, and each gets a zero-copy slice of the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

from ..format.structure import Node
from ..format.txlog import chunk_changes_of
from .changes import ChangeSet, refs_table
from .coord_refs import CoordRefs


def merge_pending_in_bulk(
    changes: ChangeSet, arrays: Mapping[int, Node], node_ids: Iterable[int]
) -> dict[int, CoordRefs]:
    """Each array's refs as ``CoordRefs.merge`` would make them from its pending refs alone.

    Every ``node_ids`` array must be new in this session, with pending refs only.
    """
    by_ndim: dict[int, list[int]] = {}
    for node_id in node_ids:
        meta = arrays[node_id].meta
        assert meta is not None
        by_ndim.setdefault(meta.ndim, []).append(node_id)
    merged: dict[int, CoordRefs] = {}
    for ndim, ids in by_ndim.items():
        merged |= _merge_same_ndim(changes, arrays, sorted(ids), ndim)
    return merged


def pending_chunk_changes(changes: ChangeSet, node_ids: Iterable[int]) -> list[pa.Table]:
    """Transaction-log rows (``chunk_changes``) of arrays whose changes are pending refs only:
    one table per dimensionality, each array's coords sorted (``changed_coords`` order)."""
    by_width: dict[int, list[int]] = {}
    for node_id in node_ids:
        by_width.setdefault(changes.chunks[node_id].ndim, []).append(node_id)
    tables = []
    for ndim, ids in by_width.items():
        pending = [changes.chunks[node_id].pending for node_id in ids]
        keys = [key for p in pending for key in p]
        owner = np.repeat(np.asarray(ids, dtype=np.uint64), [len(p) for p in pending])
        order = np.lexsort((_sortable(keys, ndim), owner))
        coords = pa.array(keys, pa.binary()).take(pa.array(order))
        tables.append(chunk_changes_of(owner[order], coords))
    return tables


def _merge_same_ndim(
    changes: ChangeSet, arrays: Mapping[int, Node], ids: list[int], ndim: int
) -> dict[int, CoordRefs]:
    pending = [changes.chunks[node_id].pending for node_id in ids]
    counts = np.array([len(p) for p in pending], dtype=np.int64)
    keys = [key for p in pending for key in p]
    refs = [ref for p in pending for ref in p.values()]
    owner = np.repeat(np.arange(len(ids)), counts)  # each row's array, as a position in ids
    sortable = _sortable(keys, ndim)
    order = np.lexsort((sortable, owner))  # by array, then by coord
    coords = _decode(sortable[order], ndim)
    grids = np.array([arrays[i].meta.grid_shape for i in ids], dtype=np.int64)  # type: ignore[union-attr]
    inside = np.all(coords < grids.reshape(len(ids), ndim)[owner[order]], axis=1)
    live = np.array([ref is not None for ref in refs], dtype=bool)[order]
    keep = order[inside & live]
    table = refs_table(keys, refs, np.asarray(ids, dtype=np.uint64)[owner]).take(pa.array(keep))
    kept_coords = coords[inside & live]
    per_array = np.bincount(owner[keep], minlength=len(ids))
    starts = np.concatenate([[0], np.cumsum(per_array)])
    return {
        node_id: CoordRefs(
            table.slice(int(starts[k]), int(per_array[k])),
            ndim,
            kept_coords[starts[k] : starts[k + 1]],
        )
        for k, node_id in enumerate(ids)
    }


def _sortable(keys: list[bytes], ndim: int) -> np.ndarray:
    # Coords are fixed-width big-endian keys: byte order is coord order, as in a manifest.
    return np.array(keys, dtype=f"S{4 * ndim}") if ndim else np.zeros(len(keys), "S1")


def _decode(sorted_keys: np.ndarray, ndim: int) -> np.ndarray:
    if ndim == 0:
        return np.zeros((len(sorted_keys), 0), dtype=np.int64)
    raw = np.frombuffer(sorted_keys.tobytes(), dtype=">u4")
    return raw.reshape(-1, ndim).astype(np.int64)

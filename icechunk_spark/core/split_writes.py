"""Arrays split over several manifests along one axis (``splitting.split``).

Which modified arrays are split is decided on an upper bound of their refs; a split array
rewrites only the pieces the session touched and keeps every other piece's manifest as it is.
Pieces of arrays whose refs are staged in files are written as tasks (``staged_writes``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor

import numpy as np
import pyarrow as pa

from ..format.keys import manifest_key
from ..format.manifest import attach_stats, encode_manifest_rows, rows_as_decoded
from ..format.structure import ManifestRef, Node
from ..progress import Progress, track
from ..splitting import ArrayStats, ManifestConfig, SplitSpec, split_spec
from ..storage import Storage
from .changes import ChangeSet
from .coord_refs import CoordRefs
from .manifest_writes import refs_manifest_rows, rewritten_for_a_few
from .snapshot import SnapshotView

_BLOCK = 1 << 20  # rows of coords looked at at a time for the pieces they fall in
# Pieces merged and encoded at once. That is CPU work: more pieces at a time than cores
# only hold more rows and buffers in memory (each pool thread's allocator keeps its own),
# 10 M refs in 10 pieces on 16 threads peaked ~0.3 GB higher than on 4, and were slower.
# Their puts, which wait on storage, run outside this bound.
PIECES_BUILT_AT_ONCE = 2 * (os.cpu_count() or 1)


def split_arrays(
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
        if node is None or node.meta is None:
            continue
        base_node = base.committed(node)
        committed = base_node.ref_count if base_node is not None else 0
        array_changes = changes.chunks.get(node_id)
        estimate = committed + (len(array_changes) if array_changes is not None else 0)
        staged = changes.staged_refs(node_id)
        estimate += staged.count if staged is not None else 0
        stats = ArrayStats(node_id, node.path, node.meta.metadata_chunks, estimate)
        spec = split_spec(stats, node.meta.grid_shape, node.meta.dimension_names, config)
        if spec is not None:
            out[node_id] = spec
    return out


def write_split_array(
    storage: Storage,
    pool: Executor,
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
    base_node = base.committed(node)
    pieces = base_node.manifests if base_node is not None else ()
    grid_shape = node.meta.grid_shape
    array_changes = changes.chunks.get(node.id)
    layers = (
        [
            CoordRefs(attach_stats(t, stats), ndim)
            # encode_refs_manifest stamps each piece's array_id
            for t in array_changes.layers(node.id, stamped=False)
        ]
        if array_changes is not None
        else []
    )
    touched = _touched_pieces(layers, spec)
    kept, rewritten = kept_pieces(pieces, spec, grid_shape[axis], touched, changes.repack_all)

    old = [(m, base.ref_index(base_node, m).table) for m in rewritten] if base_node else []
    sources = [(m.extent[axis], CoordRefs(t, ndim)) for m, t in old] + [(None, t) for t in layers]
    for _, refs in sources:
        refs.decode(axis)  # once, here: the pieces are cut from them side by side in threads

    def piece_layers(piece: int) -> list[tuple[bool, CoordRefs]]:
        """The piece's rows of each source: (committed, rows), committed ones first."""
        lo, hi = spec.piece_range(piece)
        return [
            (extent is not None, refs.within(axis, (lo, hi)))
            for extent, refs in sources
            if extent is None or (extent[0] < hi and lo < extent[1])
        ]

    building = threading.BoundedSemaphore(PIECES_BUILT_AT_ONCE)

    def write_piece(piece: int) -> ManifestRef | None:
        with building:
            layers = piece_layers(piece)
            refs = CoordRefs.merge([rows for _, rows in layers], ndim).inside(grid_shape)
            if refs.num_rows == 0:
                return None
            ref, rows = refs_manifest_rows(node.id, refs, spec.set_name)
            del refs
            data = encode_manifest_rows(rows)
            if _few_changed(layers):
                base.manifest_cache.remember(ref.manifest_id, rows_as_decoded(rows))
            del rows
        storage.put(manifest_key(ref.manifest_id), data)  # waits on storage, not on a core
        written.append(manifest_key(ref.manifest_id))
        return ref

    done = pool.map(write_piece, sorted(touched))
    stage = f"writing manifests of {node.path}"
    new = [r for r in track(progress, stage, done, len(touched)) if r is not None]
    return sorted([*kept, *new], key=lambda m: m.extent)


def _few_changed(layers: Sequence[tuple[bool, CoordRefs]]) -> bool:
    """``rewritten_for_a_few`` of a piece: committed when it had committed rows; its changed
    rows are those of the session's layers."""
    changed = sum(rows.num_rows for committed, rows in layers if not committed)
    return rewritten_for_a_few(any(committed for committed, _ in layers), changed)


def kept_pieces(
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


def _touched_pieces(layers: Sequence[CoordRefs], spec: SplitSpec) -> set[int]:
    """The pieces of every coord the session wrote or deleted (``spec.piece_of`` of each
    index along the axis), a block of rows at a time: the unique of ten million indices at
    once is a sort of a copy of them, for a handful of pieces."""
    touched: set[int] = set()
    for refs in layers:
        index = refs.coords[:, spec.axis]
        for start in range(0, len(index), _BLOCK):
            pieces = np.unique(index[start : start + _BLOCK] // spec.chunks_per_split)
            touched.update(int(p) for p in pieces)
    return touched

"""How the driver API lays an array's refs out in manifests its executors write.

The same split the core's flush would choose (``splitting.split_spec``): an array too large
for its set's ``max-manifest-size`` is cut along one axis into pieces of
``chunks_per_split`` indices, one manifest each. Pieces the write does not touch keep their
manifests; touched pieces are rewritten from the old refs plus the new ones. Pure values and
functions: the Spark jobs in :mod:`.distributed` execute the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..format.coords import decode_coords, encode_coord
from ..format.structure import ManifestRef, Node
from ..splitting import ArrayStats, ManifestConfig, assign_set, split_spec
from .staging import ArrayStaged

_MAX_INDEX = 2**32 - 1


@dataclass(frozen=True, slots=True)
class ArrayLayout:
    """One array's manifests in the new snapshot: kept ones, and pieces to (re)write."""

    path: str
    node_id: int
    ndim: int
    set_name: str
    axis: int
    chunks_per_split: int  # 0: the array is not split, every ref goes to piece 0
    kept: tuple[ManifestRef, ...]
    rewrite: tuple[ManifestRef, ...]  # old manifests whose refs feed the rewritten pieces
    write: tuple[int, ...] = (0,)  # the pieces to (re)write

    def axis_range(self, piece: int) -> tuple[int, int] | None:
        """Indices ``[lo, hi)`` along the split axis of ``piece``; ``None`` when unsplit."""
        if self.chunks_per_split == 0:
            return None
        return piece * self.chunks_per_split, (piece + 1) * self.chunks_per_split

    def key_range(self, piece: int) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
        """``[low, high)`` in (array, encoded coord) order holding every ref of ``piece``.

        Encoded coords sort like index tuples, so a piece along axis 0 is one contiguous
        range; along another axis it is spread over the whole array.
        """
        whole = (self.path, b""), (self.path, b"\xff" * (4 * self.ndim + 1))
        bounds = self.axis_range(piece)
        if bounds is None or self.axis != 0 or bounds[1] > _MAX_INDEX:
            return whole
        rest = [0] * (self.ndim - 1)
        return (self.path, encode_coord([bounds[0], *rest])), (
            self.path,
            encode_coord([bounds[1], *rest]),
        )

    def overlaps(self, manifest: ManifestRef, piece: int) -> bool:
        """Whether an old manifest may hold refs of ``piece``."""
        bounds = self.axis_range(piece)
        if bounds is None or not manifest.extent:
            return True
        lo, hi = manifest.extent[self.axis]
        return lo < bounds[1] and bounds[0] < hi

    def within(self, refs: pa.Table, piece: int) -> pa.Table:
        """The refs of ``refs`` (one array's) that belong to ``piece``."""
        bounds = self.axis_range(piece)
        if bounds is None or refs.num_rows == 0:
            return refs
        index = decode_coords(refs.column("coord"), self.ndim)[:, self.axis]
        return refs.filter(pa.array((index >= bounds[0]) & (index < bounds[1])))

    def piece_range(self, lo: int, hi: int) -> range:
        """The pieces indices ``[lo, hi]`` along the split axis fall in."""
        if self.chunks_per_split == 0:
            return range(1)
        return range(lo // self.chunks_per_split, hi // self.chunks_per_split + 1)


def plan_layout(node: Node, staged: ArrayStaged, config: ManifestConfig) -> ArrayLayout:
    """The layout of ``node`` (as it will be committed) after adding the ``staged`` refs.

    ``node.manifests`` are its current manifests (none for a new or recreated array).
    """
    assert node.meta is not None
    old = node.manifests
    estimate = sum(m.ref_count for m in old) + staged.count
    stats = ArrayStats(node.id, node.path, node.meta.metadata_chunks, estimate)
    spec = split_spec(stats, node.meta.grid_shape, node.meta.dimension_names, config)
    ndim = node.meta.ndim
    if spec is None:
        return ArrayLayout(node.path, node.id, ndim, assign_set(stats, config), 0, 0, (), old, (0,))
    axis, per = spec.axis, spec.chunks_per_split
    layout = ArrayLayout(node.path, node.id, ndim, spec.set_name, axis, per, (), ())
    indices = staged.indices[axis]
    if indices is not None:
        touched = {int(i) // per for i in indices}
    else:
        touched = set(layout.piece_range(int(staged.lo[axis]), int(staged.hi[axis])))
    grid_end = node.meta.grid_shape[axis]

    def aligned(m: ManifestRef) -> bool:
        lo, hi = m.extent[axis] if m.extent else (0, 0)
        return m.set_name == spec.set_name and lo // per == (hi - 1) // per and hi <= grid_end

    if not all(aligned(m) for m in old):
        # Laid out another way before (unsplit, or another piece size): re-cut all of it.
        for m in old:
            if m.extent:
                touched |= set(layout.piece_range(m.extent[axis][0], m.extent[axis][1] - 1))
    kept = tuple(m for m in old if aligned(m) and m.extent[axis][0] // per not in touched)
    rewrite = tuple(m for m in old if m not in kept)
    return ArrayLayout(
        node.path, node.id, ndim, spec.set_name, axis, per, kept, rewrite, tuple(sorted(touched))
    )


__all__ = ["ArrayLayout", "plan_layout"]

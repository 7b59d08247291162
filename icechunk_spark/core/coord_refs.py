"""Ref rows of one array beside their chunk coords as integers, decoded at most once.

Building a snapshot clips refs to the chunk grid, cuts split arrays into pieces along an
axis, merges layers and measures each manifest's extent: every step needs the coords as
integers. :class:`CoordRefs` decodes them the first time a step asks and carries them
through every filter and merge after it, so a commit decodes a ref's coord once, not once
per step.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.coords import coords_extent, coords_view
from ..format.locations import concat_refs
from ..format.merge import all_rows, merge_order, sorted_alone, splice, take_rows


class CoordRefs:
    """Ref rows of one array (``table``) and their ``(rows, ndim)`` coords.

    Not a frozen value: it fills in its coords when they are first asked for. Share one
    between threads only once its coords are decoded (``coords`` read), or each may decode.
    """

    __slots__ = ("_ascending", "_coords", "ndim", "table")

    def __init__(
        self,
        table: pa.Table,
        ndim: int,
        coords: np.ndarray | None = None,
        ascending: frozenset[int] = frozenset(),
    ) -> None:
        self.table, self.ndim, self._coords = table, ndim, coords
        # Axes along which the rows' indices are known never to decrease (``decode``).
        self._ascending = ascending

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    @property
    def decoded(self) -> bool:
        return self._coords is not None

    @property
    def coords(self) -> np.ndarray:
        """The rows' coords, in row order (decoded now if not yet): ints, read-only, either
        int64 or big-endian uint32 viewing the coord column (``coords_view``: a copy of ten
        million coords is 160 MB)."""
        if self._coords is None:
            self._coords = (
                coords_view(self.table.column("coord"), self.ndim)
                if self.num_rows
                else np.empty((0, self.ndim), dtype=np.int64)
            )
        return self._coords

    def decode(self, ascending_along: int | None = None) -> CoordRefs:
        """This object with its coords decoded (now, if not yet). With ``ascending_along``,
        also whether the rows' indices along that axis never decrease (a bulk write sorted by
        coord, along axis 0): then ``within`` cuts a slice found by binary search, not masks
        over every row for each piece. Call it before sharing the rows between threads."""
        coords = self.coords
        if ascending_along is not None and ascending_along not in self._ascending:
            index = coords[:, ascending_along]
            if bool(np.all(index[1:] >= index[:-1])):
                self._ascending = self._ascending | {ascending_along}
        return self

    @classmethod
    def concat(cls, parts: Sequence[CoordRefs], ndim: int) -> CoordRefs:
        """The rows of (at least one) parts end to end, their coords too where all have them."""
        coords = np.concatenate([p.coords for p in parts]) if _all_decoded(parts) else None
        return cls(concat_refs([p.table for p in parts]), ndim, coords)

    @classmethod
    def merge(
        cls, layers: Sequence[CoordRefs], ndim: int, unordered: Collection[int] = ()
    ) -> CoordRefs:
        """``format.manifest.merge_refs`` of the layers, carrying their coords where all have
        them.

        Raises:
            RepeatedCoordError: a layer in ``unordered`` holds a coord twice.
        """
        alone = sorted_alone([layer.table for layer in layers], ndim, drop_tombstones=True)
        if alone is not None:
            (layer,) = (layer for layer in layers if layer.num_rows)
            return cls(alone, ndim, layer._coords, layer._ascending)
        spliced = None if unordered else splice([layer.table for layer in layers], ndim)
        if spliced is not None:
            return cls(spliced.table(), ndim, spliced.coords(ndim))
        combined, rows = merge_order([layer.table for layer in layers], ndim, unordered=unordered)
        coords = None
        if layers and _all_decoded(layers):
            coords = (
                layers[0].coords
                if len(layers) == 1
                else np.concatenate([layer.coords for layer in layers])
            )
            coords = coords if all_rows(rows, len(coords)) else coords[rows]
        return cls(take_rows(combined, rows), ndim, coords)

    def extent(self) -> tuple[tuple[int, int], ...]:
        """Per dimension ``[min, max + 1)`` of the coords; ``()`` without rows."""
        return coords_extent(self.coords)

    def where(self, keep: np.ndarray) -> CoordRefs:
        """The rows where ``keep`` is true (this object itself when all are)."""
        count = int(np.count_nonzero(keep))
        if count == len(keep):
            return self
        first = int(np.argmax(keep)) if count else 0
        if keep[first : first + count].all():
            # One run of rows (a piece of an array sorted along the split axis): a slice
            # shares the rows where a filter would copy them.
            return self._rows(first, count)
        coords = None if self._coords is None else self._coords[keep]
        table = self.table.filter(pa.array(keep))
        return CoordRefs(table, self.ndim, coords, self._ascending)  # a subsequence ascends

    def _rows(self, start: int, count: int) -> CoordRefs:
        """Rows ``[start, start + count)``, sharing this object's rows."""
        coords = None if self._coords is None else self._coords[start : start + count]
        return CoordRefs(self.table.slice(start, count), self.ndim, coords, self._ascending)

    def inside(self, grid_shape: Sequence[int]) -> CoordRefs:
        """The rows inside a chunk grid: a resize may leave refs beyond it."""
        if self.num_rows == 0 or not grid_shape:
            return self
        return self.where(np.all(self.coords < np.asarray(grid_shape, dtype=np.int64), axis=1))

    def within(self, axis: int | None, span: tuple[int, int] | None) -> CoordRefs:
        """The rows whose index along ``axis`` lies in ``span`` ``[lo, hi)`` (all without one)."""
        if axis is None or span is None or self.num_rows == 0:
            return self
        index = self.coords[:, axis]
        if axis in self._ascending:
            lo, hi = bisect_left(index, span[0]), bisect_left(index, span[1])
            return self._rows(lo, hi - lo)
        return self.where((index >= span[0]) & (index < span[1]))

    def without(self, drop: pa.Array | None) -> CoordRefs:
        """The rows whose coord is not in ``drop`` (coords a conflict gave to the other side)."""
        if drop is None or self.num_rows == 0:
            return self
        return self.where(~pc.is_in(self.table.column("coord"), drop).to_numpy())


def _all_decoded(parts: Sequence[CoordRefs]) -> bool:
    return all(p.decoded for p in parts)

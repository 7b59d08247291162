"""Overlaying ref tables of one array: later layers win per coord, tombstones delete.

A session's changes over its base snapshot's refs, staged writes over committed refs,
a fork's changes over its parent's: every overlay of refs is one merge, sorted by coord.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import RepeatedCoordError
from .coords import coord_keys, key_coord, keys_as_coords
from .locations import concat_refs
from .manifest import conform_layers, conform_refs, empty_refs, has_tombstones, is_tombstone


def merge_refs(
    layers: Sequence[pa.Table],
    ndim: int,
    drop_tombstones: bool = True,
    unordered: Collection[int] = (),
) -> pa.Table:
    """Overlay ref tables of one array, later layers winning per coord; drop tombstones.

    The result is sorted by coord. This runs without a Python loop per chunk: one stable sort on
    the coords, then a shifted comparison keeps the last row of each run of equal coords.

    ``unordered``: indices of layers whose rows have no order among themselves (the staged
    files of one write, from tasks that ran side by side). A coord twice in one of them has no
    winner, so it is refused.

    Raises:
        RepeatedCoordError: a layer in ``unordered`` holds a coord twice.
    """
    alone = sorted_alone(layers, ndim, drop_tombstones)
    if alone is not None:
        return alone
    spliced = None if unordered else splice(layers, ndim, drop_tombstones)
    if spliced is not None:
        return spliced.table()
    combined, rows = merge_order(layers, ndim, drop_tombstones, unordered)
    return take_rows(combined, rows)


def sorted_alone(layers: Sequence[pa.Table], ndim: int, drop_tombstones: bool) -> pa.Table | None:
    """The merge of ``layers`` when one alone holds rows, sorted by coord without repeats
    (and without tombstones, when they are dropped): that layer conformed, nothing to
    reorder, drop or copy (a piece of a bulk write); else ``None``. Also no row numbers:
    ten pieces on ten pool threads would each leave their arange in the thread's arena."""
    full = [t for t in layers if t.num_rows]
    if len(full) != 1:
        return None
    single = conform_refs(full[0])
    keys = coord_keys(single.column("coord"), ndim)
    if not bool(np.all(keys[1:] > keys[:-1])):
        return None
    if drop_tombstones and has_tombstones(single):
        return None
    return single


def take_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, or ``table`` itself when ``rows`` are all its rows in order (one
    layer sorted already and without repeats: the bulk write of a whole array), which spares
    a copy of every row."""
    return table if all_rows(rows, table.num_rows) else table.take(pa.array(rows))


def all_rows(rows: np.ndarray, count: int) -> bool:
    """Whether ``rows`` are ``0 .. count - 1`` in order."""
    if len(rows) != count or count == 0:
        return len(rows) == count
    # ``count`` strictly increasing ints from 0 to count - 1 are those: no arange to compare.
    return bool(rows[0] == 0 and rows[-1] == count - 1 and np.all(rows[1:] > rows[:-1]))


def merge_order(
    layers: Sequence[pa.Table],
    ndim: int,
    drop_tombstones: bool = True,
    unordered: Collection[int] = (),
) -> tuple[pa.Table, np.ndarray]:
    """``merge_refs`` as (the layers as one table, the rows of it the merge keeps, in order).

    For a caller that holds other per-row data of the layers (their decoded coords): the
    same rows of it, laid end to end in layer order, line up with the merged table.

    Raises:
        RepeatedCoordError: a layer in ``unordered`` holds a coord twice.
    """
    sizes = [t.num_rows for t in layers]
    layers = [t for t in layers if t.num_rows]
    if not layers:
        return empty_refs(), np.empty(0, dtype=np.int64)
    if len(layers) == 1 and layers[0].num_rows == 1:
        # One ref (a small array's one chunk): nothing to order or overlay. Thousands of
        # small arrays in a commit each take this path (~0.5 ms saved per array).
        single = conform_refs(layers[0])
        keep = not (drop_tombstones and is_tombstone(single)[0].as_py())
        return single, np.zeros(1 if keep else 0, dtype=np.int64)
    combined = concat_refs([conform_refs(t) for t in layers])
    combined = combined.combine_chunks()
    keys = coord_keys(combined.column("coord"), ndim)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    repeated = sorted_keys[:-1] == sorted_keys[1:]
    if unordered:
        # The stable sort keeps layer order within a run of equal coords, so two rows of one
        # layer at the same coord end up side by side.
        layer = np.repeat(np.arange(len(sizes)), sizes)[order]
        _refuse_repeats(
            repeated & (layer[:-1] == layer[1:]) & np.isin(layer[1:], list(unordered)),
            sorted_keys,
            ndim,
        )
    # Last occurrence of each coord: the row whose successor has a different coord.
    last = np.ones(len(order), dtype=bool)
    last[:-1] = ~repeated
    rows = order[last]
    if drop_tombstones and has_tombstones(combined):
        rows = rows[~is_tombstone(combined).to_numpy()[rows]]
    return combined, rows


def _refuse_repeats(twice: np.ndarray, sorted_keys: np.ndarray, ndim: int) -> None:
    """Raise for the first coord ``twice`` marks (row ``i`` repeats row ``i + 1``)."""
    if not twice.any():
        return
    first = int(np.argmax(twice))
    coord = key_coord(sorted_keys, first, ndim)
    # A coord given three times marks two neighbouring rows: count runs, not rows.
    runs = int(np.count_nonzero(twice[1:] & ~twice[:-1])) + int(twice[0])
    raise RepeatedCoordError(coord, runs)


# Later layers of at most this many rows in all are spliced into a sorted first layer
# (``splice``): a binary search per row and slices of the layer, where the general merge sorts
# and copies every row. The merge of one changed chunk into an array of 1 M refs: 65 -> 3 ms;
# of ten refs: 150 -> 65 us. Many more rows would make many slices.
SPLICE_MAX_ROWS = 64


@dataclass(frozen=True, slots=True)
class Splice:
    """A merge as runs of rows: ``base`` (one layer, sorted by coord without repeats) with
    ``changes`` (the later layers merged, one row a coord) put in at their coords. ``runs``:
    (from changes, first row, rows), in merged order."""

    base: pa.Table
    changes: pa.Table
    runs: tuple[tuple[bool, int, int], ...]
    base_keys: np.ndarray  # coord_keys of base and of changes, found while splicing
    change_keys: np.ndarray

    def table(self) -> pa.Table:
        """The merged rows; those of ``base`` are slices of it, not copies. Empty slices of
        both first give the result the general merge's columns, in its order, even when no
        row of ``changes`` is kept."""
        parts = [self.base.slice(0, 0), self.changes.slice(0, 0)]
        parts += [(self.changes if new else self.base).slice(a, n) for new, a, n in self.runs]
        return concat_refs(parts)

    def values(self, of_base: np.ndarray, of_changes: np.ndarray) -> np.ndarray:
        """Per-row values of ``base`` and ``changes`` (their coords), laid out as the rows."""
        parts = [of_base[:0]]
        parts += [(of_changes if new else of_base)[a : a + n] for new, a, n in self.runs]
        return np.concatenate(parts)

    def coords(self, ndim: int) -> np.ndarray:
        """The merged rows' coords (``coords_view``'s kind), from the keys the splice found:
        not decoded again from the merged table's coord column, whose chunks (one per
        slice) a decode would first combine."""
        coords = keys_as_coords(self.values(self.base_keys, self.change_keys), ndim)
        coords.flags.writeable = False  # as coords_view's: shared, never changed
        return coords


def splice(layers: Sequence[pa.Table], ndim: int, drop_tombstones: bool = True) -> Splice | None:
    """``merge_refs`` of ``layers`` as a ``Splice``, when it can be one: the first layer with
    rows is sorted by coord without repeats (an array's rows of a manifest, as written) and,
    when tombstones are dropped, holds none; the later ones hold at most ``SPLICE_MAX_ROWS``
    rows in all. Else ``None``."""
    full = [t for t in layers if t.num_rows]
    if len(full) < 2 or sum(t.num_rows for t in full[1:]) > SPLICE_MAX_ROWS:
        return None
    base = full[0]
    if drop_tombstones and has_tombstones(base):
        return None
    base_keys = coord_keys(base.column("coord"), ndim)
    if not bool(np.all(base_keys[1:] > base_keys[:-1])):
        return None
    # Tombstones kept: they delete rows of ``base``.
    changes = take_rows(*merge_order(full[1:], ndim, drop_tombstones=False))
    change_keys = coord_keys(changes.column("coord"), ndim)
    at = np.searchsorted(base_keys, change_keys)
    rows = len(base_keys)
    replaces = (at < rows) & (base_keys[np.minimum(at, rows - 1)] == change_keys)
    kept = (
        (~is_tombstone(changes).to_numpy()).tolist()
        if drop_tombstones and has_tombstones(changes)
        else [True] * changes.num_rows
    )
    runs: list[tuple[bool, int, int]] = []
    start = 0
    for row, (i, replaced) in enumerate(zip(at.tolist(), replaces.tolist(), strict=True)):
        if i > start:
            runs.append((False, start, i - start))
        if kept[row]:
            runs.append((True, row, 1))
        start = i + 1 if replaced else i
    if start < rows:
        runs.append((False, start, rows - start))
    base, changes = conform_layers([base, changes])
    return Splice(base, changes, tuple(runs), base_keys, change_keys)

"""Which chunks a values query needs: conditions on labels become index masks, the masks
choose the chunk boxes that intersect them, and conditions on values drop the boxes whose
chunk statistics rule them out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidInputError
from .labels import Comparison
from .layout import StoredValues, ValuesLayout

if TYPE_CHECKING:
    from ..core import BaseSession

# Decoded bounds are computed in float64, values decode to float32 perhaps: widen by this much
# (relative) before ruling a chunk out, so rounding never drops a chunk holding a match.
_SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class LabelCondition:
    """``dim op value`` (``op`` ``"in"``: ``value`` is a sequence of labels)."""

    dim: str
    op: Comparison | str
    value: Any


@dataclass(frozen=True, slots=True)
class ValueCondition:
    """``array op value`` on decoded values, answered per chunk by its statistics."""

    array: str
    op: Comparison
    value: float


@dataclass(frozen=True, eq=False)
class Selection:
    """Per dimension, the indexes a query keeps (``None``: all of them)."""

    masks: tuple[np.ndarray | None, ...]

    @classmethod
    def of(cls, layout: ValuesLayout, conditions: Iterable[LabelCondition]) -> Selection:
        """The indexes where every condition holds.

        Raises:
            InvalidInputError: a condition on a column that is not a dimension of the table.
        """
        masks: dict[str, np.ndarray] = {}
        by_name = {d.name: d for d in layout.dims}
        for c in conditions:
            dim = by_name.get(c.dim)
            if dim is None:
                raise InvalidInputError(
                    f"{c.dim!r} is not a dimension of this values table; its dimensions are "
                    f"{[d.name for d in layout.dims]}"
                )
            mask = dim.labels.where_in(c.value) if c.op == "in" else dim.labels.where(c.op, c.value)  # type: ignore[arg-type]
            masks[c.dim] = masks[c.dim] & mask if c.dim in masks else mask
        return cls(tuple(masks.get(d.name) for d in layout.dims))

    def chunk_indexes(self, layout: ValuesLayout) -> list[np.ndarray]:
        """Per dimension, the chunk indexes holding at least one selected index."""
        out = []
        for dim, mask in zip(layout.dims, self.masks, strict=True):
            if mask is None:
                out.append(np.arange(dim.chunks))
                continue
            starts = np.arange(0, dim.size, dim.chunk)
            hit = np.logical_or.reduceat(mask, starts) if dim.size else np.zeros(0, bool)
            out.append(np.flatnonzero(hit))
        return out

    def indexes(self, dim: int, start: int, stop: int) -> np.ndarray | slice:
        """The selected indexes of ``[start, stop)`` along dimension ``dim``."""
        mask = self.masks[dim]
        if mask is None or mask[start:stop].all():
            return slice(start, stop)
        return np.flatnonzero(mask[start:stop]) + start

    def is_empty(self) -> bool:
        return any(m is not None and not m.any() for m in self.masks)


def chunk_boxes(
    layout: ValuesLayout,
    selection: Selection,
    ruled_out: Mapping[str, set[tuple[int, ...]]] | None = None,
) -> list[tuple[int, ...]]:
    """The chunk coords a query reads, in C order: those the selection touches, less the ones
    the statistics of some array rule out."""
    if selection.is_empty():
        return []
    dropped = set().union(*ruled_out.values()) if ruled_out else set()
    grid = selection.chunk_indexes(layout)
    return [b for b in itertools.product(*(g.tolist() for g in grid)) if b not in dropped]


def ruled_out_by_stats(
    session: BaseSession, layout: ValuesLayout, conditions: Sequence[ValueCondition]
) -> dict[str, set[tuple[int, ...]]]:
    """Per array, the chunk coords whose statistics show no value meeting its conditions.

    The statistics are of stored values; a column holds them decoded (``StoredValues``). A
    chunk without statistics (never written, virtual, an edge chunk, statistics off) is never
    ruled out. NaN, and a fill value that decodes to null, meet no condition.
    """
    out: dict[str, set[tuple[int, ...]]] = {}
    for name in {c.array for c in conditions}:
        array = layout.array(name)
        mine = [c for c in conditions if c.array == name]
        stats = session.chunk_stats(array.path)
        columns = [stats.column(c).to_pylist() for c in ("coord", "stat_min", "stat_max")]
        fills = stats.column("stat_fill_count").to_pylist()
        out[name] = {
            tuple(coord)
            for coord, lo, hi, fill in zip(*columns, fills, strict=True)
            if _rules_out(lo, hi, fill, array.stored, mine)
        }
    return out


def _rules_out(
    lo: float | None,
    hi: float | None,
    fills: int | None,
    stored: StoredValues,
    conditions: Sequence[ValueCondition],
) -> bool:
    if fills is None:
        return False  # no statistics
    # The statistics leave out fill values: count them back in where they read as a number.
    if fills and not stored.fill_is_null and stored.fill is not None:
        lo = stored.fill if lo is None else min(lo, stored.fill)
        hi = stored.fill if hi is None else max(hi, stored.fill)
    if lo is None or hi is None:
        return True  # statistics, and no value that reads as a number: all null
    a, b = lo * stored.scale + stored.offset, hi * stored.scale + stored.offset
    low, high = min(a, b), max(a, b)
    slack = _SLACK * max(abs(low), abs(high), 1.0)
    low, high = low - slack, high + slack
    return any(not _may_hold(low, high, c) for c in conditions)


def _may_hold(low: float, high: float, c: ValueCondition) -> bool:
    """Whether some value in ``[low, high]`` may meet ``c``."""
    v = c.value
    if math.isnan(v):
        return False
    if c.op == "=":
        return low <= v <= high
    if c.op == ">":
        return high > v
    if c.op == ">=":
        return high >= v
    if c.op == "<":
        return low < v
    return low <= v  # "<="


def partitions_of(
    boxes: Sequence[tuple[int, ...]], per_partition: int
) -> Iterator[list[tuple[int, ...]]]:
    """Boxes in groups of ``per_partition``, in order."""
    for start in range(0, len(boxes), per_partition):
        yield list(boxes[start : start + per_partition])

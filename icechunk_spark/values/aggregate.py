"""Exact aggregates over a box in label space, reading only the chunks its edges cut.

A chunk wholly inside the selection contributes its statistics (``stat_count``, ``stat_sum``,
``stat_min``, ``stat_max``); a chunk never written holds only fill values and contributes
nothing; the others (cut by an edge of the selection, or without statistics: virtual, an edge
of the array, written before statistics were on) are read. The aggregates are of the stored
values (as the codecs decode them), leaving out NaN, the fill value and the values CF marks
missing, as the statistics count them, then scaled as the values column is (``scale_factor``,
``add_offset``): ``mean`` is what numpy gives on the values xarray reads, up to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidInputError
from .layout import ValuesLayout, open_dataset, values_layout
from .plan import LabelCondition, Selection, chunk_boxes

if TYPE_CHECKING:
    from ..core import BaseSession

FUNCS = ("count", "sum", "mean", "min", "max")


@dataclass(frozen=True, slots=True)
class Partial:
    """Count, sum, min and max of some valid values (min/max ``None`` when none)."""

    count: int = 0
    sum: float = 0.0
    min: float | None = None
    max: float | None = None

    def __add__(self, other: Partial) -> Partial:
        return Partial(
            self.count + other.count,
            self.sum + other.sum,
            _pick(min, self.min, other.min),
            _pick(max, self.max, other.max),
        )

    @classmethod
    def of(cls, values: np.ndarray, missing: Sequence[float]) -> Partial:
        """Of the values that are none of ``missing`` (NaN among them: never a value)."""
        flat = np.asarray(values).reshape(-1)
        if flat.dtype.kind not in "biuf":
            raise InvalidInputError(f"values of dtype {flat.dtype} have no sum or order")
        valid = ~np.isnan(flat) if flat.dtype.kind == "f" else np.ones(flat.shape, bool)
        for value in missing:
            if not math.isnan(value):
                valid &= flat != value
        kept = flat[valid]
        if not kept.size:
            return cls()
        return cls(
            int(kept.size), float(kept.sum(dtype=np.float64)), float(kept.min()), float(kept.max())
        )

    def answer(
        self, funcs: Sequence[str], scale: float = 1.0, offset: float = 0.0
    ) -> dict[str, float | int | None]:
        """The aggregates, of ``stored * scale + offset`` (linear: exact up to rounding)."""
        ends = [v * scale + offset if v is not None else None for v in (self.min, self.max)]
        low, high = ends if scale >= 0 else ends[::-1]
        total = self.sum * scale + offset * self.count
        values: dict[str, float | int | None] = {
            "count": self.count,
            "sum": total,
            "mean": total / self.count if self.count else None,
            "min": low,
            "max": high,
        }
        return {f: values[f] for f in funcs}


@dataclass(frozen=True, eq=False)
class AggregatePlan:
    """What statistics answer already, and the chunk boxes left to read."""

    layout: ValuesLayout
    selection: Selection
    known: Partial
    boxes: tuple[tuple[int, ...], ...]
    inside: int  # chunks answered by their statistics (or never written)

    def answer(
        self, total: Partial, funcs: Sequence[str], decode: bool
    ) -> dict[str, float | int | None]:
        stored = self.layout.arrays[0].stored
        return total.answer(funcs, stored.scale, stored.offset) if decode else total.answer(funcs)


def plan_aggregate(
    session: BaseSession, group: str, array: str, where: Mapping[str, tuple[Any, Any]]
) -> AggregatePlan:
    """Split the chunks ``where`` selects into those statistics answer and those to read.

    ``where``: per dimension, ``(lo, hi)`` labels, both included (``None``: open end).

    Raises:
        InvalidInputError: a dimension the array does not have.
    """
    # Labels decoded (``where`` is in label space), values read stored (``read_partial``).
    layout = values_layout(session, group, [array])
    selection = Selection.of(layout, _conditions(where))
    node = session.get_node(layout.arrays[0].path)
    stats = session.chunk_stats(node.path)
    known, inside, read = Partial(), 0, []
    by_coord = _stats_by_coord(stats)
    written = {tuple(c) for c in stats.column("coord").to_pylist()}
    for box in chunk_boxes(layout, selection):
        if not _wholly_selected(layout, selection, box):
            read.append(box)
        elif box not in written:
            inside += 1  # only fill values: nothing to count
        elif (partial := by_coord.get(box)) is not None:
            known, inside = known + partial, inside + 1
        else:
            read.append(box)
    return AggregatePlan(layout, selection, known, tuple(read), inside)


def read_partial(
    session: BaseSession, plan: AggregatePlan, boxes: Iterable[tuple[int, ...]]
) -> Partial:
    """The aggregate of the selected values of ``boxes``, read from storage."""
    from .blocks import selected_values

    layout = plan.layout
    ds = open_dataset(session, layout.group, decode=False)
    missing = layout.arrays[0].stored.missing()
    total = Partial()
    for box in boxes:
        values = selected_values(ds, layout, plan.selection, box, layout.arrays[0].name)
        total = total + Partial.of(values, missing)
    return total


def aggregate(
    session: BaseSession,
    array: str,
    where: Mapping[str, tuple[Any, Any]] | None = None,
    funcs: Sequence[str] = FUNCS,
    group: str = "/",
    decode: bool = True,
) -> dict[str, float | int | None]:
    """``count``/``sum``/``mean``/``min``/``max`` of ``array`` over ``where``, exactly, from
    chunk statistics where a chunk lies wholly inside, reading only the others; ``decode``:
    in the units of the column (``scale_factor``, ``add_offset``), else of the stored values.

    >>> july = {"time": ("2001-07-01", "2001-07-31")}
    >>> aggregate(session, "tas", july, ["mean"])  # doctest: +SKIP
    """
    check_funcs(funcs)
    plan = plan_aggregate(session, group, array, where or {})
    total = plan.known + read_partial(session, plan, plan.boxes)
    return plan.answer(total, funcs, decode)


def check_funcs(funcs: Sequence[str]) -> None:
    unknown = [f for f in funcs if f not in FUNCS]
    if unknown or not funcs:
        raise InvalidInputError(f"funcs {list(funcs)}: choose among {list(FUNCS)}")


def _conditions(where: Mapping[str, tuple[Any, Any]]) -> list[LabelCondition]:
    out = []
    for dim, bounds in where.items():
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise InvalidInputError(f"where[{dim!r}] must be (lo, hi), not {bounds!r}")
        lo, hi = bounds
        if lo is not None:
            out.append(LabelCondition(dim, ">=", lo))
        if hi is not None:
            out.append(LabelCondition(dim, "<=", hi))
    return out


def _wholly_selected(layout: ValuesLayout, selection: Selection, box: tuple[int, ...]) -> bool:
    for axis, (dim, c) in enumerate(zip(layout.dims, box, strict=True)):
        start, stop = c * dim.chunk, (c + 1) * dim.chunk
        if stop > dim.size:
            return False  # an edge chunk: its statistics cover values outside the array
        if not isinstance(selection.indexes(axis, start, stop), slice):
            return False
    return True


def _stats_by_coord(stats: Any) -> dict[tuple[int, ...], Partial]:
    """Per chunk with full statistics, its partial aggregate."""
    columns = ("coord", "stat_count", "stat_sum", "stat_min", "stat_max")
    present = [c for c in columns if c in stats.column_names]
    if len(present) < len(columns):
        return {}  # statistics without counts and sums (older manifests): read every chunk
    out = {}
    for coord, count, total, lo, hi in zip(
        *(stats.column(c).to_pylist() for c in columns), strict=True
    ):
        if count is not None and total is not None:
            out[tuple(coord)] = Partial(int(count), float(total), lo, hi)
    return out


def _pick(
    choose: Callable[[float, float], float], a: float | None, b: float | None
) -> float | None:
    if a is None:
        return b
    return a if b is None else choose(a, b)

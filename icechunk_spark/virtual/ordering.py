"""The order of files along the concat dimension: their coordinate's (time's) order, never
their names' (issue 26).

xarray's documented reading of many files, ``open_mfdataset(files, combine="by_coords")``,
orders them by the first value of the dimension's coordinate and refuses a result whose
index does not increase ("Resulting object does not have monotonic global indexes"). Every
virtual import does the same through this module: ``import_netcdf`` (and with it
``icechunk-spark import``) on the files it scanned, the Spark ingest's driver on the
per-file summaries (``file_rows.FileSummary.span``: first and last values, read on the
executors, so the driver opens no file).

Rules, checked before anything is written:

- each file's coordinate must strictly increase (a time twice, or times out of order, are
  refused, naming the file and the two values);
- files are ordered by their first value, decoded to one set of units (CF time units may
  differ per file: "days since" each file's own date);
- each file must start after the previous one ends. A file repeating another's times, or
  starting inside its range, is refused naming both files and the times. Stricter than
  xarray, which merges a file repeating another's times exactly (keeping one) and keeps a
  repeated boundary time (``[1, 2, 3] + [3, 4]``): here one time is one index;
- an append (``after``: the dataset's last value) must start after the dataset ends; a file
  falling before or inside it is refused (``icechunk-spark import`` rebuilds the dataset
  and so places such a file where it belongs, if it overlaps nothing);
- files without values along the dimension lie anywhere (they add nothing); when no file
  has the coordinate, the order given (names, sorted) is kept: there is nothing to order by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from typing import Any

import numpy as np

from ..errors import CoordinateOrderError, InvalidInputError
from .time_units import is_time_units, parse_time_units, rebase_time_values

# A coordinate value: a number, or a label (a string); compared only with values of the
# same coordinate, so of one kind.
Value = Any


@dataclass(frozen=True, slots=True)
class Span:
    """Where one file lies along the concat coordinate: its first and last raw values (in
    its own ``units``), or ``None`` when it has no values there, and why its values do not
    increase, if they do not."""

    file: str
    first: Value | None
    last: Value | None
    units: str | None
    calendar: str | None
    disorder: str | None = None


def coordinate_path(dims_by_path: Mapping[str, Sequence[str] | None], dim: str) -> str | None:
    """The array holding ``dim``'s coordinate: 1-D along ``dim`` and named like it, the
    shallowest if several groups have one; ``None`` if no array is."""
    found = [
        path
        for path, dims in dims_by_path.items()
        if dims is not None and tuple(dims) == (dim,) and path.rsplit("/", 1)[-1] == dim
    ]
    return min(found, key=lambda p: (p.strip("/").count("/"), p), default=None)


def span_of(file: str, values: np.ndarray, attrs: Mapping[str, Any]) -> Span:
    """A file's :class:`Span` from its coordinate's raw values and attributes."""
    units, calendar = attrs.get("units"), attrs.get("calendar")
    flat = np.asarray(values).ravel()
    if flat.size == 0:
        return Span(file, None, None, _text(units), _text(calendar))
    first, last = _scalar(flat[0]), _scalar(flat[-1])
    return Span(file, first, last, _text(units), _text(calendar), _disorder(flat, units, calendar))


def _scalar(value: Any) -> Any:
    """A Python value: numpy scalars unwrapped (an object array's strings are already)."""
    return value.item() if isinstance(value, np.generic) else value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _disorder(values: np.ndarray, units: Any, calendar: Any) -> str | None:
    if np.issubdtype(values.dtype, np.floating) and np.isnan(values).any():
        return "a missing (NaN) value"
    bad = np.flatnonzero(~(values[1:] > values[:-1]))
    if bad.size == 0:
        return None
    pair = values[bad[0] : bad[0] + 2]
    a, b = (_show(_scalar(v), _text(units), _text(calendar)) for v in pair)
    return f"{a} twice" if a == b else f"{a} followed by {b}"


def order_spans(
    spans: Sequence[Span | None],
    dim: str,
    *,
    after: Span | None = None,
    names: Sequence[str] | None = None,
) -> list[int]:
    """Indices of ``spans`` (``None``: that file has no coordinate of ``dim``) in the order
    of their coordinate, checked as the module says; ``after``: the dataset appended to;
    ``names``: the files', for a message about one without the coordinate.

    >>> order_spans([Span("b", 2, 2, None, None), Span("a", 1, 1, None, None)], "x")
    [1, 0]

    Raises:
        CoordinateOrderError: a file's values do not increase, two files overlap, or a file
            does not start after ``after`` (naming the files and the values).
        InvalidInputError: only some files have the coordinate, or the files' units or
            calendars differ other than CF time units.
    """
    if all(s is None for s in spans):
        return list(range(len(spans)))
    missing = [k for k, s in enumerate(spans) if s is None]
    if missing:
        name = repr(names[missing[0]]) if names else f"file {missing[0]}"
        raise InvalidInputError(
            f"{name} has no coordinate {dim!r} though other files have: files can only be "
            f"ordered along {dim!r} when each has its coordinate"
        )
    present = [s for s in spans if s is not None]
    for span in present:
        if span.disorder is not None:
            raise CoordinateOrderError(
                f"{span.file!r}: its {dim!r} does not increase ({span.disorder}). "
                f"{_NOT_MONOTONIC} Fix the file's times",
                (span.file,),
            )
    reference = after or present[0]
    keys = [_key(s, reference) for s in present]
    placed = sorted(
        ((k, key) for k, key in enumerate(keys) if key is not None), key=lambda p: p[1][0]
    )  # stable: equal starts keep their order, and are refused below
    _check_disjoint([(present[k], key) for k, key in placed], dim, after)
    return [k for k, key in enumerate(keys) if key is None] + [k for k, _ in placed]


_NOT_MONOTONIC = (
    "Files are combined in the order of their coordinate and the result must strictly "
    'increase (xarray: "Resulting object does not have monotonic global indexes"). '
    "Nothing was imported."
)


def _check_disjoint(
    placed: Sequence[tuple[Span, tuple[Value, Value]]], dim: str, after: Span | None
) -> None:
    """Each file (in order, with its first and last value in common units) starts after the
    previous one, the first after ``after``."""
    if placed and after is not None and after.last is not None:
        span, (start, _) = placed[0]
        if not start > after.last:
            raise CoordinateOrderError(
                f"{span.file!r} starts at {_start(span)}, not after the last {dim!r} the "
                f"dataset holds ({_show(after.last, after.units, after.calendar)}): an ingest "
                "only appends, and a file before or inside the dataset's range is refused. "
                f"{_NOT_MONOTONIC} Remove the file, or rebuild the dataset with "
                "'icechunk-spark import' (which places a file that overlaps nothing where it "
                "belongs)",
                (span.file,),
            )
    for (before, (_, end)), (span, (start, _)) in pairwise(placed):
        if not start > end:
            raise CoordinateOrderError(
                f"{before.file!r} and {span.file!r} overlap along {dim!r} (times repeated "
                f"or interleaved): the second starts at {_start(span)}, not after the first ends "
                f"({_show(before.last, before.units, before.calendar)}). {_NOT_MONOTONIC} "
                "Remove one of the files or fix its times",
                (before.file, span.file),
            )


def _start(span: Span) -> str:
    return _show(span.first, span.units, span.calendar)


def _key(span: Span, reference: Span) -> tuple[Value, Value] | None:
    """``span``'s first and last values in ``reference``'s units, comparable across files."""
    if span.first is None or span.last is None:
        return None
    if span.calendar != reference.calendar:
        raise InvalidInputError(
            f"{span.file!r}: calendar {span.calendar!r}, but {reference.calendar!r} in "
            f"{reference.file!r}; the files cannot be combined"
        )
    if span.units == reference.units:
        return span.first, span.last
    if not (is_time_units(span.units) and is_time_units(reference.units)):
        raise InvalidInputError(
            f"{span.file!r}: units {span.units!r}, but {reference.units!r} in "
            f"{reference.file!r}; the files cannot be combined"
        )
    assert span.units is not None and reference.units is not None
    pair = np.array([span.first, span.last], np.float64)
    first, last = rebase_time_values(pair, span.units, reference.units, span.calendar, span.file)
    return float(first), float(last)


def _show(value: Value | None, units: str | None, calendar: str | None) -> str:
    """A value for people: the date of a CF time in a Gregorian calendar, with its raw form."""
    raw = f"{value!r} {units}" if units else repr(value)
    if (
        value is None
        or not is_time_units(units)
        or (calendar or "standard").lower()
        not in (
            "standard",
            "gregorian",
            "proleptic_gregorian",
        )
    ):
        return raw
    assert units is not None
    try:
        step, reference = parse_time_units(units)
        when = reference + timedelta(seconds=float(value) * step)
    except (InvalidInputError, OverflowError, ValueError):
        return raw
    return f"{when.replace(tzinfo=None).isoformat(sep=' ')} ({raw})"


__all__ = ["Span", "coordinate_path", "order_spans", "span_of"]

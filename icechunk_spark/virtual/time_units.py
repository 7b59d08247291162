"""CF time coordinates whose units differ between files ("days since <each file's date>").

Writers such as xarray pick each file's units from its own first time, so daily files hold
``0`` in ``days since 2024-03-01``, ``0`` in ``days since 2024-03-02``… Concatenating the raw
numbers would label every day with the first one's date: the values are re-expressed in the
first file's units instead. Only the Gregorian calendars are converted (their reference
dates are a plain number of seconds apart); other calendars with differing units are refused
rather than guessed at.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import numpy as np

from ..errors import InvalidInputError

_SECONDS = {
    **dict.fromkeys(("days", "day", "d"), 86_400.0),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), 3_600.0),
    **dict.fromkeys(("minutes", "minute", "mins", "min"), 60.0),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), 1.0),
    **dict.fromkeys(("milliseconds", "millisecond", "msecs", "msec", "ms"), 1e-3),
    **dict.fromkeys(("microseconds", "microsecond", "usecs", "usec", "us"), 1e-6),
}
_GREGORIAN = {"standard", "gregorian", "proleptic_gregorian"}
_GREGORIAN_START = datetime(1582, 10, 15, tzinfo=UTC)  # "standard" is Julian before this
_UNITS = re.compile(
    r"^\s*(?P<unit>\w+)\s+since\s+(?P<y>-?\d{1,4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})"
    r"(?:[ T](?P<H>\d{1,2}):(?P<M>\d{1,2})(?::(?P<S>\d{1,2}(?:\.\d*)?))?)?"
    r"\s*(?:Z|UTC|GMT|[+-]0{1,2}(?::?00)?)?\s*$",
    re.IGNORECASE,
)


def is_time_units(units: object) -> bool:
    return isinstance(units, str) and " since " in units.lower()


def parse_time_units(units: str) -> tuple[float, datetime]:
    """``(seconds per unit, reference date)`` of CF units like ``hours since 2000-1-1 6:00``.

    Raises:
        InvalidInputError: not CF time units this module understands.
    """
    match = _UNITS.match(units)
    if match is None or match["unit"].lower() not in _SECONDS:
        raise InvalidInputError(f"cannot read CF time units {units!r}")
    seconds = float(match["S"] or 0)
    reference = datetime(
        int(match["y"]),
        int(match["m"]),
        int(match["d"]),
        int(match["H"] or 0),
        int(match["M"] or 0),
        tzinfo=UTC,
    ) + timedelta(seconds=seconds)
    return _SECONDS[match["unit"].lower()], reference


def rebase_time_values(
    values: np.ndarray, units: str, target_units: str, calendar: str | None, where: str
) -> np.ndarray:
    """``values`` in ``units``, re-expressed in ``target_units``, in the same dtype.

    Raises:
        InvalidInputError: a calendar other than the Gregorian ones, unreadable units, or
            integer values that the new units cannot hold exactly.
    """
    if units == target_units:
        return values
    name = (calendar or "standard").lower()
    if name not in _GREGORIAN:
        raise InvalidInputError(
            f"{where}: time units differ between files ({units!r} vs {target_units!r}) in "
            f"calendar {calendar!r}; only Gregorian calendars are converted"
        )
    step, reference = parse_time_units(units)
    target_step, target_reference = parse_time_units(target_units)
    if name != "proleptic_gregorian" and min(reference, target_reference) < _GREGORIAN_START:
        raise InvalidInputError(
            f"{where}: time units {units!r} and {target_units!r} straddle the Julian calendar "
            f"of {calendar!r}; cannot convert"
        )
    offset = (reference - target_reference).total_seconds()
    converted = (values.astype(np.float64) * step + offset) / target_step
    if np.issubdtype(values.dtype, np.integer):
        rounded = np.round(converted)
        if not np.allclose(converted, rounded, rtol=0, atol=1e-9):
            raise InvalidInputError(
                f"{where}: integer times in {units!r} are not whole numbers in "
                f"{target_units!r}; cannot concatenate without losing precision"
            )
        converted = rounded
    return converted.astype(values.dtype)


__all__ = ["is_time_units", "parse_time_units", "rebase_time_values"]

"""The two shapes of rows a write takes, checked on the DataFrame's schema before any task.

``data`` rows: ``array``, ``coord``, ``data`` (a chunk's raw bytes). ``virtual`` rows: ``array``,
``coord``, ``location``, ``offset``, ``length``, optional ``checksum`` and ``inline_data``.
Other columns are left alone (a scan may carry the ``file`` a row came from). A column of the
wrong type used to be written anyway (strings as their UTF-8 bytes), and a frame with both
shapes' columns kept the data and dropped the ref: both are refused once, at plan time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import pyarrow as pa

from ..errors import InvalidInputError

RowKind = Literal["virtual", "data"]
_VIRTUAL_MARKERS = ("location", "offset", "length")

_Check = tuple[Callable[[pa.DataType], bool], str]
_STRING: _Check = (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "a string")
_BINARY: _Check = (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "binary")
_INTEGER: _Check = (pa.types.is_integer, "an integer")
_COORD: _Check = (
    lambda t: (
        ((pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type))
        or _BINARY[0](t)
    ),
    "an array of integers (or encoded binary coords)",
)
_COLUMNS: dict[RowKind, dict[str, _Check]] = {
    "data": {"array": _STRING, "coord": _COORD, "data": _BINARY},
    "virtual": {
        "array": _STRING,
        "coord": _COORD,
        "location": _STRING,
        "offset": _INTEGER,
        "length": _INTEGER,
        "checksum": _STRING,
        "inline_data": _BINARY,
    },
}


def row_kind(columns: Sequence[str]) -> RowKind:
    """``data`` rows (array, coord, data) or ``virtual`` rows (array, coord, location, ...)."""
    names = set(columns)
    missing_base = {"array", "coord"} - names
    if missing_base:
        raise InvalidInputError(
            f"rows to write need the columns 'array' and 'coord'; missing {sorted(missing_base)}"
        )
    markers = sorted(names & set(_VIRTUAL_MARKERS))
    if "data" in names and markers:
        raise InvalidInputError(
            f"rows have both a 'data' column and virtual ref columns {markers}: a row is either "
            "a chunk's bytes or a reference; write them in separate writes"
        )
    if "data" in names:
        return "data"
    if "location" in names:
        missing = set(_VIRTUAL_MARKERS) - names
        if missing:
            raise InvalidInputError(
                "virtual ref rows need 'location', 'offset' and 'length'; "
                f"missing {sorted(missing)}"
            )
        return "virtual"
    raise InvalidInputError(
        "rows to write need either a 'data' column (raw chunk bytes) or 'location', 'offset' "
        f"and 'length' columns (virtual refs); got {sorted(names)}"
    )


def check_row_schema(schema: pa.Schema) -> RowKind:
    """The rows' kind, after checking every column of that shape has the right type.

    Raises:
        InvalidInputError: a missing column, columns of both shapes, or a wrong type.
    """
    kind = row_kind(schema.names)
    for name, (accepts, expected) in _COLUMNS[kind].items():
        if name in schema.names and not accepts(schema.field(name).type):
            raise InvalidInputError(
                f"column {name!r} is {schema.field(name).type}; {kind} rows need {expected} "
                f"there (cast it, e.g. df.withColumn({name!r}, ...))"
            )
    return kind


__all__ = ["RowKind", "check_row_schema", "row_kind"]

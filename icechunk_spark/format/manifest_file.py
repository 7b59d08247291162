"""Partial manifest reads: a manifest's footer parsed, its row groups decoded on demand.

A point lookup or a scan that prunes by statistics decodes only the row groups that may hold
what it wants (``format.manifest`` sorts rows by array then coord, so an array's rows sit in a
few consecutive groups).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import FormatError
from .manifest import REF_SCHEMA, with_inline_lengths


@dataclass(frozen=True, slots=True)
class ColumnBounds:
    """A column's statistics in one row group; ``min``/``max`` are ``None`` when unrecorded."""

    min: Any
    max: Any
    null_count: int | None


@dataclass(frozen=True, slots=True)
class RowGroupBounds:
    """What one row group's statistics say about where its rows are."""

    rows: int
    array_ids: ColumnBounds
    coords: ColumnBounds

    def may_hold_array(self, array_id: int) -> bool:
        lo, hi = self.array_ids.min, self.array_ids.max
        return lo is None or hi is None or lo <= array_id <= hi

    def may_hold(self, array_id: int, coord: bytes) -> bool:
        """Whether the row of ``(array_id, coord)`` may be here (``False`` only when certain)."""
        if not self.may_hold_array(array_id):
            return False
        if not self.array_ids.min == array_id == self.array_ids.max:
            return True  # the coord statistics mix several arrays' coords
        lo, hi = self.coords.min, self.coords.max
        return lo is None or hi is None or lo <= coord <= hi


def column_bounds(metadata: pq.FileMetaData, column: str) -> list[ColumnBounds]:
    """Per row group, the statistics of ``column`` (unknown ones as ``None``)."""
    index = metadata.schema.to_arrow_schema().get_field_index(column)
    bounds = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(index).statistics if index >= 0 else None
        if stats is None:
            bounds.append(ColumnBounds(None, None, None))
            continue
        nulls = stats.null_count if stats.has_null_count else None
        if stats.has_min_max:
            bounds.append(ColumnBounds(stats.min, stats.max, nulls))
        else:
            bounds.append(ColumnBounds(None, None, nulls))
    return bounds


def row_group_bounds(metadata: pq.FileMetaData) -> list[RowGroupBounds]:
    """The array and coord bounds of every row group of a manifest."""
    ids = column_bounds(metadata, "array_id")
    coords = column_bounds(metadata, "coord")
    return [
        RowGroupBounds(metadata.row_group(i).num_rows, ids[i], coords[i])
        for i in range(metadata.num_row_groups)
    ]


# String columns kept dictionary-encoded when read in row groups: their values repeat (one
# file or container path for many refs), and a reader that only tests them for null, or
# takes one value, never pays for the strings.
_DICTIONARIES = ["chunk_id", "virtual_path", "checksum"]


class ManifestFile:
    """A manifest's bytes with only the footer parsed: row groups are decoded on demand.

    A point lookup decodes the one row group whose statistics may hold its coord (rows are
    sorted by array then coord, so there is one, or two where a coord sits on a boundary);
    manifests of any row-group size read the same way, only slower when the groups are big.
    """

    def __init__(self, source: bytes | pq.ParquetFile, name: str) -> None:
        """``source``: the manifest's bytes, or a Parquet file opened over ranged reads."""
        data = source if isinstance(source, bytes) else None
        try:
            self._parquet = (
                pq.ParquetFile(
                    pa.BufferReader(source), pre_buffer=False, read_dictionary=_DICTIONARIES
                )
                if isinstance(source, bytes)
                else source
            )
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise FormatError(
                f"{name!r} is not a readable Parquet file (corrupt or truncated): {exc}"
            ) from exc
        names = self._parquet.schema_arrow.names
        missing = [n for n in REF_SCHEMA.names if n not in names]
        if missing:
            raise FormatError(f"{name!r} lacks the columns {missing}; it is not a manifest")
        self.name = name
        self.data = data  # None when read through a file
        self.columns: tuple[str, ...] = tuple(names)
        self.groups = row_group_bounds(self._parquet.metadata)
        self._bounds: dict[str, list[ColumnBounds]] = {}
        # pyarrow's ParquetFile is not documented as safe for concurrent reads.
        self._lock = threading.Lock()

    @property
    def metadata(self) -> pq.FileMetaData:
        return self._parquet.metadata

    def bounds(self, column: str) -> list[ColumnBounds]:
        """Per row group, the statistics of ``column`` (all unknown if there is no such column)."""
        with self._lock:
            found = self._bounds.get(column)
            if found is None:
                found = self._bounds[column] = column_bounds(self._parquet.metadata, column)
        return found

    def groups_holding(self, array_id: int, coord: bytes) -> list[int]:
        """Row groups that may hold the ref of ``coord`` in array ``array_id``."""
        return [i for i, g in enumerate(self.groups) if g.may_hold(array_id, coord)]

    def groups_of_array(self, array_id: int) -> list[int]:
        """Row groups that may hold refs of array ``array_id``."""
        return [i for i, g in enumerate(self.groups) if g.may_hold_array(array_id)]

    def read_groups(self, groups: Sequence[int], columns: Sequence[str] | None = None) -> pa.Table:
        """Rows of the given row groups (only ``columns`` of them, when given).

        Raises:
            FormatError: the row groups do not decode.
        """
        wanted = list(columns) if columns is not None else None
        try:
            with self._lock:
                table = self._parquet.read_row_groups(list(groups), wanted, use_threads=False)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise FormatError(f"{self.name!r} has row groups that do not decode: {exc}") from exc
        if {"inline_data", "length"} <= set(table.column_names):
            table = with_inline_lengths(table)
        return table

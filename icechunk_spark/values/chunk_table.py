"""The chunk statistics of some arrays in label space: seed 003's MetaArray as a table.

One row per written chunk: the array, its chunk coords, per dimension the first and last label
the chunk covers (``time_start``, ``time_end``, ...; an edge chunk ends at the array's last
label), and its ``stat_*`` columns (null where unknown). A chunk never written has no row, so
"do we have July 2022 data for this box" is a ``count()`` of rows whose label ranges meet it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..format.manifest import STAT_FIELDS
from .blocks import label_column
from .layout import ValuesLayout, arrow_type, values_layout

if TYPE_CHECKING:
    from ..core import BaseSession


def chunk_stats_schema(layout: ValuesLayout) -> pa.Schema:
    fields = [pa.field("array", pa.string()), pa.field("coord", pa.list_(pa.int64()))]
    for dim in layout.dims:
        kind = arrow_type(dim.labels.values.dtype)
        fields += [pa.field(f"{dim.name}_start", kind), pa.field(f"{dim.name}_end", kind)]
    return pa.schema(fields + list(STAT_FIELDS))


def chunk_stats_table(session: BaseSession, group: str, arrays: Sequence[str]) -> pa.Table:
    """The table of the module doc for ``arrays`` of ``group`` (sharing their dimensions)."""
    layout = values_layout(session, group, arrays)
    schema = chunk_stats_schema(layout)
    parts = [_array_rows(session, layout, a.name, a.path, schema) for a in layout.arrays]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _array_rows(
    session: BaseSession, layout: ValuesLayout, name: str, path: str, schema: pa.Schema
) -> pa.Table:
    stats = session.chunk_stats(path)
    coords = np.asarray(stats.column("coord").to_pylist(), dtype=np.int64).reshape(
        stats.num_rows, len(layout.dims)
    )
    columns: list[pa.Array] = [
        pa.array([name] * stats.num_rows, pa.string()),
        pa.array(coords.tolist(), pa.list_(pa.int64())),
    ]
    for axis, dim in enumerate(layout.dims):
        first = coords[:, axis] * dim.chunk
        last = np.minimum(first + dim.chunk, dim.size) - 1
        columns.append(label_column(dim.labels.values[first]))
        columns.append(label_column(dim.labels.values[last]))
    for f in STAT_FIELDS:
        column = stats.column(f.name) if f.name in stats.column_names else pa.nulls(stats.num_rows)
        columns.append(column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)

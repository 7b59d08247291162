"""Chunk manifests: Parquet tables mapping (array, chunk coord) to the chunk's bytes.

A ref is exactly one of: **inline** (``inline_data``), **native** (``chunk_id`` of a chunk file
in ``c/`` with ``offset``/``length``), or **virtual** (``virtual_path`` into another file with
``offset``/``length`` and an optional ``checksum``). A row with none of the three is a
*tombstone*: it only ever appears in a session's change set, to delete a chunk.

Rows are sorted by ``array_id`` then ``coord`` so Parquet row-group statistics prune by array
and lookups are binary searches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .coords import coord_keys
from .parquet import parquet_to_table, table_to_parquet

REF_FIELDS = [
    pa.field("array_id", pa.uint64(), nullable=False),
    pa.field("coord", pa.binary(), nullable=False),
    pa.field("inline_data", pa.binary()),
    pa.field("chunk_id", pa.string()),
    pa.field("virtual_path", pa.string()),
    pa.field("offset", pa.uint64()),
    pa.field("length", pa.uint64()),
    pa.field("checksum", pa.string()),
]
REF_SCHEMA = pa.schema(REF_FIELDS)
ROW_GROUP_SIZE = 256 * 1024


def empty_refs() -> pa.Table:
    return REF_SCHEMA.empty_table()


def conform_refs(table: pa.Table) -> pa.Table:
    """Add missing optional columns as nulls and order/cast columns to ``REF_SCHEMA``.

    Extra columns (chunk statistics) are kept after the ref columns.
    """
    n = table.num_rows
    columns = []
    for f in REF_FIELDS:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    extra = [c for c in table.column_names if c not in REF_SCHEMA.names]
    names = [*REF_SCHEMA.names, *extra]
    arrays = [*columns, *(table.column(c) for c in extra)]
    return pa.Table.from_arrays(arrays, names=names)


def is_tombstone(table: pa.Table) -> pa.ChunkedArray:
    return pc.and_(
        pc.and_(pc.is_null(table.column("inline_data")), pc.is_null(table.column("chunk_id"))),
        pc.is_null(table.column("virtual_path")),
    )


def merge_refs(layers: Sequence[pa.Table], ndim: int, drop_tombstones: bool = True) -> pa.Table:
    """Overlay ref tables of one array, later layers winning per coord; drop tombstones.

    The result is sorted by coord. This runs without a Python loop per chunk: one stable sort on
    the coords, then a shifted comparison keeps the last row of each run of equal coords.
    """
    layers = [t for t in layers if t.num_rows]
    if not layers:
        return empty_refs()
    combined = pa.concat_tables([conform_refs(t) for t in layers], promote_options="permissive")
    combined = combined.combine_chunks()
    keys = coord_keys(combined.column("coord"), ndim)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    # Last occurrence of each coord: the row whose successor has a different coord.
    last = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        last[:-1] = sorted_keys[:-1] != sorted_keys[1:]
    result = combined.take(pa.array(order[last]))
    return result.filter(pc.invert(is_tombstone(result))) if drop_tombstones else result


def encode_manifest(refs: pa.Table, presorted: bool = False) -> bytes:
    """Encode refs (of any number of arrays) as a manifest, sorted by array then coord.

    ``presorted``: the caller guarantees that order already (sorting a copy of millions of
    rows is the largest memory cost of a commit otherwise).
    """
    refs = conform_refs(refs)
    if refs.num_rows > 1 and not presorted:
        refs = refs.sort_by([("array_id", "ascending"), ("coord", "ascending")])
    return table_to_parquet(
        refs,
        row_group_size=ROW_GROUP_SIZE,
        use_dictionary=["array_id", "chunk_id", "virtual_path", "checksum"],
        column_encoding={
            "coord": "DELTA_BYTE_ARRAY",
            "offset": "DELTA_BINARY_PACKED",
            "length": "DELTA_BINARY_PACKED",
        },
    )


def decode_manifest(data: bytes, name: str) -> pa.Table:
    return parquet_to_table(data, name, REF_SCHEMA)


def refs_of_array(manifest: pa.Table, array_id: int) -> pa.Table:
    """The rows of one array; a binary search, since manifests are sorted by array id."""
    ids = manifest.column("array_id")
    if manifest.num_rows == 0:
        return manifest
    ids_np = ids.to_numpy()
    lo = int(np.searchsorted(ids_np, array_id, side="left"))
    hi = int(np.searchsorted(ids_np, array_id, side="right"))
    return manifest.slice(lo, hi - lo)

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
import pyarrow.parquet as pq

from .locations import LOCATION_COLUMNS, conform_location, same_location_types
from .parquet import parquet_to_table, row_groups_to_parquet

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
# Optional chunk statistics (seed 003), kept as extra columns; null where not recorded (and
# stat_sum/stat_count in manifests written before they were recorded).
STAT_FIELDS = [
    pa.field("stat_min", pa.float64()),
    pa.field("stat_max", pa.float64()),
    pa.field("stat_nan_count", pa.int64()),
    pa.field("stat_fill_count", pa.int64()),
    pa.field("stat_sum", pa.float64()),
    pa.field("stat_count", pa.int64()),
]
STAT_SCHEMA = pa.schema(STAT_FIELDS)
# Rows per Parquet row group. A cold point lookup decodes one row group (found by the
# statistics of array_id and coord), so this bounds its cost: 16 Ki rows decode in ~3 ms where
# 256 Ki took ~35 ms, for 1.5% more bytes (4.02 vs 3.96 per ref for 1 M virtual refs, the
# footer grows 3.8 -> 46 KB). docs/format.md, "Chunk manifests", records the decision.
ROW_GROUP_SIZE = 16 * 1024
# Declared in the footer (Parquet sorting_columns), so any Parquet reader knows the order.
SORTING_COLUMNS = (pq.SortingColumn(0), pq.SortingColumn(1))
# The columns whose Parquet statistics a reader may prune row groups by: a point lookup and
# a scan by array_id and coord, the chunks table's filters by the numeric ones (``StatBound``).
# Those of the location columns (inline bytes, chunk ids, URLs, checksums) nothing reads, and
# they were 40 % of a small commit's manifest (4.7 -> 2.9 KB for 507 inline refs).
_PRUNED_BY = ("array_id", "coord", "offset", "length", *(f.name for f in STAT_FIELDS))


def empty_refs() -> pa.Table:
    return REF_SCHEMA.empty_table()


# The ref columns of a conformed table: REF_SCHEMA's, nullable as Table.from_arrays makes them.
_CONFORMED_FIELDS = [pa.field(f.name, f.type) for f in REF_FIELDS]
CONFORMED_REF_SCHEMA = pa.schema(_CONFORMED_FIELDS)


def conform_refs(table: pa.Table) -> pa.Table:
    """Add missing optional columns as nulls and order/cast columns to ``REF_SCHEMA``.

    Extra columns (chunk statistics) are kept after the ref columns. A location column that
    comes dictionary-encoded stays so (``format.locations``). A table conformed already is
    returned as it is (a small commit conforms the same few rows several times).
    """
    if _is_conformed(table.schema):
        return table
    n = table.num_rows
    columns = []
    for f in REF_FIELDS:
        if f.name in LOCATION_COLUMNS and f.name in table.column_names:
            columns.append(conform_location(table.column(f.name), f.type))
        elif f.name in table.column_names:
            column = table.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(null_column(n, f.type))
    extra = [c for c in table.column_names if c not in REF_SCHEMA.names]
    names = [*REF_SCHEMA.names, *extra]
    arrays = [*columns, *(table.column(c) for c in extra)]
    return pa.Table.from_arrays(arrays, names=names)


def _is_conformed(schema: pa.Schema) -> bool:
    """Whether ``conform_refs`` would give a table of this schema back unchanged."""
    if schema.metadata or len(schema) < len(_CONFORMED_FIELDS):
        return False
    if len(schema) == len(_CONFORMED_FIELDS):  # no statistics columns: one comparison
        return bool(schema.equals(CONFORMED_REF_SCHEMA, check_metadata=True))
    return all(schema.field(i).equals(f) for i, f in enumerate(_CONFORMED_FIELDS)) and not any(
        schema.field(i).metadata for i in range(len(schema))
    )


def null_column(rows: int, kind: pa.DataType) -> pa.Array:
    """``pa.nulls(rows, kind)`` over buffers numpy allocates zeroed: large ones are fresh
    pages the OS maps on first write, so a column that is all null (``inline_data`` and
    ``chunk_id`` of 10 M virtual refs: 40 MB each from ``pa.nulls``) costs no memory."""
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        offsets = pa.py_buffer(np.zeros(rows + 1, np.int32))
        buffers = [_no_bits(rows), offsets, pa.py_buffer(b"")]
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
        buffers = [_no_bits(rows), pa.py_buffer(np.zeros(rows * kind.bit_width // 8, np.uint8))]
    else:
        return pa.nulls(rows, kind)
    return pa.Array.from_buffers(kind, rows, buffers, null_count=rows)


def _no_bits(rows: int) -> pa.Buffer:
    return pa.py_buffer(np.zeros((rows + 7) // 8, np.uint8))


def conform_layers(tables: Sequence[pa.Table]) -> list[pa.Table]:
    """``conform_refs`` of each table, with each location column of one type in all of them
    (dictionary-encoded where any holds it so): the tables concatenate."""
    return same_location_types([conform_refs(t) for t in tables])


def attach_stats(refs: pa.Table, stats: pa.Table | None) -> pa.Table:
    """Fill the ``stat_*`` columns of ``refs`` from ``stats`` where the very same chunk matches.

    ``stats`` has ``coord``, ``chunk_id``, ``inline_data`` and the ``STAT_FIELDS``. A row
    matches on coord *and* on the chunk's identity (its chunk file, or its inline bytes), so
    statistics of a chunk that was overwritten or dropped in a rebase never stick to another
    chunk. Values already present in ``refs`` win.
    """
    if stats is None or stats.num_rows == 0 or refs.num_rows == 0:
        return refs
    found = pc.index_in(_identity(refs), value_set=_identity(stats).combine_chunks())
    for f in STAT_FIELDS:
        if f.name not in stats.column_names:
            continue  # statistics recorded before this column was: it stays unknown
        values = stats.column(f.name).cast(f.type).take(found)
        if f.name in refs.column_names:
            values = pc.coalesce(refs.column(f.name).cast(f.type), values)
            refs = refs.set_column(refs.schema.get_field_index(f.name), f.name, values)
        else:
            refs = refs.append_column(f, values)
    return refs


def _identity(table: pa.Table) -> pa.ChunkedArray:
    """``coord + 0x00 + (chunk id or inline bytes)``: one binary key per chunk write."""
    chunk_id = pc.cast(table.column("chunk_id"), pa.binary())
    where = pc.coalesce(chunk_id, table.column("inline_data").cast(pa.binary()))
    return pc.binary_join_element_wise(table.column("coord").cast(pa.binary()), where, b"\x00")


def with_array_id(refs: pa.Table, array_id: int) -> pa.Table:
    """``refs`` (conformed: ``array_id`` first) with every row belonging to ``array_id``."""
    return refs.set_column(
        0, "array_id", pa.repeat(pa.scalar(array_id, pa.uint64()), refs.num_rows)
    )


def has_tombstones(table: pa.Table) -> bool:
    """Whether some row of ``table`` is a tombstone. A location column without nulls rules
    them out with no pass over the rows (a commit's merge asks of every array it writes)."""
    if table.num_rows == 0 or any(
        table.column(name).null_count == 0 for name in ("inline_data", "chunk_id", "virtual_path")
    ):
        return False
    return bool(pc.any(is_tombstone(table)).as_py())


def is_tombstone(table: pa.Table) -> pa.ChunkedArray:
    return pc.and_(
        pc.and_(pc.is_null(table.column("inline_data")), pc.is_null(table.column("chunk_id"))),
        pc.is_null(table.column("virtual_path")),
    )


def encode_manifest(refs: pa.Table, presorted: bool = False) -> bytes:
    """Encode refs (of any number of arrays) as a manifest, sorted by array then coord.

    ``presorted``: the caller guarantees that order already (sorting a copy of millions of
    rows is the largest memory cost of a commit otherwise).
    """
    return encode_manifest_rows(manifest_rows(refs, presorted))


def manifest_rows(refs: pa.Table, presorted: bool = False) -> pa.Table:
    """``refs`` as a manifest holds them: conformed, inline lengths filled in, sorted by array
    then coord (``presorted``: already so). ``encode_manifest_rows`` writes them."""
    refs = with_inline_lengths(conform_refs(refs))
    if refs.num_rows > 1 and not presorted:
        refs = refs.sort_by([("array_id", "ascending"), ("coord", "ascending")])
    return refs


def encode_manifest_rows(rows: pa.Table) -> bytes:
    """The manifest file of ``manifest_rows`` output."""
    # Row group by row group: dictionary-encoded location columns are decoded one group at a
    # time, so the file is the one plain strings make, and memory holds one group of them.
    return row_groups_to_parquet(
        rows,
        row_group_size=ROW_GROUP_SIZE,
        sorting_columns=SORTING_COLUMNS,
        write_statistics=[name for name in rows.column_names if name in _PRUNED_BY],
        use_dictionary=["array_id", "chunk_id", "virtual_path", "checksum"],
        column_encoding={
            "coord": "DELTA_BYTE_ARRAY",
            "offset": "DELTA_BINARY_PACKED",
            "length": "BYTE_STREAM_SPLIT",  # random compressed sizes: 1.93 B/ref vs 1.99 delta
        },
    )


def rows_as_decoded(rows: pa.Table) -> pa.Table:
    """``manifest_rows`` output as ``decode_manifest`` reads its file back (location columns
    as plain strings, contiguous): a writer keeps what it wrote instead of decoding its own
    bytes. Contiguous: rows gathered array by array come in a chunk per array, and the next
    commit's filter over 5,760 chunks took 0.31 s (bench/bench_many_arrays.py)."""
    columns = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in rows.columns
    ]
    return pa.Table.from_arrays(columns, names=rows.column_names).combine_chunks()


def decode_manifest(data: bytes, name: str) -> pa.Table:
    """A whole manifest as a table, inline lengths filled in (see ``with_inline_lengths``)."""
    return with_inline_lengths(parquet_to_table(data, name, REF_SCHEMA))


def with_inline_lengths(refs: pa.Table) -> pa.Table:
    """``refs`` with ``length`` set to the byte count of every inline ref.

    Manifests record it since row groups shrank to 16 Ki rows, so a reader of lengths (the
    Spark ``chunks`` table) never has to fetch the inline bytes; older manifests left it null,
    and decoding fills it, so tables from old and new manifests compare equal.
    """
    if refs.num_rows == 0:
        return refs
    inline = refs.column("inline_data")
    if inline.null_count == len(inline) or refs.column("length").null_count == 0:
        return refs  # no inline refs, or every ref's length recorded already
    lengths = pc.if_else(
        pc.is_valid(inline),
        pc.cast(pc.binary_length(inline), pa.uint64()),
        refs.column("length").cast(pa.uint64()),
    )
    return refs.set_column(
        refs.schema.get_field_index("length"), REF_SCHEMA.field("length"), lengths
    )


def _array_ids(column: pa.ChunkedArray) -> np.ndarray:
    """The (never null) ``array_id`` column as numpy, viewing Arrow's buffers.

    Not ``to_numpy``: it imports pandas (0.3-0.6 s, most of a cold process's first lookup).
    """
    if column.type != pa.uint64():  # a cast to its own type still costs a compute call
        column = column.cast(pa.uint64())
    parts = [
        np.frombuffer(chunk.buffers()[1], np.uint64)[chunk.offset : chunk.offset + len(chunk)]
        for chunk in column.chunks
    ]
    if not parts:
        return np.zeros(0, np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def array_row_spans(manifest: pa.Table, array_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Per array id, its rows ``[start, stop)`` in ``manifest`` (empty where it has none): one
    binary search each, since manifests are sorted by array id."""
    ids_np = _array_ids(manifest.column("array_id"))
    wanted = np.asarray(array_ids, dtype=np.uint64)
    starts = np.searchsorted(ids_np, wanted, side="left").tolist()
    stops = np.searchsorted(ids_np, wanted, side="right").tolist()
    return list(zip(starts, stops, strict=True))


def refs_of_array(manifest: pa.Table, array_id: int) -> pa.Table:
    """The rows of one array; a binary search, since manifests are sorted by array id."""
    if manifest.num_rows == 0:
        return manifest
    ids_np = _array_ids(manifest.column("array_id"))
    lo = int(np.searchsorted(ids_np, array_id, side="left"))
    hi = int(np.searchsorted(ids_np, array_id, side="right"))
    return manifest.slice(lo, hi - lo)

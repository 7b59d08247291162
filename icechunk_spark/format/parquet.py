"""Parquet bytes in and out, with errors that name the file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import FormatError

# Files of at most this many rows are compressed with LZ4 (Parquet's LZ4_RAW), bigger ones with
# zstd. Each column chunk pays zstd a fixed cost, a third of encoding a small commit's
# structure file, manifest or transaction log, and at that size LZ4 compresses within 3 %
# (bench/bench_compression.py: a structure file of 55 nodes 0.55 -> 0.35 ms, 5,966 -> 5,815
# bytes; a shared manifest of 508 rows 0.38 -> 0.26 ms, 4,500 -> 4,639 bytes). Big manifests,
# most of a repository's bytes, stay zstd: 3.5 % smaller from 16 Ki rows on.
LZ4_MAX_ROWS = 4096


def codec_for(num_rows: int) -> str:
    """The compression of a Parquet file of ``num_rows`` rows (see ``LZ4_MAX_ROWS``)."""
    return "lz4" if num_rows <= LZ4_MAX_ROWS else "zstd"


def table_to_parquet(table: pa.Table, **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=codec_for(table.num_rows), **options)
    return bytes(sink.getvalue().to_pybytes())


def row_groups_to_parquet(table: pa.Table, row_group_size: int, **options: object) -> bytes:
    """``table_to_parquet(table, row_group_size=...)``, written one row group at a time with
    dictionary-encoded columns decoded per group: the same bytes as for the plain table.

    Handing Parquet an Arrow dictionary whole would put every entry (every file a manifest
    names) in every row group's dictionary page; decoding the whole column first would hold
    all its strings at once. A group's strings are ``row_group_size`` values.
    """
    if 0 < table.num_rows <= row_group_size and not _has_dictionary(table.schema):
        # One group of plain columns (a small commit's manifest and transaction log): the
        # same file from one call, without a writer object and a loop in Python (about 7 %
        # of encoding a manifest of a few hundred rows).
        return table_to_parquet(table, row_group_size=row_group_size, **options)
    schema = pa.schema(
        [
            f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
            for f in table.schema
        ],
        metadata=table.schema.metadata,
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression=codec_for(table.num_rows), **options) as writer:
        for start in range(0, max(table.num_rows, 1), row_group_size):
            group = table.slice(start, row_group_size)
            columns = [_plain(group.column(i)) for i in range(group.num_columns)]
            writer.write_table(
                pa.Table.from_arrays(columns, schema=schema), row_group_size=row_group_size
            )
    return bytes(sink.getvalue().to_pybytes())


def _has_dictionary(schema: pa.Schema) -> bool:
    return any(pa.types.is_dictionary(f.type) for f in schema)


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if not pa.types.is_dictionary(column.type):
        return column
    return pa.chunked_array([c.dictionary_decode() for c in column.chunks], column.type.value_type)


def small_table_to_parquet(table: pa.Table) -> bytes:
    """A file read whole and never filtered (structure; transaction logs are written so too,
    in row groups, by ``format.txlog.encode_txlog``): no column statistics
    and no dictionary pages, whose encoders cost a quarter of writing a file of a few dozen
    rows (every small commit writes two); zstd still compresses the repeated values."""
    return table_to_parquet(table, use_dictionary=False, write_statistics=False)


def read_parquet_bytes(data: bytes, columns: list[str] | None = None) -> pa.Table:
    """Read Parquet bytes on the calling thread.

    ``use_threads=False``: our files are small and we parallelise across files; and with
    pyarrow 26 a threaded read makes about half of the processes abort at interpreter exit
    ("terminate called without an active exception"). ``pre_buffer=False`` for the same
    reason: pre-buffering hands the reads to Arrow's I/O thread pool, which buys nothing for
    bytes already in memory and leaves one more native thread alive at exit.
    """
    # ParquetFile, not pq.read_table: read_table goes through pyarrow.dataset, whose import
    # pulls in pandas (0.3-0.4 s), the largest cost of a cold process's first chunk lookup.
    parquet = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
    if columns is not None:
        # read_table refused unknown columns; ParquetFile.read silently skips them.
        missing = [c for c in columns if c not in parquet.schema_arrow.names]
        if missing:
            raise pa.ArrowInvalid(f"no columns {missing} in {parquet.schema_arrow.names}")
    return parquet.read(columns=columns, use_threads=False)


def parquet_to_table(data: bytes, name: str, schema: pa.Schema | None = None) -> pa.Table:
    """Read a Parquet file's bytes; ``FormatError`` naming ``name`` when corrupt or mis-shaped."""
    try:
        table = read_parquet_bytes(data)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise FormatError(
            f"{name!r} is not a readable Parquet file (corrupt or truncated): {exc}"
        ) from exc
    if schema is not None:
        missing = [f.name for f in schema if f.name not in table.column_names]
        if missing:
            raise FormatError(
                f"{name!r} lacks the columns {missing}; it is not a file of this kind"
            )
    return table

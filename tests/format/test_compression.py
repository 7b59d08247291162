"""Each Parquet file's compression follows its size (docs/format.md, "Compression")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icechunk_spark.format import (
    decode_manifest,
    decode_structure,
    decode_txlog,
    encode_coords,
    encode_manifest,
    encode_structure,
    encode_txlog,
    make_node,
)
from icechunk_spark.format.manifest import conform_refs, manifest_rows
from icechunk_spark.format.parquet import LZ4_MAX_ROWS, table_to_parquet
from icechunk_spark.format.txlog import NodeChange, chunk_changes

GROUP_JSON = b'{"zarr_format":3,"node_type":"group","attributes":{}}'


def codecs(data: bytes) -> set[str]:
    """The compression of every column chunk of a Parquet file."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    return {
        meta.row_group(g).column(c).compression
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    }


def refs(rows: int) -> pa.Table:
    coords = encode_coords(np.arange(rows, dtype=np.int64).reshape(-1, 1))
    return conform_refs(
        pa.table(
            {
                "array_id": pa.array(np.full(rows, 7, dtype=np.uint64)),
                "coord": coords,
                "chunk_id": pa.array([f"C{i % 13}" for i in range(rows)]),
                "offset": pa.array(np.zeros(rows, dtype=np.uint64)),
                "length": pa.array(np.arange(rows, dtype=np.uint64) % 97 + 10),
            }
        )
    )


@pytest.mark.parametrize(
    ("rows", "codec"), [(1, "LZ4"), (LZ4_MAX_ROWS, "LZ4"), (LZ4_MAX_ROWS + 1, "ZSTD")]
)
def test_manifest_codec_follows_its_rows_and_reads_back(rows: int, codec: str) -> None:
    table = refs(rows)
    data = encode_manifest(table)
    assert codecs(data) == {codec}
    back = decode_manifest(data, "m/1")
    assert back.column("coord").equals(table.column("coord"))
    assert back.column("length").to_pylist() == table.column("length").to_pylist()


@pytest.mark.parametrize(("count", "codec"), [(3, "LZ4"), (LZ4_MAX_ROWS + 1, "ZSTD")])
def test_structure_and_transaction_log_codecs(count: int, codec: str) -> None:
    nodes = [make_node(i + 1, f"/g{i:05d}", GROUP_JSON) for i in range(count)]
    structure, _, _ = encode_structure(nodes, "A1")
    assert codecs(structure) == {codec}
    assert [row.path for row in decode_structure(structure, "s/1")] == [n.path for n in nodes]

    coords = encode_coords(np.arange(count, dtype=np.int64).reshape(-1, 1))
    log = encode_txlog([NodeChange("/a", 5, "new_array")], [chunk_changes(5, coords)])
    assert codecs(log) == {codec}
    assert decode_txlog(log, "x/1").chunk_coords_by_node()[5].to_pylist() == coords.to_pylist()


def test_a_small_file_written_with_zstd_still_reads() -> None:
    """Files written before the decision are zstd however small."""
    table = refs(5)
    sink = pa.BufferOutputStream()
    pq.write_table(manifest_rows(table), sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    assert codecs(data) == {"ZSTD"}
    assert decode_manifest(data, "m/old").column("coord").equals(table.column("coord"))
    assert codecs(table_to_parquet(table)) == {"LZ4"}

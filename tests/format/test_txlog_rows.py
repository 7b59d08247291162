"""Chunk-change rows of a transaction log: one array's node id held once, not once a row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from icechunk_spark.format.coords import encode_coords
from icechunk_spark.format.parquet import small_table_to_parquet
from icechunk_spark.format.txlog import (
    CHUNK_CHANGES_SCHEMA,
    ChangeKind,
    NodeChange,
    chunk_changes,
    chunk_changes_of,
    decode_txlog,
    encode_txlog,
)


def test_a_log_is_the_file_plain_node_ids_make() -> None:
    rows = 2_500_000  # three of Parquet's default row groups
    coords = encode_coords(np.stack([np.arange(rows) // 7, np.arange(rows) % 7], axis=1))
    bulk = chunk_changes(5, coords)
    assert pa.types.is_dictionary(bulk.schema.field("node_id").type)
    assert len(bulk.column("node_id").combine_chunks().dictionary) == 1
    pending = chunk_changes_of(np.array([9, 9], np.uint64), coords.slice(0, 2))
    nodes = [NodeChange("/a", 5, ChangeKind.NEW_ARRAY)]
    data = encode_txlog(nodes, [bulk, pending])
    plain = pa.concat_tables(
        [chunk_changes_of(np.full(rows, 5, np.uint64), coords), pending]
    ).replace_schema_metadata(
        {"icechunk.nodes": '[{"path": "/a", "node_id": 5, "kind": "new_array"}]'}
    )
    assert data == small_table_to_parquet(plain)
    log = decode_txlog(data, "x")
    assert log.chunks.schema == CHUNK_CHANGES_SCHEMA
    assert log.chunk_coords_by_node()[5].equals(coords)

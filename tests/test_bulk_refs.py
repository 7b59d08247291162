"""Many new arrays' refs merged at once give what merging each array alone gives."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark.core.bulk_refs import merge_pending_in_bulk, pending_chunk_changes
from icechunk_spark.core.changes import ArrayChanges, ChangeSet
from icechunk_spark.core.coord_refs import CoordRefs
from icechunk_spark.core.snapshot import ChunkRef
from icechunk_spark.format.coords import encode_coords
from icechunk_spark.format.structure import Node, make_node
from icechunk_spark.format.txlog import chunk_changes


def _array(node_id: int, shape: tuple[int, ...]) -> Node:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1] * len(shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    return make_node(node_id, f"/a{node_id}", json.dumps(doc).encode())


def _key(coord: tuple[int, ...]) -> bytes:
    return encode_coords(np.array([coord], dtype=np.int64).reshape(1, len(coord)))[0].as_py()


@pytest.mark.parametrize("seed", range(5))
def test_bulk_merge_equals_merging_each_array_alone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    changes, arrays = ChangeSet(), dict[int, Node]()
    for node_id in range(1, 40):
        ndim = int(rng.integers(0, 3))
        shape = tuple(int(s) for s in rng.integers(1, 5, ndim))
        node = _array(node_id, shape)
        arrays[node_id] = node
        array_changes = changes.chunks[node_id] = ArrayChanges(node_id, ndim)
        for _ in range(int(rng.integers(1, 8))):
            # Some coords lie beyond the grid (a resize left them), some refs are deletions.
            coord = tuple(int(c) for c in rng.integers(0, 6, ndim))
            ref = None if rng.random() < 0.2 else ChunkRef("inline", bytes([node_id, len(coord)]))
            array_changes.set(_key(coord), ref)
    bulk = merge_pending_in_bulk(changes, arrays, arrays)
    for node_id, node in arrays.items():
        assert node.meta is not None
        ndim = node.meta.ndim
        layers = [CoordRefs(t, ndim) for t in changes.chunks[node_id].layers(node_id)]
        alone = CoordRefs.merge(layers, ndim).inside(node.meta.grid_shape)
        assert bulk[node_id].table.to_pylist() == alone.table.to_pylist()
        assert np.array_equal(bulk[node_id].coords, alone.coords)
    logged = pa.concat_tables(pending_chunk_changes(changes, arrays)).sort_by(
        [("node_id", "ascending")]
    )
    one_by_one = pa.concat_tables(
        [chunk_changes(i, changes.chunks[i].changed_coords()) for i in sorted(arrays)]
    )
    assert logged.to_pylist() == one_by_one.to_pylist()

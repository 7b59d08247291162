"""Many new arrays' refs merged at once give what merging each array alone gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import Repository
from icechunk_spark.core.bulk_refs import merge_pending_in_bulk, pending_chunk_changes
from icechunk_spark.core.changes import ArrayChanges, ChangeSet
from icechunk_spark.core.coord_refs import CoordRefs
from icechunk_spark.core.manifest_cache import ChunkRef
from icechunk_spark.errors import InvalidInputError
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


def test_dictionary_encoded_locations_stay_encoded_through_a_commit(tmp_path: Path) -> None:
    """URLs and checksums handed over dictionary-encoded (as write_virtual_dataset hands
    them: one entry per file) stay so in the session, a relative URL resolved once per file,
    and the commit's manifests read back the very refs."""
    container = "file:///data/"
    repo = Repository.create(
        tmp_path.as_uri(), config={"virtual_chunk_containers": {container: {}}}
    )
    session = repo.writable_session()
    session.create_array("/v", (6, 4), (1, 1), "float32")
    rows = 24
    indices = pa.array(np.arange(rows) % 3, pa.int32())
    # "a.nc" and "file:///data/a.nc" are one file, spelled relative and absolute.
    urls = pa.DictionaryArray.from_arrays(indices, pa.array(["a.nc", container + "a.nc", "b.nc"]))
    sums = pa.DictionaryArray.from_arrays(indices, pa.array(["etag:a", "etag:a", "etag:b"]))
    coords = np.stack(np.unravel_index(np.arange(rows), (6, 4)), axis=1)
    refs = {
        "coord": coords,
        "virtual_path": urls,
        "offset": np.arange(rows) * 10,
        "length": np.full(rows, 10),
        "checksum": sums,
    }
    session.set_chunk_refs("/v", refs)
    expected = [container + ("b.nc" if i % 3 == 2 else "a.nc") for i in range(rows)]
    ours = session.chunk_refs("/v")
    assert pa.types.is_dictionary(ours.column("virtual_path").type)
    assert ours.column("virtual_path").combine_chunks().dictionary.to_pylist() == [
        container + "a.nc",
        container + "b.nc",
    ]
    assert pa.types.is_dictionary(ours.column("checksum").type)
    assert ours.column("virtual_path").to_pylist() == expected
    session.commit("dictionary-encoded refs")
    read = repo.readonly_session()
    committed = read.chunk_refs("/v")
    assert committed.column("virtual_path").to_pylist() == expected
    assert committed.column("checksum").to_pylist() == sums.to_pylist()
    ref = read.get_chunk_ref("/v", (5, 3))
    assert ref is not None
    assert (ref.virtual_path, ref.offset, ref.checksum) == (container + "b.nc", 230, "etag:b")


def test_a_row_needs_exactly_one_location(tmp_path: Path) -> None:
    repo = Repository.create(
        tmp_path.as_uri(), config={"virtual_chunk_containers": {"file:///data/": {}}}
    )
    session = repo.writable_session()
    session.create_array("/v", (4,), (1,), "uint8")
    refs = {
        "coord": np.arange(4).reshape(-1, 1),
        # one of each, then two at once, then none
        "inline_data": pa.array([b"x", None, b"y", None], pa.binary()),
        "virtual_path": pa.array([None, "file:///data/a", "file:///data/a", None]),
        "offset": np.zeros(4),
        "length": np.ones(4),
    }
    with pytest.raises(InvalidInputError, match="2 rows do not"):
        session.set_chunk_refs("/v", refs)
    refs["inline_data"] = pa.array([b"x", None, None, b"z"], pa.binary())
    assert session.set_chunk_refs("/v", refs) == 4


def test_unstamped_layers_keep_the_array_id_as_written() -> None:
    changes = ArrayChanges(7, 1)
    changes.add_table(pa.table({"coord": encode_coords(np.arange(3).reshape(-1, 1))}))
    changes.set(_key((5,)), None)
    assert [t.column("array_id").to_pylist() for t in changes.layers(7)] == [[7] * 3, [7]]
    # A split array's pieces get their array_id when each manifest is cut.
    unstamped = changes.layers(7, stamped=False)
    assert unstamped[0] is changes.tables[0]
    assert [t.column("array_id").to_pylist() for t in unstamped] == [[None] * 3, [0]]

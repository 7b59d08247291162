"""Pure encode/decode round trips and corrupt-file handling of every format."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icechunk_spark.errors import FormatError, InvalidInputError, RepeatedCoordError
from icechunk_spark.format import (
    Ref,
    SnapshotInfo,
    State,
    decode_coord,
    decode_coords,
    decode_manifest,
    decode_state,
    decode_structure,
    decode_txlog,
    encode_coord,
    encode_coords,
    encode_manifest,
    encode_state,
    encode_structure,
    encode_txlog,
    make_node,
    merge_refs,
    new_object_id,
)
from icechunk_spark.format.manifest import conform_refs
from icechunk_spark.format.parquet import table_to_parquet
from icechunk_spark.format.structure import ManifestRef
from icechunk_spark.format.txlog import NodeChange, chunk_changes

ARRAY_JSON = json.dumps(
    {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [100, 70_000],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 7]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["y", "x"],
        "attributes": {"units": "K"},
    }
).encode()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=6))
def test_coord_round_trip(coord):
    assert decode_coord(encode_coord(coord)) == tuple(coord)


@given(
    st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2),
    st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2),
)
def test_coord_bytes_sort_like_tuples(a, b):
    assert (encode_coord(a) < encode_coord(b)) == (tuple(a) < tuple(b))


def test_vector_coords_match_scalar_codec():
    coords = np.array([[0, 1], [70_000, 3], [2**32 - 1, 0]])
    encoded = encode_coords(coords)
    assert encoded.to_pylist() == [encode_coord(c) for c in coords.tolist()]
    assert decode_coords(encoded, 2).tolist() == coords.tolist()


def test_coords_out_of_range_are_refused():
    with pytest.raises(InvalidInputError):
        encode_coord((-1,))
    with pytest.raises(InvalidInputError):
        encode_coords(np.array([[2**32]]))


def test_state_round_trip():
    snap = SnapshotInfo("S1", None, 123, "F1", "init", {"k": [1, 2]})
    state = State(
        "R", 7, "file:///x", {"S1": snap}, {"main": Ref("main", "S1", "branch")}, {"a": 1}
    )
    assert decode_state(encode_state(state), "t/7") == state


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"id": "x"}', b"\x00\xff garbage"])
def test_corrupt_state_names_the_file(data):
    with pytest.raises(FormatError, match="t/00000000000000000003"):
        decode_state(data, "t/00000000000000000003")


def test_newer_format_version_is_refused():
    snap = SnapshotInfo("S1", None, 1, "F1")
    doc = json.loads(encode_state(State("R", 1, "x", {"S1": snap}, {})))
    doc["format_version"] = 99
    with pytest.raises(FormatError, match="upgrade"):
        decode_state(json.dumps(doc).encode(), "icechunk.json")


def test_structure_round_trip_keeps_exact_zarr_json_and_widened_shapes():
    group = make_node(1, "/", b'{"zarr_format":3,"node_type":"group","attributes":{}}')
    array = make_node(
        2, "/a", ARRAY_JSON, (ManifestRef("M1", ((0, 10), (0, 10_000)), 42, "default"),)
    )
    data, attrs, _ = encode_structure([array, group], "A1")
    assert attrs is None
    rows = decode_structure(data, "s/X")
    assert [r.path for r in rows] == ["/", "/a"]
    assert rows[1].zarr_json == ARRAY_JSON
    assert rows[1].manifests == array.manifests
    assert array.meta is not None and array.meta.grid_shape == (10, 10_000)


@given(
    st.lists(
        st.lists(
            st.tuples(
                st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=3),
                st.integers(0, 2**63),
                st.sampled_from(["default", "coordinates"]),
            ),
            max_size=4,
        ),
        max_size=5,
    )
)
def test_structure_manifest_refs_decode_column_by_column(per_array):
    """Any number of manifests per node, of any rank (0-d: an empty extent), between groups."""
    nodes = [make_node(1, "/", b'{"zarr_format":3,"node_type":"group"}')]
    for i, manifests in enumerate(per_array):
        refs = tuple(
            ManifestRef(f"M{i}-{j}", tuple(extent), count, set_name)
            for j, (extent, count, set_name) in enumerate(manifests)
        )
        nodes.append(make_node(10 + i, f"/a{i}", ARRAY_JSON, refs))
        nodes.append(make_node(100 + i, f"/g{i}", b'{"zarr_format":3,"node_type":"group"}'))
    rows = decode_structure(encode_structure(nodes, "A1")[0], "s/X")
    assert {r.path: r.manifests for r in rows} == {n.path: n.manifests for n in nodes}


def test_structure_with_null_manifest_lists_decodes_them_as_empty():
    """Another writer may leave a group's manifests null rather than empty."""
    data, _, _ = encode_structure(
        [
            make_node(1, "/", b'{"zarr_format":3,"node_type":"group"}'),
            make_node(2, "/a", ARRAY_JSON, (ManifestRef("M1", ((0, 10), (0, 5)), 7, "default"),)),
        ],
        "A1",
    )
    table = pq.read_table(pa.BufferReader(data))
    column = table.schema.get_field_index("manifests")
    nulled = pa.array([None, table.column(column)[1].as_py()], table.schema.field(column).type)
    rows = decode_structure(
        table_to_parquet(table.set_column(column, table.schema.field(column), nulled)), "s/N"
    )
    assert [r.manifests for r in rows] == [(), (ManifestRef("M1", ((0, 10), (0, 5)), 7),)]


def test_corrupt_structure_and_manifest_name_the_file():
    with pytest.raises(FormatError, match="s/BROKEN"):
        decode_structure(b"PAR1 not really", "s/BROKEN")
    data, _, _ = encode_structure(
        [make_node(1, "/", b'{"zarr_format":3,"node_type":"group"}')], "A"
    )
    with pytest.raises(FormatError, match="m/TRUNC"):
        decode_manifest(data[: len(data) // 2], "m/TRUNC")
    with pytest.raises(FormatError, match="lacks the columns"):
        decode_manifest(data, "m/WRONGKIND")


def test_manifest_round_trip_sorted_by_array_then_coord():
    refs = conform_refs(
        pa.table(
            {
                "array_id": pa.array([9, 3, 3], pa.uint64()),
                "coord": [encode_coord((1,)), encode_coord((2,)), encode_coord((0,))],
                "inline_data": [b"a", None, None],
                "chunk_id": [None, "C1", None],
                "virtual_path": [None, None, "file:///data/x.nc"],
                "offset": pa.array([None, 0, 100], pa.uint64()),
                "length": pa.array([None, 5, 10], pa.uint64()),
            }
        )
    )
    table = decode_manifest(encode_manifest(refs), "m/1")
    assert table.column("array_id").to_pylist() == [3, 3, 9]
    assert [decode_coord(c) for c in table.column("coord").to_pylist()] == [(0,), (2,), (1,)]


def test_merge_refs_last_write_wins_and_tombstones_delete():
    def layer(coords, values):
        return pa.table(
            {
                "array_id": pa.array([1] * len(coords), pa.uint64()),
                "coord": [encode_coord(c) for c in coords],
                "inline_data": pa.array(values, pa.binary()),
            }
        )

    merged = merge_refs(
        [layer([(0,), (1,), (2,)], [b"a", b"b", b"c"]), layer([(1,), (2,)], [b"B", None])], 1
    )
    assert merged.column("inline_data").to_pylist() == [b"a", b"B"]


def _layer(coords, values):
    return pa.table(
        {
            "array_id": pa.array([1] * len(coords), pa.uint64()),
            "coord": [encode_coord(c) for c in coords],
            "inline_data": pa.array(values, pa.binary()),
        }
    )


def test_merge_refs_refuses_a_coord_twice_in_an_unordered_layer():
    ordered = _layer([(0, 0), (1, 0)], [b"a", b"b"])
    # (1, 0) and (2, 0) are repeated; (2, 0) ends in zero bytes, which the error must keep.
    unordered = _layer([(1, 0), (2, 0), (1, 0), (2, 0), (2, 0)], [b"c", b"d", b"e", b"f", b"g"])
    with pytest.raises(RepeatedCoordError) as info:
        merge_refs([ordered, unordered], 2, unordered=[1])
    assert (info.value.coord, info.value.repeated) == ((1, 0), 2)
    assert "chunk coord (1, 0): given more than once in one write (and 1 more coords)" in str(
        info.value
    )
    # Across layers a later one wins, unordered or not; and an ordered layer may repeat.
    later = _layer([(0, 0), (1, 0)], [b"x", b"y"])
    merged = merge_refs([ordered, later], 2, unordered=[0, 1])
    assert merged.column("inline_data").to_pylist() == [b"x", b"y"]
    assert merge_refs([unordered], 2).column("inline_data").to_pylist() == [b"e", b"g"]


def test_merge_refs_refuses_the_only_chunk_of_a_0d_array_twice():
    empty = _layer([], [])  # layer 0: layer numbers count empty layers too
    twice = _layer([(), ()], [b"a", b"b"])
    with pytest.raises(RepeatedCoordError, match=re.escape("chunk coord ():")):
        merge_refs([empty, twice], 0, unordered=[1])


def test_txlog_round_trip():
    coords = encode_coords(np.array([[1, 2], [3, 4]]))
    data = encode_txlog([NodeChange("/a", 5, "new_array")], [chunk_changes(5, coords)])
    log = decode_txlog(data, "x/S")
    assert log.nodes == (NodeChange("/a", 5, "new_array"),)
    assert log.chunk_coords_by_node()[5].to_pylist() == coords.to_pylist()


def test_object_ids_are_unique_and_url_safe():
    ids = {new_object_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(i) == 20 and i.isalnum() for i in ids)


def test_merge_refs_drops_a_tombstone_among_refs_of_every_kind():
    # Every location column holds nulls here, so the merge must look at the rows themselves.
    base = conform_refs(_layer([(0,), (1,), (2,)], [b"a", b"b", b"c"]))
    kinds = pa.table(
        {
            "array_id": pa.array([1, 1, 1], pa.uint64()),
            "coord": [encode_coord(c) for c in [(1,), (2,), (3,)]],
            "chunk_id": pa.array(["C1", None, None], pa.string()),
            "virtual_path": pa.array([None, None, "s3://b/f"], pa.string()),
            "offset": pa.array([0, None, 0], pa.uint64()),
            "length": pa.array([4, None, 4], pa.uint64()),
        }
    )
    merged = merge_refs([base, kinds], 1)
    assert [decode_coord(c) for c in merged.column("coord").to_pylist()] == [(0,), (1,), (3,)]
    assert merged.column("chunk_id").to_pylist() == [None, "C1", None]

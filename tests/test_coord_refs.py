"""A commit decodes each ref's coord once and carries it (core/coord_refs.py): the coords it
carries must stay those of the rows, or manifests get wrong extents and lookups miss chunks."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from icechunk_spark import Repository
from icechunk_spark.core.coord_refs import CoordRefs
from icechunk_spark.format.coords import decode_coords, encode_coord, encode_coords


def refs(coords: list[tuple[int, int]], data: bytes | None) -> CoordRefs:
    """Decoded refs at ``coords``, inline ``data`` (``None``: tombstones)."""
    table = pa.table(
        {
            "coord": encode_coords(np.array(coords)),
            "inline_data": pa.array([data] * len(coords), pa.binary()),
        }
    )
    return CoordRefs(table, 2).decode()


def assert_in_step(merged: CoordRefs) -> None:
    assert merged.decoded
    np.testing.assert_array_equal(merged.coords, decode_coords(merged.table.column("coord"), 2))


def test_merged_layers_carry_the_coords_of_the_rows_they_keep() -> None:
    old = refs([(0, 0), (0, 1), (3, 0), (4, 1)], b"old")
    new = refs([(5, 0), (0, 1), (2, 2)], b"new")  # unsorted, one coord over an old one
    gone = refs([(3, 0)], None)
    merged = CoordRefs.merge([old, new, gone], 2)
    assert_in_step(merged)
    assert merged.coords.tolist() == [[0, 0], [0, 1], [2, 2], [4, 1], [5, 0]]
    assert merged.extent() == ((0, 6), (0, 3))
    assert_in_step(merged.within(0, (2, 5)))
    assert_in_step(merged.inside((5, 2)))
    assert_in_step(merged.without(pa.array([encode_coord((0, 1))], pa.binary())))


def test_inside_keeps_only_the_refs_within_the_grid() -> None:
    kept = refs([(0, 0), (1, 3), (2, 1), (1, 1)], b"x").inside((2, 2))
    assert kept.coords.tolist() == [[0, 0], [1, 1]]
    assert_in_step(kept)


def test_a_commit_after_a_shrink_keeps_no_ref_beyond_the_grid(tmp_path) -> None:
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    session.create_array("/a", shape=(10,), chunk_shape=(1,), dtype="int8")
    session.set_chunk_refs(
        "/a", {"coord": np.arange(10).reshape(-1, 1), "inline_data": [b"x"] * 10}
    )
    session.commit("ten chunks")
    session = repo.writable_session()
    doc = json.loads(session.get_node("/a").zarr_json)
    session.set_node_metadata("/a", json.dumps(doc | {"shape": [4]}).encode())
    session.commit("shrunk to four")
    node = repo.readonly_session().get_node("/a")
    assert node.ref_count == 4
    assert [m.extent for m in node.manifests] == [((0, 4),)]


def test_a_run_of_rows_is_cut_as_a_slice_sharing_the_rows() -> None:
    # A split array's piece of a bulk write sorted by coord: a filter would copy its rows.
    layer = refs([(i, j) for i in range(6) for j in range(3)], b"x")
    piece = layer.within(0, (2, 4))
    assert piece.coords.tolist() == [[i, j] for i in (2, 3) for j in range(3)]
    assert_in_step(piece)
    buffers = [t.column("coord").chunk(0).buffers()[2].address for t in (layer.table, piece.table)]
    assert buffers[0] == buffers[1]
    scattered = layer.where(np.arange(18) % 2 == 0)  # not one run: filtered
    assert scattered.coords.tolist() == layer.coords[::2].tolist()
    assert_in_step(scattered)


def test_an_ascending_layer_is_cut_by_binary_search() -> None:
    layer = refs([(i, j) for i in (0, 2, 2, 5, 7) for j in range(2)], b"x").decode(0)
    for span in [(0, 1), (1, 2), (2, 3), (2, 6), (3, 5), (6, 9), (8, 20), (0, 20)]:
        expected = [c for c in layer.coords.tolist() if span[0] <= c[0] < span[1]]
        piece = layer.within(0, span)
        assert piece.coords.tolist() == expected, span
        assert_in_step(piece)
    unsorted = refs([(3, 0), (1, 0), (2, 1)], b"x").decode(0)  # not ascending: masks
    assert unsorted.within(0, (1, 3)).coords.tolist() == [[1, 0], [2, 1]]

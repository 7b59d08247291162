"""A few changes merged into one sorted layer are spliced in (``format.merge.splice``): the
result must be exactly the general merge's, whatever the layers hold."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from icechunk_spark.core.coord_refs import CoordRefs
from icechunk_spark.format.coords import decode_coords, encode_coord
from icechunk_spark.format.manifest import conform_refs
from icechunk_spark.format.merge import SPLICE_MAX_ROWS, merge_order, merge_refs, splice, take_rows

# A value per row: inline bytes, a chunk file, a virtual ref, or None (a tombstone).
values = st.sampled_from([b"a", b"b", "C1", "C2", "s3://x/f", None])
coords_2d = st.tuples(st.integers(0, 6), st.integers(0, 3))


def layer(rows: list[tuple[tuple[int, ...], object]], stats: bool = False) -> pa.Table:
    """Ref rows of array 1 at these coords, each holding its value's kind of location."""
    columns: dict[str, pa.Array] = {
        "array_id": pa.array([1] * len(rows), pa.uint64()),
        "coord": pa.array([encode_coord(c) for c, _ in rows], pa.binary()),
        "inline_data": pa.array(
            [v if isinstance(v, bytes) else None for _, v in rows], pa.binary()
        ),
        "chunk_id": pa.array([v if v in ("C1", "C2") else None for _, v in rows], pa.string()),
        "virtual_path": pa.array(
            [v if isinstance(v, str) and v.startswith("s3") else None for _, v in rows], pa.string()
        ),
        "offset": pa.array([0 if isinstance(v, str) else None for _, v in rows], pa.uint64()),
        "length": pa.array([4 if v is not None else None for _, v in rows], pa.uint64()),
    }
    if stats:
        columns["stat_min"] = pa.array([float(i) for i in range(len(rows))], pa.float64())
    return pa.table(columns)


def general(layers: list[pa.Table], ndim: int, drop_tombstones: bool) -> pa.Table:
    return take_rows(*merge_order(layers, ndim, drop_tombstones))


def expected(layers: list[list[tuple[tuple[int, ...], object]]], drop: bool) -> list[tuple]:
    """The merge by its definition: later rows win per coord, tombstones delete."""
    last: dict[tuple[int, ...], object] = {}
    for rows in layers:
        for coord, value in rows:
            last[coord] = value
    return [(c, v) for c, v in sorted(last.items()) if not (drop and v is None)]


def as_rows(table: pa.Table) -> list[tuple]:
    out = []
    for row in table.to_pylist():
        value = row["inline_data"] or row["chunk_id"] or row["virtual_path"]
        out.append((tuple(decode_coords(pa.array([row["coord"]], pa.binary()), 2)[0]), value))
    return out


@settings(max_examples=150, deadline=None)
@given(
    base=st.dictionaries(coords_2d, values, max_size=20),
    changes=st.lists(st.lists(st.tuples(coords_2d, values), max_size=6), min_size=1, max_size=3),
    drop=st.booleans(),
    stats=st.booleans(),
    changes_stats=st.booleans(),
)
def test_a_splice_is_the_merge(base, changes, drop, stats, changes_stats) -> None:
    base_rows = sorted(base.items())
    if drop:  # a layer with tombstones is not spliced when they are dropped: keep it plain
        base_rows = [(c, v if v is not None else b"a") for c, v in base_rows]
    tables = [layer(base_rows, stats), *(layer(rows, changes_stats) for rows in changes)]
    assert as_rows(merge_refs(tables, 2, drop_tombstones=drop)) == expected(
        [base_rows, *changes], drop
    )
    spliced = splice(tables, 2, drop_tombstones=drop)
    if len(base_rows) and any(changes):
        assert spliced is not None  # the case this test is about
    if spliced is not None:
        want = general(tables, 2, drop)
        got = spliced.table()
        assert got.schema == want.schema
        assert got.combine_chunks().equals(want.combine_chunks())
        coords = spliced.coords(2)
        np.testing.assert_array_equal(coords, decode_coords(got.column("coord"), 2))
        assert coords.shape == (got.num_rows, 2) and not coords.flags.writeable


def test_only_a_sorted_layer_without_repeats_is_spliced_into() -> None:
    change = layer([((1, 1), b"b")])
    unsorted = layer([((2, 0), b"a"), ((1, 0), b"a")])
    repeated = layer([((1, 0), b"a"), ((1, 0), b"b")])
    tombstones = layer([((1, 0), None), ((2, 0), b"a")])
    assert splice([unsorted, change], 2) is None
    assert splice([repeated, change], 2) is None
    assert splice([tombstones, change], 2) is None  # they would have to be dropped
    assert splice([tombstones, change], 2, drop_tombstones=False) is not None
    many = layer([((i, 0), b"c") for i in range(SPLICE_MAX_ROWS + 1)])
    assert splice([layer([((0, 0), b"a")]), many], 2) is None  # sorting them is cheaper


def test_a_spliced_merge_shares_the_rows_of_the_sorted_layer() -> None:
    """One changed chunk of an array of many: the other rows are slices of the layer, not
    copies (a take of every row is what made such a commit cost 65 ms at 1 M refs)."""
    base = conform_refs(layer([((i, j), b"a") for i in range(100) for j in range(4)]))
    merged = merge_refs([base, layer([((50, 2), "C1")])], 2)
    assert merged.num_rows == 400
    assert merged.column("chunk_id").to_pylist().count("C1") == 1
    before = base.column("length").chunk(0).buffers()[1].address
    assert merged.column("length").chunk(0).buffers()[1].address == before


def test_a_spliced_merge_carries_the_coords_of_the_rows() -> None:
    # Neither layer decoded: the splice's own keys give the coords, with no decode of the
    # merged table's coord column (a chunk per slice, combined first).
    base = CoordRefs(layer([((0, 0), b"a"), ((0, 1), b"a"), ((3, 0), b"a")]), 2)
    changes = CoordRefs(layer([((0, 1), None), ((2, 2), "C1"), ((9, 0), b"b")]), 2)
    merged = CoordRefs.merge([base, changes], 2)
    assert merged.decoded
    np.testing.assert_array_equal(merged.coords, decode_coords(merged.table.column("coord"), 2))
    assert merged.coords.tolist() == [[0, 0], [2, 2], [3, 0], [9, 0]]

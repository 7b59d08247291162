"""The structure file's ``manifests`` column, built column by column, equals Arrow's conversion
of one dict per manifest (the way it was built before), value for value and byte for byte; and
an array's grid, kept after first use, follows its shape."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from icechunk_spark.format.parquet import small_table_to_parquet
from icechunk_spark.format.structure import MANIFESTS_TYPE, ArrayMeta, ManifestRef, Node
from icechunk_spark.format.structure_encode import manifests_column

BIGGEST = (1 << 64) - 1  # extents and counts are uint64

bounds = st.integers(0, BIGGEST)
refs = st.builds(
    ManifestRef,
    manifest_id=st.text(min_size=1, max_size=24),
    extent=st.lists(st.tuples(bounds, bounds), max_size=4).map(tuple),
    ref_count=bounds,
    set_name=st.text(max_size=12),
)
nodes = st.lists(
    st.builds(
        lambda i, manifests: Node(i, f"/n{i}", "array", b"{}", tuple(manifests)),
        st.integers(0, 1000),
        st.lists(refs, max_size=3),
    ),
    max_size=12,
)


def dict_per_manifest(values: list[Node]) -> pa.Array:
    """The reference: one Python dict per manifest, converted by Arrow."""
    rows: list[list[dict[str, Any]]] = [
        [
            {
                "manifest_id": m.manifest_id,
                "extent": [list(e) for e in m.extent],
                "ref_count": m.ref_count,
                "set_name": m.set_name,
            }
            for m in node.manifests
        ]
        for node in values
    ]
    return pa.array(rows, MANIFESTS_TYPE)


@settings(max_examples=200, deadline=None)
@given(nodes)
def test_the_column_equals_arrows_conversion_of_dicts(values: list[Node]) -> None:
    built = manifests_column(values)
    expected = dict_per_manifest(values)
    assert built.type == MANIFESTS_TYPE
    assert built.equals(expected)
    built.validate(full=True)
    schema = pa.schema([pa.field("manifests", MANIFESTS_TYPE)])
    as_file = small_table_to_parquet(pa.Table.from_arrays([built], schema=schema))
    assert as_file == small_table_to_parquet(pa.Table.from_arrays([expected], schema=schema))


def test_groups_get_an_empty_list_not_a_null() -> None:
    group = Node(1, "/g", "group", b"{}")
    array = Node(2, "/g/a", "array", b"{}", (ManifestRef("M", ((0, 4), (2, 3)), 7, "s"),))
    column = manifests_column([group, array, group])
    assert column.null_count == 0
    assert column.to_pylist() == [
        [],
        [{"manifest_id": "M", "extent": [[0, 4], [2, 3]], "ref_count": 7, "set_name": "s"}],
        [],
    ]


def meta(shape: tuple[int, ...], chunks: tuple[int, ...]) -> ArrayMeta:
    return ArrayMeta(shape, chunks, "uint8", None, 0, "/", "default")


def test_the_grid_kept_after_first_use_follows_the_shape() -> None:
    m = meta((10, 5), (3, 5))
    assert (m.grid_shape, m.metadata_chunks) == ((4, 1), 4)
    resized = dataclasses.replace(m, shape=(20, 5))  # a resize makes a new meta
    assert (resized.grid_shape, resized.metadata_chunks) == ((7, 1), 7)
    assert (m.grid_shape, m.metadata_chunks) == ((4, 1), 4)
    copied = pickle.loads(pickle.dumps(m))  # to executors, grid and all
    assert copied == m and hash(copied) == hash(m) and copied.grid_shape == (4, 1)
    assert m == meta((10, 5), (3, 5))  # asked for or not, the grid is no part of equality
    assert (meta((0,), (0,)).metadata_chunks, meta((), ()).metadata_chunks) == (0, 1)

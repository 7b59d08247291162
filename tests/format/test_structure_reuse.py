"""A structure table built from the previous snapshot's (unchanged rows copied) equals the one
built from scratch, whatever changed in between."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from icechunk_spark.format.structure import ManifestRef, Node, make_node
from icechunk_spark.format.structure_encode import encode_structure_table, structure_tables

INLINE_LIMIT = 400  # small, so some documents go to the attribute file


def array(node_id: int, path: str, manifest: str, note: str = "") -> Node:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10 + node_id],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": node_id % 3,
        "codecs": [{"name": "bytes"}],
        "attributes": {"note": note},
    }
    refs = (ManifestRef(manifest, ((0, 5),), 5),) if manifest else ()
    return make_node(node_id, path, json.dumps(doc).encode(), refs)


# An edit: (what, which node, a value) applied to the node list of the step before.
edits = st.lists(
    st.tuples(
        st.sampled_from(["manifest", "move", "note", "big_note", "delete", "add"]),
        st.integers(0, 40),
        st.integers(0, 1000),
    ),
    max_size=6,
)


def apply(nodes: dict[int, Node], edit: tuple[str, int, int], step: int) -> None:
    what, pick, value = edit
    ids = sorted(nodes)
    if what == "add" or not ids:
        new_id = max(ids, default=0) + 1
        nodes[new_id] = array(new_id, f"/new{step}_{new_id}", f"M{value}")
        return
    node = nodes[ids[pick % len(ids)]]
    path, manifest = node.path, node.manifests[0].manifest_id if node.manifests else ""
    if what == "delete":
        del nodes[node.id]
    elif what == "manifest":
        nodes[node.id] = array(node.id, path, f"M{value}")
    elif what == "move":
        nodes[node.id] = array(node.id, f"/moved{step}_{value}", manifest)
    elif what == "note":
        nodes[node.id] = array(node.id, path, manifest, f"n{value}")
    else:  # a document over the inline limit: its row points into a new attribute file
        nodes[node.id] = array(node.id, path, manifest, "x" * (INLINE_LIMIT + value))


@settings(max_examples=60)
@given(st.integers(1, 30), st.lists(edits, min_size=1, max_size=5))
def test_rows_copied_from_the_previous_table_equal_rows_built_anew(start, steps):
    nodes = {i: array(i, f"/a{i:02d}", f"M{i}") for i in range(1, start + 1)}
    previous = structure_tables(nodes.values(), "A0", INLINE_LIMIT)
    for step, changes in enumerate(steps, start=1):
        # As a commit does: the nodes it writes carry the attribute refs they were stored with.
        nodes = {n.id: n for n in previous.written}
        for edit in changes:
            apply(nodes, edit, step)
        attrs_file = f"A{step}"
        reused = structure_tables(nodes.values(), attrs_file, INLINE_LIMIT, previous=previous)
        fresh = structure_tables(nodes.values(), attrs_file, INLINE_LIMIT)
        assert reused.structure.equals(fresh.structure)
        assert encode_structure_table(reused.structure) == encode_structure_table(fresh.structure)
        assert reused.assigned == fresh.assigned and reused.written == fresh.written
        previous = reused


def test_a_small_change_copies_every_other_row():
    nodes = [array(i, f"/a{i:02d}", "M0") for i in range(1, 56)]
    previous = structure_tables(nodes, "A0")
    nodes[6] = array(7, "/a07", "M1")
    reused = structure_tables(nodes, "A1", previous=previous)
    assert reused.structure.equals(structure_tables(nodes, "A1").structure)
    assert reused.structure.column("manifests")[6].as_py()[0]["manifest_id"] == "M1"
    assert reused.structure.column(0).num_chunks == 1  # slices joined, not piled up

"""Encoding a snapshot's nodes as its structure file (and attribute file): the tables first,
which a writer builds on its own thread, then the Parquet bytes, which another thread may make.

A commit changes few of many nodes, so the tables of the snapshot it builds on are reused:
unchanged rows are copied as slices, and rows whose node names other manifests alone get a new
``manifests`` value.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from .parquet import small_table_to_parquet, table_to_parquet
from .structure import (
    ATTRIBUTES_SCHEMA,
    DEFAULT_INLINE_ZARR_JSON_LIMIT,
    EXTENT_TYPE,
    MANIFEST_REF_TYPE,
    MANIFESTS_TYPE,
    STRUCTURE_SCHEMA,
    AttrsRef,
    Node,
)

# The structure schema but its last column, manifests: rows are built without their manifests,
# which a node changes alone whenever a manifest it shares is rewritten.
_ROW_SCHEMA = pa.schema(list(STRUCTURE_SCHEMA)[:-1])


def encode_structure(
    nodes: Iterable[Node],
    new_attrs_file: str,
    inline_limit: int = DEFAULT_INLINE_ZARR_JSON_LIMIT,
) -> tuple[bytes, bytes | None, dict[int, AttrsRef]]:
    """Encode a snapshot's nodes (sorted by path).

    Returns the structure file, the new attribute file (``None`` when no document needed one) and
    the attribute refs assigned to nodes whose document went into it.
    """
    tables = structure_tables(nodes, new_attrs_file, inline_limit)
    attrs = None if tables.attributes is None else encode_attributes_table(tables.attributes)
    return encode_structure_table(tables.structure), attrs, tables.assigned


@dataclass(frozen=True, slots=True)
class StructureTables:
    """A snapshot's nodes as the tables of its structure file and attribute file (``None``
    when no document needed one), and the attribute refs assigned to nodes whose document
    went into the attribute file. ``written``: the node each structure row was made from (as
    it is stored: with its attribute ref), so the next snapshot can copy unchanged rows."""

    structure: pa.Table
    attributes: pa.Table | None
    assigned: dict[int, AttrsRef]
    written: tuple[Node, ...] = ()


def structure_tables(
    nodes: Iterable[Node],
    new_attrs_file: str,
    inline_limit: int = DEFAULT_INLINE_ZARR_JSON_LIMIT,
    previous: StructureTables | None = None,
) -> StructureTables:
    """``encode_structure`` before the Parquet encoding, which a writer may hand to another
    thread: it holds no lock on the interpreter, so it overlaps the writer's other work.

    ``previous``: the tables of the snapshot these nodes were changed from. A row whose node
    is unchanged is copied from it rather than built again (a small commit changes a few of
    many nodes, and building rows from Python values is most of the cost); a node that only
    names other manifests (every array of a rewritten shared manifest) gets its old row with
    a new ``manifests`` value.
    """
    ordered = sorted(nodes, key=lambda n: n.path)
    old = {n.id: (n, row) for row, n in enumerate(previous.written)} if previous else {}
    attrs_rows: list[Node] = []
    assigned: dict[int, AttrsRef] = {}
    rows: list[dict[str, Any]] = []  # new rows, but for their manifests
    manifests: list[Node] = []  # nodes whose manifests value is new
    # Per column group, the row each output row comes from: >= 0 a row of previous, < 0
    # (-1 - i) the i-th new value. ``picks`` for every column but manifests.
    picks: list[int] = []
    manifest_picks: list[int] = []
    written: list[Node] = []
    for node in ordered:
        ref = node.attrs_ref
        if ref is None and len(node.zarr_json) > inline_limit:
            ref = AttrsRef(new_attrs_file, len(attrs_rows))
            attrs_rows.append(node)
            assigned[node.id] = ref
            node = replace(node, attrs_ref=ref)
        old_node, old_row = old.get(node.id, (None, -1))
        if old_node is not None and (old_node is node or _same_but_manifests(old_node, node)):
            picks.append(old_row)
            # The rest of the row is the same: equal manifests make an equal node (the ids
            # match). Unequal ones most often differ in the first manifest id, seen at once.
            same_manifests = old_node is node or old_node.manifests == node.manifests
        else:
            picks.append(-1 - len(rows))
            rows.append(_structure_row(node, ref))
            same_manifests = False
        if same_manifests:
            manifest_picks.append(old_row)
        else:
            manifest_picks.append(-1 - len(manifests))
            manifests.append(node)
        written.append(node)
    table = _assemble_table(previous, rows, manifests, picks, manifest_picks)
    attrs_table = None
    if attrs_rows:
        attrs_table = pa.table(
            {"node_id": [n.id for n in attrs_rows], "zarr_json": [n.zarr_json for n in attrs_rows]},
            schema=ATTRIBUTES_SCHEMA,
        )
    return StructureTables(table, attrs_table, assigned, tuple(written))


def _same_but_manifests(before: Node, node: Node) -> bool:
    """Whether ``node``'s row differs from ``before``'s in its manifests alone (the typed
    metadata columns come from the document, so an equal document means equal columns)."""
    return (
        before.path == node.path
        and before.type == node.type
        and before.attrs_ref == node.attrs_ref
        and (before.zarr_json is node.zarr_json or before.zarr_json == node.zarr_json)
    )


def _assemble_table(
    previous: StructureTables | None,
    rows: list[dict[str, Any]],
    manifests: list[Node],
    picks: list[int],
    manifest_picks: list[int],
) -> pa.Table:
    fresh_manifests = pa.chunked_array([manifests_column(manifests)], MANIFESTS_TYPE)
    if previous is None or (len(rows) == len(picks) and len(manifests) == len(picks)):
        fresh = pa.Table.from_pylist(rows, schema=_ROW_SCHEMA)
        return pa.Table.from_arrays([*fresh.columns, fresh_manifests], schema=STRUCTURE_SCHEMA)
    old = previous.structure.columns
    if rows:
        fresh = pa.Table.from_pylist(rows, schema=_ROW_SCHEMA)
        row_runs = _runs(picks)
        columns = [_assemble(o, f, row_runs) for o, f in zip(old[:-1], fresh.columns, strict=True)]
    elif picks == list(range(previous.structure.num_rows)):
        columns = old[:-1]  # every node's row as it was (a commit that changed only chunks)
    else:
        row_runs = _runs(picks)
        columns = [_assemble(o, o, row_runs) for o in old[:-1]]  # no fresh row is picked
    columns.append(_assemble(old[-1], fresh_manifests, _runs(manifest_picks)))
    return pa.Table.from_arrays(columns, schema=STRUCTURE_SCHEMA)


def _runs(picks: list[int]) -> list[tuple[bool, int, int]]:
    """``picks`` (>= 0: a row of the previous table; < 0: value ``-1 - pick`` of the new
    ones) as runs of consecutive rows of one source: (from previous, first row, rows). Found
    with numpy: 5,760 rows, a tuple each in a Python loop, took ~1.5 ms."""
    if not picks:
        return []
    pick = np.asarray(picks, dtype=np.int64)
    old = pick >= 0
    row = np.where(old, pick, -1 - pick)
    # A run ends where the source changes or the next row is not the one after.
    ends = np.flatnonzero((old[1:] != old[:-1]) | (row[1:] != row[:-1] + 1)) + 1
    starts = [0, *ends.tolist()]
    stops = [*ends.tolist(), len(picks)]
    return [(bool(old[a]), int(row[a]), b - a) for a, b in zip(starts, stops, strict=True)]


def _assemble(
    previous: pa.ChunkedArray, fresh: pa.ChunkedArray, runs: list[tuple[bool, int, int]]
) -> pa.Array:
    """A column of ``runs`` of rows, as slices: ``take`` copies nested values one by one,
    which costs as much as building them (0.25 ms for 55 rows)."""
    slices = [(previous if old else fresh).slice(first, n) for old, first, n in runs]
    return pa.concat_arrays([chunk for part in slices for chunk in part.chunks])


def encode_structure_table(table: pa.Table) -> bytes:
    """The structure file of ``structure_tables(...).structure``."""
    return small_table_to_parquet(table)


def encode_attributes_table(table: pa.Table) -> bytes:
    """The attribute file of ``structure_tables(...).attributes``."""
    return table_to_parquet(table)


def _fill_json(value: Any) -> str:
    """``json.dumps`` of a fill value; the few scalar ones every array shares are cached."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return _scalar_fill_json(value, type(value).__name__)
    return json.dumps(value)


@functools.lru_cache(maxsize=256)
def _scalar_fill_json(value: Any, kind: str) -> str:  # kind: 0, 0.0 and False hash alike
    return json.dumps(value)


def _structure_row(node: Node, attrs_ref: AttrsRef | None) -> dict[str, Any]:
    meta = node.meta
    return {
        "id": node.id,
        "type": node.type,
        "path": node.path,
        "array_metadata": None
        if meta is None
        else {
            "shape": list(meta.shape),
            "data_type": meta.data_type,
            "fill_value": _fill_json(meta.fill_value),
            "dimension_names": list(meta.dimension_names)
            if meta.dimension_names is not None
            else None,
            "chunk_shape": list(meta.chunk_shape),
            "chunk_key_encoding": meta.key_encoding,
            "separator": meta.separator,
        },
        "zarr_json": None if attrs_ref is not None else node.zarr_json,
        "attrs_reference": None
        if attrs_ref is None
        else {"attrs_file": attrs_ref.attrs_file, "row": attrs_ref.row},
    }


def manifests_column(nodes: Iterable[Node]) -> pa.Array:
    """The ``manifests`` values of ``nodes``, built column by column: one pass gathers flat
    lists, then a few Arrow calls nest them: 0.55 us a node against 1.35 for Arrow's conversion
    of a dict per manifest (a change to one of 5,760 arrays sharing a manifest gives each of
    them a new value)."""
    node_offsets, dim_offsets = [0], [0]
    ids: list[str] = []
    counts: list[int] = []
    set_names: list[str] = []
    bounds: list[int] = []
    for node in nodes:
        for m in node.manifests:
            ids.append(m.manifest_id)
            counts.append(m.ref_count)
            set_names.append(m.set_name)
            for lo, hi in m.extent:
                bounds += (lo, hi)
            dim_offsets.append(len(bounds) >> 1)
        node_offsets.append(len(ids))
    pairs = pa.FixedSizeListArray.from_arrays(pa.array(bounds, pa.uint64()), 2)
    extent = pa.ListArray.from_arrays(pa.array(dim_offsets, pa.int32()), pairs, type=EXTENT_TYPE)
    refs = pa.StructArray.from_arrays(
        [
            pa.array(ids, pa.string()),
            extent,
            pa.array(counts, pa.uint64()),
            pa.array(set_names, pa.string()),
        ],
        fields=list(MANIFEST_REF_TYPE),
    )
    return pa.ListArray.from_arrays(pa.array(node_offsets, pa.int32()), refs, type=MANIFESTS_TYPE)

"""The tables the Spark data source serves, as Arrow schemas and pure builders.

No Spark here: every function takes repository values (nodes, snapshot infos, manifest rows)
and returns Arrow data whose schema is exactly the declared one, because Spark rejects record
batches whose types, order or nullability differ from the schema it was promised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.coords import decode_coords
from ..format.state import SnapshotInfo, State
from ..format.structure import Node


def _list_of(value_type: pa.DataType) -> pa.DataType:
    # Spark names list items "element"; Arrow's default "item" would also compare equal,
    # but matching Spark's spelling keeps schema errors impossible rather than unlikely.
    return pa.list_(pa.field("element", value_type))


CHUNKS = pa.schema(
    [
        ("array", pa.string()),
        ("coord", _list_of(pa.int64())),
        ("kind", pa.string()),
        ("location", pa.string()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
        ("manifest_id", pa.string()),
    ]
)
SNAPSHOTS = pa.schema(
    [
        ("id", pa.string()),
        ("parent", pa.string()),
        ("time", pa.timestamp("us", tz="UTC")),
        ("message", pa.string()),
        ("metadata", pa.string()),
    ]
)
REFS = pa.schema([("name", pa.string()), ("type", pa.string()), ("snapshot", pa.string())])
NODES = pa.schema(
    [
        ("path", pa.string()),
        ("type", pa.string()),
        ("shape", _list_of(pa.int64())),
        ("chunk_shape", _list_of(pa.int64())),
        ("dtype", pa.string()),
        ("dimension_names", _list_of(pa.string())),
        ("attributes", pa.string()),
        ("chunk_count", pa.int64()),
    ]
)
MANIFESTS = pa.schema(
    [
        ("id", pa.string()),
        ("set", pa.string()),
        ("arrays", _list_of(pa.string())),
        ("refs", pa.int64()),
        ("bytes", pa.int64()),
    ]
)
SCHEMAS: Mapping[str, pa.Schema] = {
    "chunks": CHUNKS,
    "snapshots": SNAPSHOTS,
    "refs": REFS,
    "nodes": NODES,
    "manifests": MANIFESTS,
}


def chunk_batches(
    refs: pa.Table, path: str, ndim: int, manifest_id: str, max_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """Manifest rows of one array as ``CHUNKS`` record batches of at most ``max_rows`` rows."""
    for start in range(0, refs.num_rows, max_rows):
        part = refs.slice(start, max_rows)
        n = part.num_rows
        coords = decode_coords(part.column("coord"), ndim).reshape(-1)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * ndim)
        inline = part.column("inline_data")
        chunk_id = part.column("chunk_id")
        virtual = part.column("virtual_path")
        is_inline = pc.is_valid(inline)
        kind = pc.if_else(
            is_inline, "inline", pc.if_else(pc.is_valid(chunk_id), "native", "virtual")
        )
        location = pc.coalesce(chunk_id, virtual)
        length = pc.if_else(
            is_inline,
            pc.cast(pc.binary_length(inline), pa.int64()),
            pc.cast(part.column("length"), pa.int64()),
        )
        offset = pc.if_else(is_inline, pa.scalar(None, pa.int64()), part.column("offset"))
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(np.full(n, path, dtype=object), pa.string()),
                pa.ListArray.from_arrays(
                    offsets, pa.array(coords, pa.int64()), type=CHUNKS.field("coord").type
                ),
                _flat(kind, pa.string()),
                _flat(location, pa.string()),
                _flat(pc.cast(offset, pa.int64()), pa.int64()),
                _flat(length, pa.int64()),
                pa.array(np.full(n, manifest_id, dtype=object), pa.string()),
            ],
            schema=CHUNKS,
        )


def _flat(values: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], type_)
    return values.cast(type_)


def snapshots_table(infos: Iterable[SnapshotInfo]) -> pa.Table:
    """One row per snapshot: id, parent id, commit time (UTC), message, metadata as JSON."""
    rows = list(infos)
    return pa.table(
        {
            "id": [s.id for s in rows],
            "parent": [s.parent_id for s in rows],
            "time": pa.array([s.timestamp_ms * 1000 for s in rows], pa.int64()).cast(
                SNAPSHOTS.field("time").type
            ),
            "message": [s.message for s in rows],
            "metadata": [json.dumps(dict(s.metadata), sort_keys=True) for s in rows],
        },
        schema=SNAPSHOTS,
    )


def refs_table(state: State) -> pa.Table:
    """Every branch and tag, sorted by name."""
    refs = sorted(state.refs.values(), key=lambda r: r.name)
    return pa.table(
        {
            "name": [r.name for r in refs],
            "type": [r.type for r in refs],
            "snapshot": [r.snapshot_id for r in refs],
        },
        schema=REFS,
    )


def nodes_table(nodes: Sequence[Node]) -> pa.Table:
    """One row per group or array; array-only columns are null for groups."""
    shapes: list[list[int] | None] = []
    chunk_shapes: list[list[int] | None] = []
    dtypes: list[str | None] = []
    dims: list[list[str | None] | None] = []
    attrs: list[str] = []
    counts: list[int | None] = []
    for node in nodes:
        doc = json.loads(node.zarr_json)
        attrs.append(json.dumps(doc.get("attributes", {}), sort_keys=True))
        meta = node.meta
        if meta is None:
            shapes.append(None)
            chunk_shapes.append(None)
            dtypes.append(None)
            dims.append(None)
            counts.append(None)
            continue
        shapes.append(list(meta.shape))
        chunk_shapes.append(list(meta.chunk_shape))
        dtypes.append(str(doc.get("data_type")) if doc.get("data_type") is not None else None)
        dims.append(list(meta.dimension_names) if meta.dimension_names is not None else None)
        counts.append(node.ref_count)
    return pa.table(
        {
            "path": [n.path for n in nodes],
            "type": [n.type for n in nodes],
            "shape": pa.array(shapes, NODES.field("shape").type),
            "chunk_shape": pa.array(chunk_shapes, NODES.field("chunk_shape").type),
            "dtype": dtypes,
            "dimension_names": pa.array(dims, NODES.field("dimension_names").type),
            "attributes": attrs,
            "chunk_count": pa.array(counts, pa.int64()),
        },
        schema=NODES,
    )


def manifests_table(nodes: Sequence[Node], sizes: Mapping[str, int]) -> pa.Table:
    """One row per manifest the snapshot uses: its set, arrays (by path), refs and bytes."""
    arrays: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    sets: dict[str, str] = {}
    for node in nodes:
        for ref in node.manifests:
            arrays.setdefault(ref.manifest_id, []).append(node.path)
            counts[ref.manifest_id] = counts.get(ref.manifest_id, 0) + ref.ref_count
            sets[ref.manifest_id] = ref.set_name
    ids = sorted(arrays)
    return pa.table(
        {
            "id": ids,
            "set": [sets[i] for i in ids],
            "arrays": pa.array([sorted(arrays[i]) for i in ids], MANIFESTS.field("arrays").type),
            "refs": pa.array([counts[i] for i in ids], pa.int64()),
            "bytes": pa.array([sizes.get(i) for i in ids], pa.int64()),
        },
        schema=MANIFESTS,
    )


def batches_of(table: pa.Table, max_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
    """A table as record batches, at least one (Spark wants a batch even for no rows)."""
    table = table.combine_chunks()
    batches = table.to_batches(max_chunksize=max_rows)
    if not batches:
        yield pa.RecordBatch.from_pylist([], schema=table.schema)
        return
    yield from batches


__all__ = [
    "CHUNKS",
    "MANIFESTS",
    "NODES",
    "REFS",
    "SCHEMAS",
    "SNAPSHOTS",
    "batches_of",
    "chunk_batches",
    "manifests_table",
    "nodes_table",
    "refs_table",
    "snapshots_table",
]

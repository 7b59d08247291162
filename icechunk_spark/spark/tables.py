"""The tables the Spark data source serves, as Arrow schemas and pure builders.

No Spark here: every function takes repository values (nodes, snapshot infos, manifest rows)
and returns Arrow data whose schema is exactly the declared one, because Spark rejects record
batches whose types, order or nullability differ from the schema it was promised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.coords import decode_coords
from ..format.manifest import STAT_FIELDS, with_inline_lengths
from ..format.state import SnapshotInfo, State
from ..format.structure import Node
from ..ops.feed import CHANGES
from ..ops.sources import SOURCES_SCHEMA


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
        # Chunk statistics (docs/format.md): null where not recorded, and for edge chunks.
        ("stat_min", pa.float64()),
        ("stat_max", pa.float64()),
        ("stat_nan_count", pa.int64()),
        ("stat_fill_count", pa.int64()),
        ("stat_sum", pa.float64()),
        ("stat_count", pa.int64()),
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
        ("initialized_chunks", pa.int64()),
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
    "changes": CHANGES,  # the change feed (spark/changes.py)
    "sources": SOURCES_SCHEMA,  # the files virtual refs point into (ops/sources.py)
}


@dataclass(frozen=True, slots=True)
class ChunkArray:
    """What the ``chunks`` rows of one array need besides its refs: path and grid."""

    path: str
    ndim: int
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]


# The manifest columns each ``chunks`` column is made from. Where a ref has no chunk file and no
# virtual path it is inline, so ``kind`` never needs the inline bytes; neither does ``length``
# (manifests record inline lengths, and the scan fills in those of older manifests).
_LOCATION = ("chunk_id", "virtual_path")
MANIFEST_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "array": (),
    "coord": ("coord",),
    "kind": _LOCATION,
    "location": _LOCATION,
    "offset": (*_LOCATION, "offset"),
    "length": (*_LOCATION, "length"),
    "manifest_id": (),
    **{f.name: ("coord", f.name) for f in STAT_FIELDS},  # coord: edge chunks read as null
}


def manifest_columns(columns: Iterable[str]) -> list[str]:
    """The manifest columns (``array_id`` first) to read for these ``chunks`` columns."""
    wanted = ["array_id"]
    for column in columns:
        wanted += [c for c in MANIFEST_COLUMNS[column] if c not in wanted]
    return wanted


def chunk_batch(
    refs: pa.Table, array: ChunkArray, manifest_id: str, schema: pa.Schema
) -> pa.RecordBatch:
    """Manifest rows of one array as a batch of the ``chunks`` columns in ``schema``.

    ``refs`` holds at least ``manifest_columns(schema.names)``, inline lengths filled in.
    """
    n = refs.num_rows
    recorded = [f.name for f in STAT_FIELDS if f.name in refs.column_names]
    coords: np.ndarray | None = None
    if "coord" in schema.names or (recorded and set(recorded) & set(schema.names)):
        coords = decode_coords(refs.column("coord"), array.ndim)
    inside: np.ndarray | None = None
    arrays = []
    for field in schema:
        if field.name == "array":
            arrays.append(constant_strings(array.path, n))
        elif field.name == "manifest_id":
            arrays.append(constant_strings(manifest_id, n))
        elif field.name == "coord":
            assert coords is not None
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * array.ndim)
            values = pa.array(coords.reshape(-1), pa.int64())
            arrays.append(pa.ListArray.from_arrays(offsets, values, type=field.type))
        elif field.name.startswith("stat_"):
            if field.name not in recorded:
                arrays.append(pa.nulls(n, field.type))
                continue
            if inside is None:
                assert coords is not None
                inside = _wholly_inside(coords, array)
            arrays.append(_stat(refs, field, inside))
        else:
            arrays.append(_LOCATION_BUILDERS[field.name](refs))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def chunk_batches(
    refs: pa.Table, path: str, ndim: int, manifest_id: str, max_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """Manifest rows of one array as ``CHUNKS`` record batches of at most ``max_rows`` rows
    (every column; the grid is unknown here, so no edge chunk is recognised)."""
    array = ChunkArray(path, ndim, (), ())
    refs = with_inline_lengths(refs)
    for start in range(0, refs.num_rows, max_rows):
        yield chunk_batch(refs.slice(start, max_rows), array, manifest_id, CHUNKS)


def constant_strings(value: str, n: int) -> pa.Array:
    """``n`` copies of one string, built from buffers (a Python list of n strings is slow)."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data * n)]
    )


def _is_inline(refs: pa.Table) -> pa.ChunkedArray:
    return pc.and_(pc.is_null(refs.column("chunk_id")), pc.is_null(refs.column("virtual_path")))


def _kind(refs: pa.Table) -> pa.Array:
    native = pc.is_valid(refs.column("chunk_id"))
    kind = pc.if_else(_is_inline(refs), "inline", pc.if_else(native, "native", "virtual"))
    return _flat(kind, pa.string())


def _location(refs: pa.Table) -> pa.Array:
    chunk_id, virtual = refs.column("chunk_id"), refs.column("virtual_path")
    # Usually all refs of a manifest are of one kind: then no coalesce (a copy of every string).
    if chunk_id.null_count == len(chunk_id):
        return _flat(virtual, pa.string())  # decodes a dictionary-encoded column too
    if virtual.null_count == len(virtual):
        return _flat(chunk_id, pa.string())
    return _flat(pc.coalesce(chunk_id.cast(pa.string()), virtual.cast(pa.string())), pa.string())


def _offset(refs: pa.Table) -> pa.Array:
    offset = pc.if_else(_is_inline(refs), pa.scalar(None, pa.uint64()), refs.column("offset"))
    return _flat(offset, pa.int64())


def _length(refs: pa.Table) -> pa.Array:
    return _flat(refs.column("length"), pa.int64())


_LOCATION_BUILDERS = {
    "kind": _kind,
    "location": _location,
    "offset": _offset,
    "length": _length,
}


def _stat(refs: pa.Table, field: pa.Field, inside: np.ndarray) -> pa.Array:
    values = refs.column(field.name).cast(field.type)
    return _flat(pc.if_else(pa.array(inside), values, pa.scalar(None, field.type)), field.type)


def _wholly_inside(coords: np.ndarray, array: ChunkArray) -> np.ndarray:
    """Per chunk: whether it lies wholly inside the array's shape.

    The statistics of an edge chunk read as null (docs/format.md, the rule
    ``chunks.stats.stats_table`` applies for ``chunk_stats`` and ``chunks_where``).
    """
    if coords.shape[0] == 0 or not array.shape:
        return np.ones(coords.shape[0], dtype=bool)
    ends = (coords + 1) * np.asarray(array.chunk_shape, dtype=np.int64)
    return np.asarray(np.all(ends <= np.asarray(array.shape, dtype=np.int64), axis=1))


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
            "initialized_chunks": pa.array(counts, pa.int64()),
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
    "MANIFEST_COLUMNS",
    "NODES",
    "REFS",
    "SCHEMAS",
    "SNAPSHOTS",
    "ChunkArray",
    "batches_of",
    "chunk_batch",
    "chunk_batches",
    "constant_strings",
    "manifest_columns",
    "manifests_table",
    "nodes_table",
    "refs_table",
    "snapshots_table",
]

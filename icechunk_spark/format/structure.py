"""The structure file: one Parquet row per group or array of a snapshot.

Each row keeps the node's exact ``zarr.json`` bytes (so a Zarr round trip is byte-exact), the
array metadata as typed columns (so engines can query shapes and dtypes without parsing JSON),
and the manifests holding the array's chunk refs with their extents and ref counts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pyarrow as pa

from ..errors import InvalidInputError
from .parquet import small_table_to_parquet, table_to_parquet

NodeType = Literal["group", "array"]
Extent = tuple[tuple[int, int], ...]

# Documents larger than this move to an attribute file; attributes are the only unbounded part.
DEFAULT_INLINE_ZARR_JSON_LIMIT = 16 * 1024


@dataclass(frozen=True, slots=True)
class ManifestRef:
    """Where (part of) an array's chunk refs live: a manifest, the extent it covers, its count."""

    manifest_id: str
    extent: Extent
    ref_count: int
    set_name: str = "default"


@dataclass(frozen=True, slots=True)
class AttrsRef:
    """A row of an attribute file holding a node's (large) zarr.json document."""

    attrs_file: str
    row: int


@dataclass(frozen=True, slots=True)
class ArrayMeta:
    """The parts of an array's zarr.json the engine needs, parsed once."""

    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    data_type: str
    dimension_names: tuple[str | None, ...] | None
    fill_value: Any
    separator: str
    key_encoding: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        return tuple(
            -(-s // c) if c else 0 for s, c in zip(self.shape, self.chunk_shape, strict=True)
        )

    @property
    def metadata_chunks(self) -> int:
        total = 1
        for n in self.grid_shape:
            total *= n
        return total


@dataclass(frozen=True, slots=True)
class Node:
    """A group or array of a snapshot."""

    id: int
    path: str
    type: NodeType
    zarr_json: bytes
    manifests: tuple[ManifestRef, ...] = ()
    attrs_ref: AttrsRef | None = None
    meta: ArrayMeta | None = field(default=None, compare=False)

    @property
    def ref_count(self) -> int:
        return sum(m.ref_count for m in self.manifests)


def make_node(
    node_id: int,
    path: str,
    zarr_json: bytes,
    manifests: tuple[ManifestRef, ...] = (),
    attrs_ref: AttrsRef | None = None,
) -> Node:
    """Build a node from its zarr.json document, validating and parsing it."""
    doc = parse_zarr_json(zarr_json, path)
    node_type = doc.get("node_type")
    if node_type == "group":
        return Node(node_id, path, "group", zarr_json, (), attrs_ref, None)
    if node_type == "array":
        return Node(
            node_id, path, "array", zarr_json, manifests, attrs_ref, parse_array_meta(doc, path)
        )
    raise InvalidInputError(
        f"zarr.json of {path!r} has node_type {node_type!r}; expected 'group' or 'array'"
    )


def parse_zarr_json(data: bytes, path: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"zarr.json of {path!r} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidInputError(f"zarr.json of {path!r} must be a JSON object")
    if doc.get("zarr_format") != 3:
        raise InvalidInputError(
            f"zarr.json of {path!r} has zarr_format {doc.get('zarr_format')!r}; "
            "only Zarr v3 is stored"
        )
    return doc


def parse_array_meta(doc: Mapping[str, Any], path: str) -> ArrayMeta:
    try:
        shape = tuple(int(s) for s in doc["shape"])
        grid = doc["chunk_grid"]
        if grid.get("name") != "regular":
            raise InvalidInputError(f"array {path!r}: only the 'regular' chunk grid is supported")
        chunk_shape = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        encoding = doc.get("chunk_key_encoding") or {"name": "default"}
        enc_name = str(encoding.get("name", "default"))
        default_sep = "/" if enc_name == "default" else "."
        separator = str((encoding.get("configuration") or {}).get("separator", default_sep))
        dims = doc.get("dimension_names")
        data_type = doc["data_type"]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"zarr.json of array {path!r} is missing or mistypes {exc}"
        ) from exc
    if (
        len(chunk_shape) != len(shape)
        or any(s < 0 for s in shape)
        # zarr allows a chunk length of 0, but only along an empty dimension.
        or any(c < 0 or (c == 0 and s > 0) for s, c in zip(shape, chunk_shape, strict=True))
    ):
        raise InvalidInputError(
            f"array {path!r}: shape {shape} and chunk shape {chunk_shape} do not fit"
        )
    return ArrayMeta(
        shape=shape,
        chunk_shape=chunk_shape,
        data_type=data_type if isinstance(data_type, str) else json.dumps(data_type),
        dimension_names=tuple(dims) if dims is not None else None,
        fill_value=doc.get("fill_value"),
        separator=separator,
        key_encoding=enc_name,
    )


_EXTENT = pa.list_(pa.list_(pa.uint64(), 2))
_MANIFEST_REF = pa.struct(
    [
        pa.field("manifest_id", pa.string(), nullable=False),
        pa.field("extent", _EXTENT, nullable=False),
        pa.field("ref_count", pa.uint64(), nullable=False),
        pa.field("set_name", pa.string(), nullable=False),
    ]
)
_ARRAY_METADATA = pa.struct(
    [
        pa.field("shape", pa.list_(pa.uint64()), nullable=False),
        pa.field("data_type", pa.string(), nullable=False),
        pa.field("fill_value", pa.string()),
        pa.field("dimension_names", pa.list_(pa.string())),
        pa.field("chunk_shape", pa.list_(pa.uint64()), nullable=False),
        pa.field("chunk_key_encoding", pa.string(), nullable=False),
        pa.field("separator", pa.string(), nullable=False),
    ]
)
STRUCTURE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uint64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("array_metadata", _ARRAY_METADATA),
        pa.field("zarr_json", pa.binary()),
        pa.field(
            "attrs_reference",
            pa.struct(
                [
                    pa.field("attrs_file", pa.string(), nullable=False),
                    pa.field("row", pa.uint32(), nullable=False),
                ]
            ),
        ),
        pa.field("manifests", pa.list_(_MANIFEST_REF)),
    ]
)
ATTRIBUTES_SCHEMA = pa.schema(
    [
        pa.field("node_id", pa.uint64(), nullable=False),
        pa.field("zarr_json", pa.binary(), nullable=False),
    ]
)


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
    many nodes, and building rows from Python values is most of the cost).
    """
    ordered = sorted(nodes, key=lambda n: n.path)
    old = {n.id: (n, row) for row, n in enumerate(previous.written)} if previous else {}
    attrs_rows: list[Node] = []
    assigned: dict[int, AttrsRef] = {}
    rows: list[dict[str, Any]] = []
    picks: list[int] = []  # >= 0: a row of previous; < 0: -1 - the index of a new row
    written: list[Node] = []
    for node in ordered:
        ref = node.attrs_ref
        if ref is None and len(node.zarr_json) > inline_limit:
            ref = AttrsRef(new_attrs_file, len(attrs_rows))
            attrs_rows.append(node)
            assigned[node.id] = ref
            node = replace(node, attrs_ref=ref)
        before = old.get(node.id)
        if before is not None and (before[0] is node or before[0] == node):
            picks.append(before[1])
        else:
            picks.append(-1 - len(rows))
            rows.append(_structure_row(node, ref))
        written.append(node)
    table = pa.Table.from_pylist(rows, schema=STRUCTURE_SCHEMA)
    if previous is not None and len(rows) < len(ordered):
        table = _assemble(previous.structure, table, picks)
    attrs_table = None
    if attrs_rows:
        attrs_table = pa.table(
            {"node_id": [n.id for n in attrs_rows], "zarr_json": [n.zarr_json for n in attrs_rows]},
            schema=ATTRIBUTES_SCHEMA,
        )
    return StructureTables(table, attrs_table, assigned, tuple(written))


def _assemble(previous: pa.Table, fresh: pa.Table, picks: list[int]) -> pa.Table:
    """The rows ``picks`` names (>= 0: a row of ``previous``; < 0: row ``-1 - pick`` of
    ``fresh``) in order, as slices of runs of rows: ``take`` copies nested rows one by one,
    which costs as much as building them (0.25 ms for 55 rows)."""
    runs: list[tuple[pa.Table, int, int]] = []  # (table, first row, rows)
    for pick in picks:
        source, row = (previous, pick) if pick >= 0 else (fresh, -1 - pick)
        if runs and runs[-1][0] is source and runs[-1][1] + runs[-1][2] == row:
            runs[-1] = (source, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((source, row, 1))
    return pa.concat_tables([t.slice(first, n) for t, first, n in runs]).combine_chunks()


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
        "manifests": [
            {
                "manifest_id": m.manifest_id,
                "extent": [list(e) for e in m.extent],
                "ref_count": m.ref_count,
                "set_name": m.set_name,
            }
            for m in node.manifests
        ],
    }

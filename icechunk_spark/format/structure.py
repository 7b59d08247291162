"""The structure file: one Parquet row per group or array of a snapshot.

Each row keeps the node's exact ``zarr.json`` bytes (so a Zarr round trip is byte-exact), the
array metadata as typed columns (so engines can query shapes and dtypes without parsing JSON),
and the manifests holding the array's chunk refs with their extents and ref counts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from ..errors import InvalidInputError

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
    # The grid, worked out on first use and kept: a commit asks each array of a rewritten
    # shared manifest for it (5,760 arrays: 5,760 grids a commit, ~1.5 us each to work out).
    _grid: tuple[int, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        grid = self._grid
        if grid is None:
            grid = tuple(
                -(-s // c) if c else 0 for s, c in zip(self.shape, self.chunk_shape, strict=True)
            )
            object.__setattr__(self, "_grid", grid)  # frozen: a cache, not a change of value
        return grid

    @property
    def metadata_chunks(self) -> int:
        return math.prod(self.grid_shape)


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
        manifests = self.manifests
        if len(manifests) == 1:  # most arrays: no generator to sum one count
            return manifests[0].ref_count
        return sum(m.ref_count for m in manifests)


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


EXTENT_TYPE = pa.list_(pa.list_(pa.uint64(), 2))
MANIFEST_REF_TYPE = pa.struct(
    [
        pa.field("manifest_id", pa.string(), nullable=False),
        pa.field("extent", EXTENT_TYPE, nullable=False),
        pa.field("ref_count", pa.uint64(), nullable=False),
        pa.field("set_name", pa.string(), nullable=False),
    ]
)
# An array's manifests column: each manifest holding its refs, with extent and count.
MANIFESTS_TYPE = pa.list_(MANIFEST_REF_TYPE)
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
        pa.field("manifests", MANIFESTS_TYPE),
    ]
)
ATTRIBUTES_SCHEMA = pa.schema(
    [
        pa.field("node_id", pa.uint64(), nullable=False),
        pa.field("zarr_json", pa.binary(), nullable=False),
    ]
)

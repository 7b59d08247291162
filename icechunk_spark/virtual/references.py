"""Kerchunk reference sets (JSON and Parquet) parsed into arrays of chunk refs.

A reference set maps Zarr v2 keys to values: metadata (``.zgroup``, ``.zarray``, ``.zattrs``)
as JSON text; chunks as ``[url, offset, length]``, ``[url]`` (the whole file), or inline data
(``"base64:..."`` or a plain string holding the bytes). Version 1 sets are
``{"version": 1, "templates": {...}, "refs": {...}}``; ``{{name}}`` templates in URLs are
expanded; ``gen`` entries are refused (expand them with fsspec first).

The Parquet layout is fsspec's ``LazyReferenceMapper`` (kerchunk's ``refs_to_dataframe``):
``<root>/.zmetadata`` holds ``{"metadata": {key: object}, "record_size": n}`` and
``<root>/<array>/refs.<i>.parq`` holds rows ``path, offset, size, raw`` for chunk numbers
``i * n ...`` in C order over the chunk grid (``path`` null and ``raw`` null: no chunk;
offset and size 0: the whole file). It is read column-wise with pyarrow, no loop per chunk.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError, NotFoundError
from ..format.parquet import read_parquet_bytes
from .metadata import array_v2_to_v3, group_v2_to_v3, loads

_TEMPLATE = re.compile(r"\{\{\s*(\w+)\s*\}\}")
REF_COLUMNS = pa.schema(
    [
        # Or a dictionary of strings (format.locations): VirtualiZarr manifests come so.
        pa.field("virtual_path", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("length", pa.int64()),  # null: the whole file (length from fsspec info)
        pa.field("inline_data", pa.binary()),
    ]
)


@dataclass(frozen=True, slots=True)
class ArrayRefs:
    """One array of a reference set: its v3 document and its chunk refs.

    ``coords`` is ``(n, ndim)``; ``refs`` has ``REF_COLUMNS``, one row per coord, with
    either ``virtual_path`` or ``inline_data`` set.
    """

    path: str
    doc: Mapping[str, Any]
    coords: np.ndarray
    refs: pa.Table

    @property
    def ndim(self) -> int:
        return len(self.doc["shape"])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.doc["shape"])

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self.doc["chunk_grid"]["configuration"]["chunk_shape"])

    @property
    def dimension_names(self) -> tuple[str, ...] | None:
        dims = self.doc.get("dimension_names")
        return tuple(dims) if dims else None


@dataclass(frozen=True, slots=True)
class ReferenceSet:
    """Groups (relative path -> v3 document, ``""`` the root) and arrays of a reference set."""

    groups: Mapping[str, Mapping[str, Any]]
    arrays: Mapping[str, ArrayRefs] = field(default_factory=dict)


def parse_json_refs(refs: Mapping[str, Any]) -> ReferenceSet:
    """A reference set from kerchunk's JSON form (version 0 or 1), already loaded."""
    version = refs.get("version")
    if version is not None and int(version) != 1:
        raise InvalidInputError(f"kerchunk reference version {version!r} is not supported")
    if refs.get("gen"):
        raise InvalidInputError(
            "kerchunk 'gen' references are not supported; expand them first "
            "(fsspec.implementations.reference.ReferenceFileSystem) and import the result"
        )
    entries: Mapping[str, Any] = refs.get("refs", refs)
    templates = {str(k): str(v) for k, v in (refs.get("templates") or {}).items()}
    metadata = {k: loads(v) for k, v in entries.items() if _is_metadata(k)}
    arrays = _array_paths(metadata)
    chunks: dict[str, list[tuple[str, Any]]] = {p: [] for p in arrays}
    for key, value in entries.items():
        if _is_metadata(key) or key == ".zmetadata":
            continue
        owner = _owner(key, arrays)
        if owner is None:
            raise InvalidInputError(f"reference key {key!r} belongs to no array")
        chunks[owner].append((key[len(owner) + 1 :] if owner else key, value))
    out = {}
    for path in arrays:
        doc = _array_doc(metadata, path)
        coords, table = _json_chunk_refs(path, doc, chunks[path], templates)
        out[path] = ArrayRefs(path, doc, coords, table)
    return ReferenceSet(_groups(metadata, arrays), out)


def _is_metadata(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return name in (".zarray", ".zattrs", ".zgroup")


def _array_paths(metadata: Mapping[str, Any]) -> list[str]:
    return sorted(k[: -len(".zarray")].rstrip("/") for k in metadata if k.endswith(".zarray"))


def _owner(key: str, arrays: Sequence[str]) -> str | None:
    candidate = key
    known = set(arrays)
    while "/" in candidate:
        candidate = candidate.rsplit("/", 1)[0]
        if candidate in known:
            return candidate
    return "" if "" in known else None


def _meta_key(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def _array_doc(metadata: Mapping[str, Any], path: str) -> dict[str, Any]:
    return array_v2_to_v3(
        metadata[_meta_key(path, ".zarray")],
        metadata.get(_meta_key(path, ".zattrs")),
        name=path or "/",
    )


def _groups(metadata: Mapping[str, Any], arrays: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Groups with a ``.zgroup``, plus every parent of an array or group (implicit in v2)."""
    paths = {k[: -len(".zgroup")].rstrip("/") for k in metadata if k.endswith(".zgroup")}
    paths.add("")
    for path in [*arrays, *list(paths)]:
        while "/" in path:
            path = path.rsplit("/", 1)[0]
            paths.add(path)
    paths -= set(arrays)
    return {p: group_v2_to_v3(metadata.get(_meta_key(p, ".zattrs"))) for p in sorted(paths)}


def _json_chunk_refs(
    path: str, doc: Mapping[str, Any], chunks: list[tuple[str, Any]], templates: Mapping[str, str]
) -> tuple[np.ndarray, pa.Table]:
    ndim = len(doc["shape"])
    coords = np.empty((len(chunks), ndim), dtype=np.int64)
    urls: list[str | None] = []
    offsets: list[int | None] = []
    lengths: list[int | None] = []
    inline: list[bytes | None] = []
    for row, (name, value) in enumerate(chunks):
        coords[row] = _chunk_index(path, name, ndim)
        if isinstance(value, list | tuple):
            if len(value) not in (1, 3):
                raise InvalidInputError(f"reference {path}/{name}: expected [url] or [url, o, n]")
            urls.append(_render(str(value[0]), templates))
            offsets.append(int(value[1]) if len(value) == 3 else 0)
            lengths.append(int(value[2]) if len(value) == 3 else None)
            inline.append(None)
        else:
            urls.append(None)
            offsets.append(None)
            lengths.append(None)
            inline.append(_inline_bytes(value))
    table = pa.table(
        [
            pa.array(urls, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array(lengths, pa.int64()),
            pa.array(inline, pa.binary()),
        ],
        schema=REF_COLUMNS,
    )
    return coords, table


def _chunk_index(path: str, name: str, ndim: int) -> tuple[int, ...]:
    parts = [p for p in re.split(r"[./]", name) if p != ""]
    if ndim == 0:
        if parts not in (["0"], []):
            raise InvalidInputError(f"reference {path}/{name}: a 0-d array has only chunk 0")
        return ()
    try:
        index = tuple(int(p) for p in parts)
    except ValueError:
        raise InvalidInputError(f"reference key {path}/{name} is not a chunk key") from None
    if len(index) != ndim or min(index) < 0:
        raise InvalidInputError(f"reference key {path}/{name} is not a chunk of a {ndim}-d array")
    return index


def _render(url: str, templates: Mapping[str, str]) -> str:
    if "{{" not in url:
        return url

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in templates:
            raise InvalidInputError(f"reference url {url!r} uses an undefined template {name!r}")
        return templates[name]

    return _TEMPLATE.sub(replace, url)


def _inline_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return base64.b64decode(value[7:]) if value.startswith(b"base64:") else value
    if isinstance(value, str):
        if value.startswith("base64:"):
            return base64.b64decode(value[7:])
        return value.encode("utf-8")
    raise InvalidInputError(f"unsupported inline reference value of type {type(value).__name__}")


# -- Parquet ------------------------------------------------------------------------------
def parse_parquet_refs(url: str, storage_options: Mapping[str, Any] | None = None) -> ReferenceSet:
    """A reference set from a kerchunk Parquet directory (``refs_to_dataframe`` output)."""
    import fsspec.core

    fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    root = root.rstrip("/")
    try:
        head = json.loads(fs.cat_file(f"{root}/.zmetadata"))
    except FileNotFoundError:
        raise NotFoundError(f"{url!r} is not a Parquet reference set (no .zmetadata)") from None
    metadata = {k: loads(v) for k, v in head.get("metadata", {}).items()}
    record_size = int(head["record_size"])
    arrays = _array_paths(metadata)
    out = {}
    for path in arrays:
        doc = _array_doc(metadata, path)
        coords, table = _parquet_chunk_refs(fs, root, path, doc, record_size)
        out[path] = ArrayRefs(path, doc, coords, table)
    return ReferenceSet(_groups(metadata, arrays), out)


def _parquet_chunk_refs(
    fs: Any, root: str, path: str, doc: Mapping[str, Any], record_size: int
) -> tuple[np.ndarray, pa.Table]:

    shape = [int(s) for s in doc["shape"]]
    chunks = [int(c) for c in doc["chunk_grid"]["configuration"]["chunk_shape"]]
    grid = [math.ceil(s / c) for s, c in zip(shape, chunks, strict=True)] or [1]
    total = math.prod(grid)
    pieces, numbers = [], []
    for record in range(math.ceil(total / record_size)):
        name = f"{root}/{path}/refs.{record}.parq" if path else f"{root}/refs.{record}.parq"
        try:
            data = fs.cat_file(name)
        except FileNotFoundError:
            continue  # no chunk of this record was written
        table = read_parquet_bytes(data)
        table = _conform_parquet(table)
        pieces.append(table)
        numbers.append(np.arange(table.num_rows, dtype=np.int64) + record * record_size)
    if not pieces:
        return np.empty((0, len(shape)), np.int64), REF_COLUMNS.empty_table()
    table = pa.concat_tables(pieces)
    number = np.concatenate(numbers)
    present = pc.or_(pc.is_valid(table.column("path")), pc.is_valid(table.column("raw")))
    inside = pa.array(number < total)
    keep = pc.and_(present, inside)
    table = table.filter(keep)
    number = number[np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)]
    coords = np.stack(np.unravel_index(number, grid), axis=1).astype(np.int64)
    if not shape:
        coords = coords[:, :0]
    is_url = pc.is_valid(table.column("path"))
    whole = pc.and_(
        is_url, pc.and_(pc.equal(table.column("offset"), 0), pc.equal(table.column("size"), 0))
    )
    refs = pa.table(
        [
            table.column("path"),
            pc.if_else(is_url, table.column("offset"), None),
            pc.if_else(pc.or_(pc.invert(is_url), whole), None, table.column("size")),
            pc.if_else(is_url, None, table.column("raw")),
        ],
        schema=REF_COLUMNS,
    )
    # ``raw`` holds the final bytes: kerchunk decodes "base64:" values before writing them.
    return coords, refs


def _conform_parquet(table: pa.Table) -> pa.Table:
    n = table.num_rows

    def column(name: str, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
        if name not in table.column_names:
            return pa.nulls(n, kind)
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        return col.cast(kind)

    return pa.table(
        {
            "path": column("path", pa.string()),
            "offset": column("offset", pa.int64()),
            "size": column("size", pa.int64()),
            "raw": column("raw", pa.binary()),
        }
    )

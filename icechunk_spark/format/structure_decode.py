"""Reading a structure file (and attribute files) back into nodes: ``format.structure``
writes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import FormatError, InvalidInputError
from .parquet import parquet_to_table
from .structure import (
    ATTRIBUTES_SCHEMA,
    STRUCTURE_SCHEMA,
    AttrsRef,
    ManifestRef,
    Node,
    make_node,
)


@dataclass(frozen=True, slots=True)
class StructureRow:
    """A decoded structure row whose zarr.json may still live in an attribute file."""

    id: int
    path: str
    type: str
    zarr_json: bytes | None
    attrs_ref: AttrsRef | None
    manifests: tuple[ManifestRef, ...]


def decode_structure(data: bytes, name: str) -> list[StructureRow]:
    table = parquet_to_table(data, name, STRUCTURE_SCHEMA)
    try:
        manifests = _manifest_refs(table.column("manifests"))
        rows = []
        columns = ["id", "type", "path", "zarr_json", "attrs_reference"]
        for r, refs in zip(table.select(columns).to_pylist(), manifests, strict=True):
            aref = r["attrs_reference"]
            if r["zarr_json"] is None and aref is None:
                raise ValueError(f"node {r['path']!r} has neither zarr_json nor attrs_reference")
            rows.append(
                StructureRow(
                    id=int(r["id"]),
                    path=str(r["path"]),
                    type=str(r["type"]),
                    zarr_json=r["zarr_json"],
                    attrs_ref=None
                    if aref is None
                    else AttrsRef(aref["attrs_file"], int(aref["row"])),
                    manifests=refs,
                )
            )
        return rows
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise FormatError(f"structure file {name!r} is corrupt: {exc}") from exc


def _manifest_refs(column: pa.ChunkedArray) -> list[tuple[ManifestRef, ...]]:
    """Each node's manifest refs, decoded column by column.

    Not with ``to_pylist``: a dict per manifest and lists per extent, all alive at once, set
    off a full garbage collection of the process at a thousand manifests (15 ms of a cold
    lookup's 22, bench/bench_lookup.py --pieces 1000).
    """
    lists = column.combine_chunks()
    lengths = np.diff(_numbers(lists.offsets, np.int32))
    lengths[~_valid(lists)] = 0  # flatten() skips null lists whatever their offsets say
    structs = lists.flatten()
    fields = dict(zip([f.name for f in structs.type], structs.flatten(), strict=True))
    extents = fields["extent"]
    dims = np.diff(_numbers(extents.offsets, np.int32)).tolist()
    bounds = _numbers(extents.flatten().flatten(), np.uint64).tolist()
    refs, at = [], 0
    for manifest_id, ndim, count, set_name in zip(
        fields["manifest_id"].to_pylist(),
        dims,
        _numbers(fields["ref_count"], np.uint64).tolist(),
        fields["set_name"].to_pylist(),
        strict=True,
    ):
        pairs = bounds[at : at + 2 * ndim]
        at += 2 * ndim
        refs.append(
            ManifestRef(
                manifest_id, tuple(zip(pairs[::2], pairs[1::2], strict=True)), count, set_name
            )
        )
    ends = np.cumsum(lengths).tolist()
    return [tuple(refs[end - n : end]) for end, n in zip(ends, lengths.tolist(), strict=True)]


def _numbers(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The values of a fixed-width array without nulls, viewed in its data buffer.

    Not ``to_numpy``: pyarrow imports pandas on its first use, 200 ms of a cold process.
    """
    if array.null_count:
        raise ValueError(f"unexpected nulls in a {array.type} column")
    data = np.frombuffer(array.buffers()[1], dtype=dtype)
    return data[array.offset : array.offset + len(array)]


def _valid(array: pa.Array) -> np.ndarray:
    """Which entries are not null, from the validity bitmap."""
    bitmap = array.buffers()[0]
    if bitmap is None or array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def decode_attributes(data: bytes, name: str) -> Sequence[bytes]:
    table = parquet_to_table(data, name, ATTRIBUTES_SCHEMA)
    return [bytes(b) for b in table.column("zarr_json").to_pylist()]


def node_from_row(row: StructureRow, zarr_json: bytes, name: str) -> Node:
    try:
        return make_node(row.id, row.path, zarr_json, row.manifests, row.attrs_ref)
    except InvalidInputError as exc:
        raise FormatError(f"structure file {name!r}: {exc}") from exc

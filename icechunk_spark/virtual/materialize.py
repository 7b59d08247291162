"""Copying a combined array's values into real chunks: when files cannot be concatenated
virtually (chunks not aligned, time units or packing differing between files), within
``materialize_max_bytes``; and reading a reference set's values (``read_values``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..chunks.codec import chunk_codec
from ..errors import InvalidInputError
from .references import REF_COLUMNS, ArrayRefs
from .time_units import is_time_units, rebase_time_values

# (url, offset, length or None for the whole file) -> bytes
Fetch = Callable[[str, int, int | None], bytes]

# Attributes that change the values xarray decodes; compared across files.
PACKING = ("scale_factor", "add_offset", "missing_value", "_Unsigned")
_DECODED_AWAY = (*PACKING, "_FillValue")  # not in the attributes of a decoded array


@dataclass(frozen=True, slots=True)
class FilePart:
    """One file's array (``None``: the file lacks it) and the file's length along the dim."""

    k: int
    array: ArrayRefs | None
    length: int
    attrs: Mapping[str, Any]  # with units/calendar inherited through CF bounds links


def concat_shape(parts: Sequence[FilePart], first: ArrayRefs, axis: int) -> list[int]:
    shape = list(first.shape)
    shape[axis] = sum(p.length for p in parts)
    return shape


def part_shape(part: FilePart, first: ArrayRefs, axis: int) -> tuple[int, ...]:
    shape = list(first.shape)
    shape[axis] = part.length
    return tuple(shape)


def decoded_bytes(
    parts: Sequence[FilePart], first: ArrayRefs, axis: int, dtype: np.dtype[Any] | None
) -> int:
    itemsize = (dtype or chunk_codec(json.dumps(first.doc).encode()).numpy_dtype).itemsize
    return int(np.prod(concat_shape(parts, first, axis))) * itemsize


def time_units_differ(present: Sequence[FilePart]) -> bool:
    units = [p.attrs.get("units") for p in present]
    return is_time_units(units[0]) and any(u != units[0] for u in units)


def _values_in_first_units(part: FilePart, first: FilePart, fetch: Fetch) -> np.ndarray:
    assert part.array is not None
    values = read_values(part.array, fetch)
    units, target = part.attrs.get("units"), first.attrs.get("units")
    if not is_time_units(target) or units == target:
        return values
    if not isinstance(units, str) or not is_time_units(units):
        raise InvalidInputError(
            f"{part.array.path!r}: units {units!r} in one file, {target!r} in the first; "
            "cannot concatenate"
        )
    assert isinstance(target, str)
    calendar = first.attrs.get("calendar")
    return rebase_time_values(values, units, target, calendar, part.array.path)


def materialize(parts: Sequence[FilePart], first: ArrayRefs, axis: int, fetch: Fetch) -> ArrayRefs:
    """Every file's values (time converted), concatenated and stored as one inline chunk."""
    codec = chunk_codec(json.dumps(first.doc).encode())
    reference = next(p for p in parts if p.array is not None)
    pieces = [
        _values_in_first_units(p, reference, fetch)
        if p.array is not None
        else np.full(part_shape(p, first, axis), codec.fill_value, codec.numpy_dtype)
        for p in parts
    ]
    return _single_chunk(first, dict(first.doc), np.concatenate(pieces, axis=axis))


def materialize_decoded(
    parts: Sequence[FilePart], first: ArrayRefs, axis: int, fetch: Fetch
) -> ArrayRefs:
    """Values as xarray decodes each file (packing applied, NaN where masked), as one chunk."""
    reference = next(p for p in parts if p.array is not None)
    decoded = [_decode(p, reference, fetch) if p.array is not None else None for p in parts]
    kinds = [d.dtype for d in decoded if d is not None]
    dtype = np.result_type(*kinds)
    if any(d is None for d in decoded) and dtype.kind != "f":
        dtype = np.result_type(dtype, np.float32)  # room for NaN, as xarray's outer join
    pieces = [
        d.astype(dtype) if d is not None else np.full(part_shape(p, first, axis), np.nan, dtype)
        for d, p in zip(decoded, parts, strict=True)
    ]
    values = np.concatenate(pieces, axis=axis)
    attributes = {
        k: v for k, v in (first.doc.get("attributes") or {}).items() if k not in _DECODED_AWAY
    }
    native = np.dtype(dtype).newbyteorder("<")
    doc: dict[str, Any] = {
        **first.doc,
        "data_type": str(native.name),
        "fill_value": "NaN" if native.kind == "f" else 0,
        "attributes": attributes,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}}
            if native.itemsize > 1
            else {"name": "bytes"}
        ],
    }
    return _single_chunk(first, doc, values.astype(native))


def _decode(part: FilePart, reference: FilePart, fetch: Fetch) -> np.ndarray:
    """One file's values decoded by xarray's own CF decoding; times stay numbers, rebased."""
    import xarray as xr

    array = part.array
    assert array is not None
    raw = read_values(array, fetch)
    encoding = {k: part.attrs[k] for k in PACKING if k in part.attrs}
    if "_FillValue" in (array.doc.get("attributes") or {}):
        encoding["_FillValue"] = chunk_codec(json.dumps(array.doc).encode()).fill_value
    dims = array.dimension_names or tuple(f"dim_{d}" for d in range(array.ndim))
    variable = xr.conventions.decode_cf_variable(
        array.path,
        xr.Variable(dims, raw, encoding),
        decode_times=False,
        decode_timedelta=False,
    )
    values = np.asarray(variable.values)
    units, target = part.attrs.get("units"), reference.attrs.get("units")
    if isinstance(units, str) and isinstance(target, str) and is_time_units(target):
        # Times stay numbers (in the reference file's units, which the array keeps).
        calendar = reference.attrs.get("calendar")
        values = rebase_time_values(values, units, target, calendar, array.path)
    return values


def _single_chunk(first: ArrayRefs, doc: dict[str, Any], values: np.ndarray) -> ArrayRefs:
    """``values`` as an array of one chunk, stored inline (encoded with ``doc``'s codecs)."""
    doc = {
        **doc,
        "shape": list(values.shape),
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [max(1, s) for s in values.shape]},
        },
    }
    codec = chunk_codec(json.dumps(doc).encode())
    full = np.full(codec.chunk_shape, codec.fill_value, dtype=codec.numpy_dtype)
    full[tuple(slice(0, s) for s in values.shape)] = values
    data = codec.encode(full)
    table = pa.table(
        [
            pa.array([None], pa.string()),
            pa.array([None], pa.int64()),
            pa.array([None], pa.int64()),
            pa.array([data], pa.binary()),
        ],
        schema=REF_COLUMNS,
    )
    return ArrayRefs(first.path, doc, np.zeros((1, values.ndim), np.int64), table)


def read_values(array: ArrayRefs, fetch: Fetch) -> np.ndarray:
    """All values of one file's array, decoded from its refs (unwritten chunks: fill)."""
    codec = chunk_codec(json.dumps(array.doc).encode())
    out = np.full(array.shape, codec.fill_value, dtype=codec.numpy_dtype)
    refs = array.refs.to_pylist()
    for coord, ref in zip(array.coords, refs, strict=True):
        data = _bytes_of(ref, fetch)
        chunk = codec.decode(data)
        target = tuple(
            slice(int(i) * c, min((int(i) + 1) * c, s))
            for i, c, s in zip(coord, array.chunk_shape, array.shape, strict=True)
        )
        out[target] = chunk[tuple(slice(0, t.stop - t.start) for t in target)]
    return out


def _bytes_of(ref: Mapping[str, Any], fetch: Fetch) -> bytes:
    if ref["inline_data"] is not None:
        return bytes(ref["inline_data"])
    return fetch(str(ref["virtual_path"]), int(ref["offset"] or 0), ref["length"])

"""Concatenating the reference sets of many files along one dimension (e.g. monthly files).

For each array of the first set:

- without the dimension: taken from the first set (the others must have the same shape);
- the dimension's own coordinate variable (1-D, named like the dimension): its values are
  read from every file, decoded, concatenated and stored as one real chunk (it is small,
  and a coordinate read in one request is what labelling and xarray want);
- other arrays along the dimension stay virtual: chunk coords of file *k* are shifted by the
  number of chunks of files before it. That needs every file but the last to hold a whole
  number of chunks along the dimension; arrays where it does not are materialized like
  coordinates when their decoded size is at most ``materialize_max_bytes``, else refused.

Arrays concatenated must agree on dtype, fill value, codecs, chunk shape, dimension names and
the shape of the other dimensions. Attributes (of arrays and groups) come from the first set.
Files are concatenated in the order given. CF time values whose units differ between files
("days since" each file's own date) are materialized in the first file's units (see
``time_units``): virtual refs could only repeat each file's raw numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidInputError
from ..inventory import chunk_codec
from .references import REF_COLUMNS, ArrayRefs, ReferenceSet
from .time_units import is_time_units, rebase_time_values

# (url, offset, length or None for the whole file) -> bytes
Fetch = Callable[[str, int, int | None], bytes]

DEFAULT_MATERIALIZE_MAX_BYTES = 64 * 1024 * 1024
_ALWAYS_EQUAL = ("data_type", "fill_value", "dimension_names")
_EQUAL_FOR_VIRTUAL = ("codecs", "chunk_grid")  # materialized arrays decode each file anyway


def concat_reference_sets(
    sets: Sequence[ReferenceSet],
    dim: str,
    fetch: Fetch,
    *,
    materialize_max_bytes: int = DEFAULT_MATERIALIZE_MAX_BYTES,
) -> ReferenceSet:
    """One reference set holding ``sets`` concatenated along dimension ``dim``.

    Raises:
        InvalidInputError: arrays differ between sets, or cannot be concatenated virtually.
    """
    if not sets:
        raise InvalidInputError("nothing to concatenate: no reference sets")
    first = sets[0]
    out: dict[str, ArrayRefs] = {}
    for path, array in first.arrays.items():
        parts = [_member(s, path, k) for k, s in enumerate(sets)]
        dims = array.dimension_names
        if dims is None or dim not in dims:
            _check_same_shape(parts, path)
            out[path] = array
            continue
        axis = dims.index(dim)
        _check_compatible(parts, path, axis, _ALWAYS_EQUAL)
        is_coordinate = array.ndim == 1 and path.rsplit("/", 1)[-1] == dim
        virtual_ok = _same(parts, _EQUAL_FOR_VIRTUAL) and _aligned(parts, axis)
        if not is_coordinate and virtual_ok and not _time_units_differ(parts):
            out[path] = _concat_virtual(parts, axis)
        elif is_coordinate or _decoded_bytes(parts, axis) <= materialize_max_bytes:
            out[path] = _materialize(parts, axis, fetch)
        elif virtual_ok:
            raise InvalidInputError(
                f"{path!r}: its time units differ between files, so its values must be "
                f"converted, and it is over materialize_max_bytes={materialize_max_bytes} "
                "to copy"
            )
        else:
            _check_compatible(parts, path, axis, _EQUAL_FOR_VIRTUAL)  # names the difference
            raise InvalidInputError(
                f"{path!r}: files do not hold whole chunks along {dim!r} (chunk length "
                f"{array.chunk_shape[axis]}, lengths {[p.shape[axis] for p in parts]}), so it "
                f"cannot be concatenated virtually, and it is over materialize_max_bytes="
                f"{materialize_max_bytes} to copy"
            )
    return ReferenceSet(first.groups, out)


def _member(refset: ReferenceSet, path: str, k: int) -> ArrayRefs:
    try:
        return refset.arrays[path]
    except KeyError:
        raise InvalidInputError(f"file {k} of the concatenation has no array {path!r}") from None


def _check_same_shape(parts: Sequence[ArrayRefs], path: str) -> None:
    shapes = {p.shape for p in parts}
    if len(shapes) > 1:
        raise InvalidInputError(
            f"{path!r} does not have the concatenation dimension but differs in shape between "
            f"files: {sorted(shapes)}"
        )


def _same(parts: Sequence[ArrayRefs], keys: Sequence[str]) -> bool:
    return all(p.doc.get(k) == parts[0].doc.get(k) for p in parts for k in keys)


def _check_compatible(
    parts: Sequence[ArrayRefs], path: str, axis: int, keys: Sequence[str]
) -> None:
    reference = parts[0]
    for k, part in enumerate(parts[1:], start=1):
        for key in keys:
            if reference.doc.get(key) != part.doc.get(key):
                raise InvalidInputError(
                    f"{path!r}: file {k} has another {key} ({part.doc.get(key)!r}) than file 0 "
                    f"({reference.doc.get(key)!r}); such arrays cannot be concatenated"
                )
        others = [s for d, s in enumerate(part.shape) if d != axis]
        if others != [s for d, s in enumerate(reference.shape) if d != axis]:
            raise InvalidInputError(f"{path!r}: file {k} differs in shape off the concat axis")


def _aligned(parts: Sequence[ArrayRefs], axis: int) -> bool:
    size = parts[0].chunk_shape[axis]
    return all(p.shape[axis] % size == 0 for p in parts[:-1])


def _concat_shape(parts: Sequence[ArrayRefs], axis: int) -> list[int]:
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return shape


def _concat_virtual(parts: Sequence[ArrayRefs], axis: int) -> ArrayRefs:
    size = parts[0].chunk_shape[axis]
    coords, tables, start = [], [], 0
    for part in parts:
        shifted = part.coords.copy()
        shifted[:, axis] += start // size
        coords.append(shifted)
        tables.append(part.refs)
        start += part.shape[axis]
    doc = {**parts[0].doc, "shape": _concat_shape(parts, axis)}
    return ArrayRefs(parts[0].path, doc, np.concatenate(coords), pa.concat_tables(tables))


def _decoded_bytes(parts: Sequence[ArrayRefs], axis: int) -> int:
    itemsize = chunk_codec(json.dumps(parts[0].doc).encode()).numpy_dtype.itemsize
    return int(np.prod(_concat_shape(parts, axis))) * itemsize


def _attribute(part: ArrayRefs, name: str) -> Any:
    return (part.doc.get("attributes") or {}).get(name)


def _time_units_differ(parts: Sequence[ArrayRefs]) -> bool:
    units = [_attribute(p, "units") for p in parts]
    return is_time_units(units[0]) and any(u != units[0] for u in units)


def _values_in_first_units(part: ArrayRefs, first: ArrayRefs, fetch: Fetch) -> np.ndarray:
    values = read_values(part, fetch)
    units, target = _attribute(part, "units"), _attribute(first, "units")
    if not is_time_units(target) or units == target:
        return values
    if not is_time_units(units):
        raise InvalidInputError(
            f"{part.path!r}: units {units!r} in one file, {target!r} in the first; "
            "cannot concatenate"
        )
    calendar = _attribute(first, "calendar")
    return rebase_time_values(values, units, target, calendar, part.path)


def _materialize(parts: Sequence[ArrayRefs], axis: int, fetch: Fetch) -> ArrayRefs:
    """Decode every file's values, concatenate, and store them as one inline chunk."""
    values = np.concatenate([_values_in_first_units(p, parts[0], fetch) for p in parts], axis=axis)
    doc: dict[str, Any] = {
        **parts[0].doc,
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
    return ArrayRefs(parts[0].path, doc, np.zeros((1, values.ndim), np.int64), table)


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

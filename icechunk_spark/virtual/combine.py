"""Concatenating the reference sets of many files along one dimension (e.g. monthly files).

The result reads like ``xarray.combine_by_coords(files, data_vars="minimal",
coords="minimal", join="outer", compat="equals", combine_attrs="override")`` of the same
files (docs/format.md, "Virtual datasets: what a combined import reads"), or the import is
refused with a message naming the files and the variable:

- arrays without the dimension: taken from the first file holding them; every other file
  holding them must have the same shape, metadata and values (a differing coordinate such as
  ``lat`` is refused: xarray's outer join would re-grid every chunk onto the union);
- the dimension's own coordinate variable (1-D, named like the dimension): its values are
  read from every file, decoded, concatenated and stored as one real chunk (it is small,
  and a coordinate read in one request is what labelling and xarray want); every file must
  have it;
- other arrays along the dimension stay virtual: chunk coords of file *k* are shifted by the
  number of chunks of files before it. That needs every file but the last to hold a whole
  number of chunks along the dimension; arrays where it does not are materialized like
  coordinates when their decoded size is at most ``materialize_max_bytes``, else refused;
- an array missing from some files is missing values there (NaN, as xarray's outer join
  gives): virtually as absent chunks when the array masks its fill value (``_FillValue``),
  else materialized as decoded floats;
- attributes that change decoding (``scale_factor``, ``add_offset``, ``_FillValue``,
  ``missing_value``, ``_Unsigned``, the dtype) may differ between files: the array is then
  materialized *decoded* (values as xarray decodes them, NaN where masked) within
  ``materialize_max_bytes``, else refused. Differing ``units`` or ``calendar`` are refused,
  except CF time units, which are converted (below).

Attributes (of arrays and groups) come from the first file holding them. Files are
concatenated in the order given (``import_netcdf`` gives their time order: ``ordering``).
CF time values whose units differ between files ("days since" each file's own date) are
materialized in the first file's units (see ``time_units``): virtual refs could only
repeat each file's raw numbers. Variables named by
a time variable's CF ``bounds`` or ``climatology`` attribute carry no units of their own and
are converted with their time variable's units and calendar.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..chunks.codec import chunk_codec
from ..errors import InvalidInputError
from .references import REF_COLUMNS, ArrayRefs, ReferenceSet
from .time_units import is_time_units, rebase_time_values

# (url, offset, length or None for the whole file) -> bytes
Fetch = Callable[[str, int, int | None], bytes]

DEFAULT_MATERIALIZE_MAX_BYTES = 64 * 1024 * 1024
_EQUAL_FOR_VIRTUAL = ("codecs", "chunk_grid")  # materialized arrays decode each file anyway
# Attributes that change the values xarray decodes; compared across files.
PACKING = ("scale_factor", "add_offset", "missing_value", "_Unsigned")
_DECODED_AWAY = (*PACKING, "_FillValue")  # not in the attributes of a decoded array
_LABELS = ("units", "calendar")
_BOUNDS_LINKS = ("bounds", "climatology")
_READERS = 16  # files read at once when comparing arrays without the concat dimension


@dataclass(frozen=True, slots=True)
class _Part:
    """One file's array (``None``: the file lacks it) and the file's length along the dim."""

    k: int
    array: ArrayRefs | None
    length: int
    attrs: Mapping[str, Any]  # with units/calendar inherited through CF bounds links


def concat_reference_sets(
    sets: Sequence[ReferenceSet],
    dim: str,
    fetch: Fetch,
    *,
    materialize_max_bytes: int = DEFAULT_MATERIALIZE_MAX_BYTES,
    names: Sequence[str] | None = None,
) -> ReferenceSet:
    """One reference set holding ``sets`` concatenated along dimension ``dim``.

    ``names``: the files' names for messages (default ``file 0``, ``file 1``...).

    Raises:
        InvalidInputError: arrays differ between sets, or cannot be concatenated virtually.
    """
    if not sets:
        raise InvalidInputError("nothing to concatenate: no reference sets")
    label = list(names) if names is not None else [f"file {k}" for k in range(len(sets))]
    lengths = [_dim_length(s, dim, label[k]) for k, s in enumerate(sets)]
    inherited = [inherited_attrs(s) for s in sets]
    paths: dict[str, None] = {}
    for refset in sets:
        paths.update(dict.fromkeys(refset.arrays))
    groups: dict[str, Mapping[str, Any]] = {}
    for refset in reversed(sets):  # the first file's group attributes win
        groups.update(refset.groups)
    out: dict[str, ArrayRefs] = {}
    for path in paths:
        parts = [
            _Part(k, s.arrays.get(path), lengths[k], _attrs_of(s.arrays.get(path), inherited[k]))
            for k, s in enumerate(sets)
        ]
        out[path] = _combine(path, parts, dim, fetch, materialize_max_bytes, label)
    return ReferenceSet(groups, out)


def _dim_length(refset: ReferenceSet, dim: str, name: str) -> int:
    for array in refset.arrays.values():
        dims = array.dimension_names
        if dims is not None and dim in dims:
            return array.shape[dims.index(dim)]
    raise InvalidInputError(f"{name} has no array along the concatenation dimension {dim!r}")


def inherited_attrs(refset: ReferenceSet) -> dict[str, dict[str, Any]]:
    """Bounds variable path -> units/calendar of the variable naming it (CF bounds links)."""
    out: dict[str, dict[str, Any]] = {}
    for path, array in refset.arrays.items():
        attrs = array.doc.get("attributes") or {}
        parent = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        for link in _BOUNDS_LINKS:
            target = attrs.get(link)
            if isinstance(target, str) and f"{parent}{target}" in refset.arrays:
                out[f"{parent}{target}"] = {k: attrs[k] for k in _LABELS if k in attrs}
    return out


def _attrs_of(
    array: ArrayRefs | None, inherited: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    if array is None:
        return {}
    own = dict(array.doc.get("attributes") or {})
    return {**inherited.get(array.path, {}), **own}


def _combine(
    path: str,
    parts: list[_Part],
    dim: str,
    fetch: Fetch,
    max_bytes: int,
    label: Sequence[str],
) -> ArrayRefs:
    present = [p for p in parts if p.array is not None]
    first = present[0].array
    assert first is not None
    dims = first.dimension_names
    if dims is None or dim not in dims:
        _check_constant(path, present, fetch, label)
        return first
    axis = dims.index(dim)
    _check_compatible(path, present, axis, label)
    _check_labels(path, present, label)
    is_coordinate = first.ndim == 1 and path.rsplit("/", 1)[-1] == dim
    missing = [p for p in parts if p.array is None]
    if is_coordinate and missing:
        raise InvalidInputError(
            f"{label[missing[0].k]} has no coordinate {path!r} though it has dimension {dim!r}"
        )
    packing = _first_difference(path, present, label)
    masked = "_FillValue" in (first.doc.get("attributes") or {})
    if packing is not None or (missing and not masked):
        size = _decoded_bytes(parts, first, axis, np.dtype("f8"))
        if size > max_bytes:
            reason = packing or f"it is missing from {label[missing[0].k]} and has no _FillValue"
            raise InvalidInputError(
                f"{path!r}: {reason}, so its values must be decoded and copied, and at "
                f"{size} bytes it is over materialize_max_bytes={max_bytes}"
            )
        return _materialize_decoded(parts, first, axis, fetch)
    virtual_ok = _same([p.array for p in present], _EQUAL_FOR_VIRTUAL) and _aligned(
        parts, first.chunk_shape[axis]
    )
    time_differs = _time_units_differ(present)
    if not is_coordinate and virtual_ok and not time_differs:
        return _concat_virtual(parts, first, axis)
    size = _decoded_bytes(parts, first, axis, None)
    if is_coordinate or size <= max_bytes:
        return _materialize(parts, first, axis, fetch)
    if virtual_ok:
        raise InvalidInputError(
            f"{path!r}: its time units differ between files, so its values must be "
            f"converted, and it is over materialize_max_bytes={max_bytes} to copy"
        )
    _check_same(path, present, _EQUAL_FOR_VIRTUAL, label)  # names the difference
    raise InvalidInputError(
        f"{path!r}: files do not hold whole chunks along {dim!r} (chunk length "
        f"{first.chunk_shape[axis]}, lengths {[p.length for p in parts]}), so it "
        f"cannot be concatenated virtually, and it is over materialize_max_bytes="
        f"{max_bytes} to copy"
    )


def _check_constant(
    path: str, present: Sequence[_Part], fetch: Fetch, label: Sequence[str]
) -> None:
    """An array without the concat dimension must be the same in every file holding it."""
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        if part.array.shape != first.array.shape:
            raise InvalidInputError(
                f"{path!r} does not have the concatenation dimension but its shape differs "
                f"between {label[first.k]} {first.array.shape} and {label[part.k]} "
                f"{part.array.shape}; such files cannot be combined"
            )
        for key in ("data_type", "fill_value"):
            if part.array.doc.get(key) != first.array.doc.get(key):
                raise InvalidInputError(
                    f"{path!r} does not have the concatenation dimension but its {key} "
                    f"differs between {label[first.k]} and {label[part.k]}"
                )
    if len(present) == 1:
        return
    values = read_values(first.array, fetch)

    def differs(part: _Part) -> bool:
        assert part.array is not None
        return not np.array_equal(read_values(part.array, fetch), values, equal_nan=True)

    # A daily update re-reads e.g. lat/lon of every file: in parallel, for object stores.
    with ThreadPoolExecutor(max_workers=min(_READERS, len(present) - 1)) as pool:
        for part, bad in zip(present[1:], pool.map(differs, present[1:]), strict=True):
            if bad:
                raise InvalidInputError(
                    f"{path!r} does not have the concatenation dimension but its values "
                    f"differ between {label[first.k]} and {label[part.k]}; a combined dataset "
                    "can hold only one (xarray would need join='outer' and re-grid every chunk)"
                )


def _check_compatible(path: str, present: Sequence[_Part], axis: int, label: Sequence[str]) -> None:
    first = present[0].array
    assert first is not None
    for part in present[1:]:
        assert part.array is not None
        if part.array.dimension_names != first.dimension_names:
            raise InvalidInputError(
                f"{path!r}: dimensions {part.array.dimension_names} in {label[part.k]}, "
                f"{first.dimension_names} in {label[present[0].k]}; cannot concatenate"
            )
        others = [s for d, s in enumerate(part.array.shape) if d != axis]
        if others != [s for d, s in enumerate(first.shape) if d != axis]:
            raise InvalidInputError(
                f"{path!r}: {label[part.k]} differs in shape off the concat axis from "
                f"{label[present[0].k]} ({part.array.shape} vs {first.shape})"
            )


def _check_labels(path: str, present: Sequence[_Part], label: Sequence[str]) -> None:
    """``units`` and ``calendar`` must agree, but for CF time units (converted)."""
    first = present[0]
    for part in present[1:]:
        for key in _LABELS:
            mine, theirs = part.attrs.get(key), first.attrs.get(key)
            if mine == theirs or (key == "units" and is_time_units(mine) and is_time_units(theirs)):
                continue
            raise InvalidInputError(
                f"{path!r}: attribute {key!r} is {theirs!r} in {label[first.k]} but {mine!r} "
                f"in {label[part.k]}; the files cannot be combined into one array"
            )


def _first_difference(path: str, present: Sequence[_Part], label: Sequence[str]) -> str | None:
    """A sentence naming the first decoding attribute that differs between files, if any."""
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        for key in PACKING:
            if part.attrs.get(key) != first.attrs.get(key):
                return _difference(key, first, part, label)
        for key, name in (("data_type", "dtype"), ("fill_value", "_FillValue")):
            if part.array.doc.get(key) != first.array.doc.get(key):
                return _difference(name, first, part, label, key)
    return None


def _difference(
    name: str, first: _Part, part: _Part, label: Sequence[str], doc_key: str | None = None
) -> str:
    assert first.array is not None and part.array is not None
    if doc_key is None:
        a, b = first.attrs.get(name), part.attrs.get(name)
    else:
        a, b = first.array.doc.get(doc_key), part.array.doc.get(doc_key)
    return f"{name} differs between {label[first.k]} ({a!r}) and {label[part.k]} ({b!r})"


def _check_same(
    path: str, present: Sequence[_Part], keys: Sequence[str], label: Sequence[str]
) -> None:
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        for key in keys:
            if part.array.doc.get(key) != first.array.doc.get(key):
                raise InvalidInputError(
                    f"{path!r}: {label[part.k]} has another {key} ({part.array.doc.get(key)!r}) "
                    f"than {label[first.k]} ({first.array.doc.get(key)!r}); such arrays cannot "
                    "be concatenated"
                )


def _same(arrays: Sequence[ArrayRefs | None], keys: Sequence[str]) -> bool:
    docs = [a.doc for a in arrays if a is not None]
    return all(d.get(k) == docs[0].get(k) for d in docs for k in keys)


def _aligned(parts: Sequence[_Part], size: int) -> bool:
    return all(p.length % size == 0 for p in parts[:-1])


def _concat_shape(parts: Sequence[_Part], first: ArrayRefs, axis: int) -> list[int]:
    shape = list(first.shape)
    shape[axis] = sum(p.length for p in parts)
    return shape


def _part_shape(part: _Part, first: ArrayRefs, axis: int) -> tuple[int, ...]:
    shape = list(first.shape)
    shape[axis] = part.length
    return tuple(shape)


def _concat_virtual(parts: Sequence[_Part], first: ArrayRefs, axis: int) -> ArrayRefs:
    """Chunks of file *k* shifted along ``axis``; missing files leave absent chunks (fill)."""
    size = first.chunk_shape[axis]
    coords, tables, start = [], [], 0
    for part in parts:
        if part.array is not None:
            shifted = part.array.coords.copy()
            shifted[:, axis] += start // size
            coords.append(shifted)
            tables.append(part.array.refs)
        start += part.length
    doc = {**first.doc, "shape": _concat_shape(parts, first, axis)}
    return ArrayRefs(first.path, doc, np.concatenate(coords), pa.concat_tables(tables))


def _decoded_bytes(
    parts: Sequence[_Part], first: ArrayRefs, axis: int, dtype: np.dtype[Any] | None
) -> int:
    itemsize = (dtype or chunk_codec(json.dumps(first.doc).encode()).numpy_dtype).itemsize
    return int(np.prod(_concat_shape(parts, first, axis))) * itemsize


def _time_units_differ(present: Sequence[_Part]) -> bool:
    units = [p.attrs.get("units") for p in present]
    return is_time_units(units[0]) and any(u != units[0] for u in units)


def _values_in_first_units(part: _Part, first: _Part, fetch: Fetch) -> np.ndarray:
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


def _materialize(parts: Sequence[_Part], first: ArrayRefs, axis: int, fetch: Fetch) -> ArrayRefs:
    """Every file's values (time converted), concatenated and stored as one inline chunk."""
    codec = chunk_codec(json.dumps(first.doc).encode())
    reference = next(p for p in parts if p.array is not None)
    pieces = [
        _values_in_first_units(p, reference, fetch)
        if p.array is not None
        else np.full(_part_shape(p, first, axis), codec.fill_value, codec.numpy_dtype)
        for p in parts
    ]
    return _single_chunk(first, dict(first.doc), np.concatenate(pieces, axis=axis))


def _materialize_decoded(
    parts: Sequence[_Part], first: ArrayRefs, axis: int, fetch: Fetch
) -> ArrayRefs:
    """Values as xarray decodes each file (packing applied, NaN where masked), as one chunk."""
    reference = next(p for p in parts if p.array is not None)
    decoded = [_decode(p, reference, fetch) if p.array is not None else None for p in parts]
    kinds = [d.dtype for d in decoded if d is not None]
    dtype = np.result_type(*kinds)
    if any(d is None for d in decoded) and dtype.kind != "f":
        dtype = np.result_type(dtype, np.float32)  # room for NaN, as xarray's outer join
    pieces = [
        d.astype(dtype) if d is not None else np.full(_part_shape(p, first, axis), np.nan, dtype)
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


def _decode(part: _Part, reference: _Part, fetch: Fetch) -> np.ndarray:
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

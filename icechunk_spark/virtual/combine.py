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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..format.locations import concat_refs
from .combine_checks import (
    LABELS,
    check_compatible,
    check_constant,
    check_labels,
    check_same,
    first_difference,
    same,
)
from .materialize import (
    Fetch,
    FilePart,
    concat_shape,
    decoded_bytes,
    materialize,
    materialize_decoded,
    time_units_differ,
)
from .references import ArrayRefs, ReferenceSet

DEFAULT_MATERIALIZE_MAX_BYTES = 64 * 1024 * 1024
# Must be equal for files to concatenate virtually (materialized arrays decode each file).
EQUAL_FOR_VIRTUAL = ("codecs", "chunk_grid")
_BOUNDS_LINKS = ("bounds", "climatology")


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
            FilePart(k, s.arrays.get(path), lengths[k], _attrs_of(s.arrays.get(path), inherited[k]))
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
                out[f"{parent}{target}"] = {k: attrs[k] for k in LABELS if k in attrs}
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
    parts: list[FilePart],
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
        check_constant(path, present, fetch, label)
        return first
    axis = dims.index(dim)
    check_compatible(path, present, axis, label)
    check_labels(path, present, label)
    is_coordinate = first.ndim == 1 and path.rsplit("/", 1)[-1] == dim
    missing = [p for p in parts if p.array is None]
    if is_coordinate and missing:
        raise InvalidInputError(
            f"{label[missing[0].k]} has no coordinate {path!r} though it has dimension {dim!r}"
        )
    packing = first_difference(path, present, label)
    masked = "_FillValue" in (first.doc.get("attributes") or {})
    if packing is not None or (missing and not masked):
        size = decoded_bytes(parts, first, axis, np.dtype("f8"))
        if size > max_bytes:
            reason = packing or f"it is missing from {label[missing[0].k]} and has no _FillValue"
            raise InvalidInputError(
                f"{path!r}: {reason}, so its values must be decoded and copied, and at "
                f"{size} bytes it is over materialize_max_bytes={max_bytes}"
            )
        return materialize_decoded(parts, first, axis, fetch)
    virtual_ok = same([p.array for p in present], EQUAL_FOR_VIRTUAL) and _aligned(
        parts, first.chunk_shape[axis]
    )
    time_differs = time_units_differ(present)
    if not is_coordinate and virtual_ok and not time_differs:
        return _concat_virtual(parts, first, axis)
    size = decoded_bytes(parts, first, axis, None)
    if is_coordinate or size <= max_bytes:
        return materialize(parts, first, axis, fetch)
    if virtual_ok:
        raise InvalidInputError(
            f"{path!r}: its time units differ between files, so its values must be "
            f"converted, and it is over materialize_max_bytes={max_bytes} to copy"
        )
    check_same(path, present, EQUAL_FOR_VIRTUAL, label)  # names the difference
    raise InvalidInputError(
        f"{path!r}: files do not hold whole chunks along {dim!r} (chunk length "
        f"{first.chunk_shape[axis]}, lengths {[p.length for p in parts]}), so it "
        f"cannot be concatenated virtually, and it is over materialize_max_bytes="
        f"{max_bytes} to copy"
    )


def _aligned(parts: Sequence[FilePart], size: int) -> bool:
    return all(p.length % size == 0 for p in parts[:-1])


def _concat_virtual(parts: Sequence[FilePart], first: ArrayRefs, axis: int) -> ArrayRefs:
    """Chunks of file *k* shifted along ``axis``; missing files leave absent chunks (fill)."""
    size = first.chunk_shape[axis]
    coords, tables, start = [], [], 0
    for part in parts:
        if part.array is not None:
            shifted = part.array.coords.astype(np.int64)  # a copy; uint32 would wrap
            shifted[:, axis] += start // size
            coords.append(shifted)
            tables.append(part.array.refs)
        start += part.length
    doc = {**first.doc, "shape": concat_shape(parts, first, axis)}
    # Parsed by VirtualiZarr (dictionary-encoded URLs) or from kerchunk (plain): one type.
    table = concat_refs(tables)
    return ArrayRefs(first.path, doc, np.concatenate(coords), table)

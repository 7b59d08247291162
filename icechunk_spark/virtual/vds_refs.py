"""A VirtualiZarr virtual dataset's ManifestArrays as our reference set, column-wise.

VirtualiZarr (its parsers: HDF5, NetCDF3, FITS, TIFF, Zarr, kerchunk) hands a dataset whose
virtual variables wrap a ``ManifestArray``: zarr v3 metadata (``metadata``, an
``ArrayV3Metadata`` stripped of attributes and dimension names, which live on the xarray
variable) and a ``ChunkManifest`` of three numpy arrays over the chunk grid, ``_paths``
(``StringDType``, ``""`` for a missing chunk), ``_offsets`` and ``_lengths`` (uint64). They
become ``ArrayRefs`` (the shape ``write_reference_set`` and its container checks take) with
numpy and Arrow only: no Python loop per ref, so a manifest of millions of refs costs a few
vector operations.

The array document is the ManifestArray's metadata with the variable's attributes and
dimension names put back, and the encoding keys VirtualiZarr's own Icechunk writer copies from
``variable.encoding`` (``_FillValue``, ``missing_value``, ``scale_factor``, ``add_offset``):
the source's packing and fill value stay raw, as our importers keep them, so xarray decodes
the repository as it decodes the file.

virtualizarr is an optional extra: nothing here imports it at module level, and a dataset is
recognized as virtual by its variables' types without importing it.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidInputError
from ..format.locations import as_dictionary
from ..format.manifest import null_column
from .references import REF_COLUMNS, ArrayRefs

# The variable encoding keys VirtualiZarr's Icechunk writer stores as attributes
# (virtualizarr/writers/icechunk.py ENCODING_KEYS): they change how xarray decodes values.
ENCODING_KEYS = ("_FillValue", "missing_value", "scale_factor", "add_offset")
# Paths turned into Arrow strings at a time (64 Ki x ~80 B: a few MB alive, not gigabytes).
PATH_SLICE = 1 << 16
INSTALL_HINT = "pip install 'icechunk-spark[virtualizarr]'"


def require_virtualizarr() -> Any:
    """The ``virtualizarr`` module, or a clear error naming the extra to install.

    Raises:
        InvalidInputError: virtualizarr is not installed.
    """
    try:
        import virtualizarr
    except ImportError as exc:
        raise InvalidInputError(
            f"virtual datasets from VirtualiZarr's parsers need virtualizarr: {INSTALL_HINT}"
            f" ({exc})"
        ) from exc
    return virtualizarr


def is_manifest_array(data: Any) -> bool:
    """Whether ``data`` is a VirtualiZarr ``ManifestArray`` (checked without importing it)."""
    kind = type(data)
    return kind.__name__ == "ManifestArray" and kind.__module__.startswith("virtualizarr.")


def is_virtual_dataset(dataset: Any) -> bool:
    """Whether an ``xr.Dataset`` holds at least one ManifestArray-backed variable."""
    variables = getattr(dataset, "variables", {})
    return any(is_manifest_array(v.data) for v in variables.values())


def manifest_coords_and_refs(manifest: Any, ndim: int) -> tuple[np.ndarray, pa.Table]:
    """A ``ChunkManifest``'s present chunks: ``(n, ndim)`` coords (C order) and REF_COLUMNS.

    Vectorized: one mask over ``_paths``, ``argwhere`` for the coords, Arrow arrays over the
    numpy ones. When every chunk is present (the usual manifest) offsets and lengths are the
    manifest's own arrays, viewed, not copied. The paths come dictionary-encoded (one string
    per file, an int32 index per chunk, ``paths_dictionary``): ten million refs into a
    thousand files would otherwise hold ten million strings.
    """
    paths = np.asarray(manifest._paths)
    if paths.ndim != ndim and not (ndim == 0 and paths.size == 1):
        raise InvalidInputError(
            f"a chunk manifest of {paths.ndim} dimensions for an array of {ndim}"
        )
    paths = paths.reshape(paths.shape if ndim else ())
    present = paths != ""
    everywhere = bool(present.all())

    def pick(values: np.ndarray) -> np.ndarray:
        values = values.reshape(paths.shape)
        return values.reshape(-1) if everywhere else values[present]

    if everywhere:
        coords = grid_coords(paths.shape)
    else:
        coords = np.argwhere(present).astype(np.int64, copy=False)
    if ndim == 0:
        coords = coords.reshape(int(np.count_nonzero(present)), 0)
    offsets = pick(np.asarray(manifest._offsets))
    lengths = pick(np.asarray(manifest._lengths))
    if offsets.size and (int(offsets.max()) >= 2**63 or int(lengths.max()) >= 2**63):
        raise InvalidInputError("a chunk manifest holds an offset or length past 2**63")
    urls = paths_dictionary(paths.reshape(-1), None if everywhere else present.reshape(-1))
    table = pa.table(
        [
            urls,
            # Below 2**63 (checked above) uint64 and int64 share their bits: no copy.
            pa.array(offsets.astype(np.uint64, copy=False).view(np.int64), pa.int64()),
            pa.array(lengths.astype(np.uint64, copy=False).view(np.int64), pa.int64()),
            null_column(coords.shape[0], pa.binary()),
        ],
        schema=REF_COLUMNS.set(0, pa.field("virtual_path", urls.type)),
    )
    return coords, table


def grid_coords(grid: tuple[int, ...]) -> np.ndarray:
    """Every coord of a chunk grid in C order, read-only, in the coord codec's own layout
    (big-endian uint32, ``format.coords``), so the bulk table's coord column shares it:
    ``np.argwhere`` makes int64 (160 MB for 10 M 2-d coords, after as much again for its
    index arrays), encoding copies that once more."""
    coords = np.empty((int(np.prod(grid)), len(grid)), dtype=">u4")
    laid_out = coords.reshape(*grid, len(grid))
    for axis, size in enumerate(grid):
        shape = [1] * len(grid)
        shape[axis] = size
        laid_out[..., axis] = np.arange(size, dtype=np.uint32).reshape(shape)
    coords.flags.writeable = False
    return coords


def paths_dictionary(paths: np.ndarray, present: np.ndarray | None) -> pa.DictionaryArray:
    """The flat ``paths`` (where ``present``, all without it) as a dictionary array.

    The numpy strings become Arrow strings one slice at a time, each slice dictionary-encoded
    and its few distinct values numbered in one dictionary for the whole manifest: the URLs
    alive at once are one slice's, whatever the manifest's size.
    """
    rows = len(paths) if present is None else int(np.count_nonzero(present))
    indices = np.empty(rows, np.int32)
    numbers: dict[str, int] = {}
    done = 0
    for start in range(0, len(paths), PATH_SLICE):
        part = paths[start : start + PATH_SLICE]
        if present is not None:
            part = part[present[start : start + PATH_SLICE]]
        encoded = as_dictionary(pa.array(part, pa.string()))
        values = encoded.dictionary.to_pylist()
        ids = np.array([numbers.setdefault(v, len(numbers)) for v in values], np.int32)
        indices[done : done + len(part)] = ids[encoded.indices.to_numpy()]
        done += len(part)
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(list(numbers), pa.string()))


def encode_attrs(attrs: Mapping[Any, Any]) -> dict[str, Any]:
    """Attributes as xarray stores them in zarr (numpy values as JSON numbers and lists)."""
    from xarray.backends.zarr import encode_zarr_attr_value

    return {str(k): encode_zarr_attr_value(v) for k, v in attrs.items()}  # type: ignore[no-untyped-call]


def variable_doc(name: Hashable, variable: Any) -> dict[str, Any]:
    """The v3 ``zarr.json`` of a ManifestArray-backed variable: its metadata, attributes
    (JSON-encoded as xarray does for zarr) and dimension names."""
    marray = variable.data
    doc = dict(marray.metadata.to_dict())
    attributes = encode_attrs(variable.attrs)
    extra = {k: variable.encoding[k] for k in ENCODING_KEYS if k in variable.encoding}
    attributes.update({k: v for k, v in encode_attrs(extra).items() if k not in attributes})
    doc["attributes"] = attributes
    doc["dimension_names"] = [str(d) for d in variable.dims] if variable.dims else None
    if doc["dimension_names"] is None:
        doc.pop("dimension_names")
    if not doc.get("storage_transformers"):
        doc.pop("storage_transformers", None)
    try:  # tuples -> lists, numpy scalars -> numbers: the document as it will be stored
        return dict(json.loads(json.dumps(doc, default=_json_default)))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: metadata that is not JSON: {exc}") from exc


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def variable_refs(name: Hashable, variable: Any, path: str) -> ArrayRefs:
    """One ManifestArray-backed variable as ``ArrayRefs`` at ``path`` (relative)."""
    doc = variable_doc(name, variable)
    coords, table = manifest_coords_and_refs(variable.data.manifest, len(doc["shape"]))
    return ArrayRefs(path, doc, coords, table)


def split_variables(dataset: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(virtual, loadable)`` variables of a dataset, by name."""
    virtual: dict[str, Any] = {}
    loadable: dict[str, Any] = {}
    for name, variable in dataset.variables.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"variable names must be strings, not {name!r}")
        (virtual if is_manifest_array(variable.data) else loadable)[name] = variable
    return virtual, loadable


def shifted(array: ArrayRefs, offsets: Mapping[int, int]) -> ArrayRefs:
    """``array`` with its chunk coords moved by ``offsets`` (axis -> chunks) and its shape
    left to the caller: the refs of an append land after the existing chunks."""
    coords = array.coords.astype(np.int64)  # a copy; uint32 coords would wrap, not fail
    for axis, by in offsets.items():
        coords[:, axis] += by
    return ArrayRefs(array.path, array.doc, coords, array.refs)

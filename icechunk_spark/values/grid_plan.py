"""Plan the grid of a tidy write with xarray's own encoding (see :mod:`.grid`).

A new dataset's metadata comes from xarray writing a lazy template of it (Dask arrays of the
final shape, the real coordinates) to an in-memory Zarr store: the arrays' ``zarr.json``,
the coordinates' CF time units, ``_FillValue`` and the codecs are then exactly what
``to_zarr`` would write, and xarray's reading of the template gives the encoding executors
apply to each block. A grown dataset keeps its metadata and encoding; only shapes and the
append dimension's coordinate change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError
from .grid import (
    ENCODING_KEYS,
    TIME_KEYS,
    Coordinate,
    Grid,
    TidySpec,
    Variable,
    check_known,
    encoding_of,
    grown_labels,
    sorted_labels,
)
from .labels import Labels

if TYPE_CHECKING:
    import xarray as xr
    from zarr.storage import StoreLike

# How values are stored, plus the codecs: zarr v3 compressor specs (``{"name": "zstd",
# "configuration": {...}}``), which xarray hands to zarr as they are.
_ALLOWED_ENCODING = (*ENCODING_KEYS, *TIME_KEYS, "compressors")


def plan_new_grid(
    spec: TidySpec,
    labels: Mapping[str, np.ndarray],
    dtypes: Mapping[str, np.dtype[Any]],
    *,
    replaced: Sequence[str] = (),
    create_group: bool = False,
) -> Grid:
    """The grid of a new dataset (or one that replaces the group's arrays).

    ``labels``: every label each dimension's rows hold (duplicates allowed); ``dtypes``: the
    value columns' dtypes, already promoted where holes need NaN.
    """
    _check_encoding(spec, [*spec.dims, *dtypes])
    dim_labels = tuple(sorted_labels(d, np.asarray(labels[d])) for d in spec.dims)
    shape = tuple(lab.size for lab in dim_labels)
    chunk_shape = tuple(
        int(spec.chunks.get(d, max(n, 1))) for d, n in zip(spec.dims, shape, strict=True)
    )
    import xarray as xr  # on first use: see values/__init__
    import zarr

    store_dict: dict[str, Any] = {}
    store = zarr.storage.MemoryStore(store_dict=store_dict)
    with quiet_numcodecs():
        _template(spec, dim_labels, dtypes, chunk_shape).to_zarr(
            store,
            mode="w",
            compute=False,
            zarr_format=3,
            consolidated=False,
            encoding=_encodings(spec, dtypes, chunk_shape),
        )
        written = xr.open_zarr(store, consolidated=False, chunks=None)
    docs = {
        k[: -len("/zarr.json")]: v.to_bytes()
        for k, v in store_dict.items()
        if k.endswith("/zarr.json")
    }
    variables = tuple(
        Variable(
            name,
            spec.path(name),
            docs[name],
            np.dtype(written[name].dtype),
            encoding_of(written[name].encoding),
        )
        for name in dtypes
    )
    coordinates = tuple(_stored_coordinate(store, spec, d, docs[d]) for d in spec.dims)
    attributes = json.loads(store_dict["zarr.json"].to_bytes()).get("attributes", {})
    return Grid(
        spec,
        dim_labels,
        chunk_shape,
        variables,
        coordinates,
        old_shape=(0,) * len(spec.dims),
        replaced=tuple(replaced),
        group_attributes=attributes if create_group else None,
    )


def _template(
    spec: TidySpec,
    labels: Sequence[Labels],
    dtypes: Mapping[str, np.dtype[Any]],
    chunk_shape: tuple[int, ...],
) -> xr.Dataset:
    import dask.array as da  # xarray writes a template's metadata only when it is lazy
    import xarray as xr

    shape = tuple(lab.size for lab in labels)
    data = {
        name: (spec.dims, da.zeros(shape, dtype=dtype, chunks=chunk_shape))
        for name, dtype in dtypes.items()
    }
    return xr.Dataset(data, coords={lab.dim: (lab.dim, lab.values) for lab in labels})


def _encodings(
    spec: TidySpec, dtypes: Mapping[str, np.dtype[Any]], chunk_shape: tuple[int, ...]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {
        name: {**spec.encoding.get(name, {}), "chunks": chunk_shape} for name in dtypes
    }
    for dim in spec.dims:
        if dim in spec.encoding:
            out[dim] = dict(spec.encoding[dim])
    return out


def _check_encoding(spec: TidySpec, names: Sequence[str]) -> None:
    for name, enc in spec.encoding.items():
        if name not in names:
            raise InvalidInputError(
                f"option encoding names {name!r}, which is neither a dimension nor a value "
                f"column ({', '.join(names)})"
            )
        if not isinstance(enc, Mapping):
            raise InvalidInputError(f"option encoding: {name!r} needs an object of settings")
        unknown = sorted(set(enc) - set(_ALLOWED_ENCODING))
        if unknown:
            raise InvalidInputError(
                f"option encoding of {name!r}: unknown {unknown}; it takes "
                f"{', '.join(_ALLOWED_ENCODING)}"
            )


def _stored_coordinate(store: StoreLike, spec: TidySpec, dim: str, doc: bytes) -> Coordinate:
    """The coordinate as xarray stored it in the template, as raw chunks."""
    import zarr

    array = zarr.open_array(store, path=dim, mode="r")
    return _coordinate(spec.path(dim), doc, np.asarray(array[...]), 0)


def _coordinate(path: str, doc: bytes, stored: np.ndarray, from_index: int) -> Coordinate:
    """Raw chunks of a 1-D coordinate's stored values, from the chunk holding ``from_index``."""
    meta = json.loads(doc)
    size = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    fill = meta.get("fill_value", 0)
    chunks = []
    for index in range(from_index // size, -(-stored.shape[0] // size)):
        part = stored[index * size : (index + 1) * size]
        block = np.full(size, _fill(fill, stored.dtype), dtype=stored.dtype)
        block[: part.shape[0]] = part
        chunks.append((index, np.ascontiguousarray(block).tobytes()))
    return Coordinate(path, doc, tuple(chunks))


def _fill(fill: Any, dtype: np.dtype[Any]) -> Any:
    if isinstance(fill, str):  # Zarr v3 spells NaN and infinities as strings
        return np.dtype(dtype).type(float(fill.replace("Infinity", "inf")))
    return fill


def plan_grown_grid(
    spec: TidySpec,
    ds: xr.Dataset,
    docs: Mapping[str, bytes],
    incoming: Mapping[str, np.ndarray],
    names: Sequence[str],
) -> Grid:
    """The grid of an existing dataset ``ds`` (decoded, as xarray opens it) after an append.

    ``docs``: the current ``zarr.json`` of the group's arrays by name; ``incoming``: the
    labels the rows hold per dimension.

    Raises:
        InvalidInputError: a value column the dataset lacks or holds on other dimensions,
            labels of another kind than the coordinate's, a label another dimension lacks,
            or appended labels out of order (see :func:`.grid.grown_labels`).
    """
    if spec.encoding:
        raise InvalidInputError("option encoding applies when a dataset is made, not to appends")
    for name in names:
        if name not in ds.data_vars or tuple(ds[name].dims) != spec.dims:
            have = {n: tuple(v.dims) for n, v in ds.data_vars.items()}
            raise InvalidInputError(
                f"the dataset in {spec.group!r} has no array {name!r} on dims "
                f"{list(spec.dims)}; it has {have}"
            )
    chunk_shape = _shared_chunks(spec, ds, names)
    labels, starts = [], []
    for dim in spec.dims:
        existing = _existing_labels(ds, dim)
        _check_kind(existing, np.asarray(incoming[dim]))
        if dim == spec.append_dim:
            grown, start = grown_labels(existing, np.asarray(incoming[dim]), spec.placement)
        else:
            check_known(existing, np.asarray(incoming[dim]))
            grown, start = existing, existing.size
        labels.append(grown)
        starts.append(start)
    old_shape = tuple(int(ds.sizes[d]) for d in spec.dims)
    shape = tuple(lab.size for lab in labels)
    coordinates = tuple(
        _grown_coordinate(spec, ds, docs[d], lab, start)
        for d, lab, start in zip(spec.dims, labels, starts, strict=True)
        if lab.size != start
    )
    variables = tuple(
        Variable(
            name,
            spec.path(name),
            _resized(docs[name], shape),
            np.dtype(ds[name].dtype),
            encoding_of(ds[name].encoding),
        )
        for name in names
    )
    return Grid(spec, tuple(labels), chunk_shape, variables, coordinates, old_shape)


def _shared_chunks(spec: TidySpec, ds: xr.Dataset, names: Sequence[str]) -> tuple[int, ...]:
    shapes = {tuple(ds[n].encoding.get("chunks") or ds[n].shape) for n in names}
    if len(shapes) != 1:
        raise InvalidInputError(f"arrays {list(names)} have different chunks {sorted(shapes)}")
    chunk_shape = shapes.pop()
    asked = {d: n for d, n in spec.chunks.items() if n != chunk_shape[spec.dims.index(d)]}
    if asked:
        raise InvalidInputError(
            f"option chunks {asked} differs from the dataset's chunks "
            f"{dict(zip(spec.dims, chunk_shape, strict=True))}"
        )
    return tuple(int(c) for c in chunk_shape)


def _existing_labels(ds: xr.Dataset, dim: str) -> Labels:
    if dim not in ds.coords or ds[dim].ndim != 1:
        raise InvalidInputError(f"the dataset has no coordinate array {dim!r} to place rows by")
    values = np.asarray(ds[dim].values)
    if values.dtype.kind == "M":
        values = values.astype("datetime64[ns]")
    if values.dtype.kind not in "iufM":
        raise InvalidInputError(
            f"coordinate {dim!r} holds {values.dtype} labels; rows are placed by numbers or times"
        )
    return Labels(dim, values)


def _check_kind(existing: Labels, incoming: np.ndarray) -> None:
    times = (existing.values.dtype.kind == "M", incoming.dtype.kind == "M")
    if incoming.size and times[0] != times[1]:
        raise InvalidInputError(
            f"dimension {existing.dim!r}: the rows' labels are {incoming.dtype}, the "
            f"coordinate's {existing.values.dtype}"
        )


def _grown_coordinate(
    spec: TidySpec, ds: xr.Dataset, doc: bytes, labels: Labels, start: int
) -> Coordinate:
    """The grown coordinate's chunks from the one holding its first new label, encoded as
    the coordinate is (its CF units and calendar, its dtype)."""
    import xarray as xr  # on first use: see values/__init__
    from xarray.backends.zarr import encode_zarr_variable

    variable = xr.Variable(
        (labels.dim,), labels.values, encoding=encoding_of(ds[labels.dim].encoding)
    )
    try:
        with quiet_numcodecs():
            stored = np.asarray(
                encode_zarr_variable(variable, name=labels.dim, zarr_format=3).values
            )
    except (ValueError, OverflowError) as exc:
        raise InvalidInputError(
            f"the new labels of {labels.dim!r} do not fit its encoding "
            f"{encoding_of(ds[labels.dim].encoding)}: {exc}"
        ) from exc
    return _coordinate(spec.path(labels.dim), _resized(doc, (labels.size,)), stored, start)


def _resized(doc: bytes, shape: Sequence[int]) -> bytes:
    meta = json.loads(doc)
    meta["shape"] = [int(n) for n in shape]
    return json.dumps(meta).encode()


__all__ = ["plan_grown_grid", "plan_new_grid"]

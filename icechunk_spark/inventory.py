"""The chunk inventory and chunk statistics: what is known about each chunk of an array.

Seed 003's *MetaArrays*, computed from manifests instead of kept as a second array:

- ``chunk_inventory``: a boolean array over the chunk grid, true where a chunk was written.
- ``labelled_inventory``: the same as an ``xarray.DataArray`` whose coordinates are the chunk
  centres of the array's coordinate variables, so "do we have 2022 data for this box" is
  ``inv.sel(time=slice("2022", "2022"), lat=slice(30, 60)).any()``.
- ``chunk_counts``, ``missing_chunks``, ``plot_inventory``.

**Chunk statistics** are optional, per written chunk: ``stat_min``, ``stat_max``, ``stat_sum``
and ``stat_count`` of the *valid* values (neither NaN, nor the array's fill value, nor a value
its CF attributes ``_FillValue``/``missing_value`` mark missing), ``stat_nan_count`` and
``stat_fill_count`` (elements that are the fill value or CF-missing; with a NaN fill value NaNs
count here too). Manifests written before ``stat_sum``/``stat_count`` existed read them as
null (unknown). They cover the whole stored chunk, and an edge chunk (one that reaches past the
array's shape) reads as having no statistics: a resize moves the shape through a stored
chunk, hiding values its statistics counted or showing values they would not have counted,
so only a chunk wholly inside the shape has statistics that match what a reader sees (and
a full chunk's statistics stay exact whatever resizes come later). They are recorded when a chunk is
written to an array whose path full-matches one of the repository config's
``chunk_statistics`` regexes, for numeric and boolean dtypes (as float64, so integers beyond
2**53 are rounded), and stored as extra manifest columns, null for chunks without them
(virtual refs, refs written in bulk, chunks written before statistics were enabled).
``chunks_where`` uses them to skip chunks; it is conservative: a chunk without statistics is
always returned.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .chunks.codec import chunk_codec
from .chunks.stats import stats_table
from .errors import InvalidInputError
from .format.coords import coverage
from .format.manifest import STAT_FIELDS, STAT_SCHEMA
from .format.structure import ArrayMeta, Node

if TYPE_CHECKING:
    import xarray as xr

    from .core import Session

T = TypeVar("T")

_STAT_NAMES = ("min", "max", "nan_count", "fill_count", "sum", "count")
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def chunk_region(meta: ArrayMeta, coord: Sequence[int]) -> tuple[slice, ...]:
    """The in-bounds part of chunk ``coord``, as slices into the chunk (edge chunks are cut)."""
    return tuple(
        slice(0, max(0, min(c, s - i * c)))
        for i, c, s in zip(coord, meta.chunk_shape, meta.shape, strict=True)
    )


def read_array(session: Session, path: str) -> np.ndarray:
    """All values of a (small) array, decoded from its chunks; unwritten chunks are fill."""
    node = _array_node(session, path)
    assert node.meta is not None
    codec = chunk_codec(node.zarr_json)
    out = np.empty(node.meta.shape, dtype=codec.numpy_dtype)
    for coord in np.ndindex(*node.meta.grid_shape):
        values = codec.decode(session.get_chunk(node.path, coord))
        region = chunk_region(node.meta, coord)
        target = tuple(
            slice(i * c, i * c + r.stop)
            for i, c, r in zip(coord, node.meta.chunk_shape, region, strict=True)
        )
        out[target] = values[region]
    return out


def chunk_stats(session: Session, path: str) -> pa.Table:
    """``coord`` (list of chunk indices) and the ``stat_*`` columns of every chunk of an array.

    Chunks without statistics have nulls.

    >>> chunk_stats(session, "/temperature").filter(pc.field("stat_max") > 40)  # doctest: +SKIP
    """
    node = _array_node(session, path)
    assert node.meta is not None
    return stats_table(session.chunk_refs(node.path), node.meta)


def chunks_where(
    session: Session,
    path: str,
    stat: str | pc.Expression,
    op: str | None = None,
    value: float | None = None,
) -> np.ndarray:
    """Coords ``(n, ndim)`` of the chunks that may satisfy a condition on their statistics.

    ``chunks_where(s, "/t", "max", ">", 40)`` or with an Arrow expression over the ``stat_*``
    columns, ``chunks_where(s, "/t", pc.field("stat_max") > 40)``. Chunks without
    statistics are always included (they cannot be ruled out).
    """
    table = chunk_stats(session, path)
    if isinstance(stat, pc.Expression):
        expression = stat
    else:
        name = stat if stat.startswith("stat_") else f"stat_{stat}"
        if name not in STAT_SCHEMA.names or op not in _OPERATORS or value is None:
            raise InvalidInputError(
                f"chunks_where needs a stat in {list(_STAT_NAMES)}, an operator in "
                f"{list(_OPERATORS)} and a value; got {stat!r} {op!r} {value!r}"
            )
        expression = _OPERATORS[op](pc.field(name), value)
    unknown = functools.reduce(operator.and_, [pc.field(f.name).is_null() for f in STAT_FIELDS])
    # Kleene "or": an unknown chunk is kept even where the expression itself is null.
    keep = table.filter(expression | unknown)
    node = _array_node(session, path)
    assert node.meta is not None
    flat = pc.list_flatten(keep.column("coord")).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.int64).reshape(-1, node.meta.ndim)


# -- inventory ----------------------------------------------------------------------------
def chunk_inventory(session: Session, path: str) -> np.ndarray:
    """A boolean array over the chunk grid: true where the array has a chunk (manifests only).

    >>> chunk_inventory(session, "/temperature").sum()    # doctest: +SKIP
    """
    node = _array_node(session, path)
    assert node.meta is not None
    return coverage(session.chunk_coords(node.path), node.meta.grid_shape)


def chunk_counts(session: Session) -> dict[str, tuple[int, int]]:
    """``{array path: (chunks written, chunks in the grid)}`` for every array."""
    out = {}
    for node in session.list_nodes():
        if node.type == "array" and node.meta is not None:
            out[node.path] = (len(session.chunk_coords(node.path)), node.meta.metadata_chunks)
    return out


def missing_chunks(
    session: Session, path: str, region: Sequence[slice] | None = None, *, in_chunks: bool = False
) -> np.ndarray:
    """Coords ``(n, ndim)`` of the never-written chunks that overlap ``region``.

    ``region`` is a tuple of slices in element indices of the array (``in_chunks=True``: in
    chunk indices); missing trailing slices mean the whole dimension.
    """
    node = _array_node(session, path)
    assert node.meta is not None
    inventory = chunk_inventory(session, node.path)
    window = _chunk_window(node.meta, tuple(region or ()), in_chunks)
    sub = ~inventory[window]
    offsets = np.array([w.start for w in window], dtype=np.int64)
    return np.argwhere(sub).astype(np.int64) + offsets


def _chunk_window(meta: ArrayMeta, region: tuple[slice, ...], in_chunks: bool) -> tuple[slice, ...]:
    if len(region) > meta.ndim:
        raise InvalidInputError(f"region has {len(region)} slices, the array {meta.ndim} dims")
    out = []
    for dim in range(meta.ndim):
        part = region[dim] if dim < len(region) else slice(None)
        if part.step not in (None, 1):
            raise InvalidInputError("region slices must have step 1")
        extent = meta.grid_shape[dim] if in_chunks else meta.shape[dim]
        start, stop, _ = part.indices(extent)
        if in_chunks:
            out.append(slice(start, max(start, stop)))
        else:
            size = meta.chunk_shape[dim]
            out.append(slice(start // size, -(-stop // size) if stop > start else start // size))
    return tuple(out)


def labelled_inventory(session: Session, path: str) -> xr.DataArray:
    """The inventory as an ``xarray.DataArray`` labelled with chunk centres.

    Dimensions are the array's ``dimension_names``; a sibling 1-D array named like a
    dimension (``/group/time`` for ``/group/temperature``) gives that dimension's labels
    (CF-decoded, so times are datetimes); each chunk is labelled with the centre of its first
    and last coordinate value, and ``<dim>_first``/``<dim>_last`` hold those bounds. Without
    a coordinate array, labels are chunk centres in element indices.

    >>> inv = labelled_inventory(session, "/tas")                      # doctest: +SKIP
    >>> bool(inv.sel(time=slice("2022", "2022")).all())                  # doctest: +SKIP
    """
    import xarray as xr

    node = _array_node(session, path)
    assert node.meta is not None
    meta = node.meta
    dims = [d or f"dim_{i}" for i, d in enumerate(meta.dimension_names or [None] * meta.ndim)]
    coords: dict[str, Any] = {}
    for axis, dim in enumerate(dims):
        values = _coordinate_values(session, node, dim, meta.shape[axis])
        first, last, centre = _chunk_labels(values, meta.chunk_shape[axis], meta.shape[axis])
        coords[dim] = (dim, centre)
        coords[f"{dim}_first"] = (dim, first)
        coords[f"{dim}_last"] = (dim, last)
    inventory = chunk_inventory(session, node.path)
    return xr.DataArray(
        inventory,
        dims=dims,
        coords=coords,
        name=f"{node.path.rsplit('/', 1)[-1]}_inventory",
        attrs={
            "array": node.path,
            "initialized_chunks": int(inventory.sum()),
            "total_chunks": int(inventory.size),
            "chunk_shape": list(meta.chunk_shape),
        },
    )


def _coordinate_values(session: Session, node: Node, dim: str, length: int) -> np.ndarray | None:
    import xarray as xr

    parent = node.path.rsplit("/", 1)[0] or "/"
    candidate = f"{parent.rstrip('/')}/{dim}"
    if candidate == node.path:
        return None  # a coordinate array labels itself by element index
    try:
        coord_node = session.get_node(candidate)
    except (KeyError, InvalidInputError):
        return None
    if coord_node.meta is None or coord_node.meta.shape != (length,):
        return None
    raw = read_array(session, candidate)
    attrs = dict(json.loads(coord_node.zarr_json).get("attributes") or {})
    attrs.pop("_FillValue", None)  # xarray's base64 zarr-v3 encoding is not CF
    decoded = xr.decode_cf(xr.Dataset({dim: xr.Variable((dim,), raw, attrs)}))
    return np.asarray(decoded[dim].values)


def _chunk_labels(
    values: np.ndarray | None, size: int, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    starts = np.arange(0, length, size)
    stops = np.minimum(starts + size, length) - 1
    if values is None:
        return starts, stops, (starts + stops) / 2
    first, last = values[starts], values[stops]
    try:
        centre = first + (last - first) / 2
    except TypeError:  # labels without arithmetic (strings): the first label stands in
        centre = first
    return first, last, np.asarray(centre)


def plot_inventory(
    session: Session,
    path: str,
    path_png: str | Path,
    dims: tuple[int, int] = (0, 1),
    index: Mapping[int, int] | Sequence[int] | None = None,
) -> Path:
    """Draw a 2-D slice of the inventory (dims ``dims``) as a PNG; other dims at ``index``.

    ``index`` gives the chunk index of every other dimension (a mapping dim -> index, or a
    sequence in dimension order); missing ones are 0. Needs matplotlib (``plot`` extra).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    node = _array_node(session, path)
    assert node.meta is not None
    meta = node.meta
    inventory = chunk_inventory(session, node.path)
    if meta.ndim < 2 or len(set(dims)) != 2 or not all(0 <= d < meta.ndim for d in dims):
        raise InvalidInputError(f"plot_inventory needs two distinct dims of a >= 2-D array: {dims}")
    others = [d for d in range(meta.ndim) if d not in dims]
    chosen = (
        dict(index) if isinstance(index, Mapping) else dict(zip(others, index or (), strict=False))
    )
    selector: list[Any] = [slice(None)] * meta.ndim
    for d in others:
        selector[d] = int(chosen.get(d, 0))
    plane = inventory[tuple(selector)]
    if dims[0] > dims[1]:
        plane = plane.T
    names = [n or f"dim_{i}" for i, n in enumerate(meta.dimension_names or [None] * meta.ndim)]
    figure = Figure(figsize=(6, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.imshow(
        plane, cmap="Greens", vmin=0, vmax=1, origin="lower", aspect="auto", interpolation="nearest"
    )
    axes.set_xlabel(f"{names[dims[1]]} (chunk index)")
    axes.set_ylabel(f"{names[dims[0]]} (chunk index)")
    fixed = ", ".join(f"{names[d]}={selector[d]}" for d in others)
    axes.set_title(
        f"{node.path}: {int(plane.sum())}/{plane.size} chunks written"
        + (f" ({fixed})" if fixed else "")
    )
    out = Path(path_png)
    figure.savefig(out, format="png")
    return out


def _array_node(session: Session, path: str) -> Node:
    node = session.get_node(path)
    if node.type != "array" or node.meta is None:
        raise InvalidInputError(f"{node.path!r} is a group, not an array")
    return node


__all__ = [
    "chunk_counts",
    "chunk_inventory",
    "chunk_region",
    "chunk_stats",
    "chunks_where",
    "labelled_inventory",
    "missing_chunks",
    "plot_inventory",
    "read_array",
]

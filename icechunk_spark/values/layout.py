"""The layout of a values table: which arrays, on which dimensions, with which labels and types.

One row per array element: a column per dimension holding its label (``labels.py``), then a
column per selected array holding its value decoded as ``xr.open_zarr`` decodes it
(``scale_factor``/``add_offset``, ``_FillValue``/``missing_value`` masked, CF times), or raw with
``decode=False``. The arrays must share their dimensions (names and sizes). A value xarray
decodes to NaN (masked, or NaN in the data) is null: Spark orders NaN above every number, so
``tas > 300`` would otherwise hold for a missing value.

xarray opens the group lazily (metadata and coordinate arrays only); the layout pickles to
executors with the labels, so they never decode a coordinate again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError, NotFoundError
from ..format.paths import normalize_path
from .labels import Labels

if TYPE_CHECKING:
    import xarray as xr

    from ..core import BaseSession

VALUES_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True, eq=False)
class Dimension:
    """One dimension: its labels and the chunk length the arrays are read by along it."""

    labels: Labels
    chunk: int

    @property
    def name(self) -> str:
        return self.labels.dim

    @property
    def size(self) -> int:
        return self.labels.size

    @property
    def chunks(self) -> int:
        """How many chunks along this dimension."""
        return -(-self.size // self.chunk)


@dataclass(frozen=True, slots=True)
class StoredValues:
    """How a column's values relate to the stored values its chunk statistics describe:
    ``value = stored * scale + offset``; ``fill`` (the array's fill value, stored) reads as
    null when ``fill_is_null``, else as itself; ``masked``: the stored values CF attributes
    mark missing (``_FillValue``, ``missing_value``), which xarray reads as NaN."""

    scale: float = 1.0
    offset: float = 0.0
    fill: float | None = None
    fill_is_null: bool = False
    masked: tuple[float, ...] = ()

    def missing(self) -> tuple[float, ...]:
        """Every stored value that is not a value: NaN, the fill value, the masked ones."""
        fill = () if self.fill is None else (self.fill,)
        return (math.nan, *fill, *self.masked)


@dataclass(frozen=True, slots=True)
class ValueArray:
    """One selected array: its name in the group, its node path, the type of its column, and
    how its values relate to its stored ones."""

    name: str
    path: str
    type: pa.DataType
    stored: StoredValues = StoredValues()


@dataclass(frozen=True, eq=False)
class ValuesLayout:
    """The arrays of one values table over their shared dimensions."""

    group: str
    dims: tuple[Dimension, ...]
    arrays: tuple[ValueArray, ...]
    decode: bool

    def schema(self) -> pa.Schema:
        dims = [pa.field(d.name, arrow_type(d.labels.values.dtype)) for d in self.dims]
        return pa.schema(dims + [pa.field(a.name, a.type) for a in self.arrays])

    def array(self, name: str) -> ValueArray:
        return next(a for a in self.arrays if a.name == name)

    def narrowed(self, columns: Sequence[str]) -> ValuesLayout:
        """Only the arrays among ``columns`` (a schema narrower than the full one)."""
        kept = tuple(a for a in self.arrays if a.name in columns)
        return ValuesLayout(self.group, self.dims, kept, self.decode)


def open_dataset(session: BaseSession, group: str, decode: bool = True) -> xr.Dataset:
    """The group as xarray opens it, lazily: nothing but metadata and coordinates is read."""
    with quiet_numcodecs():
        return _open(session, group, decode)


def _open(session: BaseSession, group: str, decode: bool) -> xr.Dataset:
    import xarray as xr  # on first use: see values/__init__

    from ..zarr_store import IcechunkStore

    ds: xr.Dataset = xr.open_zarr(
        IcechunkStore(session, read_only=True),
        group=None if group == "/" else group.strip("/"),
        consolidated=False,
        chunks=None,
        decode_cf=decode,
        mask_and_scale=decode,
        decode_times=decode,
    )
    return ds


def values_layout(
    session: BaseSession, group: str, names: Sequence[str], decode: bool = True
) -> ValuesLayout:
    """The layout of a values table over the arrays ``names`` of ``group``.

    Raises:
        InvalidInputError: no arrays named, an unknown array, or arrays on different dimensions.
        NotFoundError: no group at ``group``.
    """
    group = normalize_path(group)
    if not names:
        raise InvalidInputError("option arrays: name the arrays to read, e.g. 'tas,pr'")
    node = session.find_node(group)
    if node is None or node.type != "group":
        raise NotFoundError(f"option group={group!r}: there is no group there")
    ds = open_dataset(session, group, decode)
    missing = [n for n in names if n not in ds.data_vars and n not in ds.coords]
    if missing:
        raise InvalidInputError(
            f"no array {missing[0]!r} in group {group!r}; it holds {sorted(map(str, ds.variables))}"
        )
    dims = _shared_dims(ds, names)
    first = session.get_node(_child(group, names[0]))
    assert first.meta is not None
    dimensions = tuple(
        Dimension(_labels(ds, d, ds.sizes[d]), int(c))
        for d, c in zip(dims, first.meta.chunk_shape, strict=True)
    )
    arrays = tuple(
        ValueArray(n, path, arrow_type(ds[n].dtype), _stored_values(ds[n], session, path, decode))
        for n in names
        for path in [_child(group, n)]
    )
    return ValuesLayout(group, dimensions, arrays, decode)


def arrow_type(dtype: np.dtype[Any]) -> pa.DataType:
    """The Arrow (and so Spark) type of a column of ``dtype``.

    Raises:
        InvalidInputError: a dtype Spark has no column type for.
    """
    if dtype.kind == "M":
        return VALUES_TIMESTAMP
    if dtype.kind in "OUS":
        return pa.string()
    try:
        return pa.from_numpy_dtype(dtype)
    except (pa.ArrowNotImplementedError, TypeError) as exc:
        raise InvalidInputError(f"values of dtype {dtype} have no Spark column type") from exc


def _shared_dims(ds: xr.Dataset, names: Sequence[str]) -> tuple[str, ...]:
    dims = {n: tuple(map(str, ds[n].dims)) for n in names}
    first = dims[names[0]]
    if not first:
        raise InvalidInputError(f"array {names[0]!r} has no dimensions: it holds one value")
    if any(d != first for d in dims.values()):
        listed = "; ".join(f"{n}({', '.join(d)})" for n, d in dims.items())
        raise InvalidInputError(
            f"the arrays of one values table must share their dimensions, in order: {listed}. "
            "Read them as separate tables and join on the dimension columns"
        )
    return first


def _labels(ds: xr.Dataset, dim: str, size: int) -> Labels:
    if dim not in ds.variables or ds[dim].ndim != 1:
        return Labels.indexes(dim, size)
    values = np.asarray(ds[dim].values)
    if values.dtype.kind == "O":  # cftime dates (non-standard calendars), or text
        values = np.array([v.isoformat() if hasattr(v, "isoformat") else str(v) for v in values])
    if values.dtype.kind == "M":
        values = values.astype("datetime64[ns]")
    return Labels(dim, values)


def _stored_values(
    variable: xr.DataArray, session: BaseSession, path: str, decode: bool
) -> StoredValues:
    """What decoding does to the stored values of ``variable`` (xarray keeps it in encoding)."""
    meta = session.get_node(path).meta
    assert meta is not None
    fill = _number(meta.fill_value)
    # Decoding moved the CF attributes into the encoding; undecoded, they are attributes.
    cf = variable.encoding if decode else variable.attrs
    masked = tuple(
        sorted({n for k in ("_FillValue", "missing_value") for n in _numbers(cf.get(k))})
    )
    nan_fill = fill is not None and math.isnan(fill)
    if not decode:
        return StoredValues(fill=fill, fill_is_null=nan_fill, masked=masked)
    return StoredValues(
        scale=float(cf.get("scale_factor", 1.0)),
        offset=float(cf.get("add_offset", 0.0)),
        fill=fill,
        fill_is_null=nan_fill or (fill is not None and fill in masked),
        masked=masked,
    )


def _numbers(value: Any) -> list[float]:
    """A CF attribute's numbers (``missing_value`` may be a list)."""
    items = value if isinstance(value, list | tuple | np.ndarray) else [value]
    return [n for n in map(_number, items) if n is not None and not math.isnan(n)]


def _number(value: Any) -> float | None:
    """A fill value as a number (zarr's JSON writes NaN and the infinities as text)."""
    if isinstance(value, bool | int | float | np.number):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("inity", ""))
    return None


def _child(group: str, name: str) -> str:
    return normalize_path(f"{group}/{name}")

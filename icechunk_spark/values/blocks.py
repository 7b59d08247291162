"""Reading the rows of one chunk box: the arrays' values there, decoded, with their labels.

xarray reads and decodes (``values_layout`` opened it the same way), zarr fetches exactly the
chunks the box covers through ``session.store`` (native, inline and virtual refs, shards, edge
chunks; unwritten chunks read as the fill value), and the rows come out in C order of the
dimensions, as ``Dataset.to_dataframe()`` lists them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.codec import quiet_numcodecs
from ..errors import IcechunkSparkError, InvalidInputError
from .layout import ValuesLayout, arrow_type
from .plan import Selection, ValueCondition

if TYPE_CHECKING:
    import xarray as xr


def read_boxes(
    ds: xr.Dataset,
    layout: ValuesLayout,
    selection: Selection,
    boxes: Sequence[tuple[int, ...]],
    values: Sequence[ValueCondition] = (),
) -> Iterator[pa.RecordBatch]:
    """One record batch per chunk box (boxes the selection leaves nothing of give none);
    with ``values``, only the rows whose values meet every condition (null meets none)."""
    schema = layout.schema()
    for box in boxes:
        indexers = _indexers(layout, selection, box)
        sizes = [_length(i) for i in indexers]
        if 0 in sizes:
            continue
        columns = _label_columns(layout, indexers, sizes)
        for array in layout.arrays:
            columns.append(_value_column(ds, array.name, layout, indexers, box))
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        yield batch.filter(_meeting(batch, values)) if values else batch


_COMPUTE = {
    "=": pc.equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _meeting(batch: pa.RecordBatch, values: Sequence[ValueCondition]) -> pa.Array:
    """Per row, whether every condition holds (a null value meets none)."""
    masks = [_COMPUTE[c.op](batch.column(c.array), c.value) for c in values]
    return pc.fill_null(functools.reduce(pc.and_, masks), False)


def _indexers(
    layout: ValuesLayout, selection: Selection, box: tuple[int, ...]
) -> list[np.ndarray | slice]:
    out = []
    for axis, (dim, c) in enumerate(zip(layout.dims, box, strict=True)):
        start, stop = c * dim.chunk, min((c + 1) * dim.chunk, dim.size)
        out.append(selection.indexes(axis, start, stop))
    return out


def _length(indexer: np.ndarray | slice) -> int:
    if isinstance(indexer, slice):
        return int(indexer.stop - indexer.start)
    return int(indexer.shape[0])


def _label_columns(
    layout: ValuesLayout, indexers: Sequence[np.ndarray | slice], sizes: Sequence[int]
) -> list[pa.Array]:
    """Each dimension's labels, repeated as the C-order rows of the box need them."""
    total = int(np.prod(sizes))
    columns = []
    for axis, (dim, indexer) in enumerate(zip(layout.dims, indexers, strict=True)):
        labels = dim.labels.values[indexer]
        inner = int(np.prod(sizes[axis + 1 :]))
        column = np.tile(np.repeat(labels, inner), total // (inner * len(labels)))
        columns.append(_arrow(column))
    return columns


def _value_column(
    ds: xr.Dataset,
    name: str,
    layout: ValuesLayout,
    indexers: Sequence[np.ndarray | slice],
    box: tuple[int, ...],
) -> pa.Array:
    values = _read(ds, name, layout, indexers, box)
    return _arrow(values.reshape(-1), layout.array(name).type)


def selected_values(
    ds: xr.Dataset, layout: ValuesLayout, selection: Selection, box: tuple[int, ...], name: str
) -> np.ndarray:
    """The values of array ``name`` in ``box`` that ``selection`` keeps, as an nd-array."""
    return _read(ds, name, layout, _indexers(layout, selection, box), box)


def _read(
    ds: xr.Dataset,
    name: str,
    layout: ValuesLayout,
    indexers: Sequence[np.ndarray | slice],
    box: tuple[int, ...],
) -> np.ndarray:
    selected = {d.name: i for d, i in zip(layout.dims, indexers, strict=True)}
    try:
        with quiet_numcodecs():
            return np.asarray(ds[name].isel(selected).values)
    except IcechunkSparkError as exc:
        exc.add_note(f"reading array {layout.array(name).path!r}, chunk {box}")
        raise


def label_column(values: np.ndarray) -> pa.Array:
    """Labels as a column of their Arrow type (times in UTC microseconds)."""
    return _arrow(values)


def _arrow(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """A column: NaN and NaT become null (see ``layout``), cftime dates their ISO text."""
    if values.dtype.kind == "O":
        values = np.array([v.isoformat() if hasattr(v, "isoformat") else v for v in values])
    target = type or arrow_type(values.dtype)
    if values.dtype.kind == "M":
        values = values.astype("datetime64[us]")
    try:
        return pa.array(values, from_pandas=True).cast(target)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"values of dtype {values.dtype} do not fit {target}") from exc


def box_rows(layout: ValuesLayout, selection: Selection, box: tuple[int, ...]) -> int:
    """How many rows a box gives."""
    return int(np.prod([_length(i) for i in _indexers(layout, selection, box)]))


__all__ = ["box_rows", "label_column", "read_boxes", "selected_values"]

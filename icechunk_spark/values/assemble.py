"""Tidy rows -> the stored bytes of whole chunks (one process's part of a tidy write).

Rows arrive grouped by chunk (a Spark task gets its chunks' rows sorted by chunk id). Each
chunk becomes a dense block per value array: the hole value where no row gives an element,
the elements the dataset holds already where the rows cover only part of a chunk that
reaches into it (read, merged, rewritten), then the rows' values. xarray's own
``encode_zarr_variable`` stores the block (packing, ``_FillValue``), so the bytes are those
``to_zarr`` would write; the raw block then takes the array's codecs like any chunk row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xarray as xr
from xarray.backends.zarr import encode_zarr_variable

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError
from .grid import Grid, Variable

CHUNK_COLUMN = "_chunk"
CHUNK_ROWS = pa.schema(
    [("array", pa.string()), ("coord", pa.list_(pa.int64())), ("data", pa.binary())]
)
# Reads the decoded values an array holds already in a box of index slices.
ReadExisting = Callable[[str, tuple[slice, ...]], np.ndarray]


class DuplicateLabelsError(InvalidInputError):
    """Two rows of one write give the same element (rows have no order to pick one by)."""

    def __init__(self, labels: dict[str, str], chunk: int) -> None:
        self.labels = labels
        self.chunk = chunk
        shown = ", ".join(f"{d}={v}" for d, v in labels.items())
        super().__init__(f"two rows have the labels {shown}: each element takes one row")

    @property
    def order(self) -> tuple[int, ...]:
        """Where the duplicate is: of several tasks' refusals, the first chunk's is raised."""
        return (self.chunk,)

    def __reduce__(self) -> tuple[Any, ...]:
        return (DuplicateLabelsError, (self.labels, self.chunk))


def label_columns(table: pa.Table | pa.RecordBatch, dims: Iterable[str]) -> list[np.ndarray]:
    """The dimension columns as numpy labels (times as UTC ``datetime64[ns]``)."""
    return [labels_of(table.column(d)) for d in dims]


def labels_of(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One column of labels as numpy, times as naive UTC ``datetime64[ns]`` like xarray's."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ns", tz=column.type.tz)).cast(pa.int64())
        return np.asarray(column.to_numpy(zero_copy_only=False)).view("datetime64[ns]")
    return np.asarray(column.to_numpy(zero_copy_only=False))


def with_chunk_ids(batch: pa.RecordBatch, grid: Grid) -> pa.RecordBatch:
    """``batch`` with each row's chunk id (a label the grid lacks is an error)."""
    ids = grid.chunk_ids(grid.indexes(label_columns(batch, grid.spec.dims)))
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array(ids, pa.int64())], [*batch.schema.names, CHUNK_COLUMN]
    )


def rows_by_chunk(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """(chunk id, all its rows) from batches sorted by chunk id: one chunk held at a time."""
    pending: list[pa.Table] = []
    current: int | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        ids = batch.column(CHUNK_COLUMN).to_numpy()
        cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), batch.num_rows]
        for start, end in zip(starts, ends, strict=True):
            chunk = int(ids[start])
            if current is not None and chunk != current:
                yield current, pa.concat_tables(pending)
                pending = []
            current = chunk
            pending.append(pa.Table.from_batches([batch.slice(start, end - start)]))
    if current is not None:
        yield current, pa.concat_tables(pending)


def chunk_rows(
    batches: Iterable[pa.RecordBatch], grid: Grid, read_existing: ReadExisting
) -> Iterator[pa.RecordBatch]:
    """The chunk rows (array, coord, raw data) of every chunk the sorted batches hold."""
    for chunk, rows in rows_by_chunk(batches):
        yield assemble_chunk(chunk, rows, grid, read_existing)


def assemble_chunk(
    chunk: int, rows: pa.Table, grid: Grid, read_existing: ReadExisting
) -> pa.RecordBatch:
    """One chunk's rows -> one chunk row per value array, its bytes as stored."""
    coord = tuple(int(c) for c in np.unravel_index(chunk, grid.grid_shape))
    starts = [c * n for c, n in zip(coord, grid.chunk_shape, strict=True)]
    stops = [
        min(s + n, size) for s, n, size in zip(starts, grid.chunk_shape, grid.shape, strict=True)
    ]
    indexes = grid.indexes(label_columns(rows, grid.spec.dims))
    local = [i - s for i, s in zip(indexes, starts, strict=True)]
    offsets = np.ravel_multi_index(local, grid.chunk_shape)
    _refuse_duplicates(offsets, rows, grid, chunk)
    covered = offsets.shape[0] == int(np.prod([b - a for a, b in zip(starts, stops, strict=True)]))
    kept = None if covered else _old_part(starts, stops, grid.old_shape)
    data = []
    for variable in grid.variables:
        block = np.full(grid.chunk_shape, variable.hole, dtype=variable.dtype)
        if kept is not None:
            inside = tuple(
                slice(s.start - a, s.stop - a) for s, a in zip(kept, starts, strict=True)
            )
            block[inside] = read_existing(variable.name, kept)
        block.reshape(-1)[offsets] = _values(rows.column(variable.name), variable)
        data.append(_stored(block, variable, grid.spec.dims))
    names = [v.path for v in grid.variables]
    return pa.RecordBatch.from_pydict(
        {"array": names, "coord": [list(coord)] * len(names), "data": data}, schema=CHUNK_ROWS
    )


def _refuse_duplicates(offsets: np.ndarray, rows: pa.Table, grid: Grid, chunk: int) -> None:
    order = np.argsort(offsets, kind="stable")
    repeated = np.flatnonzero(offsets[order][1:] == offsets[order][:-1])
    if repeated.size:
        row = int(order[repeated[0]])
        labels = {d: _label_text(rows.column(d)[row].as_py()) for d in grid.spec.dims}
        raise DuplicateLabelsError(labels, chunk)


def _label_text(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else repr(value)


def _old_part(
    starts: list[int], stops: list[int], old_shape: tuple[int, ...]
) -> tuple[slice, ...] | None:
    """The part of the chunk's box the dataset held before, if any."""
    part = tuple(slice(a, min(b, old)) for a, b, old in zip(starts, stops, old_shape, strict=True))
    return part if all(s.stop > s.start for s in part) else None


def _values(column: pa.ChunkedArray, variable: Variable) -> np.ndarray:
    """A value column as the block's dtype; a null is a hole, as a missing row is."""
    if column.null_count and variable.dtype.kind in "iub":
        column = pc.fill_null(column, variable.hole)
    values = column.to_numpy()
    return np.asarray(values, dtype=variable.dtype)


def _stored(block: np.ndarray, variable: Variable, dims: tuple[str, ...]) -> bytes:
    """The block's raw C-order bytes as stored: xarray's CF encoding of it."""
    decoded = xr.Variable(dims, block, encoding=dict(variable.encoding))
    with quiet_numcodecs():
        stored = encode_zarr_variable(decoded, name=variable.name, zarr_format=3)
    return np.ascontiguousarray(stored.values).tobytes()


__all__ = [
    "CHUNK_COLUMN",
    "CHUNK_ROWS",
    "DuplicateLabelsError",
    "ReadExisting",
    "assemble_chunk",
    "chunk_rows",
    "label_columns",
    "labels_of",
    "rows_by_chunk",
    "with_chunk_ids",
]

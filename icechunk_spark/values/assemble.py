"""Tidy rows -> the stored bytes of whole chunks (one process's part of a tidy write).

Rows arrive grouped by chunk (a Spark task gets its chunks' rows sorted by chunk id). Each
chunk becomes a dense block per value array: the hole value where no row gives an element,
the elements the dataset holds already where the rows cover only part of a chunk that
reaches into it (read, merged, rewritten), then the rows' values. xarray's own
``encode_zarr_variable`` stores the block (packing, ``_FillValue``), so the bytes are those
``to_zarr`` would write; the raw block then takes the array's codecs like any chunk row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError
from .grid import Grid, Variable

CHUNK_COLUMN = "_chunk"
OFFSET_COLUMN = "_offset"
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


def keyed(batch: pa.RecordBatch | pa.Table, grid: Grid) -> pa.Table:
    """Tidy rows as the assembler takes them: each row's chunk and offset in that chunk
    (from its labels, here; the Spark path computes the same columns in the JVM), then the
    value columns. A label the grid lacks is an error."""
    indexes = grid.indexes(label_columns(batch, grid.spec.dims))
    columns = {
        CHUNK_COLUMN: pa.array(grid.chunk_ids(indexes), pa.int64()),
        OFFSET_COLUMN: pa.array(grid.offsets(indexes), pa.int64()),
    }
    columns.update({v.name: batch.column(v.name) for v in grid.variables})
    return pa.table(columns)


@dataclass(eq=False, slots=True)
class _Block:
    """One chunk being assembled: a block per value array, and which elements rows gave."""

    values: list[np.ndarray]
    given: np.ndarray


class ChunkAssembler:
    """Scatters keyed rows into dense chunk blocks as they come, in any order; ``finish``
    then yields each chunk's stored bytes. A task holds the blocks of the chunks its rows
    touch (Spark's shuffle gives it whole chunks, few of them), never the rows."""

    def __init__(self, grid: Grid, read_existing: ReadExisting) -> None:
        self.grid = grid
        self.read_existing = read_existing
        self._blocks: dict[int, _Block] = {}

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Place one batch of keyed rows (see :func:`keyed`).

        Raises:
            DuplicateLabelsError: two rows give one element (in this batch, or before).
        """
        for chunk, offsets, values in _by_chunk(batch, self.grid):
            self._place(chunk, offsets, values)

    def add_packed(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Place one batch of packed rows (see :func:`packed`)."""
        columns = batch.to_pydict()
        for row, chunk in enumerate(columns[CHUNK_COLUMN]):
            offsets = np.frombuffer(columns[OFFSET_COLUMN][row], dtype=np.int64)
            values = [
                np.frombuffer(columns[v.name][row], dtype=v.dtype) for v in self.grid.variables
            ]
            self._place(int(chunk), offsets, values)

    def _place(self, chunk: int, offsets: np.ndarray, values: list[np.ndarray]) -> None:
        block = self._blocks.get(chunk)
        if block is None:
            size = math.prod(self.grid.chunk_shape)
            block = _Block(
                [np.full(size, v.hole, dtype=v.dtype) for v in self.grid.variables],
                np.zeros(size, dtype=bool),
            )
            self._blocks[chunk] = block
        _refuse_duplicates(chunk, offsets, block.given, self.grid)
        block.given[offsets] = True
        for target, given in zip(block.values, values, strict=True):
            target[offsets] = given

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The chunk rows (array, coord, raw data) of every chunk placed, one chunk at a
        time (its blocks are let go as it is yielded)."""
        for chunk in sorted(self._blocks):
            yield self._stored(chunk, self._blocks.pop(chunk))

    def _stored(self, chunk: int, block: _Block) -> pa.RecordBatch:
        grid = self.grid
        coord = tuple(int(c) for c in np.unravel_index(chunk, grid.grid_shape))
        starts = [c * n for c, n in zip(coord, grid.chunk_shape, strict=True)]
        kept = None if block.given.all() else _old_part(starts, grid)
        data = []
        for variable, flat in zip(grid.variables, block.values, strict=True):
            values = flat.reshape(grid.chunk_shape)
            if kept is not None:
                inside = tuple(
                    slice(s.start - a, s.stop - a) for s, a in zip(kept, starts, strict=True)
                )
                given = block.given.reshape(grid.chunk_shape)[inside]
                old = self.read_existing(variable.name, kept)
                values[inside] = np.where(given, values[inside], old)
            data.append(_stored(values, variable, grid.spec.dims))
        names = [v.path for v in grid.variables]
        return pa.RecordBatch.from_pydict(
            {"array": names, "coord": [list(coord)] * len(names), "data": data}, schema=CHUNK_ROWS
        )


PACKED_TYPE = pa.binary()


def packed(batches: Iterable[pa.RecordBatch], grid: Grid) -> Iterator[pa.RecordBatch]:
    """Keyed rows packed by chunk: per batch, one row per chunk it touches, holding that
    chunk's offsets and values as raw bytes. Spark then shuffles a few rows per batch instead
    of every element (rows go to Python once either way, to be packed)."""
    for batch in batches:
        parts = list(_by_chunk(batch, grid))
        if not parts:
            continue
        columns = {
            CHUNK_COLUMN: pa.array([c for c, _, _ in parts], pa.int64()),
            OFFSET_COLUMN: pa.array([o.tobytes() for _, o, _ in parts], PACKED_TYPE),
        }
        for i, variable in enumerate(grid.variables):
            columns[variable.name] = pa.array([v[i].tobytes() for _, _, v in parts], PACKED_TYPE)
        yield pa.RecordBatch.from_pydict(columns)


def _by_chunk(
    batch: pa.RecordBatch | pa.Table, grid: Grid
) -> Iterator[tuple[int, np.ndarray, list[np.ndarray]]]:
    """(chunk, offsets, values per array) of each chunk a batch of keyed rows touches."""
    if batch.num_rows == 0:
        return
    chunks = np.asarray(batch.column(CHUNK_COLUMN).to_numpy())
    offsets = np.asarray(batch.column(OFFSET_COLUMN).to_numpy()).astype(np.int64, copy=False)
    values = [_values(batch.column(v.name), v) for v in grid.variables]
    order = np.argsort(chunks, kind="stable")
    ids, starts = np.unique(chunks[order], return_index=True)
    for chunk, rows in zip(ids, np.split(order, starts[1:]), strict=True):
        yield int(chunk), offsets[rows], [v[rows] for v in values]


def chunk_rows(
    batches: Iterable[pa.RecordBatch],
    grid: Grid,
    read_existing: ReadExisting,
    *,
    packed_rows: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The chunk rows (array, coord, raw data) of all the rows of ``batches``: keyed rows
    (:func:`keyed`), or packed ones (:func:`packed`) with ``packed_rows``."""
    assembler = ChunkAssembler(grid, read_existing)
    add = assembler.add_packed if packed_rows else assembler.add
    for batch in batches:
        add(batch)
    yield from assembler.finish()


def _refuse_duplicates(chunk: int, offsets: np.ndarray, given: np.ndarray, grid: Grid) -> None:
    """Refuse rows giving an element twice: the smallest such offset is named."""
    order = np.sort(offsets)
    twice = order[1:][order[1:] == order[:-1]]
    before = offsets[given[offsets]]
    repeated = np.concatenate([twice, before])
    if repeated.size:
        raise DuplicateLabelsError(grid.labels_at(chunk, int(repeated.min())), chunk)


def _old_part(starts: list[int], grid: Grid) -> tuple[slice, ...] | None:
    """The part of the chunk's box the dataset held before, if any."""
    part = tuple(
        slice(a, min(a + n, old, size))
        for a, n, old, size in zip(
            starts, grid.chunk_shape, grid.old_shape, grid.shape, strict=True
        )
    )
    return part if all(s.stop > s.start for s in part) else None


def _values(column: pa.ChunkedArray, variable: Variable) -> np.ndarray:
    """A value column as the block's dtype; a null is a hole, as a missing row is."""
    if column.null_count and variable.dtype.kind in "iub":
        column = pc.fill_null(column, variable.hole)
    values = column.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=variable.dtype)


def _stored(block: np.ndarray, variable: Variable, dims: tuple[str, ...]) -> bytes:
    """The block's raw C-order bytes as stored: xarray's CF encoding of it."""
    import xarray as xr  # on first use: see values/__init__
    from xarray.backends.zarr import encode_zarr_variable

    decoded = xr.Variable(dims, block, encoding=dict(variable.encoding))
    with quiet_numcodecs():
        stored = encode_zarr_variable(decoded, name=variable.name, zarr_format=3)
    return np.ascontiguousarray(stored.values).tobytes()


__all__ = [
    "CHUNK_COLUMN",
    "CHUNK_ROWS",
    "OFFSET_COLUMN",
    "PACKED_TYPE",
    "ChunkAssembler",
    "DuplicateLabelsError",
    "ReadExisting",
    "chunk_rows",
    "keyed",
    "label_columns",
    "labels_of",
    "packed",
]

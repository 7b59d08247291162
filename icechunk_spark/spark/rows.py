"""Input rows of a write: split them by array, read their coords, and check them.

Every error names the row's array and chunk coord, so a failed Spark job says which row of
which array was wrong, not just that something was.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError
from ..format.coords import decode_coords
from .plan import ArrayTarget


def split_by_array(table: pa.Table) -> Iterable[tuple[str | None, pa.Table]]:
    """``(array path as written, its rows)`` per distinct ``array`` value (``None``: null)."""
    column = table.column("array")
    if column.null_count == 0 and pc.count_distinct(column).as_py() == 1:
        yield column[0].as_py(), table
        return
    encoded = pc.dictionary_encode(column).combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    codes = np.where(pc.is_null(encoded).to_numpy(zero_copy_only=False), -1, codes)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    for run in np.split(order, bounds):
        code = int(codes[run[0]])
        path = None if code < 0 else encoded.dictionary[code].as_py()
        yield path, table.take(pa.array(run))


def coords_of(target: ArrayTarget, rows: pa.Table) -> np.ndarray:
    """The rows' coords as an ``(n, ndim)`` array (from list<int> or encoded binary)."""
    column = rows.column("coord")
    ndim = target.meta.ndim
    if column.null_count:
        raise InvalidInputError(f"a row for array {target.path!r} has a null coord")
    flat_column = flat(column)
    if pa.types.is_binary(flat_column.type) or pa.types.is_large_binary(flat_column.type):
        return decode_coords(flat_column, ndim)
    lengths = pc.list_value_length(flat_column).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != ndim)
    if len(bad):
        first = flat_column[int(bad[0])].as_py()
        raise InvalidInputError(
            f"row for array {target.path!r} at coord {tuple(first)}: the array has {ndim} "
            f"dimensions, the coord {len(first)}"
        )
    values = pc.list_flatten(flat_column)
    if values.null_count:
        raise InvalidInputError(f"a row for array {target.path!r} has a null coord index")
    indices: np.ndarray = values.to_numpy(zero_copy_only=False).astype(np.int64)
    return indices.reshape(-1, ndim)


def check_grid(target: ArrayTarget, coords: np.ndarray) -> None:
    """Refuse coords outside the array's chunk grid (its append axis is unbounded)."""
    if coords.size == 0:
        return
    grid = np.asarray(target.grid_shape, dtype=np.int64)
    if target.grow_axis is not None:
        grid[target.grow_axis] = np.iinfo(np.uint32).max + 1  # the append axis grows to fit
    outside = np.any((coords < 0) | (coords >= grid), axis=1)
    if outside.any():
        bad = int(np.argmax(outside))
        raise row_error(
            target,
            coords,
            bad,
            f"the coord is outside the chunk grid {target.grid_shape} "
            f"(shape {target.meta.shape}, chunks {target.meta.chunk_shape})",
        )


def row_error(target: ArrayTarget, coords: np.ndarray, row: int, problem: str) -> Exception:
    """An error naming the array and the coord of row ``row``."""
    coord = tuple(int(c) for c in coords[row])
    return InvalidInputError(f"row for array {target.path!r} at coord {coord}: {problem}")


def first_coord(rows: pa.Table) -> tuple[int, ...] | None:
    """The first row's coord as written, for errors about rows we cannot decode."""
    value = rows.column("coord")[0].as_py()
    return tuple(value) if isinstance(value, list) else value


def flat(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One contiguous array from a (chunked) column."""
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


__all__ = ["check_grid", "coords_of", "first_coord", "flat", "row_error", "split_by_array"]

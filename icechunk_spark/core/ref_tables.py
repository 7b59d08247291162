"""Bulk chunk refs as Arrow tables: accepted shapes, checked with no Python loop per chunk.

``Session.set_chunk_refs`` takes a table (or a mapping of columns) with a ``coord`` column and,
per row, exactly one location: ``inline_data``, ``chunk_id`` (+ ``offset``, ``length``), or
``virtual_path``/``location`` (+ ``offset``, ``length``, optional ``checksum``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError
from ..format.coords import coords_view, encode_coords
from ..format.locations import remap
from ..format.manifest import conform_refs
from ..format.structure import Node
from .containers import resolve_url


def ref_table(
    refs: pa.Table | Mapping[str, Any], node: Node, containers: Mapping[str, Any]
) -> pa.Table:
    """``refs`` for array ``node`` as a manifest ref table: coords encoded and inside the chunk
    grid, one location per row, virtual URLs resolved against ``containers``.

    Raises:
        InvalidInputError: a column is missing or of the wrong type, a coord lies outside the
            grid, a row has no location or several.
        VirtualRefRefusedError: a virtual URL lies outside the containers.
    """
    assert node.meta is not None
    table = _as_ref_table(refs, node.meta.ndim)
    _check_coords_in_grid(node, table)
    _check_one_location(node, table)
    return _resolve_virtual_column(table, containers)


def check_coord(node: Node, coord: Sequence[int]) -> tuple[int, ...]:
    """``coord`` as ints, checked against the array's chunk grid.

    Raises:
        InvalidInputError: the coord has the wrong rank or lies outside the grid.
    """
    assert node.meta is not None
    coord = tuple(int(c) for c in coord)
    grid = node.meta.grid_shape
    if len(coord) != len(grid) or any(not 0 <= c < g for c, g in zip(coord, grid, strict=False)):
        raise InvalidInputError(
            f"chunk coord {coord} is outside the chunk grid {grid} of array {node.path!r}"
        )
    return coord


def _check_coords_in_grid(node: Node, table: pa.Table) -> None:
    assert node.meta is not None
    if table.num_rows == 0 or node.meta.ndim == 0:
        return
    coords = coords_view(table.column("coord"), node.meta.ndim)  # not a copy of them all
    grid = np.asarray(node.meta.grid_shape, dtype=np.int64)
    if bool(np.all(coords.max(axis=0) < grid)):
        return  # no per-row arrays when every coord is inside (10 M 2-d coords: 30 MB)
    outside = np.any(coords >= grid, axis=1)
    if outside.any():
        first = tuple(int(c) for c in coords[int(np.argmax(outside))])
        raise InvalidInputError(
            f"{int(outside.sum())} chunk coords lie outside the chunk grid "
            f"{node.meta.grid_shape} of array {node.path!r}, the first {first}"
        )


def _check_one_location(node: Node, table: pa.Table) -> None:
    # On bitmaps: exactly one of three is set when their xor is, and not all three are.
    inline, native, virtual = (
        pc.is_valid(table.column(c)) for c in ("inline_data", "chunk_id", "virtual_path")
    )
    one = pc.xor(pc.xor(inline, native), virtual)
    bad = pc.invert(pc.and_(one, pc.invert(pc.and_(pc.and_(inline, native), virtual))))
    if pc.any(bad).as_py():
        raise InvalidInputError(
            f"every ref for array {node.path!r} needs exactly one of inline_data, chunk_id, "
            f"virtual_path; {pc.sum(pc.cast(bad, pa.int64())).as_py()} rows do not"
        )


def _resolve_virtual_column(table: pa.Table, containers: Mapping[str, Any]) -> pa.Table:
    """Each distinct URL resolved once; rewritten (dictionary-encoded) only if one changes."""
    column = table.column("virtual_path")
    if column.null_count == len(column):
        return table
    unique = [u for u in pc.unique(column).to_pylist() if u is not None]
    resolved = {u: resolve_url(u, containers)[0] for u in unique}
    if all(k == v for k, v in resolved.items()):
        return table
    mapped = remap(column, resolved)
    index = table.schema.get_field_index("virtual_path")
    return table.set_column(index, pa.field("virtual_path", mapped.type), mapped)


def _as_ref_table(refs: pa.Table | Mapping[str, Any], ndim: int) -> pa.Table:
    if not isinstance(refs, pa.Table):
        refs = dict(refs)
        coords = refs.get("coord")
        if isinstance(coords, np.ndarray):
            # A 0-d array's coords are (n, 0): -1 cannot be inferred from size 0.
            rows = coords.shape[0] if coords.ndim else 1
            refs["coord"] = encode_coords(
                coords.reshape(rows, ndim) if ndim == 0 else coords.reshape(-1, ndim)
            )
        refs = pa.table(refs)
    if "location" in refs.column_names and "virtual_path" not in refs.column_names:
        refs = refs.rename_columns(
            ["virtual_path" if c == "location" else c for c in refs.column_names]
        )
    if "coord" not in refs.column_names:
        raise InvalidInputError("bulk refs need a 'coord' column")
    coord = refs.column("coord")
    if (
        pa.types.is_list(coord.type)
        or pa.types.is_large_list(coord.type)
        or pa.types.is_fixed_size_list(coord.type)
    ):
        flat = pc.list_flatten(coord).to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(coord).to_numpy(zero_copy_only=False)
        if len(lengths) and not np.all(lengths == ndim):
            raise InvalidInputError(f"every coord must have {ndim} indices")
        if len(flat) and flat.min() < 0:
            raise InvalidInputError("chunk coords must be >= 0")
        refs = refs.set_column(
            refs.schema.get_field_index("coord"), "coord", encode_coords(flat.reshape(-1, ndim))
        )
    elif not (pa.types.is_binary(coord.type) or pa.types.is_large_binary(coord.type)):
        raise InvalidInputError(f"the 'coord' column must be list<int> or binary, not {coord.type}")
    if "array_id" not in refs.column_names:
        refs = refs.append_column("array_id", pa.array(np.zeros(refs.num_rows, np.uint64)))
    return conform_refs(refs)

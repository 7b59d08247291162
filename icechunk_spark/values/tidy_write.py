"""Write tidy rows as arrays: the steps both front doors share, and the one-process writer.

``write_table(session, table, spec)`` is the plain-Python path (no Spark): it plans the grid
from the session's snapshot, makes the arrays ready and assembles every chunk here. The Spark
path (``icechunk_spark.spark.write_values``) plans the same way on the driver and assembles
chunks on executors; both check the columns with :func:`value_dtypes` and plan with
:func:`plan_grid`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ..core import BaseSession, Session
from ..errors import InvalidInputError
from ..format.structure import parse_array_meta
from .assemble import CHUNK_COLUMN, OFFSET_COLUMN, ReadExisting, chunk_rows, keyed, labels_of
from .grid import Grid, TidySpec
from .grid_plan import plan_grown_grid, plan_new_grid
from .layout import open_dataset

Mode = Literal["append", "overwrite"]


def value_dtypes(schema: pa.Schema, dims: tuple[str, ...]) -> dict[str, np.dtype[Any]]:
    """The value columns (every column but the dimensions) and their numpy dtypes.

    Raises:
        InvalidInputError: a dimension column is missing or holds neither numbers nor times,
            no value column is left, or a value column is not numeric.
    """
    names = schema.names
    missing = [d for d in dims if d not in names]
    if missing:
        raise InvalidInputError(
            f"the rows have no dimension column {missing[0]!r} (columns: {', '.join(names)})"
        )
    for dim in dims:
        kind = schema.field(dim).type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_timestamp(kind)
        ):
            raise InvalidInputError(
                f"dimension column {dim!r} holds {kind}; labels must be numbers or timestamps"
            )
    values = {}
    for field in schema:
        if field.name in dims or field.name in (CHUNK_COLUMN, OFFSET_COLUMN):
            continue
        if not (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
            raise InvalidInputError(
                f"value column {field.name!r} holds {field.type}; arrays take numbers "
                "(leave other columns out of the write)"
            )
        values[field.name] = np.dtype(field.type.to_pandas_dtype())
    if not values:
        raise InvalidInputError(f"the rows have no value column beside the dimensions {list(dims)}")
    return values


def with_holes(dtypes: Mapping[str, np.dtype[Any]], holes: bool) -> dict[str, np.dtype[Any]]:
    """Integer columns become float64 when some element gets no value: its hole is NaN,
    as in xarray's ``from_dataframe``."""
    return {n: np.dtype("float64") if holes and d.kind in "iu" else d for n, d in dtypes.items()}


def plan_grid(
    session: BaseSession,
    spec: TidySpec,
    labels: Mapping[str, np.ndarray],
    dtypes: Mapping[str, np.dtype[Any]],
    mode: Mode,
) -> Grid:
    """The grid of the write from the session's snapshot: a new dataset (``overwrite``, or
    an ``append`` to a group holding no arrays yet) or the grown one."""
    group = session.find_node(spec.group)
    children = _children(session, spec.group)
    if group is not None and group.type != "group":
        raise InvalidInputError(f"{spec.group!r} is an array, not a group to write a dataset in")
    if mode == "overwrite" or not children:
        return plan_new_grid(
            spec, labels, dtypes, replaced=tuple(children), create_group=group is None
        )
    ds = open_dataset(session, spec.group)
    docs = {path.rsplit("/", 1)[1]: session.get_node(path).zarr_json for path in children}
    return plan_grown_grid(spec, ds, docs, labels, list(dtypes))


def _children(session: BaseSession, group: str) -> list[str]:
    prefix = group.rstrip("/") + "/"
    return sorted(
        n.path
        for n in session.list_nodes()
        if n.path.startswith(prefix) and "/" not in n.path[len(prefix) :]
    )


def existing_reader(session: BaseSession, group: str) -> ReadExisting:
    """Reads the decoded values the snapshot holds (opened on the first read only)."""
    opened: dict[str, Any] = {}

    def read(name: str, box: tuple[slice, ...]) -> np.ndarray:
        if "ds" not in opened:
            opened["ds"] = open_dataset(session, group)
        return np.asarray(opened["ds"][name][box].values)

    return read


def make_ready(session: BaseSession, grid: Grid) -> None:
    """Replace what the write replaces, create the group, and size every array."""
    for path in grid.replaced:
        session.delete_node(path)
    if grid.group_attributes is not None and session.find_node(grid.spec.group) is None:
        session.create_group(grid.spec.group, grid.group_attributes)
    for path, zarr_json in grid.documents():
        shape = json.loads(zarr_json)["shape"]
        session.ensure_array(path, zarr_json, min_shape=shape)


def write_table(
    session: Session,
    table: pa.Table,
    spec: TidySpec,
    *,
    mode: Mode = "append",
) -> Grid | None:
    """Write the tidy ``table`` into the session (uncommitted): the arrays of ``spec.group``
    as ``xr.Dataset.from_dataframe(table.to_pandas().set_index(dims))`` would write them, or
    grown along ``spec.append_dim``. ``None`` when the table has no rows.

    Raises:
        InvalidInputError: bad columns (:func:`value_dtypes`), labels (:mod:`.grid`), or two
            rows with the same labels.
    """
    dtypes = value_dtypes(table.schema, spec.dims)
    if table.num_rows == 0:
        return None
    labels = {d: labels_of(table.column(d)) for d in spec.dims}
    holes = table.num_rows < np.prod([np.unique(v).size for v in labels.values()]) or any(
        table.column(n).null_count for n in dtypes
    )
    grid = plan_grid(session, spec, labels, with_holes(dtypes, holes), mode)
    make_ready(session, grid)
    for coordinate in grid.coordinates:
        _set_raw(session, coordinate.path, coordinate.zarr_json, coordinate.chunks)
    reader = existing_reader(session, spec.group)
    docs = {v.path: v.zarr_json for v in grid.variables}
    rows = (keyed(batch, grid) for batch in table.to_batches())
    for batch in chunk_rows(rows, grid, reader):
        for row in batch.to_pylist():
            _set_raw(session, row["array"], docs[row["array"]], [(row["coord"], row["data"])])
    return grid


def _set_raw(session: BaseSession, path: str, zarr_json: bytes, chunks: Any) -> None:
    meta = parse_array_meta(json.loads(zarr_json), path)
    for coord, data in chunks:
        coord = (coord,) if isinstance(coord, int) else tuple(coord)
        values = np.frombuffer(data, dtype=np.dtype(meta.data_type)).reshape(meta.chunk_shape)
        session.set_chunk_values(path, coord, values)


__all__ = [
    "Mode",
    "existing_reader",
    "make_ready",
    "plan_grid",
    "value_dtypes",
    "with_holes",
    "write_table",
]

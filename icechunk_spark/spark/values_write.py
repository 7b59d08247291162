"""Tidy DataFrames become arrays: ``write_values(df, url, dims=..., chunks=...)``.

One row per element (a label per dimension, then the values) in; the arrays of a dataset
out, as ``xr.Dataset.from_dataframe(pdf.set_index(dims)).to_zarr(...)`` writes them, or
grown along ``append_dim``. The steps, each where it belongs:

1. driver: one Spark aggregation gives each dimension's distinct labels and the counts
   (rows, nulls): small, whatever the row count; the grid is planned from them and the
   branch tip (``values.tidy_write.plan_grid``: coordinate arrays, metadata, encoding);
2. executors: each row gets its chunk from its labels, Spark shuffles the rows by chunk
   and sorts them, and each task assembles its chunks one at a time (a partly covered
   chunk that holds data already is read, merged and rewritten), encodes them with the
   arrays' codecs and stages them like any chunk rows (``distributed.stage``);
3. driver: the coordinate chunks are staged here (a few, small), and the coordinator
   commits everything as one snapshot from the base the grid was planned on, so a
   concurrent commit to a chunk this write rewrote is a conflict, never a lost update.

Why not ``df.write.format("icechunk").option("table", "values")``: a Python data source
cannot ask Spark to shuffle the rows it is given (Spark's ``PythonWrite`` has no required
distribution), and its tasks start before anyone knows the labels of all rows; so the write
runs from the driver, as ``write_chunks`` does. Streams use :func:`values_batches` with
``foreachBatch``, exactly once per batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from ..errors import InvalidInputError
from ..format.paths import normalize_path
from ..format.structure import parse_array_meta
from ..values.assemble import (
    CHUNK_COLUMN,
    CHUNK_ROWS,
    OFFSET_COLUMN,
    chunk_rows,
    labels_of,
    packed,
)
from ..values.grid import Grid, TidySpec
from ..values.labels import Labels
from ..values.tidy_write import Mode, existing_reader, plan_grid, value_dtypes, with_holes
from .coordinator import StagedWrite, abort_write, landed_already, run_commit
from .distributed import spark_piece_runner, stage
from .options import repo_options
from .plan import ArrayTarget, WritePlan, make_plan, options_from_kwargs
from .staging import Stager
from .streaming import STREAM_BATCH_KEY, STREAM_QUERY_KEY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_QUERY_ID_PROPERTY = "sql.streaming.queryId"
# Tasks of the assembling stage: one per chunk up to this many (then a task holds the blocks
# of several chunks at once).
MAX_TASKS = 1024


def write_values(
    df: DataFrame,
    url: str,
    *,
    dims: str | Sequence[str],
    chunks: Mapping[str, int] | None = None,
    group: str = "/",
    mode: Mode = "append",
    append_dim: str | None = None,
    placement: str = "after",
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    branch: str = "main",
    message: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    on_conflict: str = "fail",
    once: Mapping[str, Any] | None = None,
) -> str | None:
    """Write the tidy rows of ``df`` as the arrays of ``group`` and commit them as one
    snapshot on ``branch``; the new snapshot id (``None``: no rows).

    ``dims``: the dimension columns in order (``"time,lat,lon"``); every other column becomes
    an array on them. ``chunks``: ``{dim: size}`` (a dimension left out is one chunk).
    ``mode="overwrite"`` makes the dataset (replacing the group's arrays); ``append`` (the
    default) makes it when the group holds no arrays yet, else writes into it: new labels
    along ``append_dim`` go after the existing ones, rows at labels the dataset has update
    those elements (along ``append_dim`` only with ``placement="update"``). ``encoding``:
    per array or coordinate, xarray's keys (``dtype``, ``_FillValue``, ``missing_value``,
    ``scale_factor``, ``add_offset``, ``units``, ``calendar``, ``compressors`` as zarr codec
    specs). ``once``: marks naming the commit (a replay of a write that landed commits
    nothing; streams pass theirs).

    Raises:
        InvalidInputError: a missing dimension column, a value column that is not numeric, a
            label another dimension lacks, labels of another kind than the coordinate's,
            appended labels out of order, or two rows with the same labels.
        ConflictError: a concurrent commit changed a chunk this write rewrites.
    """
    spec = TidySpec(
        _dims(dims),
        dict(chunks or {}),
        normalize_path(group),
        dict(encoding or {}),
        append_dim,
        placement,  # type: ignore[arg-type]
    )
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    dtypes = value_dtypes(to_arrow_schema(df.schema, timezone="UTC"), spec.dims)
    options = options_from_kwargs(
        url,
        branch=branch,
        message=message or f"write values of {', '.join(dtypes)} to {spec.group}",
        metadata=metadata,
        storage_options=storage_options,
        on_conflict=on_conflict,
    )
    with repo_options(options).opened(None) as repo:
        plan = make_plan(options, list(CHUNK_ROWS.names), False, repo=repo)
        plan = dataclasses.replace(plan, once_marks=dict(once or {}))
        landed = landed_already(repo, plan)
        if landed is not None:
            return landed
        counts = _label_counts(df, spec, list(dtypes))
        if counts.rows == 0:
            return None
        session = repo.readonly_session(snapshot_id=plan.base_snapshot)
        grid = plan_grid(session, spec, counts.labels, with_holes(dtypes, counts.holes), mode)
        plan = _with_grid(plan, grid, {n.path for n in session.list_nodes()})
        try:
            staged = _stage(df, plan, grid)
        except BaseException:
            abort_write(plan, [], repo)
            raise
        return run_commit(plan, staged, spark_piece_runner(df.sparkSession, plan), repo=repo)


def _dims(dims: str | Sequence[str]) -> tuple[str, ...]:
    names = dims.split(",") if isinstance(dims, str) else list(dims)
    return tuple(n.strip() for n in names if n.strip())


@dataclasses.dataclass(frozen=True)
class _Counts:
    rows: int
    holes: bool
    labels: dict[str, np.ndarray]


def _label_counts(df: DataFrame, spec: TidySpec, names: list[str]) -> _Counts:
    """One aggregation: rows, non-null counts, each dimension's distinct labels."""
    aggregates = [
        F.count(F.lit(1)).alias("_rows"),
        *[F.count(F.col(c)).alias(f"_n{i}") for i, c in enumerate([*spec.dims, *names])],
        *[F.collect_set(F.col(d)).alias(f"_l{i}") for i, d in enumerate(spec.dims)],
    ]
    table = df.agg(*aggregates).toArrow()
    rows = int(table.column("_rows")[0].as_py())
    filled = [int(table.column(f"_n{i}")[0].as_py()) for i in range(len(spec.dims) + len(names))]
    for dim, count in zip(spec.dims, filled, strict=False):
        if count < rows:
            raise InvalidInputError(f"dimension column {dim!r} holds nulls: every row needs labels")
    labels = {
        d: labels_of(table.column(f"_l{i}").combine_chunks().flatten())
        for i, d in enumerate(spec.dims)
    }
    cells = int(np.prod([v.size for v in labels.values()]))
    holes = rows < cells or any(n < rows for n in filled[len(spec.dims) :])
    return _Counts(rows, holes, labels)


def _with_grid(plan: WritePlan, grid: Grid, existing: set[str]) -> WritePlan:
    """The plan writing the grid's arrays: each sized exactly, created where missing."""
    targets = {}
    for path, zarr_json in grid.documents():
        meta = parse_array_meta(json.loads(zarr_json), path)
        exists = path in existing and not any(
            path == r or path.startswith(r.rstrip("/") + "/") for r in grid.replaced
        )
        targets[path] = ArrayTarget(path, zarr_json, exists, None, meta, final_shape=meta.shape)
    attributes = grid.group_attributes
    groups = {grid.spec.group: dict(attributes)} if attributes is not None else {}
    return dataclasses.replace(plan, arrays=targets, groups=groups, replaced=grid.replaced)


def _stage(df: DataFrame, plan: WritePlan, grid: Grid) -> StagedWrite:
    """Executors assemble and stage the value chunks; the coordinate chunks are staged here.

    Each row's chunk and offset are computed in the JVM (arithmetic, or a broadcast join per
    dimension with its label -> index table); rows cross to Python once, to be packed a row
    per (batch, chunk), and Spark shuffles the packed rows into whole chunks per task, about
    one chunk a task (at most ``MAX_TASKS`` tasks).
    """
    parts = max(1, min(math.prod(grid.grid_shape), MAX_TASKS))

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return packed(batches, grid)

    schema = StructType(
        [
            StructField(CHUNK_COLUMN, LongType()),
            StructField(OFFSET_COLUMN, BinaryType()),
            *[StructField(v.name, BinaryType()) for v in grid.variables],
        ]
    )
    ordered = _keyed(df, grid).mapInArrow(pack, schema).repartition(parts, CHUNK_COLUMN)
    values = stage(ordered, plan, _assembler(plan, grid))
    coordinates = _stage_coordinates(plan, grid)
    return StagedWrite(
        {**values.arrays, **coordinates.arrays}, values.attempts | coordinates.attempts
    )


def _keyed(df: DataFrame, grid: Grid) -> DataFrame:
    """The rows as ``(_chunk, _offset, values...)``: the columns ``values.assemble.keyed``
    makes in one process, here by Spark. The driver checked every label is on the grid."""
    rows = df
    chunk, offset = F.lit(0), F.lit(0)
    for axis, labels in enumerate(grid.labels):
        rows, index = _with_index(rows, labels, f"_i{axis}")
        size = grid.chunk_shape[axis]
        chunk = chunk * grid.grid_shape[axis] + F.expr(f"{index} div {size}")
        offset = offset * size + F.expr(f"{index} % {size}")
    values = [v.name for v in grid.variables]
    return rows.select(chunk.alias(CHUNK_COLUMN), offset.alias(OFFSET_COLUMN), *values)


def _with_index(rows: DataFrame, labels: Labels, index: str) -> tuple[DataFrame, str]:
    """``rows`` with each label's index in column ``index``: arithmetic on evenly spaced
    labels (daily times, regular grids), else a broadcast join with the label table."""
    step = regular_step(labels.values)
    column = F.col(labels.dim)
    if step is not None:
        first = labels.values[0]
        if labels.values.dtype.kind == "M":
            micros = F.unix_micros(column) - int(first.astype("datetime64[us]").astype(np.int64))
            position = micros / (int(step) / 1000)  # step in ns
        else:
            position = (column - float(first)) / float(step)
        # floor(x + 0.5), not round(): Spark rounds doubles through BigDecimal (slow)
        return rows.withColumn(index, F.floor(position + 0.5)), index
    table = rows.sparkSession.createDataFrame(_index_table(labels, index))
    dim_type = rows.schema[labels.dim].dataType
    joined = rows.join(
        F.broadcast(table.select(F.col(labels.dim).cast(dim_type), index)), labels.dim
    )
    return joined, index


def regular_step(values: np.ndarray) -> Any:
    """The step of evenly spaced labels (within a thousandth of a step), else ``None``."""
    if values.shape[0] < 2:
        return None
    if values.dtype.kind == "M":
        ns = values.astype("datetime64[ns]").astype(np.int64)
        steps = np.diff(ns)
        return int(steps[0]) if steps[0] > 0 and (steps == steps[0]).all() else None
    numbers = values.astype(np.float64)
    step = (numbers[-1] - numbers[0]) / (numbers.shape[0] - 1)
    expected = numbers[0] + step * np.arange(numbers.shape[0])
    return step if step > 0 and np.abs(numbers - expected).max() < step / 1000 else None


def _index_table(labels: Labels, index: str) -> pa.Table:
    """A dimension's labels and their indexes (times as UTC instants, as Spark's are)."""
    values = labels.values
    if values.dtype.kind == "M":
        column = pa.array(values.astype("datetime64[us]"), pa.timestamp("us", tz="UTC"))
    else:
        column = pa.array(values)
    return pa.table({labels.dim: column, index: pa.array(np.arange(labels.size), pa.int64())})


def _assembler(
    plan: WritePlan, grid: Grid
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A task's chunk rows from its packed rows; the snapshot the grid was planned on is
    opened only when a chunk must keep values it holds."""

    def assemble(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opened: dict[str, Any] = {}

        def read_existing(name: str, box: tuple[slice, ...]) -> np.ndarray:
            if "read" not in opened:
                opened["repo"] = repo = plan.repo.open()
                session = repo.readonly_session(snapshot_id=plan.base_snapshot)
                opened["read"] = existing_reader(session, grid.spec.group)
            return np.asarray(opened["read"](name, box))

        try:
            yield from chunk_rows(batches, grid, read_existing, packed_rows=True)
        finally:  # Python workers are reused: the task's repository is closed with it
            if "repo" in opened:
                opened["repo"].close()

    return assemble


def _stage_coordinates(plan: WritePlan, grid: Grid) -> StagedWrite:
    rows = [
        {"array": c.path, "coord": [index], "data": data}
        for c in grid.coordinates
        for index, data in c.chunks
    ]
    if not rows:
        return StagedWrite({}, frozenset())
    batch = pa.RecordBatch.from_pylist(rows, schema=CHUNK_ROWS)
    result = Stager(plan, plan.repo.storage(), "driver-coordinates").run([batch])
    return StagedWrite.of([result])


def values_batches(
    url: str, *, query_id: str | None = None, **options: Any
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function appending each micro-batch with :func:`write_values`,
    exactly once: the commit is marked with the query's id (kept in its checkpoint) and the
    batch id, so a batch replayed after its commit landed commits nothing. ``query_id``: a
    name that stays the same across the query's restarts, where Spark's own id cannot be
    read (a Spark Connect client); by default the id Spark keeps in the checkpoint.

    >>> (rows.writeStream.foreachBatch(values_batches(url, dims="time,lat,lon",
    ...     append_dim="time")).option("checkpointLocation", ckpt).start())  # doctest: +SKIP
    """
    if "once" in options or "mode" in options:
        raise InvalidInputError("values_batches sets once and mode itself (it appends)")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        query = query_id or _stream_query_id(batch)
        once = {STREAM_QUERY_KEY: query, STREAM_BATCH_KEY: int(batch_id)}
        write_values(batch, url, mode="append", once=once, **options)

    return write_batch


def _stream_query_id(batch: DataFrame) -> str:
    """The running query's id, which Spark sets on the thread calling foreachBatch."""
    try:
        query_id = batch.sparkSession.sparkContext.getLocalProperty(_QUERY_ID_PROPERTY)
    except Exception:  # a Spark Connect session has no SparkContext
        query_id = None
    if not query_id:
        raise InvalidInputError(
            "values_batches runs inside writeStream.foreachBatch only; where Spark's query id "
            "cannot be read (Spark Connect), pass query_id= a name stable across restarts"
        )
    return str(query_id)


__all__ = ["values_batches", "write_values"]

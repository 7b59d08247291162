"""The driver API for jobs too big for one process: Spark does every step.

``commit_refs(df, url)`` (virtual refs) and ``write_chunks(df, url)`` (raw chunk data) run in
the user's driver process, so every step can be a Spark job:

1. stage (``mapInArrow``): executors validate rows, write chunk data, stage refs as Parquet
   sorted by (array, coord), and emit one summary row per array they staged;
2. aggregate (``groupBy("array").applyInArrow``): Spark reduces the summaries to each array's
   ref count, coordinate bounds and the staged files holding its rows;
3. commit (driver, :mod:`.coordinator`): the core packs manifest sets and splits arrays from
   those counts, as for any commit; the pieces of split arrays go to a Spark job, one task a
   piece, that reads just the row groups of its piece with ranged reads and writes its
   manifest. The staged files are the shuffle: no ref row passes through the JVM, and no
   process holds more than one manifest's refs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from ..core import PieceRunner, PieceTask, write_piece_task
from ..errors import InvalidInputError
from ..format.structure import ManifestRef
from ..storage import Storage
from .coordinator import StagedWrite, abort_write, run_commit, staged_refs
from .plan import WritePlan, make_plan, options_from_kwargs
from .row_schema import RowKind, check_row_schema
from .staging import Stager, StageResult, attempt_name, merged_stats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class WriteOptions(TypedDict, total=False):
    """The keyword options of :func:`commit_refs` and :func:`write_chunks`: the data source's
    write options (docs/spark.md) as Python values; a missing one takes its default.

    ``branch`` (default ``"main"``), ``message``, ``metadata`` (commit metadata),
    ``storage_options``, ``mode`` (``"append"`` or ``"overwrite"``), ``arrays``
    (``{path: zarr.json dict}`` to create), ``append_dim``, ``on_conflict`` (``"fail"``,
    ``"ours"``, ``"theirs"``).
    """

    branch: str
    message: str | None
    metadata: Mapping[str, Any] | None
    storage_options: Mapping[str, Any] | None
    mode: str
    arrays: Mapping[str, Mapping[str, Any]] | None
    append_dim: str | int | None
    on_conflict: str


class RefWriteOptions(WriteOptions, total=False):
    """:func:`commit_refs` takes exact ``shapes`` and ``groups`` to create too."""

    shapes: Mapping[str, Sequence[int]] | None
    groups: Mapping[str, Mapping[str, Any]] | None


class ChunkWriteOptions(WriteOptions, total=False):
    """:func:`write_chunks` takes ``pack_chunks`` too."""

    pack_chunks: bool


def commit_refs(df: DataFrame, url: str, **options: Unpack[RefWriteOptions]) -> str | None:
    """Commit the virtual refs in ``df`` (``array``, ``coord``, ``location``, ``offset``,
    ``length``, optional ``checksum``) as one snapshot on ``branch``. A row may carry its
    chunk's stored (encoded) bytes in an optional ``inline_data`` column instead of a
    location (null otherwise): chunks a virtual import copies rather than points at.

    Options (``RefWriteOptions``): ``arrays`` declares arrays to create (``{path: zarr.json
    dict}``), ``append_dim`` grows shapes to fit the coords (to whole chunks), ``shapes``
    (``{path: shape}``) gives arrays their exact new shape instead (only growing them),
    ``mode="overwrite"`` replaces every ref of the arrays in ``df``; ``groups`` (``{path:
    attributes}``) creates missing groups. Returns the new snapshot id, or ``None`` when
    ``df`` is empty and nothing was declared.

    >>> commit_refs(refs_df, "s3://bucket/repo", message="import")      # doctest: +SKIP

    Raises:
        ConflictError: another commit changed the same chunks first (``on_conflict='fail'``).
        InvalidInputError: bad options; or (wrapped in Spark's error) a row outside its
            array's grid, of an unknown array, or pointing outside every virtual container.
        TypeError: an option it does not take.
    """
    return _run(df, url, "virtual", _checked("commit_refs", options, RefWriteOptions))


def write_chunks(df: DataFrame, url: str, **options: Unpack[ChunkWriteOptions]) -> str | None:
    """Encode and write the chunks in ``df`` (``array``, ``coord``, ``data`` = the chunk's raw
    C-order bytes in the array's dtype) and commit them as one snapshot on ``branch``.

    Options (``ChunkWriteOptions``) as for :func:`commit_refs`; ``pack_chunks`` packs each
    task's chunks into few objects. Returns the new snapshot id.

    Raises:
        ConflictError: another commit changed the same chunks first (``on_conflict='fail'``).
        InvalidInputError: as :func:`commit_refs`, and ``data`` of the wrong length.
        TypeError: an option it does not take.
    """
    return _run(df, url, "data", _checked("write_chunks", options, ChunkWriteOptions))


def _checked(function: str, options: Mapping[str, Any], takes: type) -> dict[str, Any]:
    """``options`` when ``takes`` (a ``WriteOptions`` type) names every one, as Python's own
    keyword arguments would be checked."""
    unknown = sorted(set(options) - getattr(takes, "__optional_keys__", frozenset()))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    return dict(options)


def _run(df: DataFrame, url: str, kind: RowKind, options: dict[str, Any]) -> str | None:
    mode = options.pop("mode", "append")
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    check_row_schema(to_arrow_schema(df.schema))
    plan = make_plan(options_from_kwargs(url, **options), df.columns, mode == "overwrite")
    if plan.rows != kind:
        other = "write_chunks" if plan.rows == "data" else "commit_refs"
        raise InvalidInputError(f"these rows hold {plan.rows} refs: use {other}")
    try:
        staged = stage(df, plan)
    except BaseException:
        abort_write(plan, [])
        raise
    return run_commit(plan, staged, spark_piece_runner(df.sparkSession, plan))


_SUMMARY = "attempt string, array string, count long, lo array<long>, hi array<long>, detail binary"
_REDUCED = "array string, count long, lo array<long>, hi array<long>, detail binary"
_REDUCED_ARROW = pa.schema(
    [
        ("array", pa.string()),
        ("count", pa.int64()),
        ("lo", pa.list_(pa.int64())),
        ("hi", pa.list_(pa.int64())),
        ("detail", pa.binary()),
    ]
)
_SUMMARY_ARROW = _REDUCED_ARROW.insert(0, pa.field("attempt", pa.string()))
# Turns one task's batches into the rows it stages (see ``stage``).
Prepare = Callable[[Iterator[pa.RecordBatch]], Iterable[pa.RecordBatch]]


# The summary row of a task that met bad input: its error, pickled, instead of its arrays.
_REFUSED = "\x00refused"


def stage(df: DataFrame, plan: WritePlan, prepare: Prepare | None = None) -> StagedWrite:
    """Stage every row on executors; reduce the per-task summaries per array with Spark.

    One Spark action: the staging tasks are the map side of the aggregation, so each runs
    once (a re-run attempt's files replace the failed one's, whose are swept after commit).
    ``prepare`` turns a task's batches into the rows to stage (tidy rows into chunk rows).
    Bad input a task meets comes back as a value and is raised here as it is, not wrapped
    in Spark's task failure (the first by ``InvalidInputError.order`` when several tasks
    refuse).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        attempt = attempt_name(context.partitionId(), context.taskAttemptId())
        rows = prepare(batches) if prepare is not None else batches
        try:
            result = Stager(plan, plan.repo.storage(), attempt).run(rows)
        except InvalidInputError as error:
            yield _refused_row(attempt, error)
            return
        if result.arrays:
            yield _summary_rows(result)

    reduced = df.mapInArrow(run, _SUMMARY).groupBy("array").applyInArrow(_reduce, _REDUCED)
    arrays, attempts, refused = {}, set(), []
    for row in reduced.collect():
        if row["array"] == _REFUSED:
            refused.extend(pickle.loads(row["detail"]))
            continue
        stats, files, row_attempts = pickle.loads(row["detail"])
        arrays[row["array"]] = staged_refs(row["array"], stats, files)
        attempts |= row_attempts
    if refused:
        raise min(refused, key=lambda e: getattr(e, "order", ()))
    return StagedWrite(arrays, frozenset(attempts))


def _refused_row(attempt: str, error: InvalidInputError) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "attempt": [attempt],
            "array": [_REFUSED],
            "count": [0],
            "lo": [[]],
            "hi": [[]],
            "detail": [pickle.dumps([error])],
        },
        schema=_SUMMARY_ARROW,
    )


def _summary_rows(result: StageResult) -> pa.RecordBatch:
    """One row per array an attempt staged: count and bounds, and (pickled) indices and files."""
    paths = sorted(result.arrays)
    stats = [result.arrays[p] for p in paths]
    return pa.RecordBatch.from_pydict(
        {
            "attempt": [result.attempt] * len(paths),
            "array": paths,
            "count": [s.count for s in stats],
            "lo": [s.lo.tolist() for s in stats],
            "hi": [s.hi.tolist() for s in stats],
            "detail": [pickle.dumps((s, result.files, {result.attempt})) for s in stats],
        }
    )


def _reduce(table: pa.Table) -> pa.Table:
    """The summaries of one array from every attempt, merged (runs on executors)."""
    if table.column("array")[0].as_py() == _REFUSED:
        errors = [e for d in table.column("detail").to_pylist() for e in pickle.loads(d)]
        return pa.table(
            {
                "array": [_REFUSED],
                "count": [0],
                "lo": [[]],
                "hi": [[]],
                "detail": [pickle.dumps(errors)],
            },
            schema=_REDUCED_ARROW,
        )
    details = [pickle.loads(d) for d in table.column("detail").to_pylist()]
    merged = merged_stats([stats for stats, _, _ in details])
    files = sorted({f.key: f for _, fs, _ in details for f in fs}.values(), key=lambda f: f.key)
    attempts = set().union(*(a for _, _, a in details))
    return pa.table(
        {
            "array": [table.column("array")[0].as_py()],
            "count": [merged.count],
            "lo": [merged.lo.tolist()],
            "hi": [merged.hi.tolist()],
            "detail": [pickle.dumps((merged, files, attempts))],
        }
    )


def spark_piece_runner(spark: SparkSession, plan: WritePlan) -> PieceRunner:
    """Write manifest pieces with one Spark task each, on executors (see ``core.staged_writes``)."""

    def run(tasks: Sequence[PieceTask]) -> list[ManifestRef | None]:
        if not tasks:
            return []

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            storage = plan.repo.storage()
            for batch in batches:
                for i, blob in zip(
                    batch.column("i").to_pylist(), batch.column("task").to_pylist(), strict=True
                ):
                    yield pa.RecordBatch.from_pydict(
                        {"i": [i], "manifest": [_written(storage, blob)]}
                    )

        blobs = spark.createDataFrame(
            [(i, pickle.dumps(t)) for i, t in enumerate(tasks)], "i long, task binary"
        )
        written = blobs.repartition(len(tasks)).mapInArrow(write, "i long, manifest binary")
        rows = sorted(written.collect(), key=lambda r: r["i"])  # the runner keeps task order
        results = [pickle.loads(r["manifest"]) for r in rows]
        for result in results:
            if isinstance(result, InvalidInputError):
                raise result
        return results

    return run


def _written(storage: Storage, task: bytes) -> bytes:
    """A piece task's manifest ref, or the bad-input error it raised (both pickled).

    Bad input comes back as a value, so the driver raises it as it is rather than wrapped in
    Spark's task failure, and Spark does not retry what would fail the same way again.
    Anything else (a storage error) fails the task as usual, so Spark retries it.
    """
    try:
        return pickle.dumps(write_piece_task(storage, pickle.loads(task)))
    except InvalidInputError as error:
        try:
            return pickle.dumps(error)
        except Exception:  # an error that does not pickle fails the task as it is
            raise error from None


__all__ = [
    "ChunkWriteOptions",
    "Prepare",
    "RefWriteOptions",
    "WriteOptions",
    "commit_refs",
    "spark_piece_runner",
    "stage",
    "write_chunks",
]

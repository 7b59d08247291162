"""The ``icechunk`` Spark data source: read tables of a repository, write chunk refs to it.

>>> spark.read.format("icechunk").load("s3://bucket/repo").show()          # doctest: +SKIP
>>> (df.write.format("icechunk").mode("append")                            # doctest: +SKIP
...    .option("message", "ingest").save("s3://bucket/repo"))

Instances hold only option values (they are pickled to Python workers); repositories and
storage clients are opened where they are used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from ..core import raise_if_collected
from ..errors import InvalidInputError, NotFoundError
from ..format.keys import MANIFESTS_PREFIX, object_id
from ..storage import Storage
from . import scan, tables
from .changes import ChangesReader, ChangesStreamReader, stream_table
from .coordinator import abort_write, commit_staged
from .option_names import STREAM_WRITE, WRITE, check_options, read_options
from .options import ReadTarget, RepoOptions, get, get_int, read_target, repo_options
from .plan import WritePlan, make_plan
from .row_schema import check_row_schema
from .staging import Stager, StageResult, attempt_name
from .streaming import IcechunkStreamWriter
from .values import ChunkStatsReader, ValuesReader, values_schema

NAME = "icechunk"
# No reader pushes filters down: Spark 4.3 keeps the read plan a pushdown made on the
# DataFrame's relation and reuses it for that DataFrame's (or view's) later queries that push
# nothing, so a filter of one query would silently narrow the next one (reproduced by
# tests/spark/test_values.py::test_a_filter_of_one_query_never_narrows_the_next). Narrow reads
# with options instead (arrays; for values, where), which define the DataFrame itself.


def spark_schema(table: str) -> StructType:
    """The Spark schema of one of the source's tables."""
    try:
        arrow = tables.SCHEMAS[table]
    except KeyError:
        raise InvalidInputError(
            f"option table={table!r}: choose one of "
            f"{sorted([*tables.SCHEMAS, 'values', 'chunk_stats'])}"
        ) from None
    return from_arrow_schema(arrow, prefer_timestamp_ntz=False)


class IcechunkDataSource(DataSource):
    """``format("icechunk")``: tables ``chunks`` (default), ``values`` (the arrays' elements,
    spark/values.py), ``snapshots``, ``refs``, ``sources``, ``nodes``, ``manifests``,
    ``changes`` (also as a stream); writes of virtual refs or raw chunk data."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        table = self._read_table()
        if table in ("values", "chunk_stats"):
            return values_schema(self.options, table)
        return spark_schema(table)

    def _read_table(self) -> str:
        """The table to read; its options checked (``schema`` and ``reader`` both ask)."""
        table = (get(self.options, "table") or "chunks").lower()
        check_options(self.options, read_options(table), f"reading the {table!r} table")
        return table

    def reader(self, schema: StructType) -> DataSourceReader:
        table = self._read_table()
        if table == "changes":
            return ChangesReader(self.options, checked_schema(table, schema))
        if table == "chunk_stats":
            return ChunkStatsReader(self.options, schema)
        if table == "values":
            return ValuesReader(self.options, schema)
        if table != "chunks":
            return MetadataReader(table, self.options, schema)
        return ChunksReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> IcechunkWriter:
        _refuse_values_table(self.options, "write_values(df, url, dims=...)")
        check_options(self.options, WRITE, "df.write")
        check_row_schema(to_arrow_schema(schema))
        return IcechunkWriter(make_plan(self.options, schema.fieldNames(), overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcechunkStreamWriter:
        if overwrite:
            raise InvalidInputError(
                "the icechunk stream sink appends: use outputMode('append'), not 'complete'"
            )
        _refuse_values_table(self.options, "foreachBatch(values_batches(url, dims=...))")
        check_options(self.options, STREAM_WRITE, "df.writeStream")
        check_row_schema(to_arrow_schema(schema))
        return IcechunkStreamWriter(self.options, schema.fieldNames())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The change feed of a branch (``option("table", "changes")``, see spark/changes.py)."""
        table = stream_table(self.options)  # before the schema check: says what to add
        check_options(self.options, read_options(table), "spark.readStream")
        return ChangesStreamReader(self.options, checked_schema(table, schema))


def _refuse_values_table(options: Any, instead: str) -> None:
    """Tidy rows cannot go through a Python data source's writer: see spark/values_write.py."""
    if (get(options, "table") or "").lower() == "values":
        raise InvalidInputError(
            "table=values is written from the driver, not by df.write/writeStream: a Python "
            "data source cannot have Spark shuffle its rows by chunk, and its tasks cannot "
            f"know every row's labels; use icechunk_spark.spark.{instead}"
        )


# -- reading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ChunksPartition(InputPartition):
    part: scan.ManifestPart


class ChunksReader(DataSourceReader):
    """Reads refs manifest by manifest; arrays chosen by the ``arrays`` regex option.

    Only the columns of ``schema`` are built, and only the manifest columns they need are
    read: Spark prunes no columns for Python sources, but a user may narrow the schema,
    ``spark.read.format("icechunk").schema("array string, coord array<bigint>")``.
    """

    def __init__(self, options: Any, schema: StructType) -> None:
        self._repo: RepoOptions = repo_options(options)
        self._target: ReadTarget = read_target(options)
        self._pattern: str | None = get(options, "arrays")
        self._rows_per_partition = get_int(
            options, "rows_per_partition", scan.DEFAULT_ROWS_PER_PARTITION
        )
        self._arrow_schema = checked_schema("chunks", schema)
        # Pin the snapshot now, so planning (and filter pushdown, in another worker) and
        # every partition of this plan read the same one, as MetadataReader does.
        self._snapshot = _pinned_snapshot(self._repo, self._target)

    def partitions(self) -> Sequence[InputPartition]:
        repo = self._repo.open()
        try:
            session = repo.readonly_session(snapshot_id=self._snapshot)
            arrays = scan.select_arrays(session.list_nodes(), self._pattern, None)
            parts = scan.plan_parts(repo.storage, arrays, self._rows_per_partition)
        finally:
            repo.close()
        return [_ChunksPartition(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _ChunksPartition):
            return  # no manifests: Spark plans one placeholder partition, which holds nothing
        storage = self._repo.storage()
        columns = self._arrow_schema.names
        try:
            for batch in scan.read_part(storage, partition.part, columns, ()):
                yield _conform(batch, self._arrow_schema)
        except NotFoundError as missing:
            self._explain_if_collected(storage, missing)
            raise

    def _explain_if_collected(self, storage: Storage, missing: NotFoundError) -> None:
        """A manifest gone because the pinned snapshot left the history and GC ran since the
        plan is reported as that (``SnapshotCollectedError``), not as a bare miss. (Planning
        after that opens no session on it: "snapshot ... not found; it may have been
        expired".)"""
        during = "while Spark read its chunks table"
        advice = "read the table again, at a snapshot still in the history"
        raise_if_collected(storage, [self._snapshot], missing, during, advice)


def _pinned_snapshot(repo_options: RepoOptions, target: ReadTarget) -> str:
    repo = repo_options.open()
    try:
        return target.session(repo).snapshot_id
    finally:
        repo.close()


def checked_schema(table: str, schema: StructType) -> pa.Schema:
    """``schema`` (the table's own or one the user gave) as Arrow, checked against the table.

    Raises:
        InvalidInputError: a column the table does not have, or of another type.
    """
    full = spark_schema(table)
    bad = [
        f"{f.name} {f.dataType.simpleString()}"
        for f in schema.fields
        if f.name not in full.fieldNames() or full[f.name].dataType != f.dataType
    ]
    if bad:
        offered = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in full.fields)
        raise InvalidInputError(
            f"the {table} table has no columns {bad}; a schema may name any of: {offered}"
        )
    return to_arrow_schema(schema, timezone="UTC")


@dataclass(frozen=True)
class _MetadataPartition(InputPartition):
    table: str


class MetadataReader(DataSourceReader):
    """One partition holding a small table about the repository (built where it is read)."""

    def __init__(self, table: str, options: Any, schema: StructType) -> None:
        self._table = table
        self._repo = repo_options(options)
        self._target = read_target(options)
        self._arrow_schema = checked_schema(table, schema)
        # Pin the snapshot now, so every read of this DataFrame's plan sees the same one.
        self._snapshot = _pinned_snapshot(self._repo, self._target)

    def partitions(self) -> Sequence[InputPartition]:
        return [_MetadataPartition(self._table)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        repo = self._repo.open()
        try:
            table = build_metadata_table(repo, self._table, self._snapshot)
        finally:
            repo.close()
        table = table.select(self._arrow_schema.names)  # a narrower schema the user gave
        for batch in table.to_batches(max_chunksize=65_536):
            yield _conform(batch, self._arrow_schema)


def build_metadata_table(repo: Any, table: str, snapshot_id: str) -> pa.Table:
    """``snapshots`` (ancestry of the snapshot), ``refs``, ``sources``, ``nodes`` or
    ``manifests``."""
    if table == "snapshots":
        return tables.snapshots_table(repo.ancestry(snapshot_id=snapshot_id))
    if table == "refs":
        return tables.refs_table(repo.state())
    if table == "sources":
        return repo.sources(snapshot_id=snapshot_id)
    nodes = repo.readonly_session(snapshot_id=snapshot_id).list_nodes()
    if table == "nodes":
        return tables.nodes_table(nodes)
    if table == "manifests":
        sizes = {
            object_id(i.key, MANIFESTS_PREFIX): i.size for i in repo.storage.list(MANIFESTS_PREFIX)
        }
        return tables.manifests_table(nodes, sizes)
    raise InvalidInputError(f"unknown table {table!r}")


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    # Spark checks batches against its own Arrow rendering of the schema (list field names,
    # timestamp units): cast to exactly that, which is a no-op when they already agree.
    if batch.schema.equals(schema):
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(i).cast(schema.field(i).type) for i in range(batch.num_columns)],
        schema=schema,
    )


# -- writing ------------------------------------------------------------------------------


@dataclass
class IcechunkCommitMessage(WriterCommitMessage):
    """What one task attempt staged (keys, per-array counts and coord bounds)."""

    staged: StageResult


class IcechunkWriter(DataSourceArrowWriter):
    """Executors stage refs (and write chunk data); the driver-host commit attaches them."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> IcechunkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = attempt_name(
            context.partitionId() if context else 0, context.taskAttemptId() if context else 0
        )
        stager = Stager(self.plan, self.plan.repo.storage(), attempt)
        return IcechunkCommitMessage(stager.run(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_staged(self.plan, [_staged(m) for m in messages if m is not None])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_write(self.plan, [_staged(m) for m in messages if m is not None])


def _staged(message: WriterCommitMessage) -> StageResult:
    if not isinstance(message, IcechunkCommitMessage):
        raise InvalidInputError(f"unexpected commit message {type(message).__name__}")
    return message.staged


__all__ = [
    "NAME",
    "ChunksReader",
    "IcechunkCommitMessage",
    "IcechunkDataSource",
    "IcechunkWriter",
    "MetadataReader",
    "build_metadata_table",
    "checked_schema",
    "spark_schema",
]

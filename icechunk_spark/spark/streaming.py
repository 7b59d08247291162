"""The streaming sink: every micro-batch of ``df.writeStream.format("icechunk")`` is at most
one commit, and exactly one however often Spark replays it.

Spark marks a micro-batch done in its checkpoint only *after* the sink's ``commit`` returns. A
driver killed between the two replays the batch after a restart, although its commit landed.
So the commit's once-marks (``WritePlan.once``) are the streaming query's id (stable across
restarts from one checkpoint) and the batch id, stored in the snapshot metadata, and a batch
whose pair is already in the branch's history commits nothing and deletes what the replay
wrote (``coordinator.run_commit``).

The writer object is made once per run of a query, but each batch must start from the branch
as it is when the batch runs (earlier batches moved it). So every task plans its part of the
batch itself, from the branch tip, and reports what it started from; the commit starts from
the oldest of those starts, so a concurrent commit in between is checked for conflicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..errors import Conflict, ConflictError, InvalidInputError
from ..format.ids import new_object_id
from ..repository import Repository
from .coordinator import StagedWrite, abort_write, run_commit
from .options import get, repo_options
from .plan import WritePlan, make_plan
from .staging import Stager, StageResult, attempt_name

STREAM_QUERY_KEY = "icechunk_spark.stream.query_id"
STREAM_BATCH_KEY = "icechunk_spark.stream.batch_id"
# Local properties Spark sets on every task of a micro-batch (StreamExecution.QUERY_ID_KEY,
# MicroBatchExecution.BATCH_ID_KEY): the query id is the one kept in the checkpoint.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
APPENDED_CONCURRENTLY = "array appended to while a micro-batch was written"


@dataclass(frozen=True, slots=True)
class BatchStart:
    """What one task planned its part of a micro-batch from."""

    query_id: str
    write_id: str
    base_snapshot: str
    base_generation: int
    # Per array placed ``after_end``: the chunk index its rows were counted from.
    ends: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, plan: WritePlan, query_id: str) -> BatchStart:
        ends: tuple[tuple[str, int], ...] = ()
        if plan.placement == "after_end":
            ends = tuple(
                (path, target.end_chunk())
                for path, target in sorted(plan.arrays.items())
                if target.grow_axis is not None
            )
        return cls(query_id, plan.write_id, plan.base_snapshot, plan.base_generation, ends)


@dataclass
class StreamCommitMessage(WriterCommitMessage):
    """One task attempt of a micro-batch: where it started and what it staged."""

    start: BatchStart
    staged: StageResult


class IcechunkStreamWriter(DataSourceStreamArrowWriter):
    """Executors stage each micro-batch's refs; the driver commits it once (see module doc)."""

    def __init__(self, options: Mapping[str, str], columns: Sequence[str]) -> None:
        self.options = dict(options)
        self.columns = tuple(columns)
        # Names this run's staging areas: task attempt ids start again at 0 after a restart,
        # so a replayed batch must not stage under the same names as the killed run's.
        self.run_id = new_object_id()
        make_plan(self.options, self.columns, False)  # bad options fail when the query starts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise InvalidInputError("the icechunk stream writer runs only in streaming tasks")
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise InvalidInputError("the icechunk stream writer runs only in streaming queries")
        plan = dataclasses.replace(
            make_plan(self.options, self.columns, False),
            write_id=f"{self.run_id}-{int(batch_id):06d}",
        )
        attempt = attempt_name(context.partitionId(), context.taskAttemptId())
        staged = Stager(plan, plan.repo.storage(), attempt).run(iterator)
        return StreamCommitMessage(BatchStart.of(plan, query_id), staged)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_batch(self.options, self.columns, _messages(messages), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        received = _messages(messages)
        if not received:
            return  # no task reported: its staging area is left to garbage collection
        with repo_options(self.options).opened() as repo:
            plan = batch_plan(self.options, self.columns, received, batchId, repo)
            abort_write(plan, [m.staged for m in received], repo)


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[StreamCommitMessage]:
    received = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, StreamCommitMessage):
            raise InvalidInputError(f"unexpected commit message {type(message).__name__}")
        received.append(message)
    return received


def batch_plan(
    options: Mapping[str, str],
    columns: Sequence[str],
    messages: Sequence[StreamCommitMessage],
    batch_id: int,
    repo: Repository | None = None,
) -> WritePlan:
    """The commit's plan: from the oldest start any task reported, landing once as the batch.

    Raises:
        ConflictError: tasks placed rows ``after_end`` of different array ends (another
            writer appended to the array while the batch's tasks ran).
    """
    starts = {m.start for m in messages}
    if len({(s.query_id, s.write_id) for s in starts}) != 1:
        raise InvalidInputError(f"micro-batch {batch_id}: tasks of different writes reported")
    _check_same_ends(starts, get(options, "branch") or "main")
    oldest = min(starts, key=lambda s: s.base_generation)
    plan = make_plan(options, columns, False, base_snapshot=oldest.base_snapshot, repo=repo)
    message = get(options, "message") or f"Spark stream {oldest.query_id}, batch {batch_id}"
    return dataclasses.replace(
        plan,
        write_id=oldest.write_id,
        base_generation=oldest.base_generation,
        message=message,
        once_marks=batch_marks(oldest.query_id, batch_id),
    )


def batch_marks(query_id: str, batch_id: int) -> dict[str, Any]:
    """The once-marks of a micro-batch, stored in its snapshot's metadata."""
    return {STREAM_QUERY_KEY: query_id, STREAM_BATCH_KEY: batch_id}


def _check_same_ends(starts: set[BatchStart], branch: str) -> None:
    by_array: dict[str, set[int]] = {}
    for start in starts:
        for path, end in start.ends:
            by_array.setdefault(path, set()).add(end)
    moved = sorted(path for path, ends in by_array.items() if len(ends) > 1)
    if moved:
        raise ConflictError([Conflict(path, APPENDED_CONCURRENTLY) for path in moved], branch)


def commit_batch(
    options: Mapping[str, str],
    columns: Sequence[str],
    messages: Sequence[StreamCommitMessage],
    batch_id: int,
) -> str | None:
    """Commit one micro-batch unless it already was; the snapshot id, or ``None`` if empty.

    One open repository serves the plan, the look at the history and the commit.
    """
    if not any(m.staged.files for m in messages):
        return None  # nothing staged: an empty batch makes no snapshot
    with repo_options(options).opened() as repo:
        plan = batch_plan(options, columns, messages, batch_id, repo)
        return run_commit(plan, StagedWrite.of([m.staged for m in messages]), repo=repo)


__all__ = [
    "APPENDED_CONCURRENTLY",
    "STREAM_BATCH_KEY",
    "STREAM_QUERY_KEY",
    "BatchStart",
    "IcechunkStreamWriter",
    "StreamCommitMessage",
    "batch_marks",
    "batch_plan",
    "commit_batch",
]

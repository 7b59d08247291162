"""The change feed in Spark: ``readStream`` of a branch's changes, and the ``changes`` table.

>>> (spark.readStream.format("icechunk").option("table", "changes")      # doctest: +SKIP
...     .option("starting", "earliest").load("s3://bucket/repo"))
>>> (spark.read.format("icechunk").option("table", "changes")            # doctest: +SKIP
...     .option("from", "v1").option("to", "v2").load("s3://bucket/repo"))

One implementation serves both. The driver turns offsets (stream) or ``from``/``to`` (table)
into the snapshots to read with ``feed.steps_after``, reading only the state file, and plans
one input partition per snapshot and shard; executors read each snapshot's transaction log,
structure files and manifests (``feed.snapshot_changes``). A partition carries the snapshot's
and its parent's structure file ids, so executors never look the snapshots up again.

The stream needs ``option("table", "changes")``: Spark asks a source for its schema before it
says whether it reads a batch or a stream, and a batch read without ``table`` is ``chunks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from ..core import DEFAULT_BRANCH, ManifestCache, read_latest_state
from ..errors import (
    HistoryExpiredError,
    HistoryRewrittenError,
    InvalidInputError,
    NotFoundError,
)
from ..format.state import SnapshotInfo, State
from ..ops import feed
from .options import RepoOptions, get, get_int, repo_options

TABLE = "changes"
EARLIEST = "earliest"
LATEST = "latest"
_BATCH_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class FeedOptions:
    """The options both readers share: where, which branch, how many tasks per snapshot."""

    repo: RepoOptions
    branch: str
    shards: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FeedOptions:
        if get(options, "tag") or get(options, "snapshot") or get(options, "as_of"):
            raise InvalidInputError(
                "the changes table follows a branch: use options branch, from, to (or starting "
                "for a stream), not tag, snapshot or as_of"
            )
        return cls(
            repo=repo_options(options),
            branch=get(options, "branch") or DEFAULT_BRANCH,
            shards=get_int(options, "partitions_per_snapshot", 1),
        )

    def state(self) -> State:
        return read_latest_state(self.repo.storage())

    def history(self, state: State) -> list[SnapshotInfo]:
        """The branch's first-parent history, oldest first."""
        return feed.lineage(state, state.branch(self.branch).snapshot_id)

    @property
    def where(self) -> str:
        return f"branch {self.branch!r}"


def resolve_snapshot(state: State, name: str, option: str) -> str:
    """The snapshot id a tag, branch or snapshot id names (tags first).

    Raises:
        NotFoundError: nothing of that name.
    """
    if name in state.tags():
        return state.tags()[name]
    if name in state.snapshots:
        return name
    if name in state.branches():
        return state.branches()[name]
    raise NotFoundError(
        f"option {option}={name!r} names no tag, snapshot or branch; tags: "
        f"{sorted(state.tags())}, branches: {sorted(state.branches())}"
    )


def stream_table(options: Mapping[str, str]) -> str:
    """The table a stream reads: ``changes``, the only one that changes over time.

    Raises:
        InvalidInputError: option ``table`` is not ``changes`` (or missing).
    """
    table = (get(options, "table") or "").lower()
    if table != TABLE:
        raise InvalidInputError(
            "spark.readStream.format('icechunk') streams the change feed: add "
            ".option('table', 'changes') (Spark asks for the schema before it says whether "
            f"it reads a batch or a stream; table={table or 'chunks'!r} is batch only)"
        )
    return table


@dataclass(frozen=True)
class ChangesPartition(InputPartition):
    """One snapshot's changes, or the share of them whose node id falls in ``shard``."""

    step: feed.Step
    shard: int
    shards: int


def plan(steps: Sequence[feed.Step], shards: int) -> list[ChangesPartition]:
    return [ChangesPartition(s, i, shards) for s in steps for i in range(shards)]


def read_changes(
    repo: RepoOptions, partition: InputPartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, narrowed and cast to ``schema`` (Spark's rendering)."""
    if not isinstance(partition, ChangesPartition):
        return  # no snapshots: Spark plans one placeholder partition, which holds nothing
    storage = repo.storage()
    tables = feed.iter_snapshot_changes(
        storage, ManifestCache(storage), partition.step, partition.shard, partition.shards
    )
    for table in tables:
        narrowed = table.select(schema.names).cast(schema)
        yield from narrowed.to_batches(max_chunksize=_BATCH_ROWS)


class ChangesReader(DataSourceReader):
    """The ``changes`` table: the changes of the snapshots in ``(from, to]``.

    ``from`` (default: before the first snapshot) and ``to`` (default: the branch tip) are
    resolved when the query is planned, so every partition reads the same snapshots.
    """

    def __init__(self, options: Mapping[str, str], schema: pa.Schema) -> None:
        self._options = FeedOptions.parse(options)
        self._arrow_schema = schema
        self._steps = self._pin(options)

    def _pin(self, options: Mapping[str, str]) -> list[feed.Step]:
        state = self._options.state()
        to_name, from_name = get(options, "to"), get(options, "from")
        to_id = (
            resolve_snapshot(state, to_name, "to")
            if to_name
            else state.branch(self._options.branch).snapshot_id
        )
        start = feed.BEFORE_HISTORY
        if from_name and from_name.lower() != EARLIEST:
            start = feed.Position(resolve_snapshot(state, from_name, "from"), -1)
        try:
            return feed.steps_after(state, start, to_id, f"snapshot {to_id}")
        except HistoryExpiredError:
            raise  # from is an ancestor of to; the snapshots between expired (says which)
        except HistoryRewrittenError:
            raise InvalidInputError(
                f"option from={from_name!r} is not in the history of to={to_name or to_id!r}: "
                "from must be an ancestor of to (first parents)"
            ) from None

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self._steps, self._options.shards)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_changes(self._options.repo, partition, self._arrow_schema)


class ChangesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The change feed of a branch. Offsets are ``feed.Position``s: the last snapshot read.

    Each micro-batch reads the snapshots after its start offset up to its end offset, along
    the end's first parents; a start no longer in the branch's history (the branch was reset)
    fails with ``HistoryRewrittenError`` rather than skip or repeat changes, and a batch
    across snapshots that expired with ``HistoryExpiredError``.
    """

    def __init__(self, options: Mapping[str, str], schema: pa.Schema) -> None:
        stream_table(options)
        self._options = FeedOptions.parse(options)
        self._arrow_schema = schema
        self._starting = get(options, "starting") or LATEST
        max_snapshots = get(options, "max_snapshots_per_trigger")
        self._max_snapshots = (
            get_int(options, "max_snapshots_per_trigger", 1) if max_snapshots else None
        )
        self._until: str | None = None  # Trigger.AvailableNow: the tip when it was prepared

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: after ``starting`` (a snapshot, tag, ``latest`` = the tip
        now, or ``earliest`` = before the first snapshot)."""
        if self._starting.lower() == EARLIEST:
            return feed.BEFORE_HISTORY.to_offset()
        state = self._options.state()
        line = self._options.history(state)
        if self._starting.lower() == LATEST:
            return feed.Position(line[-1].id, len(line) - 1).to_offset()
        snapshot_id = resolve_snapshot(state, self._starting, "starting")
        try:
            return feed.position_of(line, snapshot_id, self._options.where).to_offset()
        except HistoryRewrittenError:
            raise InvalidInputError(
                f"option starting={self._starting!r} is not in the history of {self._options.where}"
            ) from None

    def getDefaultReadLimit(self) -> ReadLimit:
        # "Files" are snapshots here: the one built-in limit that counts units of input.
        if self._max_snapshots is None:
            return ReadAllAvailable()
        return ReadMaxFiles(self._max_snapshots)

    def prepareForTriggerAvailableNow(self) -> None:
        state = self._options.state()
        self._until = state.branch(self._options.branch).snapshot_id

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        position = feed.Position.from_offset(start)
        line = self._options.history(self._options.state())
        where = self._options.where
        seq = -1
        if position.snapshot_id is not None:
            seq = feed.position_of(line, position.snapshot_id, where).seq
        last = len(line) - 1
        if self._until is not None:
            last = min(last, feed.position_of(line, self._until, where).seq)
        if isinstance(limit, ReadMaxFiles):
            last = min(last, seq + max(1, limit.max_files))
        if last <= seq:
            return start  # nothing new: the very same offset tells Spark so
        return feed.Position(line[last].id, last).to_offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = feed.Position.from_offset(start), feed.Position.from_offset(end)
        if last.snapshot_id is None or first.snapshot_id == last.snapshot_id:
            return []
        # Along the end's own first parents, not the branch: a batch replayed after a restart
        # reads the same snapshots even if the branch moved meanwhile.
        steps = feed.steps_after(
            self._options.state(), first, last.snapshot_id, f"snapshot {last.snapshot_id}"
        )
        return plan(steps, self._options.shards)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_changes(self._options.repo, partition, self._arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: reading holds no resources between batches


__all__ = [
    "ChangesPartition",
    "ChangesReader",
    "ChangesStreamReader",
    "FeedOptions",
    "plan",
    "read_changes",
    "resolve_snapshot",
    "stream_table",
]

"""Garbage collection while a write is in flight: its tasks have staged their refs (and written
chunk objects), the commit has not run yet, and GC runs with a cut-off of now.

GC may delete that write area (it cannot tell a live write from an abandoned one by age
alone); what it must never do is make the commit fail with a bare ``NotFoundError`` on a
staging file or land a snapshot pointing at deleted chunks. The commit sees the GC fence
newer than the state its write was planned from and stops with ``StaleSessionError`` saying
what happened and what to do; the repository stays at its previous snapshot, and running the
write again (a stream: restarting the query, which replays the batch) lands it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import Repository
from icechunk_spark.errors import StaleSessionError
from icechunk_spark.ops.gc import garbage_collect
from icechunk_spark.spark.coordinator import commit_staged
from icechunk_spark.spark.plan import make_plan, options_from_kwargs
from icechunk_spark.spark.staging import Stager
from icechunk_spark.spark.streaming import BatchStart, StreamCommitMessage, commit_batch

from .helpers import keys, new_repo

pytestmark = pytest.mark.spark

COLUMNS = ["array", "coord", "data"]
SERIES = {
    "/v": {"shape": [0], "chunk_shape": [4], "data_type": "float64", "dimension_names": ["t"]}
}


def _rows(first: int, chunks: int) -> pa.Table:
    return pa.table(
        {
            "array": ["/v"] * chunks,
            "coord": pa.array([[first + c] for c in range(chunks)], pa.list_(pa.int64())),
            "data": [np.full(4, float(first + c)).tobytes() for c in range(chunks)],
        }
    )


def _collect_now(repo: Repository) -> None:
    # GC keeps what its fence's time cannot prove older (a file time stands for a whole tick
    # of the storage's clock): let the writes age past that first.
    time.sleep(repo.storage.mtime_resolution_ms / 1000 + 0.05)
    garbage_collect(repo.handle, datetime.now(UTC) + timedelta(seconds=1))


def _values(repo: Repository) -> list[float]:
    import zarr

    array = zarr.open_array(repo.readonly_session("main").store, path="v", mode="r")
    return [float(x) for x in array[:]]


def test_a_write_whose_staging_gc_deleted_fails_stale_and_lands_when_run_again(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    options = options_from_kwargs(url, arrays=SERIES, append_dim="t")
    plan = make_plan(options, COLUMNS, overwrite=False)
    staged = Stager(plan, repo.storage, "00000-1").run(iter(_rows(0, 3).to_batches()))
    before = next(repo.ancestry()).id

    _collect_now(repo)  # between the tasks and the commit

    with pytest.raises(StaleSessionError, match="garbage collection"):
        commit_staged(plan, [staged])
    assert next(repo.ancestry()).id == before
    assert keys(repo, "staging/") == set()

    again = make_plan(options, COLUMNS, overwrite=False)
    commit_staged(
        again, [Stager(again, repo.storage, "00000-1").run(iter(_rows(0, 3).to_batches()))]
    )
    assert _values(repo) == [0.0] * 4 + [1.0] * 4 + [2.0] * 4


def test_a_stream_batch_whose_staging_gc_deleted_fails_stale_then_replays_once(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    options = {"path": url, "arrays": json.dumps(SERIES), "append_dim": "t"}
    options["placement"] = "after_end"

    def staged_batch(run: str) -> StreamCommitMessage:
        plan = dataclasses.replace(make_plan(options, COLUMNS, False), write_id=f"{run}-000000")
        staged = Stager(plan, plan.repo.storage(), "00000-0").run(iter(_rows(0, 2).to_batches()))
        return StreamCommitMessage(BatchStart.of(plan, "q"), staged)

    first = staged_batch("run1")
    before = next(repo.ancestry()).id
    _collect_now(repo)
    with pytest.raises(StaleSessionError, match="restart"):
        commit_batch(options, COLUMNS, [first], 0)
    assert next(repo.ancestry()).id == before

    # The restarted query replays batch 0: staged anew, it commits once.
    commit_batch(options, COLUMNS, [staged_batch("run2")], 0)
    assert _values(repo) == [0.0] * 4 + [1.0] * 4

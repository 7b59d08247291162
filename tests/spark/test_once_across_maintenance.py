"""Exactly-once meets maintenance: expiry and GC between a crash and the restart.

A stream's batch (or a ``df.write``'s commit) lands; Spark does not learn it did (the driver
dies first); another writer commits; old snapshots are expired and garbage collected; then the
batch is replayed. It must commit nothing: the branch still answers for it through the marks
expiry carried forward (``landed_once``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import Repository
from icechunk_spark.ops.gc import garbage_collect
from icechunk_spark.ops.history import expire_snapshots
from icechunk_spark.spark.coordinator import commit_staged
from icechunk_spark.spark.plan import make_plan, options_from_kwargs
from icechunk_spark.spark.staging import Stager

from .helpers import keys, new_repo, referenced_chunk_objects
from .test_streaming import (
    file_values,
    forget_batch_done,
    newest_entry,
    run_stream,
    series,
    write_batch_file,
)

pytestmark = pytest.mark.spark


def _maintain(repo: Repository) -> frozenset[str]:
    """Expire every snapshot but the tips, then collect everything unreachable: cut-off now."""
    now = datetime.now(UTC) + timedelta(seconds=1)
    expired = expire_snapshots(repo.handle, now)
    garbage_collect(repo.handle, now)
    return expired


def _another_writer(repo: Repository) -> str:
    session = repo.writable_session("main")
    session.create_group("/other")
    return session.commit("another writer")


def test_a_replayed_batch_after_expiry_and_gc_is_not_appended_again(
    spark: Any, tmp_path: Path
) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    for number in range(2):
        write_batch_file(folder, number)
    run_stream(spark, folder, url, checkpoint)
    batch_one = next(repo.ancestry(branch="main")).id

    forget_batch_done(checkpoint, 1)  # the driver died between our commit and Spark's log
    _another_writer(repo)
    assert batch_one in _maintain(repo)  # batch 1's snapshot is gone from the history

    run_stream(spark, folder, url, checkpoint)  # the restart replays batch 1
    assert newest_entry(checkpoint, "commits") == 1  # Spark did run it again
    np.testing.assert_array_equal(series(repo), np.concatenate([file_values(0), file_values(1)]))
    assert next(i.message for i in repo.ancestry(branch="main")) == "another writer"
    assert keys(repo, "staging/") == set()
    assert keys(repo, "c/") == referenced_chunk_objects(repo)  # the replay's objects are gone


def test_a_retried_write_commit_after_expiry_and_gc_lands_once(tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    session = repo.writable_session("main")
    session.create_array("/a", (8,), (4,), "float64")
    session.commit("array")
    plan = make_plan(options_from_kwargs(url), ["array", "coord", "data"], overwrite=False)
    rows = pa.table(
        {
            "array": ["/a"],
            "coord": pa.array([[1]], pa.list_(pa.int64())),
            "data": [np.full(4, 7.0).tobytes()],
        }
    )
    first = Stager(plan, repo.storage, "00000-1").run(iter(rows.to_batches()))
    landed = commit_staged(plan, [first])
    tip = _another_writer(repo)
    assert landed in _maintain(repo)

    # Spark retries the job's commit (its first answer was lost): the same write id again.
    again = Stager(plan, repo.storage, "00000-2").run(iter(rows.to_batches()))
    assert commit_staged(plan, [again]) == tip
    assert next(repo.ancestry(branch="main")).id == tip
    assert keys(repo, "staging/") == set()
    assert keys(repo, "c/") == referenced_chunk_objects(repo)

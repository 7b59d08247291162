"""A clone copied by Spark tasks (jobs/clone.py's copier) equals the source object by object,
and a clone whose Spark job died part-way resumes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from icechunk_spark import Repository
from icechunk_spark.ops.clone import clone
from icechunk_spark.spark.clone import spark_copier
from icechunk_spark.storage import open_storage
from tests.test_clone_export import same_repository, with_history

pytestmark = pytest.mark.spark


def test_a_clone_copied_on_executors_equals_the_source(spark: Any, tmp_path: Path) -> None:
    src, dst = (tmp_path / "src").as_uri(), (tmp_path / "dst").as_uri()
    source, destination = open_storage(src), open_storage(dst)
    with_history(source, chunks=100)
    copier = spark_copier(spark, (src, {}), (dst, {}))

    def dies_half_way(batches):  # the job fails after its first half of tasks
        half = len(batches) // 2
        yield from copier(batches[:half])
        raise RuntimeError("executor lost (injected)")

    with pytest.raises(RuntimeError, match="injected"):
        clone(source, destination, copier=dies_half_way)
    assert not Repository.exists(destination)
    summary = clone(source, destination, copier=copier)
    assert summary.objects_already_there > 0 and summary.objects_copied > 0
    same_repository(source, destination)


def test_a_clone_on_executors_copies_the_newer_state_after_gc_deleted_listed_files(
    spark: Any, tmp_path: Path
) -> None:
    """Expiry and GC on the source between the driver's listing and the tasks' copies: the
    tasks report the deleted files, and the clone copies the state after the collection
    (tests/trust/test_clone_during_maintenance.py for the threaded copier)."""
    src, dst = (tmp_path / "src").as_uri(), (tmp_path / "dst").as_uri()
    source, destination = open_storage(src), open_storage(dst)
    repo = with_history(source, chunks=8)
    repo.delete_tag("v1")
    repo.delete_branch("dev")
    copier = spark_copier(spark, (src, {}), (dst, {}))
    maintained: list[str] = []

    def collected_after_the_listing(batches):  # type: ignore[no-untyped-def]
        if not maintained:  # once: a collection every round would never let it finish
            maintained.extend(repo.expire_snapshots(datetime.now(UTC)))
            time.sleep(0.02)
            repo.garbage_collect(datetime.now(UTC))
        yield from copier(batches)

    summary = clone(source, destination, copier=collected_after_the_listing)
    assert maintained, "the expiry removed nothing: the test would not test"
    copy = Repository.open(destination)
    assert not set(maintained) & set(copy.state().snapshots)
    assert summary.generation == repo.state().generation
    for snapshot_id in copy.state().snapshots:  # every listed snapshot reads in full
        session = copy.readonly_session(snapshot_id=snapshot_id)
        if session.find_node("/t") is not None:
            assert session.get_chunk("/t", (0,)) is not None

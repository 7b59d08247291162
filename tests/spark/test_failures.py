"""Failures: bad rows, failed jobs, task retries, concurrent jobs and conflicts."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import ConflictError, Repository
from icechunk_spark.spark import commit_refs
from icechunk_spark.spark.coordinator import commit_staged
from icechunk_spark.spark.plan import make_plan, options_from_kwargs
from icechunk_spark.spark.staging import Stager

from .helpers import keys, new_repo, referenced_chunk_objects

pytestmark = pytest.mark.spark

CONTAINER = "file:///data/"
DATA_SCHEMA = "array string, coord array<bigint>, data binary"
REF_SCHEMA = "array string, coord array<bigint>, location string, offset bigint, length bigint"


def setup_repo(tmp_path: Path) -> tuple[str, Repository]:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url, config={"virtual_chunk_containers": {CONTAINER: {}}})
    session = repo.writable_session("main")
    for name in ("a", "b"):
        session.create_array(f"/{name}", (4, 4), (2, 2), "float32")  # 16-byte chunks: inline
        session.create_array(f"/big_{name}", (64, 64), (32, 32), "float32")  # 4 KiB: objects
    session.commit("arrays")
    return url, repo


def chunk(value: float, n: int = 4) -> bytes:
    return np.full(n, value, "<f4").tobytes()


def save(df: Any, url: str, **options: str) -> None:
    writer = df.write.format("icechunk").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(url)


BAD_ROWS = {
    "outside the grid": (
        DATA_SCHEMA,
        [("/a", [0, 0], chunk(1)), ("/a", [2, 0], chunk(2))],
        "'/a' at coord (2, 0)",
    ),
    "unknown array": (DATA_SCHEMA, [("/nope", [0, 0], chunk(1))], "'/nope' at coord (0, 0)"),
    "wrong data length": (
        DATA_SCHEMA,
        [("/a", [1, 1], chunk(1, n=3))],
        "'/a' at coord (1, 1): 'data' has 12 bytes",
    ),
    "location outside containers": (
        REF_SCHEMA,
        [("/a", [1, 0], "file:///elsewhere/x.bin", 0, 16)],
        "'/a' at coord (1, 0)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_rows_fail_the_job_and_commit_nothing(spark: Any, tmp_path: Path, case: str) -> None:
    url, repo = setup_repo(tmp_path)
    schema, rows, message = BAD_ROWS[case]
    # A second partition of good rows writes chunk objects before the job fails.
    good = [("/big_a", [0, 0], chunk(5, 32 * 32))] if schema == DATA_SCHEMA else []
    tip = repo.lookup_branch("main")
    df = spark.createDataFrame(rows, schema).union(spark.createDataFrame(good, schema))
    with pytest.raises(Exception, match="row for array") as failure:
        save(df.repartition(2), url)
    assert message in str(failure.value)
    assert repo.lookup_branch("main") == tip
    assert keys(repo, "staging/") == set()
    assert keys(repo, "c/") == set()


def test_bad_rows_fail_the_driver_api_too(spark: Any, tmp_path: Path) -> None:
    url, repo = setup_repo(tmp_path)
    tip = repo.lookup_branch("main")
    df = spark.createDataFrame([("/a", [0, 7], f"{CONTAINER}x", 0, 16)], REF_SCHEMA)
    with pytest.raises(Exception, match=r"'/a' at coord \(0, 7\)"):
        commit_refs(df, url)
    assert repo.lookup_branch("main") == tip
    assert keys(repo, "staging/") == set()


def fail_first_attempt(
    after_batches: int,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if i == after_batches and context.partitionId() == 0 and context.attemptNumber() == 0:
                raise RuntimeError("injected failure of the first attempt")
            yield batch

    return run


def test_task_retry_neither_duplicates_nor_loses_refs(
    spark: Any, sql_conf: Any, tmp_path: Path
) -> None:
    url, repo = setup_repo(tmp_path)
    sql_conf({"spark.sql.execution.arrow.maxRecordsPerBatch": "2"})
    rows = [("/big_a", [i, j], chunk(i * 2 + j, 32 * 32)) for i in range(2) for j in range(2)]
    rows += [("/a", [i, j], chunk(10 + i * 2 + j)) for i in range(2) for j in range(2)]
    df = spark.createDataFrame(rows, DATA_SCHEMA).coalesce(1)
    # The first attempt stages two batches (stage_rows=1 flushes each) and writes chunk
    # objects, then dies; the second attempt does it all again.
    df = df.mapInArrow(fail_first_attempt(after_batches=2), df.schema)
    save(df, url, stage_rows="1", pack_chunks="true")

    session = repo.readonly_session("main")
    for path, base in (("/big_a", 0), ("/a", 10)):
        refs = session.chunk_refs(path)
        assert refs.num_rows == 4
        for i in range(2):
            for j in range(2):
                data = session.get_chunk(path, (i, j))
                n = 32 * 32 if path == "/big_a" else 4
                assert np.frombuffer(data, "<f4").tolist() == [base + i * 2 + j] * n
    assert keys(repo, "staging/") == set()
    assert keys(repo, "c/") == referenced_chunk_objects(repo)


def test_commit_sweeps_chunks_of_attempts_that_died(tmp_path: Path) -> None:
    """An attempt killed without cleaning up leaves journaled chunk objects: commit deletes them."""
    url, repo = setup_repo(tmp_path)
    options = options_from_kwargs(url)
    plan = make_plan(options, ["array", "coord", "data"], overwrite=False)
    batch = pa.table(
        {
            "array": ["/big_a"],
            "coord": pa.array([[0, 1]], pa.list_(pa.int64())),
            "data": [chunk(1, 32 * 32)],
        }
    )
    dead = Stager(plan, repo.storage, "00000-1")
    dead.add(batch)  # wrote a chunk object, then "died": no discard, no result
    assert len(keys(repo, "c/")) == 1
    alive = Stager(plan, repo.storage, "00000-2").run(iter([batch]))
    commit_staged(plan, [alive])
    assert keys(repo, "c/") == referenced_chunk_objects(repo)
    assert len(keys(repo, "c/")) == 1
    assert keys(repo, "staging/") == set()


def meet(
    barrier: Path, parties: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A task that waits until ``parties`` tasks have started: every job has planned (and picked
    its base snapshot) before any job commits, however slow the host. Never a deadlock: a task
    gives up waiting after two minutes, and the test's assertions then say what happened."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        (barrier / uuid.uuid4().hex).touch()
        deadline = time.monotonic() + 120
        while len(list(barrier.iterdir())) < parties and time.monotonic() < deadline:
            time.sleep(0.05)
        yield from batches

    return run


def run_concurrently(jobs: list[Callable[[], None]]) -> list[BaseException | None]:
    errors: list[BaseException | None] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            jobs[i]()
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def barrier_df(spark: Any, barrier: Path, rows: list[tuple], schema: str = DATA_SCHEMA) -> Any:
    """One task for ``rows`` that starts its work only when the other job's task has started."""
    barrier.mkdir(exist_ok=True)
    df = spark.createDataFrame(rows, schema).coalesce(1)
    return df.mapInArrow(meet(barrier, 2), df.schema)


def test_concurrent_jobs_on_different_arrays_both_land(spark: Any, tmp_path: Path) -> None:
    url, repo = setup_repo(tmp_path)
    tip = repo.lookup_branch("main")
    jobs = [
        lambda name=name: save(
            barrier_df(spark, tmp_path / "barrier", [(f"/{name}", [0, 0], chunk(1))]),
            url,
            message=name,
        )
        for name in ("a", "b")
    ]
    assert run_concurrently(jobs) == [None, None]
    history = [s.message for s in repo.ancestry(branch="main")]
    assert sorted(history[:2]) == ["a", "b"] and repo.lookup_snapshot(tip).message == history[2]
    session = repo.readonly_session("main")
    assert session.get_chunk("/a", (0, 0)) == session.get_chunk("/b", (0, 0)) == chunk(1)


def test_concurrent_jobs_on_the_same_chunk_conflict(spark: Any, tmp_path: Path) -> None:
    url, repo = setup_repo(tmp_path)
    jobs = [
        lambda v=v: save(
            barrier_df(spark, tmp_path / "barrier", [("/a", [1, 1], chunk(v))]), url, message=str(v)
        )
        for v in (1, 2)
    ]
    errors = run_concurrently(jobs)
    failed = [e for e in errors if e is not None]
    assert len(failed) == 1
    assert "ConflictError" in str(failed[0]) and "'/a'" in str(failed[0])
    winner = errors.index(None) + 1
    assert repo.readonly_session("main").get_chunk("/a", (1, 1)) == chunk(winner)
    assert keys(repo, "staging/") == set()


def test_conflict_resolved_by_on_conflict(spark: Any, tmp_path: Path) -> None:
    url, repo = setup_repo(tmp_path)
    rows = [("/a", [0, 1], f"{CONTAINER}{v}.bin", 0, 16) for v in ("x", "y")]
    jobs = [
        lambda row=row: commit_refs(
            barrier_df(spark, tmp_path / "barrier", [row], REF_SCHEMA), url, on_conflict="ours"
        )
        for row in rows
    ]
    assert run_concurrently(jobs) == [None, None]
    assert len(list(repo.ancestry(branch="main"))) == 5


def test_conflict_through_the_driver_api_is_a_conflict_error(spark: Any, tmp_path: Path) -> None:
    url, repo = setup_repo(tmp_path)
    rows = [("/a", [0, 1], f"{CONTAINER}{v}.bin", 0, 16) for v in ("x", "y")]
    jobs = [
        lambda row=row: commit_refs(barrier_df(spark, tmp_path / "barrier", [row], REF_SCHEMA), url)
        for row in rows
    ]
    errors = run_concurrently(jobs)
    assert sum(isinstance(e, ConflictError) for e in errors) == 1
    assert errors.count(None) == 1
    assert json.dumps(sorted(keys(repo, "staging/"))) == "[]"

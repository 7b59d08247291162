"""``df.writeStream.format("icechunk")``: one commit per micro-batch, exactly once."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from icechunk_spark import Repository
from icechunk_spark.core.requirements import AssertNotCommitted
from icechunk_spark.errors import InvalidInputError
from icechunk_spark.spark import coordinator
from icechunk_spark.spark.plan import make_plan
from icechunk_spark.spark.staging import Stager
from icechunk_spark.spark.streaming import (
    STREAM_BATCH_KEY,
    STREAM_QUERY_KEY,
    BatchStart,
    StreamCommitMessage,
    batch_marks,
    commit_batch,
)

from .helpers import keys, new_repo, referenced_chunk_objects

pytestmark = pytest.mark.spark

CHUNK = 4
SERIES = {
    "/v": {
        "shape": [0],
        "chunk_shape": [CHUNK],
        "data_type": "float64",
        "dimension_names": ["t"],
        "fill_value": -1.0,
    }
}
ROW_SCHEMA = "array string, coord array<bigint>, data binary"


def file_values(number: int, chunks: int = 2) -> np.ndarray:
    """The values file ``number`` appends: unique to the file, so a duplicate shows."""
    return number * 100 + np.arange(chunks * CHUNK, dtype="float64")


def write_batch_file(folder: Path, number: int, chunks: int = 2, first_chunk: int = 0) -> None:
    """One file of rows: ``chunks`` chunks of ``/v`` from coord ``first_chunk`` (0: for
    ``placement=after_end``, which counts from the array's end)."""
    values = file_values(number, chunks)
    table = pa.table(
        {
            "array": ["/v"] * chunks,
            "coord": [[first_chunk + c] for c in range(chunks)],
            "data": [values[c * CHUNK : (c + 1) * CHUNK].tobytes() for c in range(chunks)],
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"batch-{number:04d}.parquet"
    pq.write_table(table, path)
    # The file source takes the oldest files first: make the order the numbering.
    os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))


def start_stream(spark: Any, folder: Path, url: str, checkpoint: Path, **options: str) -> Any:
    stream = (
        spark.readStream.schema(ROW_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder))
        .writeStream.format("icechunk")
        .option("checkpointLocation", str(checkpoint))
        .option("arrays", json.dumps(SERIES))
        .option("append_dim", "t")
        .option("placement", "after_end")
    )
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.trigger(availableNow=True).start(url)


def run_stream(spark: Any, folder: Path, url: str, checkpoint: Path, **options: str) -> Any:
    query = start_stream(spark, folder, url, checkpoint, **options)
    query.awaitTermination()
    return query


def stream_commits(repo: Repository) -> list[tuple[str, int]]:
    """(query id, batch id) of every stream commit on main, oldest first."""
    return [
        (info.metadata[STREAM_QUERY_KEY], info.metadata[STREAM_BATCH_KEY])
        for info in reversed(list(repo.ancestry(branch="main")))
        if STREAM_QUERY_KEY in info.metadata
    ]


def forget_batch_done(checkpoint: Path, batch: int) -> None:
    """Remove the checkpoint's record that ``batch`` is done (and Hadoop's checksum of it)."""
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)


def series(repo: Repository) -> np.ndarray:
    session = repo.readonly_session("main")
    return zarr.open_array(session.store, path="v", mode="r")[:]


def test_each_micro_batch_is_one_commit_placed_after_the_end(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    folder = tmp_path / "in"
    for number in range(3):
        write_batch_file(folder, number)

    query = run_stream(spark, folder, url, tmp_path / "ck", message="feed")

    repo = Repository.open(url)
    commits = stream_commits(repo)
    assert commits == [(str(query.id), 0), (str(query.id), 1), (str(query.id), 2)]
    assert next(repo.ancestry(branch="main")).message == "feed"
    np.testing.assert_array_equal(series(repo), np.concatenate([file_values(n) for n in range(3)]))
    assert keys(repo, "staging/") == set()

    # New files later: the same query (same checkpoint) appends only them.
    write_batch_file(folder, 3, chunks=1)
    run_stream(spark, folder, url, tmp_path / "ck")
    assert stream_commits(repo)[-1] == (str(query.id), 3)
    np.testing.assert_array_equal(
        series(repo), np.concatenate([file_values(n) for n in range(3)] + [file_values(3, 1)])
    )


def test_a_replayed_batch_commits_nothing(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    for number in range(2):
        write_batch_file(folder, number)
    run_stream(spark, folder, url, checkpoint)
    history = [info.id for info in repo.ancestry(branch="main")]
    chunk_objects = keys(repo, "c/")

    # What a driver killed after the commit landed, before Spark recorded it, leaves behind:
    # the batch's offsets are in the checkpoint, its commit entry is not. Spark replays it.
    forget_batch_done(checkpoint, 1)
    run_stream(spark, folder, url, checkpoint)

    assert [info.id for info in repo.ancestry(branch="main")] == history
    np.testing.assert_array_equal(series(repo), np.concatenate([file_values(n) for n in range(2)]))
    assert keys(repo, "c/") == chunk_objects  # the replay's chunk objects are gone again
    assert keys(repo, "staging/") == set()
    assert (checkpoint / "commits" / "1").exists()


def test_absolute_coords_append_like_the_batch_writer(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    folder = tmp_path / "in"
    rows = pa.table(
        {
            "array": ["/v", "/v"],
            "coord": [[3], [5]],
            "data": [np.full(CHUNK, 3.0).tobytes(), np.full(CHUNK, 5.0).tobytes()],
        }
    )
    folder.mkdir()
    pq.write_table(rows, folder / "rows.parquet")
    run_stream(spark, folder, url, tmp_path / "ck", placement="absolute")
    values = series(repo)
    assert values.shape == (6 * CHUNK,)
    np.testing.assert_array_equal(values[3 * CHUNK : 4 * CHUNK], 3.0)
    np.testing.assert_array_equal(values[: 3 * CHUNK], -1.0)


def test_a_batch_placing_two_rows_at_one_coord_fails_and_commits_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """Two rows counted from the end to the same chunk: neither may win by chance."""
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    folder = tmp_path / "in"
    write_batch_file(folder, 0)
    run_stream(spark, folder, url, tmp_path / "ck")
    tip, before = repo.lookup_branch("main"), series(repo)
    chunk_objects = keys(repo, "c/")
    rows = pa.table(
        {
            "array": ["/v"] * 3,
            "coord": [[0], [1], [1]],
            "data": [np.full(CHUNK, float(v)).tobytes() for v in (7, 8, 9)],
        }
    )
    pq.write_table(rows, folder / "batch-0001.parquet")
    message = "row for array '/v' at coord (3,): given more than once in one write"
    with pytest.raises(Exception, match=re.escape(message)):
        run_stream(spark, folder, url, tmp_path / "ck")
    assert repo.lookup_branch("main") == tip
    np.testing.assert_array_equal(series(repo), before)
    assert keys(repo, "c/") == chunk_objects
    assert keys(repo, "staging/") == set()


def test_bad_options_fail_when_the_query_starts(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    folder = tmp_path / "in"
    write_batch_file(folder, 0)
    with pytest.raises(Exception, match="placement=after_end needs option append_dim") as info:
        (
            spark.readStream.schema(ROW_SCHEMA)
            .parquet(str(folder))
            .writeStream.format("icechunk")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .option("arrays", json.dumps(SERIES))
            .option("placement", "after_end")
            .trigger(availableNow=True)
            .start(url)
            .awaitTermination()
        )
    assert "InvalidInputError" in str(info.value) or isinstance(info.value, InvalidInputError)


DRIVER = Path(__file__).with_name("stream_driver.py")


def start_driver(
    url: str, folder: Path, checkpoint: Path, mode: str, log: Path, placement: str
) -> Any:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    args = [sys.executable, str(DRIVER), url, str(folder), str(checkpoint)]
    with log.open("ab") as out:
        # A session of its own, so one killpg takes the JVM and its Python workers too.
        return subprocess.Popen(
            [*args, json.dumps(SERIES), mode, placement],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_for_new_commit(
    repo: Repository, seen: int, process: Any, timeout: float, log: Path, done: Any
) -> None:
    deadline = time.monotonic() + timeout
    while len(stream_commits(repo)) <= seen and process.poll() is None and not done():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-5000:]
            raise AssertionError(f"no micro-batch committed within {timeout} s; driver:\n{tail}")
        time.sleep(0.05)


def newest_entry(checkpoint: Path, log: str) -> int | None:
    """The newest batch id in the checkpoint's ``offsets`` or ``commits`` log."""
    entries = [int(p.name) for p in (checkpoint / log).glob("*") if p.name.isdigit()]
    return max(entries, default=None)


@pytest.mark.slow
def test_a_killed_driver_restarted_from_its_checkpoint_appends_every_batch_exactly_once(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("ICECHUNK_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"kill test seed {seed} (ICECHUNK_KILL_SEED={seed} repeats its kill points)")
    files = 6
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    folder, checkpoint, log = tmp_path / "in", tmp_path / "ck", tmp_path / "driver.log"
    sizes = [1 + n % 2 for n in range(files)]
    # Absolute coords: after a crash Spark may put two files in one micro-batch (a file the
    # killed run logged as its next batch joins the one after), and rows placed after_end
    # are one block per batch, so two files would land on the same coords.
    starts = np.cumsum([0, *sizes[:-1]])
    for number, (chunks, first) in enumerate(zip(sizes, starts, strict=True)):
        write_batch_file(folder, number, chunks, first_chunk=int(first))
    expected = np.concatenate([file_values(n, c) for n, c in enumerate(sizes)])

    def all_landed() -> bool:
        return bool(stream_commits(repo)) and series(repo).shape == expected.shape

    # One driver killed at a random point of a later batch, then one run to the end, which
    # replays the batch the kill interrupted: committed once whether or not its commit landed
    # before the kill. (Each driver start costs ~30 s of CI: two, not three. A replay of a
    # batch whose commit landed, for certain, is test_a_replayed_batch_commits_nothing's.)
    seen = len(stream_commits(repo))
    driver = start_driver(url, folder, checkpoint, "forever", log, "absolute")
    try:
        wait_for_new_commit(repo, seen, driver, timeout=300, log=log, done=all_landed)
        # Spark logs the batch as done a little after its commit lands (under load, more than
        # 0.1 s): the kill is meant for a later batch, so wait for that entry first.
        deadline = time.monotonic() + 60
        while newest_entry(checkpoint, "commits") is None and driver.poll() is None:
            assert time.monotonic() < deadline, "Spark never logged the first batch as done"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))  # a random point in a later batch
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    done = newest_entry(checkpoint, "commits")
    planned = newest_entry(checkpoint, "offsets")
    assert done is not None and planned is not None
    if planned == done:
        # Killed between batches: make it the narrowest window instead, after the commit
        # landed and before Spark logged the batch as done (milliseconds in real life).
        forget_batch_done(checkpoint, done)
    landed_before_kill = planned in {batch for _, batch in stream_commits(repo)}
    final = start_driver(url, folder, checkpoint, "available_now", log, "absolute")
    assert final.wait(timeout=300) == 0, log.read_text()[-5000:]
    assert (checkpoint / "commits" / str(planned)).exists()  # Spark did run it again

    commits = stream_commits(repo)
    how = "after its commit landed" if landed_before_kill else "before its commit landed"
    print(f"seed {seed}: {files} files, killed in batch {planned} {how}; it was replayed")
    print("batches committed, in order:", commits)
    assert len({query for query, _ in commits}) == 1  # one query across every restart
    # Every batch committed once: a replay committing again would repeat its batch id.
    assert [batch for _, batch in commits] == list(range(len(commits)))
    np.testing.assert_array_equal(series(repo), expected)


def committed_batch(repo: Repository, branch: str, query_id: str, batch_id: int) -> str | None:
    """The look a batch commit takes first (``coordinator.landed_already``)."""
    return AssertNotCommitted(branch, batch_marks(query_id, batch_id)).landed(repo.state())


def test_committed_batch_finds_the_pair_on_its_branch_only(tmp_path: Path) -> None:
    repo = new_repo((tmp_path / "repo").as_uri())
    for query, batch in (("q1", 0), ("q2", 0), ("q1", 1), ("q1", 2)):
        session = repo.writable_session("main")
        session.create_group(f"/{query}-{batch}")
        session.commit("batch", {STREAM_QUERY_KEY: query, STREAM_BATCH_KEY: batch})
    tip = next(repo.ancestry(branch="main")).id
    assert committed_batch(repo, "main", "q1", 2) == tip
    assert committed_batch(repo, "main", "q2", 0) is not None
    assert committed_batch(repo, "main", "q1", 3) is None
    assert committed_batch(repo, "main", "q3", 0) is None
    assert committed_batch(repo, "main", "q1", 0) is not None
    assert committed_batch(repo, "other", "q1", 2) is None  # no such branch: nothing landed


def test_a_batch_landing_after_our_look_at_the_history_is_still_committed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    options = {"path": url, "arrays": json.dumps(SERIES), "append_dim": "t"}
    options["placement"] = "after_end"
    columns = ["array", "coord", "data"]

    def staged_batch_zero(run: str) -> StreamCommitMessage:
        """One task of batch 0 of query ``q``, staged by the run of a driver named ``run``."""
        plan = dataclasses.replace(make_plan(options, columns, False), write_id=f"{run}-000000")
        rows = pa.table({"array": ["/v"], "coord": [[0]], "data": [file_values(0, 1).tobytes()]})
        staged = Stager(plan, plan.repo.storage(), "00000-0").run(rows.to_batches())
        return StreamCommitMessage(BatchStart.of(plan, "q"), staged)

    # Two drivers of one query staged batch 0, and each looked at the history before the
    # other committed: only the check inside the commit's compare-and-swap can stop one.
    first, second = staged_batch_zero("run1"), staged_batch_zero("run2")
    monkeypatch.setattr(coordinator, "landed_already", lambda *args: None)
    landed = commit_batch(options, columns, [first], 0)
    assert commit_batch(options, columns, [second], 0) == landed

    assert stream_commits(repo) == [("q", 0)]
    np.testing.assert_array_equal(series(repo), file_values(0, 1))
    assert keys(repo, "staging/") == set()
    assert keys(repo, "c/") == referenced_chunk_objects(repo)  # the loser's objects are gone


def test_a_batch_commit_opens_the_repository_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task plans from the branch tip (one open each); the commit opens it once more:
    planning from the tasks' starts, the look at the history and the commit share it."""
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    options = {"path": url, "arrays": json.dumps(SERIES), "append_dim": "t"}
    options["placement"] = "after_end"
    columns = ["array", "coord", "data"]
    opens: list[str] = []
    real_open = Repository.open.__func__  # type: ignore[attr-defined]

    def counting_open(cls: type[Repository], *args: Any, **kwargs: Any) -> Repository:
        opens.append("open")
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(Repository, "open", classmethod(counting_open))

    def staged_task(partition: int) -> StreamCommitMessage:
        plan = dataclasses.replace(make_plan(options, columns, False), write_id="run-000000")
        rows = pa.table(
            {"array": ["/v"], "coord": [[partition]], "data": [file_values(partition, 1).tobytes()]}
        )
        staged = Stager(plan, plan.repo.storage(), f"{partition:05d}-0").run(rows.to_batches())
        return StreamCommitMessage(BatchStart.of(plan, "q"), staged)

    tasks = [staged_task(p) for p in range(3)]
    assert len(opens) == len(tasks)
    opens.clear()

    commit_batch(options, columns, tasks, 0)
    commit_opens = len(opens)
    assert stream_commits(Repository.open(url)) == [("q", 0)]
    assert commit_opens == 1

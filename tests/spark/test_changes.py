"""The change feed: ``readStream`` of a branch and the ``changes`` table give the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from icechunk_spark import Repository
from icechunk_spark.format.keys import txlog_key
from icechunk_spark.format.txlog import ChangeKind, decode_txlog

from .helpers import new_repo

pytestmark = pytest.mark.spark

COLUMNS = ["snapshot", "seq", "change", "path", "coord", "kind", "location", "offset", "length"]


def rows_of(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in COLUMNS) for r in rows]


def table(spark: Any, url: str, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format("icechunk").option("table", "changes")
    for key, value in options.items():
        reader = reader.option(key, value)
    return rows_of(reader.load(url).collect())


def stream(spark: Any, url: str, checkpoint: Path, **options: str) -> list[list[tuple[Any, ...]]]:
    """Run the feed once with ``Trigger.AvailableNow``; the rows of each micro-batch."""
    batches: dict[int, list[tuple[Any, ...]]] = {}

    def collect(df: Any, batch_id: int) -> None:
        batches[batch_id] = rows_of(df.collect())

    reader = spark.readStream.format("icechunk").option("table", "changes")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(url)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return [batches[i] for i in sorted(batches)]


def write(repo: Repository, chunks: dict[tuple[int, int], int], delete: tuple = ()) -> str:
    session = repo.writable_session("main")
    if "/a" not in {n.path for n in session.list_nodes()}:
        session.create_array("/a", shape=(4, 4), chunk_shape=(2, 2), dtype="uint8")
    for coord, value in chunks.items():
        session.set_chunk("/a", coord, bytes([value]) * 4)
    for coord in delete:
        session.delete_chunk("/a", coord)
    return session.commit("write")


def test_stream_resumes_from_its_checkpoint_and_equals_the_table(
    spark: Any, tmp_path: Path
) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    first = write(repo, {(0, 0): 1, (1, 1): 2})
    checkpoint = tmp_path / "checkpoint"

    # One snapshot per micro-batch: the root (no log), the root group, the first write.
    seen = stream(spark, url, checkpoint, starting="earliest", max_snapshots_per_trigger="1")
    assert [sorted({r[1] for r in b}) for b in seen] == [[], [1], [2]]  # the root has no log
    assert [(r[2], r[3], r[4]) for r in seen[2]] == [
        ("new_array", "/a", None),
        ("set", "/a", [0, 0]),
        ("set", "/a", [1, 1]),
    ]

    second = write(repo, {(0, 0): 3}, delete=((1, 1),))
    third = write(repo, {(1, 0): 4})
    again = stream(spark, url, checkpoint)  # restarted: only what came after
    new_rows = [r for b in again for r in b]
    assert [(r[0], r[2], r[4]) for r in new_rows] == [
        (second, "set", [0, 0]),
        (second, "delete", [1, 1]),
        (third, "set", [1, 0]),
    ]
    assert new_rows[0][5:] == ("inline", None, None, 4)
    assert new_rows[1][5:] == (None, None, None, None)

    everything = [r for b in seen + again for r in b]
    assert table(spark, url) == everything
    assert table(spark, url, **{"from": first}) == new_rows
    assert table(spark, url, **{"from": first, "to": second}) == new_rows[:2]


def test_starting_is_exclusive_like_from(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    tagged = write(repo, {(0, 0): 1})
    repo.create_tag("v1", tagged)
    write(repo, {(0, 1): 2})

    after_tag = [r for b in stream(spark, url, tmp_path / "c1", starting="v1") for r in b]
    assert [r[4] for r in after_tag] == [[0, 1]]
    assert table(spark, url, **{"from": "v1"}) == after_tag
    # latest (the default): only what is committed after the query starts, here nothing.
    assert [r for b in stream(spark, url, tmp_path / "c2") for r in b] == []


def test_coordinator_range_write_yields_exact_coords(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    session = repo.writable_session("main")
    session.create_array("/t", shape=(8, 4), chunk_shape=(2, 2), dtype="uint8")
    session.commit("array")

    def data_rows(coords: list[tuple[int, int]], value: int) -> Any:
        rows = [("/t", list(c), np.full(4, value, np.uint8).tobytes()) for c in coords]
        return spark.createDataFrame(rows, "array string, coord array<bigint>, data binary")

    everything = [(i, j) for i in range(4) for j in range(2)]
    data_rows(everything, 1).write.format("icechunk").mode("append").save(url)
    data_rows([(3, 1), (1, 0)], 2).write.format("icechunk").mode("append").save(url)
    tip = repo.lookup_branch("main")

    log = decode_txlog(repo.storage.get(txlog_key(tip)), "log")
    assert [c.kind for c in log.nodes] == [ChangeKind.WRITE_CHUNK_RANGE]
    assert log.chunks.num_rows == 0  # the coordinator lists no coords: the feed finds them
    parent = repo.state().snapshot(tip).parent_id
    rows = table(spark, url, **{"from": parent})
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [
        ("set", "/t", [1, 0], "inline"),  # 4 bytes: small chunks are stored inline
        ("set", "/t", [3, 1], "inline"),
    ]


def test_reset_branch_fails_the_stream_clearly(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    kept = write(repo, {(0, 0): 1})
    checkpoint = tmp_path / "checkpoint"
    stream(spark, url, checkpoint, starting=kept)
    write(repo, {(0, 1): 2})
    assert len(stream(spark, url, checkpoint)) == 1  # read up to the new tip

    repo.reset_branch("main", kept)
    write(repo, {(1, 1): 3})
    with pytest.raises(Exception, match="HistoryRewrittenError") as failure:
        stream(spark, url, checkpoint)
    assert "no longer in the history of branch 'main'" in str(failure.value)


def test_options_are_checked(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    first = write(repo, {(0, 0): 1})
    second = write(repo, {(0, 1): 1})
    with pytest.raises(Exception, match="is not in the history of"):
        table(spark, url, **{"from": second, "to": first})
    with pytest.raises(Exception, match="names no tag, snapshot or branch"):
        table(spark, url, **{"from": "nope"})
    query = (
        spark.readStream.format("icechunk")
        .load(url)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match="option\\('table', 'changes'\\)"):
        query.awaitTermination(60)
    query.stop()

"""Plain-Python tests of the Spark package's pure parts (no SparkSession)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import (
    HistoryExpiredError,
    InvalidInputError,
    NotFoundError,
    Repository,
    SnapshotCollectedError,
)
from icechunk_spark.chunks.codec import ChunkCodec
from icechunk_spark.format import manifest as manifest_format
from icechunk_spark.format import manifest_file
from icechunk_spark.format.structure import ManifestRef
from icechunk_spark.spark import scan, tables
from icechunk_spark.spark.options import parse_value, read_target, repo_options
from icechunk_spark.spark.plan import array_document, declared_arrays
from icechunk_spark.spark.row_schema import row_kind
from icechunk_spark.spark.staging import ArrayStaged, Stager

from .helpers import new_repo


def test_spark_schemas_match_the_arrow_schemas() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from icechunk_spark.spark.source import spark_schema

    for name, arrow in tables.SCHEMAS.items():
        assert to_arrow_schema(spark_schema(name), timezone="UTC").equals(arrow), name


def test_chunks_split_by_row_groups_with_ranged_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest_format, "ROW_GROUP_SIZE", 4)  # many row groups from few refs
    repo = new_repo((tmp_path / "repo").as_uri())
    session = repo.writable_session("main")
    for path in ("/a", "/b"):
        session.create_array(path, (10, 2), (1, 1), "uint8")
        coords = np.array([(i, j) for i in range(10) for j in range(2)])
        session.set_chunk_refs(path, {"coord": coords, "inline_data": [b"x"] * 20})
    session.commit("two arrays in one manifest")
    nodes = repo.readonly_session().list_nodes()
    a = scan.select_arrays(nodes, "/a")
    assert len({m.manifest_id for n in nodes for m in n.manifests}) == 1
    parts = scan.plan_parts(repo.storage, a, rows_per_partition=8)
    assert [len(p.row_groups or ()) for p in parts] == [2, 2, 1]  # 5 of the 10 row groups
    rows = [r for p in parts for b in scan.read_part(repo.storage, p) for r in b.to_pylist()]
    assert sorted(tuple(r["coord"]) for r in rows) == [(i, j) for i in range(10) for j in range(2)]
    assert {r["array"] for r in rows} == {"/a"}
    whole = scan.plan_parts(repo.storage, a, rows_per_partition=100)
    assert [p.row_groups for p in whole] == [None]


def test_codec_round_trip_with_compression() -> None:
    doc = array_document(
        {
            "shape": [4, 4],
            "chunk_shape": [2, 2],
            "data_type": "float64",
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "gzip", "configuration": {"level": 1}},
            ],
        }
    )
    codec = ChunkCodec(json.dumps(doc).encode())
    raw = np.arange(4, dtype="float64").tobytes()
    (stored,) = codec.encode_raw([raw])
    assert stored != raw
    np.testing.assert_array_equal(codec.decode(stored), np.arange(4.0).reshape(2, 2))
    assert codec.chunk_nbytes == 32


def test_options() -> None:
    options = {
        "path": "s3://b/r",
        "storage.endpoint_url": "http://x",
        "storage.anon": "true",
        "storage.key": "0123",
        "authorize_virtual": "file:///a/,s3://b/",
    }
    repo = repo_options(options)
    assert repo.storage_options == {"endpoint_url": "http://x", "anon": True, "key": "0123"}
    assert repo.authorize_virtual == ("file:///a/", "s3://b/")
    assert parse_value('{"a": 1}') == {"a": 1}
    assert read_target({"as_of": "2024-05-01T12:00:00+00:00"}).as_of is not None
    with pytest.raises(InvalidInputError, match="at most one"):
        read_target({"branch": "main", "tag": "v1"})
    with pytest.raises(InvalidInputError, match="no repository"):
        repo_options({})


def test_row_kinds_and_declarations() -> None:
    assert row_kind(["array", "coord", "data"]) == "data"
    assert row_kind(["array", "coord", "location", "offset", "length"]) == "virtual"
    with pytest.raises(InvalidInputError, match="'offset'"):
        row_kind(["array", "coord", "location"])
    declared = declared_arrays('{"x/y": {"shape": [4], "chunk_shape": [2], "data_type": "int8"}}')
    doc = json.loads(declared["/x/y"])
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [2]
    with pytest.raises(InvalidInputError):
        declared_arrays('{"/z": {"shape": [4]}}')


def test_staged_stats_merge() -> None:
    one = ArrayStaged.of(np.array([[0, 5], [3, 1]]))
    one.merge(ArrayStaged.of(np.array([[9, 0]])))
    assert one.count == 3
    assert one.lo.tolist() == [0, 0] and one.hi.tolist() == [9, 5]
    assert [i.tolist() for i in one.indices] == [[0, 3, 9], [0, 1, 5]]


def test_chunk_batches_match_the_schema() -> None:
    refs = manifest_format.conform_refs(
        pa.table({"coord": pa.array([b"\x00\x00\x00\x01"], pa.binary()), "inline_data": [b"ab"]})
    )
    (batch,) = tables.chunk_batches(refs, "/a", 1, "M1")
    assert batch.schema.equals(tables.CHUNKS)
    assert batch.to_pylist() == [
        {
            "array": "/a",
            "coord": [1],
            "kind": "inline",
            "location": None,
            "offset": None,
            "length": 2,
            "manifest_id": "M1",
            "stat_min": None,
            "stat_max": None,
            "stat_nan_count": None,
            "stat_fill_count": None,
            "stat_sum": None,
            "stat_count": None,
        }
    ]
    assert Repository  # the package's public entry point imports without Spark


def test_piece_tasks_read_only_the_row_groups_of_their_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator without Spark: stage, commit staged refs, one task per split piece."""
    from icechunk_spark.core.staged_writes import PieceTask, write_piece_task
    from icechunk_spark.spark import staging
    from icechunk_spark.spark.coordinator import StagedWrite, stage_into
    from icechunk_spark.spark.plan import make_plan, options_from_kwargs

    monkeypatch.setattr(staging, "STAGED_ROW_GROUP", 10)
    config = {
        "virtual_chunk_containers": {"file:///data/": {}},
        "manifests": {
            "chunk-manifests": {"sets": [{"default": {"max-manifest-size": 20}}], "rules": []}
        },
    }
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url, config=config)
    declared = {"/big": {"shape": [50, 2], "chunk_shape": [1, 1], "data_type": "uint8"}}
    columns = ["array", "coord", "location", "offset", "length"]
    plan = make_plan(options_from_kwargs(url, arrays=declared), columns, overwrite=False)
    coords = [[i, j] for i in range(50) for j in range(2)]
    rows = pa.table(
        {
            "array": ["/big"] * 100,
            "coord": pa.array(coords[::-1], pa.list_(pa.int64())),  # unsorted on purpose
            "location": [f"file:///data/{i}.bin" for i, _ in coords[::-1]],
            "offset": [0] * 100,
            "length": [1] * 100,
        }
    )
    result = Stager(plan, repo.storage, "00000-1").run(iter(rows.to_batches(max_chunksize=30)))
    (staged_file,) = result.files
    assert [g.rows for g in staged_file.groups] == [10] * 10

    tasks: list[PieceTask] = []

    def runner(todo: Sequence[PieceTask]) -> list[ManifestRef | None]:
        tasks.extend(todo)
        return [write_piece_task(repo.storage, t) for t in todo]

    session = repo.writable_session("main", base_snapshot_id=plan.base_snapshot)
    stage_into(session, plan, StagedWrite.of([result]))
    session.commit("staged", piece_runner=runner)

    # 20 refs per piece, sorted staging: each piece reads 2 of the 10 row groups.
    assert [(t.axis, t.span) for t in tasks] == [(0, (10 * p, 10 * p + 10)) for p in range(5)]
    groups = [
        f.groups_between(*t.staged.key_range(t.axis, t.span)) for t in tasks for f in t.staged.files
    ]
    assert groups == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    (node,) = [n for n in repo.readonly_session("main").list_nodes() if n.path == "/big"]
    assert [(m.extent, m.ref_count) for m in node.manifests] == [
        (((10 * p, 10 * p + 10), (0, 2)), 20) for p in range(5)
    ]


def _recording_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """Every ``ManifestFile.read_groups`` call: (row groups, columns)."""
    calls: list[tuple[tuple[int, ...], tuple[str, ...]]] = []
    original = manifest_file.ManifestFile.read_groups

    def read_groups(self: Any, groups: Any, columns: Any = None) -> pa.Table:
        calls.append((tuple(groups), tuple(columns or ())))
        return original(self, groups, columns)

    monkeypatch.setattr(manifest_file.ManifestFile, "read_groups", read_groups)
    return calls


def _inline_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_layout: bool) -> Repository:
    """Arrays /a (inline), /b (native) and /c (inline) in one manifest of 4-row groups; with
    ``old_layout`` the manifest records no inline lengths, as manifests before did."""
    monkeypatch.setattr(manifest_format, "ROW_GROUP_SIZE", 4)
    if old_layout:
        monkeypatch.setattr(manifest_format, "with_inline_lengths", lambda refs: refs)
    repo = new_repo((tmp_path / "repo").as_uri())
    session = repo.writable_session("main")
    for path in ("/a", "/b", "/c"):
        session.create_array(path, (10,), (1,), "uint8")
    session.set_chunk_refs(
        "/a", {"coord": np.arange(10).reshape(-1, 1), "inline_data": [b"xy"] * 10}
    )
    session.set_chunk_refs(
        "/b",
        {
            "coord": np.arange(10).reshape(-1, 1),
            "chunk_id": ["C"] * 10,
            "offset": [0] * 10,
            "length": [3] * 10,
        },
    )
    session.set_chunk_refs(
        "/c", {"coord": np.arange(10).reshape(-1, 1), "inline_data": [b"z"] * 10}
    )
    session.commit("three arrays in one manifest")
    monkeypatch.undo()
    return repo


@pytest.mark.parametrize("old_layout", [False, True])
def test_inline_bytes_are_read_only_for_old_manifests_lengths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_layout: bool
) -> None:
    repo = _inline_repo(tmp_path, monkeypatch, old_layout)
    calls = _recording_reads(monkeypatch)
    (part,) = scan.plan_parts(
        repo.storage, scan.select_arrays(repo.readonly_session().list_nodes(), None), 100
    )
    rows = [r for b in scan.read_part(repo.storage, part) for r in b.to_pylist()]
    assert {(r["array"], r["kind"], r["length"]) for r in rows} == {
        ("/a", "inline", 2),
        ("/b", "native", 3),
        ("/c", "inline", 1),
    }
    read = {c for _, columns in calls for c in columns}
    assert ("inline_data" in read) == old_layout  # new manifests record inline lengths
    calls.clear()
    for _ in scan.read_part(repo.storage, part, ["array", "coord", "kind", "location", "offset"]):
        pass
    assert "inline_data" not in {c for _, columns in calls for c in columns}
    assert {c for _, columns in calls for c in columns} == {
        "array_id",
        "coord",
        "chunk_id",
        "virtual_path",
        "offset",
    }


def test_row_groups_of_other_arrays_and_ruled_out_statistics_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _inline_repo(tmp_path, monkeypatch, old_layout=False)
    nodes = repo.readonly_session().list_nodes()
    # Rows are sorted by (random) node id: array k in that order has rows 10k..10k+9, so its
    # 4-row groups are 10k // 4 .. (10k + 9) // 4.
    order = [n.path for n in sorted((n for n in nodes if n.type == "array"), key=lambda n: n.id)]

    def groups_of(path: str) -> list[int]:
        k = order.index(path)
        return list(range(10 * k // 4, (10 * k + 9) // 4 + 1))

    calls = _recording_reads(monkeypatch)
    (part,) = scan.plan_parts(repo.storage, scan.select_arrays(nodes, "/c"), 100)
    rows = [
        r for b in scan.read_part(repo.storage, part, ["array", "coord"]) for r in b.to_pylist()
    ]
    assert sorted(r["coord"][0] for r in rows) == list(range(10))
    assert sorted(g for groups, _ in calls for g in groups) == groups_of("/c")
    calls.clear()
    bound = scan.StatBound("length", ">", 2.5)  # only /b's native refs are longer than 2
    (everything,) = scan.plan_parts(repo.storage, scan.select_arrays(nodes, None), 100)
    rows = [
        r
        for b in scan.read_part(repo.storage, everything, ["array"], [bound])
        for r in b.to_pylist()
    ]
    assert "/b" in {r["array"] for r in rows}
    assert sorted(g for groups, _ in calls for g in groups) == groups_of("/b")


def test_stat_bounds_decide_only_when_statistics_allow() -> None:
    bounds = manifest_file.ColumnBounds(10.0, 20.0, 0)
    assert scan.StatBound("stat_max", ">", 19.0).may_match(bounds, 5)
    assert not scan.StatBound("stat_max", ">", 20.0).may_match(bounds, 5)
    assert scan.StatBound("stat_max", ">=", 20.0).may_match(bounds, 5)
    assert not scan.StatBound("stat_min", "<", 10.0).may_match(bounds, 5)
    assert not scan.StatBound("stat_min", "=", 21.0).may_match(bounds, 5)
    assert scan.StatBound("stat_min", "=", 15.0).may_match(bounds, 5)
    unknown = manifest_file.ColumnBounds(None, None, None)
    assert scan.StatBound("stat_max", ">", 1e9).may_match(unknown, 5)
    only_nulls = manifest_file.ColumnBounds(None, None, 5)
    assert not scan.StatBound("stat_max", "<", 1e9).may_match(only_nulls, 5)


def one_chunk_repo(tmp_path: Path) -> tuple[str, Repository, str]:
    """A repository whose main holds one array `/a` with one chunk: URL, repo, snapshot."""
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    session = repo.writable_session("main")
    session.create_array("/a", (4,), (1,), "uint8")
    session.set_chunk("/a", (0,), b"\x01")
    return url, repo, session.commit("one chunk")


def test_the_chunks_reader_is_pinned_to_the_snapshot_it_planned(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from icechunk_spark.spark.source import ChunksReader, spark_schema

    url, repo, _ = one_chunk_repo(tmp_path)
    reader = ChunksReader({"path": url}, spark_schema("chunks"))
    session = repo.writable_session("main")
    session.set_chunk("/a", (1,), b"\x02")
    session.commit("a second chunk, after planning began")
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert [r["coord"] for r in rows] == [[0]]


def test_the_change_feed_refuses_to_read_across_expired_history(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from icechunk_spark.ops import feed
    from icechunk_spark.spark.changes import ChangesReader, ChangesStreamReader

    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    session = repo.writable_session("main")
    session.create_array("/a", (4,), (1,), "uint8")
    repo.create_tag("v1", session.commit("tagged"))
    for coord in (0, 1):
        session = repo.writable_session("main")
        session.set_chunk("/a", (coord,), b"\x01")
        session.commit(f"chunk {coord}")  # the first of these expires
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    options = {"path": url, "table": "changes"}

    # Not "from is not an ancestor of to": it is, and the snapshots after it expired.
    with pytest.raises(HistoryExpiredError, match="expired"):
        ChangesReader({**options, "from": "v1"}, feed.CHANGES)
    stream = ChangesStreamReader({**options, "starting": "v1"}, feed.CHANGES)
    start = stream.initialOffset()
    end = stream.latestOffset(start, ReadAllAvailable())
    with pytest.raises(HistoryExpiredError, match="expired"):
        stream.partitions(start, end)


def test_the_chunks_reader_says_when_its_snapshot_was_collected_under_it(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from icechunk_spark.spark.source import ChunksReader, spark_schema

    url, repo, first = one_chunk_repo(tmp_path)
    session = repo.writable_session("main")
    session.set_chunk("/a", (0,), b"\x02")  # first's manifest is now only first's
    session.commit("second")
    planned = ChunksReader({"path": url, "snapshot": first}, spark_schema("chunks"))
    parts = planned.partitions()  # the plan is made; executors read the manifests later
    unplanned = ChunksReader({"path": url, "snapshot": first}, spark_schema("chunks"))

    assert first in repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=1))

    with pytest.raises(SnapshotCollectedError, match=f"snapshot {first} left the repo") as read:
        [b for p in parts for b in planned.read(p)]
    assert "chunks table" in str(read.value) and "m/" in str(read.value)
    with pytest.raises(NotFoundError, match="may have been expired"):  # planned too late
        unplanned.partitions()

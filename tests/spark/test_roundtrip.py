"""Writing through Spark and reading back through zarr and through Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from chispa import assert_df_equality

from icechunk_spark import Repository
from icechunk_spark.spark.source import spark_schema

from .helpers import chunk_grid_rows, expected_chunk_rows, keys, new_repo

pytestmark = pytest.mark.spark

CUBE = {
    "shape": [7, 6, 5],
    "chunk_shape": [3, 4, 5],
    "data_type": "float32",
    "dimension_names": ["time", "y", "x"],
    "fill_value": 0.0,
    "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
    ],
}


def cube_values() -> np.ndarray:
    return np.arange(7 * 6 * 5, dtype="float32").reshape(7, 6, 5) / 7


def data_frame(spark: Any, rows: list[tuple[str, list[int], bytes]], partitions: int = 2) -> Any:
    return spark.createDataFrame(
        rows, "array string, coord array<bigint>, data binary"
    ).repartition(partitions)


def test_chunk_data_round_trip(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    values = cube_values()
    rows = list(chunk_grid_rows(values, (3, 4, 5), "/cube"))
    (
        data_frame(spark, rows)
        .write.format("icechunk")
        .mode("append")
        .option("arrays", json.dumps({"/cube": CUBE}))
        .option("message", "cube")
        .save(url)
    )
    repo = Repository.open(url)
    session = repo.readonly_session("main")
    assert next(repo.ancestry(branch="main")).message == "cube"
    array = zarr.open_array(session.store, path="cube", mode="r")
    np.testing.assert_array_equal(array[:], values)
    assert keys(repo, "staging/") == set()

    chunks = spark.read.format("icechunk").load(url)
    expected = spark.createDataFrame(expected_chunk_rows(repo), spark_schema("chunks"))
    assert chunks.count() == len(rows) == 3 * 2 * 1
    assert_df_equality(chunks, expected, ignore_row_order=True)


def test_virtual_refs_round_trip(spark: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "files"
    data_dir.mkdir()
    values = np.arange(8 * 6, dtype="<i4").reshape(8, 6)
    rows = []
    for i in range(4):  # one file per row of chunks, two chunks of (2, 3) each, back to back
        path = data_dir / f"part{i}.bin"
        blocks = [
            np.ascontiguousarray(values[2 * i : 2 * i + 2, 3 * j : 3 * j + 3]) for j in (0, 1)
        ]
        path.write_bytes(b"".join(b.tobytes() for b in blocks))
        for j in (0, 1):
            rows.append(("/v", [i, j], path.as_uri(), j * 24, 24))
    container = data_dir.as_uri() + "/"
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config={"virtual_chunk_containers": {container: {}}})
    declared = {"/v": {"shape": [8, 6], "chunk_shape": [2, 3], "data_type": "int32"}}
    df = spark.createDataFrame(
        rows, "array string, coord array<bigint>, location string, offset bigint, length bigint"
    )
    df.write.format("icechunk").mode("append").option("arrays", json.dumps(declared)).save(url)

    repo = Repository.open(url, authorize_virtual=[container])
    array = zarr.open_array(repo.readonly_session("main").store, path="v", mode="r")
    np.testing.assert_array_equal(array[:], values)
    kinds = spark.read.format("icechunk").load(url).select("kind").distinct().collect()
    assert [r.kind for r in kinds] == ["virtual"]


def test_three_appends_make_three_snapshots_and_time_travel(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    declared = {
        "/s": {
            "shape": [0, 2],
            "chunk_shape": [1, 2],
            "data_type": "int16",
            "dimension_names": ["time", "x"],
        }
    }
    snapshots = []
    for step in range(3):
        rows = [("/s", [step, 0], np.array([step, step + 10], "<i2").tobytes())]
        (
            data_frame(spark, rows, partitions=1)
            .write.format("icechunk")
            .mode("append")
            .option("arrays", json.dumps(declared))
            .option("append_dim", "time")
            .option("message", f"step {step}")
            .save(url)
        )
        snapshots.append(repo.lookup_branch("main"))
    history = [s.message for s in repo.ancestry(branch="main")]
    assert history[:3] == ["step 2", "step 1", "step 0"]
    for step, snapshot in enumerate(snapshots):
        table = spark.read.format("icechunk").option("snapshot", snapshot).load(url)
        assert sorted(tuple(r.coord) for r in table.collect()) == [(i, 0) for i in range(step + 1)]
        session = repo.readonly_session(snapshot_id=snapshot)
        values = zarr.open_array(session.store, path="s", mode="r")[:]
        np.testing.assert_array_equal(values, [[i, i + 10] for i in range(step + 1)])


def test_overwrite_replaces_the_chunks_of_written_arrays(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    declared = {p: {"shape": [4], "chunk_shape": [2], "data_type": "uint8"} for p in ("/a", "/b")}
    rows = [(p, [i], bytes([i, i])) for p in ("/a", "/b") for i in range(2)]
    writer = data_frame(spark, rows).write.format("icechunk").option("arrays", json.dumps(declared))
    writer.mode("append").save(url)
    data_frame(spark, [("/a", [1], b"\x07\x07")]).write.format("icechunk").mode("overwrite").save(
        url
    )
    session = repo.readonly_session("main")
    a = zarr.open_array(session.store, path="a", mode="r")[:]
    b = zarr.open_array(session.store, path="b", mode="r")[:]
    np.testing.assert_array_equal(a, [0, 0, 7, 7])  # chunk 0 gone: fill value
    np.testing.assert_array_equal(b, [0, 0, 1, 1])  # not in the DataFrame: untouched

"""The driver API: executors stage refs and write manifests, the driver only attaches them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from icechunk_spark import Repository
from icechunk_spark.errors import RepeatedCoordError
from icechunk_spark.spark import commit_refs, write_chunks

from .helpers import chunk_grid_rows, keys, new_repo
from .test_roundtrip import CUBE, cube_values

pytestmark = pytest.mark.spark

CONTAINER = "file:///data/"
# Tiny manifests, so a 60-ref array is split into pieces like a 100-million-ref one would be.
SPLIT_CONFIG = {
    "virtual_chunk_containers": {CONTAINER: {}},
    "manifests": {
        "chunk-manifests": {"sets": [{"default": {"max-manifest-size": 10}}], "rules": []}
    },
}
BIG = {"/big": {"shape": [40, 2], "chunk_shape": [1, 1], "data_type": "uint8"}}


def virtual_rows(coords: list[tuple[int, int]], path: str = "/big", tag: str = "a") -> list[tuple]:
    return [(path, [i, j], f"{CONTAINER}{tag}/{i}.bin", 100 * j, 1 + j) for i, j in coords]


def refs_df(spark: Any, rows: list[tuple]) -> Any:
    return spark.createDataFrame(
        rows, "array string, coord array<bigint>, location string, offset bigint, length bigint"
    ).repartition(3)


def ref_map(repo: Repository, path: str) -> dict[tuple[int, ...], tuple[str, int, int]]:
    from icechunk_spark.format.coords import decode_coords

    refs = repo.readonly_session("main").chunk_refs(path)
    coords = decode_coords(refs.column("coord"), 2)
    return {
        tuple(int(c) for c in coord): (loc, off, length)
        for coord, loc, off, length in zip(
            coords,
            refs.column("virtual_path").to_pylist(),
            refs.column("offset").to_pylist(),
            refs.column("length").to_pylist(),
            strict=True,
        )
    }


def test_write_chunks_round_trip(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    values = cube_values()
    df = spark.createDataFrame(
        list(chunk_grid_rows(values, (3, 4, 5), "/cube")),
        "array string, coord array<bigint>, data binary",
    )
    snapshot = write_chunks(df, url, arrays={"/cube": CUBE}, message="cube", pack_chunks=True)
    repo = Repository.open(url)
    assert repo.lookup_branch("main") == snapshot
    array = zarr.open_array(repo.readonly_session("main").store, path="cube", mode="r")
    np.testing.assert_array_equal(array[:], values)
    # pack_chunks: one object per task holds several chunks.
    assert len(keys(repo, "c/")) < 6
    assert keys(repo, "staging/") == set()


def test_a_coord_given_twice_is_refused_through_both_front_doors(
    spark: Any, tmp_path: Path
) -> None:
    """The rows of a DataFrame have no order: keeping either ref of a chunk given twice would
    be a guess (before, whichever staged file sorted last won, and the write succeeded)."""
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config=SPLIT_CONFIG)
    commit_refs(refs_df(spark, virtual_rows([(i, 0) for i in range(30)])), url, arrays=BIG)
    repo = Repository.open(url)
    tip, before = repo.lookup_branch("main"), ref_map(repo, "/big")
    # 40 refs: split into pieces, written on executors (commit_refs) or by commit() (df.write).
    rows = virtual_rows([(i, 1) for i in range(40)], tag="b") + virtual_rows([(33, 1)], tag="c")
    message = re.escape("row for array '/big' at coord (33, 1): given more than once in one write")
    with pytest.raises(RepeatedCoordError, match=message):
        commit_refs(refs_df(spark, rows), url)
    with pytest.raises(Exception, match=message):
        refs_df(spark, rows).write.format("icechunk").mode("append").save(url)
    assert repo.lookup_branch("main") == tip and ref_map(repo, "/big") == before
    assert keys(repo, "staging/") == set()


def test_locations_in_hadoops_file_form_resolve_to_file_urls(spark: Any, tmp_path: Path) -> None:
    """Spark names local files file:/path; such a location once became <container>file:/path."""
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config=SPLIT_CONFIG)
    rows = [("/big", [i, 0], f"file:/data/a/{i}.bin", 0, 1) for i in range(3)]
    commit_refs(refs_df(spark, rows), url, arrays=BIG)
    refs = ref_map(Repository.open(url), "/big")
    assert refs == {(i, 0): (f"{CONTAINER}a/{i}.bin", 0, 1) for i in range(3)}


def test_commit_refs_splits_and_appends_touch_only_their_pieces(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config=SPLIT_CONFIG)
    first = [(i, j) for i in range(30) for j in range(2)]
    commit_refs(refs_df(spark, virtual_rows(first)), url, arrays=BIG, message="first")
    repo = Repository.open(url)
    node = repo.readonly_session("main").get_node("/big")
    # 10 refs per manifest at most; 2 chunks per index along axis 0 -> 5 indices per piece.
    assert [m.extent[0] for m in node.manifests] == [(5 * p, 5 * p + 5) for p in range(6)]
    assert all(m.ref_count == 10 for m in node.manifests)
    assert ref_map(repo, "/big") == {
        (i, j): (f"{CONTAINER}a/{i}.bin", 100 * j, 1 + j) for i, j in first
    }

    # Rewrite one old chunk and add two new ones: only pieces 1 and 6 are written again.
    commit_refs(refs_df(spark, virtual_rows([(7, 1), (31, 0), (32, 1)], tag="b")), url)
    after = repo.readonly_session("main").get_node("/big")
    kept = {m.manifest_id for m in node.manifests} & {m.manifest_id for m in after.manifests}
    assert len(kept) == 5
    expected = {(i, j): (f"{CONTAINER}a/{i}.bin", 100 * j, 1 + j) for i, j in first}
    expected |= {
        (i, j): (f"{CONTAINER}b/{i}.bin", 100 * j, 1 + j) for i, j in [(7, 1), (31, 0), (32, 1)]
    }
    assert ref_map(repo, "/big") == expected
    assert keys(repo, "staging/") == set()


def test_commit_refs_matches_the_core_path(spark: Any, tmp_path: Path) -> None:
    """Spark's manifests and the core's own flush split the same refs the same way."""
    coords = [(i, j) for i in range(0, 40, 3) for j in range(2)]
    spark_url, core_url = (tmp_path / "spark").as_uri(), (tmp_path / "core").as_uri()
    new_repo(spark_url, config=SPLIT_CONFIG)
    commit_refs(refs_df(spark, virtual_rows(coords)), spark_url, arrays=BIG)

    core = new_repo(core_url, config=SPLIT_CONFIG)
    session = core.writable_session("main")
    session.create_array("/big", shape=(40, 2), chunk_shape=(1, 1), dtype="uint8")
    rows = virtual_rows(coords)
    session.set_chunk_refs(
        "/big",
        {
            "coord": np.array([r[1] for r in rows]),
            "location": [r[2] for r in rows],
            "offset": [r[3] for r in rows],
            "length": [r[4] for r in rows],
        },
    )
    session.commit("core")
    spark_repo = Repository.open(spark_url)
    assert ref_map(spark_repo, "/big") == ref_map(core, "/big")
    assert manifest_layout(spark_repo) == manifest_layout(core)


def manifest_layout(repo: Repository) -> list[tuple[object, int]]:
    return [(m.extent, m.ref_count) for m in repo.readonly_session().get_node("/big").manifests]


def test_commit_refs_overwrite_and_append_dim(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config={"virtual_chunk_containers": {CONTAINER: {}}})
    declared = {
        "/t": {
            "shape": [2, 2],
            "chunk_shape": [1, 1],
            "data_type": "uint8",
            "dimension_names": ["time", "x"],
        }
    }
    commit_refs(refs_df(spark, virtual_rows([(0, 0), (1, 1)], "/t")), url, arrays=declared)
    # append_dim grows the shape to hold index 4 along time.
    commit_refs(refs_df(spark, virtual_rows([(4, 0)], "/t")), url, append_dim="time")
    repo = Repository.open(url)
    assert repo.readonly_session().get_node("/t").meta.shape == (5, 2)
    assert set(ref_map(repo, "/t")) == {(0, 0), (1, 1), (4, 0)}
    commit_refs(refs_df(spark, virtual_rows([(3, 1)], "/t")), url, mode="overwrite")
    assert set(ref_map(repo, "/t")) == {(3, 1)}


LAYOUT_CONFIG = {
    "virtual_chunk_containers": {CONTAINER: {}},
    "manifests": {
        "chunk-manifests": {
            "sets": [
                {"coordinates": {"max-manifest-size": 20, "cardinality": 1}},
                {"default": {"max-manifest-size": 30}},
            ],
            "rules": [{"path": ".*/(time|lat)", "target": "coordinates"}],
        }
    },
}
CUBE_ARRAYS = {
    "/time": {"shape": [12], "chunk_shape": [1], "data_type": "float64"},
    "/lat": {"shape": [4], "chunk_shape": [1], "data_type": "float64"},
    "/big": {"shape": [40, 2], "chunk_shape": [1, 1], "data_type": "uint8"},
    "/small": {"shape": [6, 2], "chunk_shape": [1, 1], "data_type": "uint8"},
}


def layout(repo: Repository) -> list[tuple[Any, ...]]:
    """Sets, arrays per manifest, ref counts, and each array's manifest extents."""
    manifests = sorted((m.set_name, m.arrays, m.refs) for m in repo.manifests())
    nodes = repo.readonly_session("main").list_nodes()
    extents = sorted((n.path, tuple(m.extent for m in n.manifests)) for n in nodes)
    return [*manifests, *extents]


def test_both_front_doors_lay_manifests_out_like_the_core(spark: Any, tmp_path: Path) -> None:
    """One datacube through df.write, commit_refs and the core: the same manifests."""
    rows = [("/time", [i], f"{CONTAINER}t.bin", 8 * i, 8) for i in range(12)]
    rows += [("/lat", [i], f"{CONTAINER}l.bin", 8 * i, 8) for i in range(4)]
    rows += virtual_rows([(i, j) for i in range(40) for j in range(2)])
    rows += virtual_rows([(i, j) for i in range(6) for j in range(2)], path="/small")
    schema = "array string, coord array<bigint>, location string, offset bigint, length bigint"
    repos = {}
    for door in ("df.write", "commit_refs", "core"):
        url = (tmp_path / door.replace(".", "_")).as_uri()
        repos[door] = new_repo(url, config=LAYOUT_CONFIG)
        df = spark.createDataFrame(rows, schema).repartition(3)
        if door == "df.write":
            (
                df.write.format("icechunk")
                .mode("append")
                .option("arrays", json.dumps(CUBE_ARRAYS))
                .save(url)
            )
        elif door == "commit_refs":
            commit_refs(df, url, arrays=CUBE_ARRAYS)
        else:
            session = repos[door].writable_session()
            for path, doc in CUBE_ARRAYS.items():
                session.create_array(path, doc["shape"], doc["chunk_shape"], doc["data_type"])
            for path in CUBE_ARRAYS:
                mine = [r for r in rows if r[0] == path]
                session.set_chunk_refs(
                    path,
                    {
                        "coord": np.array([r[1] for r in mine]),
                        "location": [r[2] for r in mine],
                        "offset": [r[3] for r in mine],
                        "length": [r[4] for r in mine],
                    },
                )
            session.commit("core")
    expected = layout(repos["core"])
    assert ("coordinates", ("/lat", "/time"), 16) in expected  # packed, not one per array
    assert sum(1 for m in repos["core"].manifests() if m.arrays == ("/big",)) == 3  # split
    assert layout(repos["df.write"]) == expected
    assert layout(repos["commit_refs"]) == expected
    for path in ("/big", "/small"):
        assert ref_map(repos["df.write"], path) == ref_map(repos["core"], path)
        assert ref_map(repos["commit_refs"], path) == ref_map(repos["core"], path)

"""Chunk statistics: recorded at write time, stored in manifests, queryable, used to skip."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

from icechunk_spark import ConfigError, InvalidInputError, Repository, Session
from icechunk_spark.chunks.codec import ChunkCodec
from icechunk_spark.chunks.stats import cf_missing, compute_stats
from icechunk_spark.format.keys import manifest_key
from icechunk_spark.format.manifest import decode_manifest, encode_manifest
from icechunk_spark.inventory import chunk_stats, chunks_where

from .conftest import NUMCODECS_WARNING

SHAPE, CHUNKS = (10, 13), (4, 5)  # edge chunks on both axes
ZSTD = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
]


def new_repo(tmp_path: Path, patterns: list[str], **config: Any) -> Repository:
    return Repository.create(tmp_path.as_uri(), config={"chunk_statistics": patterns, **config})


def sample(seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).normal(20, 15, SHAPE).astype("f4")
    values[0, :3] = np.nan
    values[5, 5] = -1.0  # the fill value
    values[8:, 10:] = np.nan  # an edge chunk with only NaNs and one valid value
    values[9, 12] = 7.0
    return values


def expected_stats(values: np.ndarray, fill: float) -> dict[tuple[int, int], tuple[Any, ...]]:
    out = {}
    for i in range(-(-SHAPE[0] // CHUNKS[0])):
        for j in range(-(-SHAPE[1] // CHUNKS[1])):
            part = values[i * 4 : (i + 1) * 4, j * 5 : (j + 1) * 5]
            if part.shape != CHUNKS:  # an edge chunk: a resize could make its stats stale
                out[(i, j)] = (None,) * 4
                continue
            valid = part[~np.isnan(part) & (part != fill)]
            out[(i, j)] = (
                float(valid.min()) if valid.size else None,
                float(valid.max()) if valid.size else None,
                int(np.isnan(part).sum()),
                int((part == fill).sum()),
            )
    return out


def stats_by_coord(session: Session, path: str) -> dict[tuple[int, ...], tuple[Any, ...]]:
    table = chunk_stats(session, path).to_pylist()
    return {
        tuple(r["coord"]): (r["stat_min"], r["stat_max"], r["stat_nan_count"], r["stat_fill_count"])
        for r in table
    }


def make_array(session: Session, path: str = "/t", fill: float = -1.0) -> None:
    try:
        session.get_node("/")
    except KeyError:
        session.create_group("/")
    session.create_array(path, SHAPE, CHUNKS, "float32", fill_value=fill, codecs=ZSTD)


@pytest.mark.filterwarnings(NUMCODECS_WARNING)
def test_stats_of_chunks_written_through_zarr_match_numpy(tmp_path: Path) -> None:
    import zarr

    repo = new_repo(tmp_path, [".*/t"])
    session = repo.writable_session()
    make_array(session)
    values = sample()
    zarr.open_array(session.store, path="t", mode="r+")[:] = values
    want = expected_stats(values, -1.0)
    assert stats_by_coord(session, "/t") == want  # before the commit
    session.commit("with stats")
    assert stats_by_coord(repo.readonly_session(), "/t") == want


def test_stats_through_set_chunk_and_set_chunk_values(tmp_path: Path) -> None:
    repo = new_repo(tmp_path, ["/t", "/u"])
    session = repo.writable_session()
    make_array(session, "/t")
    make_array(session, "/u")
    values = sample(1)
    codec = ChunkCodec(session.get_node("/t").zarr_json)
    for i in range(3):
        for j in range(3):
            chunk = np.full(CHUNKS, -1.0, "f4")
            part = values[i * 4 : (i + 1) * 4, j * 5 : (j + 1) * 5]
            chunk[: part.shape[0], : part.shape[1]] = part
            session.set_chunk("/t", (i, j), codec.encode(chunk))  # encoded bytes: decoded
            session.set_chunk_values("/u", (i, j), chunk)  # values: no decoding
    session.commit("both paths")
    reader = repo.readonly_session()
    want = expected_stats(values, -1.0)
    assert stats_by_coord(reader, "/t") == want
    assert stats_by_coord(reader, "/u") == want
    assert reader.get_chunk("/t", (1, 1)) == reader.get_chunk("/u", (1, 1))


def test_integer_and_nan_fill_values() -> None:
    ints = np.array([[0, 3, 0], [9, -2, 0]], dtype="i2")
    assert compute_stats(ints, 0) == compute_stats(ints, np.int16(0))
    stats = compute_stats(ints, 0)
    assert stats is not None and (stats.min, stats.max, stats.nan_count, stats.fill_count) == (
        -2.0,
        9.0,
        0,
        3,
    )
    floats = np.array([np.nan, 1.5, np.nan], dtype="f8")
    stats = compute_stats(floats, float("nan"))
    assert stats is not None and (stats.min, stats.max, stats.nan_count, stats.fill_count) == (
        1.5,
        1.5,
        2,
        2,
    )
    assert compute_stats(np.array(["a"]), "") is None


def test_only_selected_arrays_get_stats_and_other_refs_have_nulls(
    tmp_path: Path, data_dir: Path
) -> None:
    container = data_dir.as_uri() + "/"
    (data_dir / "v.bin").write_bytes(b"\0" * 80)
    repo = new_repo(tmp_path, ["/t"], virtual_chunk_containers={container: {}})
    session = repo.writable_session()
    make_array(session, "/t")
    make_array(session, "/other")
    chunk = np.ones(CHUNKS, "f4")
    session.set_chunk_values("/t", (0, 0), chunk)
    session.set_chunk_values("/other", (0, 0), chunk)
    session.set_virtual_ref("/t", (1, 0), container + "v.bin", 0, 80)
    session.commit("mixed")
    reader = repo.readonly_session()
    assert stats_by_coord(reader, "/t") == {(0, 0): (1.0, 1.0, 0, 0), (1, 0): (None,) * 4}
    assert stats_by_coord(reader, "/other") == {(0, 0): (None,) * 4}


def test_stats_follow_their_chunk_through_later_commits(tmp_path: Path) -> None:
    repo = new_repo(tmp_path, ["/t"])
    session = repo.writable_session()
    make_array(session)
    session.set_chunk_values("/t", (0, 0), np.full(CHUNKS, 5, "f4"))
    session.set_chunk_values("/t", (0, 1), np.full(CHUNKS, 6, "f4"))
    session.commit("first")
    session = repo.writable_session()
    session.set_chunk_values("/t", (0, 1), np.full(CHUNKS, 60, "f4"))  # overwrite
    session.commit("second")
    stats = stats_by_coord(repo.readonly_session(), "/t")
    assert stats[(0, 0)] == (5.0, 5.0, 0, 0)  # carried over from the first manifest
    assert stats[(0, 1)] == (60.0, 60.0, 0, 0)
    session = repo.writable_session()
    session.set_chunk_values("/t", (2, 2), np.full(CHUNKS, 7, "f4"))
    session.discard_changes()
    assert (2, 2) not in stats_by_coord(session, "/t")


def test_undecodable_chunks_are_refused_where_stats_are_on(tmp_path: Path) -> None:
    repo = new_repo(tmp_path, ["/t"])
    session = repo.writable_session()
    make_array(session)
    make_array(session, "/raw")
    with pytest.raises(InvalidInputError, match="does not decode"):
        session.set_chunk("/t", (0, 0), b"not zstd".ljust(80, b"."))
    assert session.get_chunk_ref("/t", (0, 0)) is None
    session.set_chunk("/raw", (0, 0), b"not zstd".ljust(80, b"."))  # no stats: bytes as given


def test_stats_survive_a_rebase(tmp_path: Path) -> None:
    repo = new_repo(tmp_path, ["/t"])
    session = repo.writable_session()
    make_array(session)
    session.commit("array")
    ours, theirs = repo.writable_session(), repo.writable_session()
    ours.set_chunk_values("/t", (0, 0), np.full(CHUNKS, 1, "f4"))
    theirs.set_chunk_values("/t", (1, 1), np.full(CHUNKS, 2, "f4"))
    theirs.commit("theirs first")
    ours.commit("ours, rebased")
    stats = stats_by_coord(repo.readonly_session(), "/t")
    assert stats == {(0, 0): (1.0, 1.0, 0, 0), (1, 1): (2.0, 2.0, 0, 0)}


def test_stats_in_split_manifests(tmp_path: Path) -> None:
    config = {
        "chunk-manifests": {
            "sets": [
                {
                    "by-row": {
                        "max-manifest-size": None,
                        "arrays-per-manifest": 1,
                        "cardinality": None,
                        "split-along": "row",
                        "chunks-per-split": 1,
                    }
                }
            ],
            "rules": [{"path": "/t", "target": "by-row"}],
        }
    }
    repo = new_repo(tmp_path, ["/t"], manifests=config)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array(
        "/t", SHAPE, CHUNKS, "float32", fill_value=-1.0, dimension_names=["row", "col"]
    )
    for i in range(3):
        session.set_chunk_values("/t", (i, 0), np.full(CHUNKS, i, "f4"))
    session.commit("split")
    assert len(repo.readonly_session().get_node("/t").manifests) == 3
    stats = stats_by_coord(repo.readonly_session(), "/t")
    assert stats == {
        **{(i, 0): (float(i), float(i), 0, 0) for i in range(2)},
        (2, 0): (None,) * 4,  # an edge chunk (see test_stats_are_not_stale_after_a_resize)
    }


def test_chunks_where_skips_chunks(tmp_path: Path, data_dir: Path) -> None:
    container = data_dir.as_uri() + "/"
    (data_dir / "v.bin").write_bytes(b"\0" * 80)
    repo = new_repo(tmp_path, ["/t"], virtual_chunk_containers={container: {}})
    session = repo.writable_session()
    make_array(session)
    for coord, top in [((0, 0), 10), ((0, 1), 50), ((1, 1), 30)]:  # whole (non-edge) chunks
        values = np.linspace(0, top, 20, dtype="f4").reshape(CHUNKS)
        session.set_chunk_values("/t", coord, values)
    session.set_virtual_ref("/t", (0, 2), container + "v.bin", 0, 80)  # no stats: kept
    session.commit("for queries")
    reader = repo.readonly_session()
    hot = chunks_where(reader, "/t", "max", ">", 40)
    np.testing.assert_array_equal(hot, [[0, 1], [0, 2]])
    by_expression = chunks_where(reader, "/t", pc.field("stat_max") >= 30)
    np.testing.assert_array_equal(by_expression, [[0, 1], [0, 2], [1, 1]])
    assert reader.chunk_stats("/t").num_rows == 4
    with pytest.raises(ValueError, match="chunks_where needs"):
        chunks_where(reader, "/t", "median", ">", 1)


def test_stats_config_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="chunk_statistics"):
        new_repo(tmp_path, ["("])
    with pytest.raises(ConfigError, match="chunk_statistics"):
        Repository.create(tmp_path.as_uri(), config={"chunk_statistics": ".*"})


def test_stats_from_concurrent_writers_in_one_session(tmp_path: Path) -> None:
    repo = new_repo(tmp_path, ["/t"])
    session = repo.writable_session()
    make_array(session)

    def write(i: int) -> None:
        for j in range(3):
            session.set_chunk_values("/t", (i, j), np.full(CHUNKS, i * 10 + j, "f4"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    session.commit("threads")
    stats = stats_by_coord(repo.readonly_session(), "/t")
    assert {c: s[0] for c, s in stats.items()} == {
        (i, j): float(i * 10 + j) if i < 2 and j < 2 else None  # edge chunks: none
        for i in range(3)
        for j in range(3)
    }


def _resize(session: Session, path: str, shape: tuple[int, ...]) -> None:
    """What zarr's ``Array.resize`` does to the node: a new ``shape`` in its zarr.json."""
    doc = json.loads(session.get_node(path).zarr_json)
    doc["shape"] = list(shape)
    session.set_node_metadata(path, json.dumps(doc).encode())


@pytest.mark.parametrize("committed", [True, False])
def test_stats_are_not_stale_after_a_resize(tmp_path: Path, committed: bool) -> None:
    """Shrinking hides values the stats counted; growing shows values they did not."""
    repo = new_repo(tmp_path, ["/t"])
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/t", (8,), (4,), "float32", fill_value=-1.0, codecs=ZSTD)
    session.set_chunk_values("/t", (0,), np.array([1, 2, 3, 4], "f4"))
    session.set_chunk_values("/t", (1,), np.array([10, 10, 99, 99], "f4"))
    if committed:
        session.commit("written")
        session = repo.writable_session()
    _resize(session, "/t", (6,))  # chunk 1 now holds [10, 10]: its max is 10
    assert chunks_where(session, "/t", "max", "<", 50).tolist() == [[0], [1]]
    _resize(session, "/t", (8,))  # and back: [10, 10, 99, 99] again
    assert chunks_where(session, "/t", "max", ">", 50).tolist() == [[1]]

    session = repo.writable_session() if committed else session
    session.set_chunk_values("/t", (1,), np.array([10, 10, 99, 99], "f4"))
    _resize(session, "/t", (6,))
    session.set_chunk_values("/t", (1,), np.array([10, 10, 99, 99], "f4"))  # written partial
    _resize(session, "/t", (8,))
    assert chunks_where(session, "/t", "max", ">", 50).tolist() == [[1]]


def test_sum_and_count_leave_out_nan_fill_and_cf_missing_values() -> None:
    values = np.array([np.nan, 1.5, -1.0, 2.5, -999.0, 4.0], dtype="f4")
    stats = compute_stats(values, -1.0, missing=(-999.0,))
    assert stats is not None
    assert (stats.sum, stats.count, stats.nan_count, stats.fill_count) == (8.0, 3, 1, 2)
    assert stats.count + stats.nan_count + stats.fill_count == values.size
    assert (stats.min, stats.max) == (1.5, 4.0)
    empty = compute_stats(np.array([-1.0, np.nan], "f8"), -1.0)
    assert empty is not None and (empty.sum, empty.count, empty.min) == (None, 0, None)


def test_cf_missing_reads_the_attributes_xarray_writes() -> None:
    import base64
    import struct

    fill = base64.standard_b64encode(struct.pack("<d", -999.0)).decode()  # xarray's v3 float
    doc = {"attributes": {"_FillValue": fill, "missing_value": [-1, -2]}}
    assert cf_missing(json.dumps(doc).encode()) == (-999.0, -1.0, -2.0)
    assert cf_missing(json.dumps({"attributes": {"_FillValue": "NaN"}}).encode()) == ()
    assert cf_missing(json.dumps({}).encode()) == ()


def test_manifests_without_sum_and_count_read_them_as_unknown(tmp_path: Path) -> None:
    repo = Repository.create(tmp_path.as_uri(), config={"chunk_statistics": ["/t"]})
    session = repo.writable_session("main")
    session.create_array("/t", (8,), (4,), "float64", fill_value=-1.0)
    session.set_chunk_values("/t", (0,), np.array([1.0, 2.0, -1.0, 4.0]))
    session.set_chunk_values("/t", (1,), np.array([5.0, 6.0, 7.0, 8.0]))
    session.commit("stats")
    node = repo.readonly_session().get_node("/t")
    for manifest in node.manifests:  # rewritten as manifests were before the two columns
        key = manifest_key(manifest.manifest_id)
        table = decode_manifest(repo.storage.get(key), key).drop_columns(["stat_sum", "stat_count"])
        repo.storage.put(key, encode_manifest(table, presorted=True))
    reader = Repository.open(tmp_path.as_uri()).readonly_session()
    stats = reader.chunk_stats("/t")
    assert stats.column("stat_sum").to_pylist() == [None, None]
    assert stats.column("stat_count").to_pylist() == [None, None]
    assert stats.column("stat_max").to_pylist() == [4.0, 8.0]  # the older columns still read


def test_sum_and_count_survive_a_fork_merge_and_a_repack(tmp_path: Path) -> None:
    repo = Repository.create(tmp_path.as_uri(), config={"chunk_statistics": ["/t"]})
    session = repo.writable_session("main")
    session.create_array("/t", (8,), (4,), "float64", fill_value=-1.0)
    session.commit("array")
    session = repo.writable_session("main")
    fork = session.fork()
    fork.set_chunk_values("/t", (1,), np.array([5.0, 6.0, np.nan, 8.0]))
    session.set_chunk_values("/t", (0,), np.array([1.0, 2.0, -1.0, 4.0]))
    session.merge(fork)
    session.commit("a chunk from the session, one from a fork")
    want = {(0,): (7.0, 3), (1,): (19.0, 3)}

    def sums() -> dict[tuple[int, ...], tuple[float, int]]:
        stats = repo.readonly_session().chunk_stats("/t").to_pylist()
        return {tuple(r["coord"]): (r["stat_sum"], r["stat_count"]) for r in stats}

    assert sums() == want
    single = {
        "chunk-manifests": {
            "sets": [{"single": {"arrays-per-manifest": 1, "cardinality": None}}],
            "rules": [{"path": ".*", "target": "single"}],
        }
    }
    repo.rewrite_manifests(single, "repack")
    assert sums() == want

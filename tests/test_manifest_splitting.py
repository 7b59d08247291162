"""Manifest sets, splitting of huge arrays, preload and repacking, end to end on a repository."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import Repository
from icechunk_spark.core.manifest_writes import ManifestParts
from icechunk_spark.storage import open_storage
from tests.support.counting import CountingStorage

BIG_SHAPE = (2000, 1000)  # 2,000,000 chunks of one element


def _grid_coords(shape: tuple[int, ...], start: int = 0) -> np.ndarray:
    return np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1) + np.array(
        [start, 0]
    )


def _native_refs(n: int) -> dict[str, object]:
    # Refs into one (never read) chunk file at distinct offsets: the refs are what we measure.
    return {
        "chunk_id": np.full(n, "PACKED", dtype=object),
        "offset": np.arange(n, dtype=np.uint64) * 4,
        "length": np.full(n, 4, np.uint64),
    }


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory):
    """A 2,000,000-chunk variable, three coordinate arrays and fifty small arrays."""
    url = tmp_path_factory.mktemp("split").as_uri()
    repo = Repository.create(url, config={"inline_chunk_threshold_bytes": 64})
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/time", shape=(2000,), chunk_shape=(100,), dtype="int64")
    session.create_array("/lat", shape=(1000,), chunk_shape=(100,), dtype="float32")
    session.create_array("/lon", shape=(1000,), chunk_shape=(100,), dtype="float32")
    for name in ("time", "lat", "lon"):
        n = session.get_node(f"/{name}").meta.grid_shape[0]
        session.set_chunk_refs(
            f"/{name}", {"coord": np.arange(n).reshape(-1, 1), "inline_data": [b"c"] * n}
        )
    for i in range(50):
        session.create_array(f"/small{i}", shape=(10,), chunk_shape=(1,), dtype="int8")
        session.set_chunk_refs(
            f"/small{i}", {"coord": np.arange(10).reshape(-1, 1), "inline_data": [b"s"] * 10}
        )
    session.create_array(
        "/var", shape=BIG_SHAPE, chunk_shape=(1, 1), dtype="float32", dimension_names=["time", "x"]
    )
    session.set_chunk_refs("/var", {"coord": _grid_coords(BIG_SHAPE), **_native_refs(2_000_000)})
    session.commit("datacube")
    return url


def _counting(url: str) -> tuple[Repository, CountingStorage]:
    storage = CountingStorage(open_storage(url))
    return Repository.open(storage), storage


def test_layout_small_arrays_share_one_manifest_and_the_big_one_is_split(big_repo):
    repo = Repository.open(big_repo)
    manifests = repo.manifests()
    by_set = {}
    for m in manifests:
        by_set.setdefault(m.set_name, []).append(m)
    [coords] = by_set["coordinates"]
    assert len(coords.arrays) == 53 and "/time" in coords.arrays
    assert sorted(m.refs for m in by_set["default"]) == [1_000_000, 1_000_000]
    assert all(m.arrays == ("/var",) for m in by_set["default"])
    total = sum(m.refs for m in manifests)
    assert total == 2_000_000 + 20 + 10 + 10 + 500


def test_reading_time_fetches_only_the_small_manifest(big_repo):
    repo, storage = _counting(big_repo)
    reader = repo.readonly_session()
    assert reader.get_chunk("/time", (3,)) == b"c"
    if repo.handle.preload_thread is not None:
        repo.handle.preload_thread.join()  # the default config preloads the manifest holding /time
    coords_bytes = next(m.bytes for m in repo.manifests() if m.set_name == "coordinates")
    # One manifest GET in all (preload and read share it), of exactly the small manifest.
    assert storage.gets["m"] == 1
    assert storage.get_bytes["m"] == coords_bytes


def test_preload_fetches_the_coordinate_manifest_in_the_background(big_repo):
    repo, storage = _counting(big_repo)
    repo.readonly_session()
    assert repo.handle.preload_thread is not None
    repo.handle.preload_thread.join(timeout=30)
    assert storage.gets["m"] == 1
    [coords] = [m for m in repo.manifests() if m.set_name == "coordinates"]
    assert repo.handle.manifest_cache.is_cached(coords.id)


def test_commit_touching_one_small_array_writes_exactly_one_manifest(big_repo):
    repo, storage = _counting(big_repo)
    session = repo.writable_session()
    session.set_chunk("/small7", (3,), b"new")
    session.commit("one small array")
    assert storage.puts["m"] == 1
    assert repo.readonly_session().get_chunk("/small7", (3,)) == b"new"


def test_append_along_the_split_dimension_writes_only_the_last_piece(big_repo):
    repo, storage = _counting(big_repo)
    session = repo.writable_session()
    node = session.get_node("/var")
    before = {m.manifest_id for m in node.manifests}
    doc = node.zarr_json.replace(b"[2000, 1000]", b"[2001, 1000]")
    session.set_node_metadata("/var", doc)
    session.set_chunk_refs(
        "/var", {"coord": _grid_coords((1, 1000), start=2000), **_native_refs(1000)}
    )
    session.commit("append one step")
    assert storage.puts["m"] == 1
    reader = repo.readonly_session()
    assert reader.get_chunk_ref("/var", (2000, 999)).offset == 999 * 4
    assert reader.get_chunk_ref("/var", (5, 5)).offset == (5 * 1000 + 5) * 4
    after = reader.get_node("/var").manifests
    # Pieces hold 1,000 time steps each: the full ones are linked unchanged, a third one is new.
    assert before < {m.manifest_id for m in after}
    assert [m.extent[0] for m in after] == [(0, 1000), (1000, 2000), (2000, 2001)]


def test_rewrite_manifests_repacks_under_a_new_config(tmp_path):
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    for i in range(4):
        session.create_array(f"/a{i}", shape=(100,), chunk_shape=(1,), dtype="int8")
        session.set_chunk_refs(
            f"/a{i}", {"coord": np.arange(100).reshape(-1, 1), "inline_data": [b"x"] * 100}
        )
    session.commit("four arrays")
    assert len(repo.manifests()) == 1
    config = {
        "chunk-manifests": {
            "sets": [{"single": {"arrays-per-manifest": 1, "cardinality": None}}],
            "rules": [{"path": ".*", "target": "single"}],
        }
    }
    repo.rewrite_manifests(config, "one manifest per array")
    manifests = repo.manifests()
    assert sorted(m.arrays for m in manifests) == [("/a0",), ("/a1",), ("/a2",), ("/a3",)]
    assert Repository.open(tmp_path.as_uri()).manifest_config.set("single").arrays_per_manifest == 1
    assert repo.readonly_session().get_chunk("/a3", (99,)) == b"x"


def test_split_along_a_named_dimension(tmp_path):
    config = {
        "manifests": {
            "chunk-manifests": {
                "sets": [
                    {
                        "by-time": {
                            "max-manifest-size": None,
                            "arrays-per-manifest": 1,
                            "cardinality": None,
                            "split-along": "time",
                            "chunks-per-split": 10,
                        }
                    }
                ],
                "rules": [{"path": "/var", "target": "by-time"}],
            }
        }
    }
    repo = Repository.create(tmp_path.as_uri(), config=config)
    session = repo.writable_session()
    session.create_array(
        "/var", shape=(35, 4), chunk_shape=(1, 1), dtype="int8", dimension_names=["time", "x"]
    )
    session.set_chunk_refs("/var", {"coord": _grid_coords((35, 4)), "inline_data": [b"v"] * 140})
    session.commit("split")
    extents = sorted(m.extent[0] for m in repo.readonly_session().get_node("/var").manifests)
    assert extents == [(0, 10), (10, 20), (20, 30), (30, 35)]
    assert repo.readonly_session().get_chunk("/var", (34, 3)) == b"v"


def test_pieces_are_built_a_few_at_a_time_and_written_all(tmp_path, monkeypatch):
    """Merging and encoding a split array's pieces is CPU work: at most
    PIECES_BUILT_AT_ONCE at a time, on a pool with more threads, and every piece written."""
    import threading

    from icechunk_spark.core import split_writes

    monkeypatch.setattr(split_writes, "PIECES_BUILT_AT_ONCE", 2)
    active, most, lock = [0], [0], threading.Lock()
    encode = split_writes.encode_manifest_rows

    def counting(*args, **kwargs):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            threading.Event().wait(0.02)  # long enough for the other pool threads to pile up
            return encode(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(split_writes, "encode_manifest_rows", counting)
    sets = {"max-manifest-size": None, "arrays-per-manifest": 1, "cardinality": None}
    split = {"split-along": "time", "chunks-per-split": 5}
    config = {
        "manifests": {
            "chunk-manifests": {
                "sets": [{"by-time": {**sets, **split}}],
                "rules": [{"path": "/var", "target": "by-time"}],
            }
        }
    }
    repo = Repository.create(tmp_path.as_uri(), config=config)
    session = repo.writable_session()
    session.create_array(
        "/var", shape=(40, 2), chunk_shape=(1, 1), dtype="int8", dimension_names=["time", "x"]
    )
    session.set_chunk_refs("/var", {"coord": _grid_coords((40, 2)), "inline_data": [b"v"] * 80})
    session.commit("eight pieces")
    assert most[0] == 2
    assert len(repo.readonly_session().get_node("/var").manifests) == 8
    assert repo.readonly_session().get_chunk("/var", (39, 1)) == b"v"


def test_a_change_to_one_of_many_arrays_sharing_a_manifest_keeps_every_other_chunk(tmp_path):
    # Twelve arrays share one manifest; each commit changes one (the first, one in the middle,
    # the last, two at once), so the others' rows are carried over as slices of the old
    # manifest, side by side. Every chunk of every array reads back after each commit.
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    expected: dict[tuple[str, tuple[int]], bytes] = {}
    for i in range(12):
        session.create_array(f"/a{i:02d}", shape=(3,), chunk_shape=(1,), dtype="int8")
        for k in range(3):
            expected[(f"/a{i:02d}", (k,))] = f"{i}-{k}".encode()
            session.set_chunk(f"/a{i:02d}", (k,), expected[(f"/a{i:02d}", (k,))])
    session.commit("twelve arrays")
    assert len(repo.manifests()) == 1
    for step, changed in enumerate([["/a00"], ["/a05"], ["/a11"], ["/a03", "/a08"]]):
        session = repo.writable_session()
        for path in changed:
            expected[(path, (1,))] = f"step {step}".encode()
            session.set_chunk(path, (1,), expected[(path, (1,))])
        session.commit(f"step {step}")
        (manifest,) = repo.manifests()
        assert len(manifest.arrays) == 12
        reader = repo.readonly_session()
        assert {key: reader.get_chunk(*key) for key in expected} == expected


def test_arrays_carried_into_a_rewritten_manifest_share_one_ref_where_theirs_are_equal(tmp_path):
    # The new snapshot's nodes outlive the commit; a ref and a tuple for each of thousands of
    # carried arrays would be that many more objects for the interpreter's collector to walk.
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    for i in range(8):
        session.create_array(f"/a{i}", shape=(3,), chunk_shape=(1,), dtype="int8")
        for k in (0, 1, 2) if i < 6 else (0, 2):  # six of 3 refs, two of 2: extents alike
            session.set_chunk(f"/a{i}", (k,), bytes([i, k]))
    session.commit("eight arrays")
    session = repo.writable_session()
    session.set_chunk("/a0", (0,), b"new")
    session.commit("one changed")
    nodes = {n.path: n for n in repo.readonly_session().list_nodes() if n.type == "array"}
    (manifest_id,) = {m.manifest_id for n in nodes.values() for m in n.manifests}
    three = {id(nodes[f"/a{i}"].manifests) for i in range(1, 6)}
    two = {id(nodes[f"/a{i}"].manifests) for i in (6, 7)}
    assert len(three) == len(two) == 1 and three != two
    assert id(nodes["/a0"].manifests) not in three  # the changed array has its own
    assert nodes["/a1"].manifests[0].ref_count == 3 and nodes["/a6"].manifests[0].ref_count == 2
    assert nodes["/a1"].manifests[0].manifest_id == manifest_id
    assert nodes["/a1"].manifests[0].extent == nodes["/a6"].manifests[0].extent == ((0, 3),)
    assert repo.readonly_session().get_chunk("/a7", (2,)) == bytes([7, 2])


def test_arrays_kept_from_two_old_manifests_are_packed_into_one(tmp_path):
    # Bins of 6 refs: four arrays of 3 chunks take two manifests. Emptying one array of each
    # puts the other two, unchanged, into one new manifest: their rows come from both.
    config = {
        "manifests": {
            "chunk-manifests": {
                "sets": [{"small": {"max-manifest-size": 6, "cardinality": None}}],
                "rules": [{"path": ".*", "target": "small"}],
            }
        }
    }
    repo = Repository.create(tmp_path.as_uri(), config=config)
    session = repo.writable_session()
    for i in range(4):
        session.create_array(f"/a{i}", shape=(3,), chunk_shape=(1,), dtype="int8")
        for k in range(3):
            session.set_chunk(f"/a{i}", (k,), f"{i}{k}".encode())
    session.commit("four arrays")
    first, second = (m.arrays for m in repo.manifests())
    emptied, kept = (first[0], second[0]), (first[1], second[1])
    session = repo.writable_session()
    for path in emptied:
        for k in range(3):
            session.delete_chunk(path, (k,))
    session.commit("empty one array of each manifest")

    (manifest,) = repo.manifests()
    assert sorted(manifest.arrays) == sorted(kept)
    reader = repo.readonly_session()
    for path in kept:
        assert [reader.get_chunk(path, (k,)) for k in range(3)] == [
            f"{path[2]}{k}".encode() for k in range(3)
        ]
    for path in emptied:
        assert reader.get_chunk(path, (0,)) is None


def test_carried_rows_join_only_rows_that_follow_them_in_the_same_table():
    one, other = pa.table({"x": [1, 2, 3, 4]}), pa.table({"x": [1, 2, 3, 4]})
    fresh = pa.table({"x": [9]})
    parts = ManifestParts()
    parts.carry(one, 0, 1)
    parts.carry(one, 1, 3)  # follows: one slice
    parts.carry(other, 3, 4)  # another table
    parts.carry(other, 0, 1)  # the same table, but not what follows
    parts.add(fresh)
    parts.carry(other, 1, 2)  # follows rows of other, but a fresh table came between
    tables = parts.tables()
    assert [t.column("x").to_pylist() for t in tables] == [[1, 2, 3], [4], [1], [9], [2]]
    assert ManifestParts().tables() == []


def test_a_piece_rewritten_for_a_few_chunks_is_kept_decoded_and_an_imported_one_is_not(tmp_path):
    """The next commit to a piece a commit rewrote for a few changed chunks finds it decoded
    (it would read a piece of a million refs back whole: 0.3 s), and what is kept is what
    decoding the file gives. A piece an import wrote is not kept."""
    from icechunk_spark.format.keys import manifest_key
    from icechunk_spark.format.manifest import decode_manifest

    sets = {"max-manifest-size": None, "arrays-per-manifest": 1, "cardinality": None}
    config = {
        "manifests": {
            "chunk-manifests": {
                "sets": [{"by-time": {**sets, "split-along": "time", "chunks-per-split": 10}}],
                "rules": [{"path": "/var", "target": "by-time"}],
            }
        }
    }
    repo = Repository.create(tmp_path.as_uri(), config=config)
    cache = repo.handle.manifest_cache
    session = repo.writable_session()
    session.create_array(
        "/var", shape=(30, 2), chunk_shape=(1, 1), dtype="int8", dimension_names=["time", "x"]
    )
    session.set_chunk_refs("/var", {"coord": _grid_coords((30, 2)), "inline_data": [b"v"] * 60})
    session.commit("three pieces")
    imported = repo.readonly_session().get_node("/var").manifests
    assert not any(cache.is_cached(m.manifest_id) for m in imported)

    for k, coord in enumerate([(12, 1), (15, 0), (15, 0)]):
        session = repo.writable_session()
        session.set_chunk("/var", coord, bytes([k]))
        fetched = cache.fetches
        session.commit(f"one chunk of the middle piece, {k}")
        # The first change reads the imported piece; the later ones read nothing.
        assert cache.fetches - fetched == (1 if k == 0 else 0)
        (piece,) = (
            m for m in repo.readonly_session().get_node("/var").manifests if m.extent[0] == (10, 20)
        )
        assert cache.is_cached(piece.manifest_id)
        key = manifest_key(piece.manifest_id)
        assert cache.get(piece.manifest_id).equals(decode_manifest(repo.storage.get(key), key))
    reader = Repository.open(tmp_path.as_uri()).readonly_session()
    assert reader.get_chunk("/var", (15, 0)) == bytes([2])
    assert reader.get_chunk("/var", (12, 1)) == bytes([0])
    assert reader.get_chunk("/var", (29, 1)) == b"v"


@pytest.mark.parametrize("held_back", [True, False])
def test_a_big_packed_manifest_rewritten_for_a_few_chunks_is_kept_decoded(
    tmp_path, monkeypatch, held_back
):
    """As a split array's piece: a manifest bigger than small ones kept decoded, rewritten for
    one changed chunk, is kept decoded for the next commit, whether it is held back to be
    written with the structure file or written at once (too big for that); one an import
    wrote is not."""
    from icechunk_spark.core import flush, manifest_writes
    from icechunk_spark.format.keys import manifest_key
    from icechunk_spark.format.manifest import decode_manifest

    monkeypatch.setattr(manifest_writes, "REMEMBERED_ROWS", 10)  # 30 refs are "big" here
    if not held_back:
        monkeypatch.setattr(flush, "DEFERRED_MANIFEST_ROWS", 10)
    repo = Repository.create(tmp_path.as_uri())
    cache = repo.handle.manifest_cache
    session = repo.writable_session()
    session.create_array("/a", shape=(30,), chunk_shape=(1,), dtype="int8")
    session.set_chunk_refs(
        "/a", {"coord": np.arange(30).reshape(-1, 1), "inline_data": [b"v"] * 30}
    )
    session.commit("an import")
    (imported,) = repo.readonly_session().get_node("/a").manifests
    assert not cache.is_cached(imported.manifest_id)
    for k in range(3):
        session = repo.writable_session()
        session.set_chunk("/a", (7 * k,), bytes([k]))
        fetched = cache.fetches
        session.commit(f"one chunk, {k}")
        assert cache.fetches - fetched == (1 if k == 0 else 0)  # the import's, then none
        (manifest,) = repo.readonly_session().get_node("/a").manifests
        assert cache.is_cached(manifest.manifest_id)  # asked before ``get`` would load it
        key = manifest_key(manifest.manifest_id)
        assert cache.get(manifest.manifest_id).equals(decode_manifest(repo.storage.get(key), key))
    reader = Repository.open(tmp_path.as_uri()).readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in (0, 7, 14, 29)] == [b"\0", b"\1", b"\2", b"v"]

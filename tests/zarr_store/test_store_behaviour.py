"""How the store maps Zarr keys onto the repository, and what it does with bad input."""

from __future__ import annotations

import asyncio
import pickle
import uuid
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import sync

from icechunk_spark import ForkSession, InvalidInputError, ReadOnlyError, Repository
from icechunk_spark.errors import ReadOnlyStoreError
from icechunk_spark.zarr_store import IcechunkStore
from tests.support.helpers import create_repo

from .raw_keys import array_doc, group_doc

prototype = default_buffer_prototype()


def buf(data: bytes) -> Buffer:
    return cpu.Buffer.from_bytes(data)


def get(store: IcechunkStore, key: str, byte_range: Any = None) -> bytes | None:
    value = sync(store.get(key, prototype, byte_range))
    return None if value is None else value.to_bytes()


def keys(store: IcechunkStore) -> list[str]:
    async def collect() -> list[str]:
        return sorted([k async for k in store.list()])

    return sync(collect())


@pytest.fixture
def repo() -> Repository:
    return Repository.create(f"memory://{uuid.uuid4().hex}")


@pytest.fixture
def session(repo: Repository) -> Any:
    return repo.writable_session("main")


@pytest.mark.parametrize(
    ("encoding", "shape", "chunks", "expected"),
    [
        ({"name": "default"}, (4, 4), (2, 2), ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]),
        ({"name": "default", "separator": "."}, (4,), (2,), ["c.0", "c.1"]),
        ({"name": "v2"}, (4, 4), (2, 4), ["0.0", "1.0"]),
        ({"name": "v2", "separator": "/"}, (2, 2), (1, 2), ["0/0", "1/0"]),
        ({"name": "default"}, (), (), ["c"]),
        ({"name": "v2"}, (), (), ["0"]),
    ],
)
def test_zarr_writes_each_chunk_key_spelling_and_reads_it_back_after_commit(
    repo: Repository,
    session: Any,
    encoding: dict[str, str],
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    expected: list[str],
) -> None:
    root = zarr.group(store=session.store)
    data = np.arange(1, int(np.prod(shape)) + 1, dtype="int16").reshape(shape)
    array = root.create_array(
        "grp/arr",
        shape=shape,
        chunks=chunks if shape else "auto",
        dtype="int16",
        chunk_key_encoding=encoding,
        fill_value=0,
    )
    array[...] = data
    session.commit("write")

    store = repo.readonly_session("main").store
    assert keys(store) == sorted(
        ["zarr.json", "grp/zarr.json", "grp/arr/zarr.json"] + [f"grp/arr/{k}" for k in expected]
    )
    np.testing.assert_array_equal(zarr.open_array(store, path="grp/arr", mode="r")[...], data)


def test_metadata_bytes_round_trip_exactly(session: Any) -> None:
    document = b'{"zarr_format":3,   "node_type":"group", "attributes": {"b": 1, "a": 2}}\n'
    sync(session.store.set("g/zarr.json", buf(document)))
    assert get(session.store, "g/zarr.json") == document
    assert session.get_node("/g").zarr_json == document


def test_never_written_chunks_read_as_missing_and_fill(session: Any) -> None:
    array = zarr.create_array(
        session.store, name="a", shape=(4,), chunks=(2,), dtype="int8", fill_value=7
    )
    array[:2] = 1
    assert get(session.store, "a/c/1") is None
    assert array[:].tolist() == [1, 1, 7, 7]


@pytest.mark.parametrize(
    ("byte_range", "expected"),
    [
        (None, b"0123456789" * 100),
        (RangeByteRequest(5, 15), b"5678901234"),
        (RangeByteRequest(995, 2000), b"56789"),
        (RangeByteRequest(3, 3), b""),
        (OffsetByteRequest(990), b"0123456789"),
        (SuffixByteRequest(3), b"789"),
        (SuffixByteRequest(5000), b"0123456789" * 100),
    ],
)
def test_byte_ranges_of_committed_chunks_on_every_backend(
    backend: Any, byte_range: Any, expected: bytes
) -> None:
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 100})
    writer = repo.writable_session("main")
    sync(writer.store.set("zarr.json", buf(array_doc(1))))
    sync(writer.store.set("c/0", buf(b"0123456789" * 100)))  # a chunk file
    sync(writer.store.set("c/1", buf(b"0123456789" * 100)[:50]))  # inline in the manifest
    writer.commit("write")
    store = repo.readonly_session("main").store
    assert get(store, "c/0", byte_range) == expected
    assert (
        get(store, "c/1", byte_range) == (b"0123456789" * 5)[slice(*_python_slice(byte_range, 50))]
    )
    assert sync(store.getsize("c/0")) == 1000
    metadata = array_doc(1)
    assert (
        get(store, "zarr.json", byte_range)
        == metadata[slice(*_python_slice(byte_range, len(metadata)))]
    )


def _python_slice(byte_range: Any, length: int) -> tuple[int, int]:
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetByteRequest):
        return byte_range.offset, length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    return 0, length


@pytest.mark.parametrize(
    "byte_range",
    [
        (0, 2),
        RangeByteRequest(4, 2),
        RangeByteRequest(-1, 2),
        OffsetByteRequest(-1),
        SuffixByteRequest(-2),
    ],
)
def test_bad_byte_ranges_are_invalid_input(session: Any, byte_range: Any) -> None:
    sync(session.store.set("zarr.json", buf(array_doc(1))))
    sync(session.store.set("c/0", buf(b"abcd")))
    with pytest.raises(InvalidInputError, match=r"byte_range|byte range"):
        get(session.store, "c/0", byte_range)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("foo", "no array above it"),
        ("grp/c/0", "is a group"),
        ("arr/c/x", "not a chunk key of array '/arr'"),
        ("arr/c/0/0", "not a chunk key of array '/arr'"),
        ("arr/c/01", "not a chunk key of array '/arr'"),
        ("arr/0", "so its first chunk is 'arr/c/0'"),
        ("arr/c/64", "outside the chunk grid"),
        ("arr//c/0", "invalid key"),
        ("/arr/c/0", "invalid key"),
        ("", "invalid key"),
        ("grp/./zarr.json", "not allowed"),
        ("grp/../zarr.json", "not allowed"),
    ],
)
def test_keys_zarr_never_writes_are_refused_and_leave_the_repository_alone(
    repo: Repository, session: Any, key: str, message: str
) -> None:
    store = session.store
    sync(store.set("grp/zarr.json", buf(group_doc())))
    sync(store.set("arr/zarr.json", buf(array_doc(1))))
    sync(store.set("arr/c/1", buf(b"one")))
    before = keys(store)

    with pytest.raises(InvalidInputError, match=message):
        sync(store.set(key, buf(b"data")))
    with pytest.raises(InvalidInputError, match=message):
        sync(store.set_if_not_exists(key, buf(b"data")))
    assert get(store, key) is None
    assert not sync(store.exists(key))
    with pytest.raises(FileNotFoundError):
        sync(store.getsize(key))
    sync(store.delete(key))  # a key that cannot hold a value holds none: nothing to delete

    assert keys(store) == before
    session.commit("only the good keys")
    assert keys(repo.readonly_session("main").store) == before


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"zarr_format": 2, "node_type": "group"}', "only Zarr v3"),
        (b'{"zarr_format": 3, "node_type": "table"}', "node_type 'table'"),
        (b'{"zarr_format": 3, "node_type": "array", "shape": [4]}', "missing or mistypes"),
    ],
)
def test_malformed_zarr_json_is_refused_and_the_old_document_kept(
    session: Any, document: bytes, message: str
) -> None:
    store = session.store
    sync(store.set("a/zarr.json", buf(array_doc(1))))
    sync(store.set("a/c/0", buf(b"x")))
    with pytest.raises(InvalidInputError, match=message):
        sync(store.set("a/zarr.json", buf(document)))
    assert get(store, "a/zarr.json") == array_doc(1)
    assert get(store, "a/c/0") == b"x"


def test_every_write_through_a_read_only_store_is_refused(repo: Repository) -> None:
    store = repo.readonly_session("main").store
    assert store.read_only
    writes = [
        store.set("zarr.json", buf(group_doc())),
        store.set_if_not_exists("zarr.json", buf(group_doc())),
        store.delete("zarr.json"),
        store.delete("missing"),
        store.delete_dir(""),
        store.clear(),
    ]
    for write in writes:
        with pytest.raises(ReadOnlyStoreError) as raised:
            sync(write)
        assert isinstance(raised.value, ReadOnlyError) and isinstance(raised.value, ValueError)
        assert "read-only mode" in str(raised.value)
    with pytest.raises(ReadOnlyError, match="cannot back a writable store"):
        IcechunkStore(repo.readonly_session("main"), read_only=False)
    with pytest.raises(ValueError, match="read-only"):
        zarr.create_array(store, name="a", shape=(2,), dtype="int8")


def test_the_store_turns_read_only_when_its_session_commits(session: Any) -> None:
    store = session.store
    zarr.group(store=store)
    session.commit("root")
    assert store.read_only
    with pytest.raises(ReadOnlyStoreError):
        sync(store.set("a/zarr.json", buf(group_doc())))


def test_deleting_missing_keys_records_no_change(session: Any) -> None:
    store = session.store
    sync(store.set("zarr.json", buf(array_doc(1))))
    session.commit("array")
    writer = Repository(session.handle).writable_session("main")
    for key in ["c/3", "c/63", "c/64", "missing/zarr.json", "missing/c/0", "zarr.json/x"]:
        sync(writer.store.delete(key))
    assert not writer.has_uncommitted_changes()


def test_a_key_replaces_a_node_of_another_type(session: Any) -> None:
    store = session.store
    sync(store.set("x/zarr.json", buf(group_doc())))
    sync(store.set("x/zarr.json", buf(array_doc(1))))
    sync(store.set("x/c/0", buf(b"chunk")))
    assert session.get_node("/x").type == "array"
    sync(store.set("x/zarr.json", buf(group_doc())))
    assert session.get_node("/x").type == "group"
    assert get(store, "x/c/0") is None


def test_delete_of_zarr_json_removes_that_node_only(session: Any) -> None:
    store = session.store
    root = zarr.group(store=store)
    root.create_array("sub/a", shape=(2,), dtype="int8")[:] = 1
    sync(store.delete("sub/zarr.json"))
    assert sorted(n.path for n in session.list_nodes()) == ["/", "/sub/a"]
    assert keys(store) == ["sub/a/c/0", "sub/a/zarr.json", "zarr.json"]


def test_listing_by_directory_and_prefix(session: Any) -> None:
    store = session.store
    root = zarr.group(store=store)
    root.create_array("a", shape=(4, 4), chunks=(2, 2), dtype="int8")[:] = 1
    root.create_group("g").create_array("b", shape=(2,), chunks=(1,), dtype="int8")[:] = 1
    root.create_group("a-b")

    async def listing(method: str, prefix: str) -> list[str]:
        return sorted([k async for k in getattr(store, method)(prefix)])

    assert sync(listing("list_dir", "")) == ["a", "a-b", "g", "zarr.json"]
    assert sync(listing("list_dir", "a")) == ["c", "zarr.json"]
    assert sync(listing("list_dir", "a/c")) == ["0", "1"]
    assert sync(listing("list_dir", "a/c/1/")) == ["0", "1"]
    assert sync(listing("list_dir", "g")) == ["b", "zarr.json"]
    assert sync(listing("list_prefix", "a")) == [
        "a-b/zarr.json",
        "a/c/0/0",
        "a/c/0/1",
        "a/c/1/0",
        "a/c/1/1",
        "a/zarr.json",
    ]
    assert sync(listing("list_prefix", "a/c/1")) == ["a/c/1/0", "a/c/1/1"]
    assert sync(listing("list_prefix", "g/b/c/")) == ["g/b/c/0", "g/b/c/1"]
    sync(store.delete_dir("a/c/1"))
    assert sync(listing("list_prefix", "a/")) == ["a/c/0/0", "a/c/0/1", "a/zarr.json"]


def test_chunks_outside_a_shrunk_grid_are_not_listed(session: Any) -> None:
    store = session.store
    sync(store.set("zarr.json", buf(array_doc(1))))
    sync(store.set("c/10", buf(b"x")))
    doc = array_doc(1).replace(b'"shape": [64]', b'"shape": [5]')
    sync(store.set("zarr.json", buf(doc)))
    assert keys(store) == ["zarr.json"]
    assert get(store, "c/10") is None


def test_set_if_not_exists_keeps_exactly_one_of_concurrent_values(session: Any) -> None:
    store = session.store
    sync(store.set("zarr.json", buf(array_doc(1))))
    values = [bytes([i]) * 1000 for i in range(16)]  # chunk files: the set runs in threads

    async def race() -> None:
        await asyncio.gather(*(store.set_if_not_exists("c/0", buf(v)) for v in values))

    sync(race())
    winner = get(store, "c/0")
    assert winner in values
    sync(store.set_if_not_exists("c/0", buf(b"late")))
    assert get(store, "c/0") == winner


def test_read_only_stores_pickle_at_their_snapshot(tmp_path: Any) -> None:
    repo = Repository.create((tmp_path / "repo").as_uri())
    writer = repo.writable_session("main")
    zarr.create_array(writer.store, name="a", shape=(3,), dtype="int8", fill_value=0)[:] = 5
    first = writer.commit("first")
    store = repo.readonly_session("main").store
    again = repo.writable_session("main")
    zarr.open_array(again.store, path="a")[:] = 9
    again.commit("second")

    copy = pickle.loads(pickle.dumps(store))
    assert copy == store and copy.read_only and copy.session.snapshot_id == first
    assert zarr.open_array(copy, path="a", mode="r")[:].tolist() == [5, 5, 5]
    assert copy != repo.readonly_session("main").store


def test_writable_stores_pickle_as_stores_over_a_fork(tmp_path: Any) -> None:
    repo = Repository.create((tmp_path / "repo").as_uri())
    writer = repo.writable_session("main")
    zarr.create_array(writer.store, name="a", shape=(3,), dtype="int8", fill_value=0)[:] = 5
    copy = pickle.loads(pickle.dumps(writer.store))
    assert isinstance(copy.session, ForkSession) and not copy.read_only
    assert zarr.open_array(copy, path="a", mode="r")[:].tolist() == [5, 5, 5]  # our changes
    zarr.open_array(copy, path="a", mode="r+")[1:] = 7
    assert zarr.open_array(writer.store, path="a", mode="r")[:].tolist() == [5, 5, 5]
    writer.merge(copy.session)
    writer.commit("through the copy")
    reader = repo.readonly_session("main").store
    assert zarr.open_array(reader, path="a", mode="r")[:].tolist() == [5, 7, 7]


def test_stores_are_equal_when_they_show_the_same_data(repo: Repository) -> None:
    writable = repo.writable_session("main")
    assert writable.store == writable.store
    assert writable.store != repo.writable_session("main").store
    assert writable.store != writable.store.with_read_only(True)
    assert repo.readonly_session("main").store == repo.readonly_session("main").store

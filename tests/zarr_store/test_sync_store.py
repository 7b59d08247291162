"""The store's synchronous methods: zarr's ``SupportsGetSync``, ``SupportsSetSync`` and
``SupportsDeleteSync``.

zarr reaches them through ``StorePath.get_sync``/``set_sync``/``delete_sync`` (its
synchronous codec pipeline reads and writes chunks that way, without the event loop). Each must
give exactly what its async twin gives, over a session, a fork of one and a committed snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import (
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
    SupportsSyncStore,
)
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore, StorePath

from icechunk_spark import ForkSession, Repository, Session
from icechunk_spark.errors import InvalidInputError, ReadOnlyStoreError
from icechunk_spark.zarr_store import IcechunkStore
from icechunk_spark.zarr_values import session_lock

from .raw_keys import array_doc, group_doc

prototype = default_buffer_prototype()
BYTE_RANGES = [None, RangeByteRequest(1, 3), OffsetByteRequest(2), SuffixByteRequest(3)]
CUBE = np.arange(24, dtype="int32").reshape(4, 6)  # chunks of 2x3 int32: 24 bytes, chunk files
SMALL = np.arange(1, 9, dtype="uint8")  # chunks of 4 bytes: inline in the manifest
VIRTUAL_FILE = b"ABCDEFGH"  # the two 4-byte chunks of the array /virtual


def buf(data: bytes) -> Buffer:
    return cpu.Buffer.from_bytes(data)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "v.bin").write_bytes(VIRTUAL_FILE)
    container = data.as_uri() + "/"
    repo = Repository.create(
        (tmp_path / "repo").as_uri(),
        config={"inline_chunk_threshold_bytes": 16, "virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    yield repo
    repo.close()
    repo.handle.virtual_reader.close()


def write_arrays(session: Session) -> None:
    """zarr writes /cube and /small (through the async path); /virtual points into v.bin."""
    root = zarr.open_group(session.store, mode="w")
    for name, values, chunks in [("cube", CUBE, (2, 3)), ("small", SMALL, (4,))]:
        root.create_array(name, data=values, chunks=chunks, compressors=None)
    root.create_array("virtual", shape=(8,), chunks=(4,), dtype="uint8", compressors=None)
    for coord in (0, 1):
        session.set_virtual_ref("/virtual", (coord,), "v.bin", 4 * coord, 4)


def store_of(repo: Repository, session: Session, over: str) -> IcechunkStore:
    if over == "fork":
        return session.fork().store
    if over == "committed":
        session.commit("arrays")
        return repo.readonly_session("main").store
    return session.store


@pytest.mark.parametrize("over", ["session", "fork", "committed"])
def test_sync_reads_give_the_bytes_of_async_reads(repo: Repository, over: str) -> None:
    session = repo.writable_session("main")
    write_arrays(session)
    store = store_of(repo, session, over)
    assert isinstance(store, SupportsSyncStore)
    keys = sorted(sync(_collect(store)))
    kinds = {
        ref.kind for name in ("cube", "small", "virtual") for ref in _refs(store.session, name)
    }
    assert kinds == {"native", "inline", "virtual"}  # every way a chunk is read
    np.testing.assert_array_equal(zarr.open_array(store, path="cube", mode="r")[...], CUBE)
    for key in keys:
        for byte_range in BYTE_RANGES:
            expected = sync(store.get(key, prototype, byte_range))
            observed = StorePath(store, key).get_sync(byte_range=byte_range)
            assert expected is not None and observed is not None, key
            assert observed.to_bytes() == expected.to_bytes(), (key, byte_range)
    assert store.get_sync("cube/c/0/0", prototype=prototype) is not None
    assert store.get_sync("virtual/c/1").to_bytes() == b"EFGH"  # type: ignore[union-attr]
    for missing in ("nothing/zarr.json", "cube/c/9/9", "cube/c/0", "no/such/key"):
        assert store.get_sync(missing) is None


@pytest.mark.parametrize("over", ["session", "fork"])
def test_zarr_reads_what_sync_writes_wrote(repo: Repository, over: str) -> None:
    # zarr encodes the chunks into a MemoryStore; they are copied key by key with set_sync.
    source = MemoryStore()
    zarr.create_array(source, name="cube", data=CUBE, chunks=(2, 3), compressors=None)
    encoded = {k: sync(source.get(k, prototype)) for k in sync(_collect(source))}
    session = repo.writable_session("main")
    for key, value in encoded.items():  # a fork writes chunks only: the session, metadata
        if key.endswith("zarr.json"):
            StorePath(session.store, key).set_sync(value)
    writer = session.fork() if over == "fork" else session
    for key, value in encoded.items():
        if not key.endswith("zarr.json"):
            StorePath(writer.store, key).set_sync(value)
    if isinstance(writer, ForkSession):
        session.merge(writer)
    session.commit("written with set_sync")
    store = repo.readonly_session("main").store
    np.testing.assert_array_equal(zarr.open_array(store, path="cube", mode="r")[...], CUBE)
    for key, value in encoded.items():
        assert store.get_sync(key).to_bytes() == value.to_bytes()  # type: ignore[union-attr]


def test_delete_sync_drops_one_chunk_or_one_node(repo: Repository) -> None:
    session = repo.writable_session("main")
    write_arrays(session)
    store = session.store
    StorePath(store, "cube/c/0/0").delete_sync()
    cube = zarr.open_array(store, path="cube", mode="r")[...]
    assert (cube[:2, :3] == 0).all() and (cube[2:] == CUBE[2:]).all()
    store.delete_sync("small/zarr.json")
    assert session.find_node("/small") is None
    assert session.find_node("/cube") is not None
    session.commit("deleted")
    session = repo.writable_session("main")
    for missing in ("cube/c/0/0", "small/zarr.json", "cube/c/9/9", "no/such/key"):
        session.store.delete_sync(missing)  # holds nothing: nothing to do
    assert not session.has_uncommitted_changes()


def test_sync_writes_refuse_what_async_writes_refuse(repo: Repository) -> None:
    session = repo.writable_session("main")
    write_arrays(session)
    store = session.store
    with pytest.raises(InvalidInputError, match="not a Zarr key"):
        store.set_sync("foo", buf(b"x"))
    with pytest.raises(InvalidInputError, match="Zarr v2 metadata"):
        store.set_sync(".zarray", buf(b"{}"))
    with pytest.raises(InvalidInputError):
        store.set_sync("cube/zarr.json", buf(b"not json"))
    with pytest.raises(TypeError, match="must be a zarr Buffer"):
        store.set_sync("cube/c/0/0", b"\x00" * 24)  # type: ignore[arg-type]
    session.commit("arrays")
    for read_only in (repo.readonly_session("main").store, session.store):  # committed: too
        with pytest.raises(ReadOnlyStoreError):
            read_only.set_sync("cube/c/0/0", buf(b"\x00" * 24))
        with pytest.raises(ReadOnlyStoreError):
            read_only.delete_sync("cube/c/0/0")


WRITES: dict[str, Callable[[IcechunkStore], None]] = {
    "set_sync": lambda store: store.set_sync("a/zarr.json", buf(group_doc())),
    "set": lambda store: sync(store.set("a/zarr.json", buf(group_doc()))),
    "set_if_not_exists": lambda store: sync(
        store.set_if_not_exists("b/zarr.json", buf(group_doc()))
    ),
    "delete_sync": lambda store: store.delete_sync("a/zarr.json"),
    "delete": lambda store: sync(store.delete("a/zarr.json")),
}


@pytest.mark.parametrize("write", WRITES)
def test_metadata_changes_hold_the_session_lock_from_check_to_write(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A metadata change looks at the node, then changes it: sync calls come from many
    threads, so no other change of the session's metadata through a store may come between
    (replacing an array by a group deletes, then creates; a delete in between failed it)."""
    session = repo.writable_session("main")
    session.set_node_metadata("/a", array_doc(1))
    held: list[tuple[str, bool]] = []
    lock = session_lock(session)
    for name in ("set_node_metadata", "delete_node"):
        original = getattr(session, name)

        def hooked(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            held.append((_name, lock.locked()))
            return _original(*args, **kw)

        monkeypatch.setattr(session, name, hooked)
    WRITES[write](session.store)
    assert held and all(locked for _, locked in held), held


async def _collect(store: Any) -> list[str]:
    return [key async for key in store.list()]


def _refs(session: Any, name: str) -> list[Any]:
    coords = session.chunk_coords(f"/{name}").tolist()
    return [session.get_chunk_ref(f"/{name}", tuple(c)) for c in coords]

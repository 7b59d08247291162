"""zarr's own store conformance suite (``StoreTests``) over every storage backend.

Two stores: one over a writable session, and one over read-only sessions of committed
snapshots. Our store holds only Zarr metadata and chunks, so the tests of ``StoreTests`` that
store arbitrary bytes under arbitrary keys (``foo``, ``k``, ``zarr.json`` = ``b"bar"``) are
overridden below (the synchronous ones in sync_store_tests.py) with the same checks on real
``zarr.json`` documents and chunk keys; each override says what it changed.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Awaitable, Mapping
from typing import Any

import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync
from zarr.testing.store import StoreTests
from zarr.testing.utils import assert_bytes_equal

from icechunk_spark import ReadOnlyError, Repository, Session
from icechunk_spark.errors import ReadOnlyStoreError
from icechunk_spark.zarr_store import IcechunkStore
from tests.support.helpers import create_repo

from .raw_keys import array_doc, group_doc, read_raw, write_raw
from .sync_store_tests import READ_ONLY_MESSAGE, ReadOnlySyncTests, WritableSyncTests

# Values of 4 bytes go to chunk files in storage, empty ones inline in the manifest: both paths.
REPO_CONFIG = {"inline_chunk_threshold_bytes": 2}
prototype = default_buffer_prototype()


def buf(data: bytes) -> Buffer:
    return cpu.Buffer.from_bytes(data)


class _IcechunkStoreTests(StoreTests[IcechunkStore, cpu.Buffer]):
    """Overrides shared by both stores; ``put`` writes a batch of keys the class's own way."""

    buffer_cls = cpu.Buffer

    async def put(self, store: IcechunkStore, items: Mapping[str, bytes]) -> None:
        raise NotImplementedError

    @pytest.fixture
    def repo(self, backend: Any) -> Repository:
        return create_repo(backend, config=REPO_CONFIG)

    # StoreTests' fixtures are ``async def``; plain ones need no asyncio pytest plugin.
    @pytest.fixture
    def store(self, open_kwargs: dict[str, Any]) -> IcechunkStore:
        return sync(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs: dict[str, Any]) -> IcechunkStore:
        return self.store_cls(**store_kwargs)

    def test_store_repr(self, store: IcechunkStore) -> None:
        assert repr(store).startswith("IcechunkStore(<Session ")
        assert f"read_only={store.read_only}" in repr(store)

    def test_store_supports_writes(self, store: IcechunkStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: IcechunkStore) -> None:
        assert store.supports_listing

    @pytest.mark.parametrize(
        ("keys", "key_ranges"),
        [
            ([], []),
            ([], [("zarr.json", RangeByteRequest(0, 2))]),
            (["c/0"], [("c/0", RangeByteRequest(0, 2)), ("zarr.json", None)]),
            (
                ["c/0/0", "c/0/1", "c/0/2"],
                [
                    ("c/0/0", RangeByteRequest(0, 2)),
                    ("c/0/1", SuffixByteRequest(2)),
                    ("c/0/2", OffsetByteRequest(2)),
                ],
            ),
        ],
    )
    async def test_get_partial_values(
        self, store: IcechunkStore, keys: list[str], key_ranges: list[tuple[str, Any]]
    ) -> None:
        """Changed: zarr.json holds the root's real metadata instead of the bytes b'zarr.json'."""
        for key in keys:
            await self.set(store, key, buf(key.encode()))
        if not keys:
            await self.set(store, "zarr.json", buf(group_doc()))
        observed = await store.get_partial_values(prototype, key_ranges)
        for (key, byte_range), value in zip(key_ranges, observed, strict=True):
            expected = await store.get(key, prototype, byte_range)
            assert value is not None and expected is not None
            assert value.to_bytes() == expected.to_bytes()
        if len(keys) == 3:
            assert [v.to_bytes() for v in observed if v is not None] == [b"c/", b"/1", b"0/2"]

    async def test_getsize_prefix(self, store: IcechunkStore) -> None:
        """Changed: the chunks belong to a real 2-d root array."""
        chunks = {k: b"\x01\x02\x03\x04" for k in ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]}
        await self.put(store, {"zarr.json": array_doc(2), **chunks})
        assert await store.getsize_prefix("c") == 16

    async def test_exists(self, store: IcechunkStore) -> None:
        """Changed: foo/zarr.json holds a group document instead of b'bar'."""
        assert not await store.exists("foo")
        await self.put(store, {"foo/zarr.json": group_doc()})
        assert await store.exists("foo/zarr.json")
        assert not await store.exists("foo")

    async def test_is_empty(self, store: IcechunkStore) -> None:
        """Changed: the key under foo/ is a chunk of array foo, not the arbitrary 'foo/bar'."""
        assert await store.is_empty("")
        await self.set(store, "foo/c/0", buf(b"something"))
        assert not await store.is_empty("")
        assert await store.is_empty("fo")
        assert not await store.is_empty("foo/")
        assert not await store.is_empty("foo")
        assert await store.is_empty("spam/")

    async def test_list(self, store: IcechunkStore) -> None:
        """Changed: foo/zarr.json holds array metadata instead of b''."""
        assert await _collect_aiterator(store.list()) == ()
        items = {"foo/zarr.json": array_doc(1), **{f"foo/c/{i}": b"" for i in range(10)}}
        await self.put(store, items)
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)

    async def test_list_prefix(self, store: IcechunkStore) -> None:
        """Changed: each zarr.json holds a group document instead of b''."""
        prefixes = ("", "a/", "a/b/", "a/b/c/")
        await self.put(store, {p + "zarr.json": group_doc() for p in prefixes})
        for prefix in prefixes:
            observed = sorted(await _collect_aiterator(store.list_prefix(prefix)))
            assert observed == sorted(p + "zarr.json" for p in prefixes if p.startswith(prefix))

    async def test_list_empty_path(self, store: IcechunkStore) -> None:
        """Changed: foo/baz gets a zarr.json too (a chunk needs its array)."""
        items = {
            "foo/bar/zarr.json": array_doc(1),
            "foo/bar/c/1": b"",
            "foo/baz/zarr.json": array_doc(1),
            "foo/baz/c/0": b"",
        }
        await self.put(store, items)
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == sorted(items)
        observed = sorted(await _collect_aiterator(store.list_prefix("foo/bar/")))
        assert observed == ["foo/bar/c/1", "foo/bar/zarr.json"]

    async def test_list_dir(self, store: IcechunkStore) -> None:
        """Changed: a group with child nodes stands in for the arbitrary keys below foo/bar."""
        roots_and_keys: list[tuple[str, dict[str, bytes]]] = [
            ("foo", {"foo/zarr.json": array_doc(1), "foo/c/1": b"\x01"}),
            (
                "bar",
                {
                    "bar/zarr.json": group_doc(),
                    "bar/first_child/zarr.json": array_doc(1),
                    "bar/first_child/c/0": b"1",
                    "bar/second_child/zarr.json": group_doc(),
                },
            ),
        ]
        assert await _collect_aiterator(store.list_dir("")) == ()
        for root, items in roots_and_keys:
            assert await _collect_aiterator(store.list_dir(root)) == ()
            await self.put(store, items)
            expected = sorted({k.removeprefix(root + "/").split("/")[0] for k in items})
            assert sorted(await _collect_aiterator(store.list_dir(root))) == expected
            assert sorted(await _collect_aiterator(store.list_dir(root + "/"))) == expected
        assert await _collect_aiterator(store.list_dir("foo/c")) == ("1",)
        assert sorted(await _collect_aiterator(store.list_dir(""))) == ["bar", "foo"]

    async def test_get_bytes(self, store: IcechunkStore) -> None:
        """Changed: zarr.json holds a real document (its exact bytes) instead of b'hello world'."""
        data = b'{"zarr_format": 3,  "node_type": "group"}'
        await self.set(store, "zarr.json", buf(data))
        assert await store._get_bytes("zarr.json", prototype=prototype) == data
        with pytest.raises(FileNotFoundError):
            await store._get_bytes("nonexistent_key", prototype=prototype)

    def test_get_bytes_sync(self, store: IcechunkStore) -> None:
        """Changed: as test_get_bytes."""
        data = b'{"zarr_format": 3,  "node_type": "group"}'
        sync(self.set(store, "zarr.json", buf(data)))
        assert store._get_bytes_sync("zarr.json", prototype=prototype) == data

    async def test_get_json(self, store: IcechunkStore) -> None:
        """Changed: the JSON is a group document with attributes instead of {'foo': 'bar'}."""
        await self.set(store, "zarr.json", buf(group_doc(foo="bar")))
        doc = await store._get_json("zarr.json", prototype=prototype)
        assert doc == json.loads(group_doc(foo="bar"))

    def test_get_json_sync(self, store: IcechunkStore) -> None:
        """Changed: as test_get_json."""
        sync(self.set(store, "zarr.json", buf(group_doc(foo="bar"))))
        doc = store._get_json_sync("zarr.json", prototype=prototype)
        assert doc == json.loads(group_doc(foo="bar"))


class TestWritableStore(WritableSyncTests, _IcechunkStoreTests):
    """A store over a writable session; raw helpers go straight through the session."""

    store_cls = IcechunkStore

    @pytest.fixture
    def store_kwargs(self, repo: Repository) -> dict[str, Any]:
        return {"session": repo.writable_session("main")}

    async def set(self, store: IcechunkStore, key: str, value: Buffer) -> None:
        write_raw(store.session, key, value.to_bytes())

    async def get(self, store: IcechunkStore, key: str) -> Buffer:
        data = read_raw(store.session, key)
        assert data is not None, f"{key!r} holds nothing"
        return buf(data)

    async def put(self, store: IcechunkStore, items: Mapping[str, bytes]) -> None:
        # Concurrently, as zarr writes: metadata set first must still land before its chunks.
        await store._set_many((k, buf(v)) for k, v in items.items())

    async def test_serializable_store(self, store: IcechunkStore) -> None:
        """Changed: a writable store pickles as a store over a fork of its session. The copy
        reads what the store held and writes on its own until its session merges it, so it is
        a different store (not ``==``); the read-only store runs the round trip unchanged."""
        await store.set("zarr.json", buf(array_doc(1)))
        await store.set("c/0", buf(b"\x01\x02\x03\x04"))
        new_store = pickle.loads(pickle.dumps(store))
        assert new_store != store
        assert new_store.read_only == store.read_only
        assert_bytes_equal(
            await new_store.get("c/0", prototype=prototype), buf(b"\x01\x02\x03\x04")
        )
        await new_store.set("c/1", buf(b"\x05\x06\x07\x08"))
        assert await store.get("c/1", prototype=prototype) is None
        store.session.merge(new_store.session)
        assert_bytes_equal(await store.get("c/1", prototype=prototype), buf(b"\x05\x06\x07\x08"))

    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None:
        """Changed: the writer writes a real zarr.json instead of the arbitrary key 'foo'."""
        store = await self.store_cls.open(**{**open_kwargs, "read_only": True})
        with pytest.raises(ValueError, match=READ_ONLY_MESSAGE):
            await store.set("foo/zarr.json", buf(group_doc()))
        writer = store.with_read_only(read_only=False)
        assert not writer._is_open and not writer.read_only
        await writer.set("foo/zarr.json", buf(group_doc()))
        await writer.delete("foo/zarr.json")
        for reader in (store, store.with_read_only(read_only=True)):
            assert reader.read_only
            with pytest.raises(ReadOnlyError, match=READ_ONLY_MESSAGE):
                await reader.set("foo/zarr.json", buf(group_doc()))
            with pytest.raises(ValueError, match=READ_ONLY_MESSAGE):
                await reader.delete("foo/zarr.json")

    @pytest.mark.parametrize(
        ("metadata", "parent", "key"),
        [
            (array_doc(1), "", "c/0"),
            (array_doc(2), "foo/", "c/0/3"),
            (array_doc(2, separator="."), "", "c.0.3"),
            (array_doc(2, "v2", "."), "foo/", "0.3"),
            (array_doc(2, "v2", "/"), "", "0/3"),
            (array_doc(0), "foo/", "c"),
            (array_doc(0, "v2"), "", "0"),
        ],
    )
    @pytest.mark.parametrize("data", [b"\x01\x02\x03\x04", b""])
    async def test_set(  # type: ignore[override]
        self, store: IcechunkStore, metadata: bytes, parent: str, key: str, data: bytes
    ) -> None:
        """Changed: the array's zarr.json is set first, then one chunk key of each spelling."""
        await store.set(parent + "zarr.json", buf(metadata))
        await store.set(parent + key, buf(data))
        assert_bytes_equal(await self.get(store, parent + "zarr.json"), buf(metadata))
        assert_bytes_equal(await self.get(store, parent + key), buf(data))

    async def test_set_not_open(self, store_not_open: IcechunkStore) -> None:
        """Changed: the root array's zarr.json is set before its chunk c/0."""
        assert not store_not_open._is_open
        await store_not_open.set("zarr.json", buf(array_doc(1)))
        await store_not_open.set("c/0", buf(b"\x01\x02\x03\x04"))
        assert_bytes_equal(await self.get(store_not_open, "c/0"), buf(b"\x01\x02\x03\x04"))

    async def test_set_many(self, store: IcechunkStore) -> None:
        """Changed: real metadata for the root and foo, then chunks of both."""
        items = {
            "zarr.json": array_doc(1),
            "c/0": b"c/0",
            "foo/zarr.json": array_doc(2, "v2", "/"),
            "foo/0/0": b"foo/0/0",
        }
        await self.put(store, items)
        for key, value in items.items():
            assert (await self.get(store, key)).to_bytes() == value

    async def test_delete(self, store: IcechunkStore) -> None:
        """Changed: foo/zarr.json holds a group document instead of b'bar'; chunks too."""
        await store.set("foo/zarr.json", buf(group_doc()))
        await store.set("foo/bar/zarr.json", buf(array_doc(1)))
        await store.set("foo/bar/c/3", buf(b"chunk"))
        await store.delete("foo/bar/c/3")
        assert not await store.exists("foo/bar/c/3")
        await store.delete("foo/zarr.json")
        assert not await store.exists("foo/zarr.json")
        assert await store.exists("foo/bar/zarr.json")  # deleting a zarr.json is not recursive

    async def test_delete_dir(self, store: IcechunkStore) -> None:
        """Changed: real documents; foo is an array so foo/c/0 is its chunk."""
        await store.set("zarr.json", buf(group_doc()))
        await store.set("foo-bar/zarr.json", buf(group_doc()))
        await store.set("foo/zarr.json", buf(array_doc(1)))
        await store.set("foo/c/0", buf(b"chunk"))
        await store.delete_dir("foo")
        assert await store.exists("zarr.json")
        assert await store.exists("foo-bar/zarr.json")
        assert not await store.exists("foo/zarr.json")
        assert not await store.exists("foo/c/0")

    async def test_clear(self, store: IcechunkStore) -> None:
        """Changed: a chunk key of an array instead of the arbitrary key 'key'."""
        await self.set(store, "foo/c/0", buf(b"something"))
        await store.clear()
        assert await store.is_empty("")

    async def test_set_if_not_exists(self, store: IcechunkStore) -> None:
        """Changed: chunks c/0 and c/1 of a root array instead of the arbitrary keys k, k2."""
        await self.set(store, "c/0", buf(b"0000"))
        await store.set_if_not_exists("c/0", buf(b"1111"))
        assert await store.get("c/0", prototype) == buf(b"0000")
        await store.set_if_not_exists("c/1", buf(b"1111"))
        assert await store.get("c/1", prototype) == buf(b"1111")
        await store.set_if_not_exists("zarr.json", buf(group_doc()))  # metadata: kept too
        assert (await self.get(store, "zarr.json")).to_bytes() == array_doc(1)


class CommittedStore(IcechunkStore):
    """Test double: a read-only store that moves to the branch tip when the test commits.

    zarr's tests write raw keys and then read them through the store they already hold, so the
    store has to see later commits; a real read-only store stays on its snapshot.
    """

    def __init__(self, session: Session, *, read_only: bool | None = None) -> None:
        super().__init__(session, read_only=read_only)
        self.current = session

    @property
    def session(self) -> Session:
        return self.current

    def follow_tip(self) -> None:
        self.current = Repository(self.current.handle).readonly_session("main")


class TestReadOnlyStore(ReadOnlySyncTests, _IcechunkStoreTests):
    """Read-only sessions of committed snapshots; raw helpers commit through a writable session.

    Every StoreTests test that writes through the store checks here that the write is refused.
    """

    store_cls = CommittedStore

    @pytest.fixture
    def store_kwargs(self, repo: Repository) -> dict[str, Any]:
        return {"session": repo.readonly_session("main")}

    async def set(self, store: IcechunkStore, key: str, value: Buffer) -> None:
        await self.put(store, {key: value.to_bytes()})

    async def get(self, store: IcechunkStore, key: str) -> Buffer:
        data = read_raw(store.session, key)
        assert data is not None, f"{key!r} holds nothing"
        return buf(data)

    async def put(self, store: IcechunkStore, items: Mapping[str, bytes]) -> None:
        assert isinstance(store, CommittedStore)
        writer = Repository(store.session.handle).writable_session("main")
        for key, value in items.items():
            write_raw(writer, key, value)
        writer.commit(f"write {len(items)} keys")
        store.follow_tip()

    @staticmethod
    async def refused(write: Awaitable[Any]) -> None:
        with pytest.raises(ReadOnlyStoreError, match=READ_ONLY_MESSAGE):
            await write

    def test_store_read_only(self, store: IcechunkStore) -> None:
        """Changed: this store is read-only (and the attribute still cannot be assigned)."""
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False  # type: ignore[misc]

    @pytest.mark.parametrize("read_only", [True, False])
    async def test_store_open_read_only(self, open_kwargs: dict[str, Any], read_only: bool) -> None:
        """Changed: read_only=False over a read-only session is refused."""
        kwargs = {**open_kwargs, "read_only": read_only}
        if not read_only:
            with pytest.raises(ReadOnlyStoreError, match="a read-only session cannot back"):
                await self.store_cls.open(**kwargs)
            return
        store = await self.store_cls.open(**kwargs)
        assert store._is_open and store.read_only

    async def test_serializable_store(self, store: IcechunkStore) -> None:
        """Changed: after the round trip the data is read, not written."""
        await self.set(store, "foo/c/0", buf(b"\x01\x02\x03\x04"))
        pickled = pickle.dumps(store)
        new_store = pickle.loads(pickled)
        assert new_store == store
        assert new_store.read_only == store.read_only
        observed = await new_store.get("foo/c/0", prototype=prototype)
        assert_bytes_equal(observed, buf(b"\x01\x02\x03\x04"))

    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None:
        """Changed: a read-only session has no writable copy; the read-only copy still refuses."""
        store = await self.store_cls.open(**{**open_kwargs, "read_only": True})
        with pytest.raises(ReadOnlyStoreError, match="a read-only session cannot back"):
            store.with_read_only(read_only=False)
        reader = store.with_read_only(read_only=True)
        await self.refused(reader.set("zarr.json", buf(group_doc())))
        await self.refused(reader.delete("zarr.json"))

    # Writes through the store: each is refused.
    async def test_set(self, store: IcechunkStore) -> None:  # type: ignore[override]
        await self.refused(store.set("zarr.json", buf(group_doc())))

    async def test_set_not_open(self, store_not_open: IcechunkStore) -> None:
        await self.refused(store_not_open.set("zarr.json", buf(group_doc())))

    async def test_set_many(self, store: IcechunkStore) -> None:
        await self.refused(store._set_many([("zarr.json", buf(group_doc()))]))

    async def test_set_if_not_exists(self, store: IcechunkStore) -> None:
        await self.refused(store.set_if_not_exists("zarr.json", buf(group_doc())))

    async def test_delete(self, store: IcechunkStore) -> None:
        await self.set(store, "foo/zarr.json", buf(group_doc()))
        await self.refused(store.delete("foo/zarr.json"))
        assert await store.exists("foo/zarr.json")

    async def test_delete_nonexistent_key_does_not_raise(self, store: IcechunkStore) -> None:
        """Changed: even a missing key cannot be deleted through a read-only store."""
        await self.refused(store.delete("nonexistent_key"))

    async def test_delete_dir(self, store: IcechunkStore) -> None:
        await self.set(store, "foo/zarr.json", buf(group_doc()))
        await self.refused(store.delete_dir("foo"))
        assert await store.exists("foo/zarr.json")

    async def test_clear(self, store: IcechunkStore) -> None:
        await self.set(store, "foo/c/0", buf(b"something"))
        await self.refused(store.clear())
        assert not await store.is_empty("")

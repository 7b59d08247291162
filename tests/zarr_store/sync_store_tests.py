"""StoreTests' synchronous tests (zarr's ``SupportsGetSync``, ``SupportsSetSync``,
``SupportsDeleteSync``), overridden for test_store_conformance.py.

zarr's versions store bytes under arbitrary keys (``sync_get``, ``sync_set``), which our store
cannot hold; these run the same checks on ``zarr.json`` documents and chunk keys of real arrays.
Each override says what it changed; ``test_get_sync_missing`` runs unchanged.
"""

from __future__ import annotations

import pytest
from zarr.core.buffer import Buffer, cpu
from zarr.core.sync import sync
from zarr.testing.store import StoreTests
from zarr.testing.utils import assert_bytes_equal

from icechunk_spark.errors import ReadOnlyStoreError
from icechunk_spark.zarr_store import IcechunkStore

from .raw_keys import array_doc, group_doc

# zarr's own message for a write through a read-only store; ours keeps it.
READ_ONLY_MESSAGE = "store was opened in read-only mode and does not support writing"
CHUNK = b"\x01\x02\x03\x04"


def buf(data: bytes) -> Buffer:
    return cpu.Buffer.from_bytes(data)


class SyncReadTests(StoreTests[IcechunkStore, cpu.Buffer]):
    def test_get_sync(self, store: IcechunkStore) -> None:
        """Changed: chunk c/0 of a root array instead of the arbitrary key 'sync_get'."""
        sync(self.set(store, "c/0", buf(CHUNK)))
        result = store.get_sync("c/0")
        assert result is not None
        assert_bytes_equal(result, buf(CHUNK))


class WritableSyncTests(SyncReadTests):
    def test_set_sync(self, store: IcechunkStore) -> None:
        """Changed: the root array's zarr.json is set first, then its chunk c/0."""
        store.set_sync("zarr.json", buf(array_doc(1)))
        store.set_sync("c/0", buf(CHUNK))
        assert sync(self.get(store, "zarr.json")).to_bytes() == array_doc(1)
        assert_bytes_equal(sync(self.get(store, "c/0")), buf(CHUNK))

    def test_delete_sync(self, store: IcechunkStore) -> None:
        """Changed: a chunk of a root array, then the array's zarr.json, instead of one
        arbitrary key."""
        store.set_sync("zarr.json", buf(array_doc(1)))
        store.set_sync("c/0", buf(CHUNK))
        store.delete_sync("c/0")
        assert store.get_sync("c/0") is None
        store.delete_sync("zarr.json")
        assert store.get_sync("zarr.json") is None


class ReadOnlySyncTests(SyncReadTests):
    """Every synchronous write through a read-only store is refused."""

    def test_set_sync(self, store: IcechunkStore) -> None:
        with pytest.raises(ReadOnlyStoreError, match=READ_ONLY_MESSAGE):
            store.set_sync("zarr.json", buf(group_doc()))
        assert store.get_sync("zarr.json") is None

    def test_delete_sync(self, store: IcechunkStore) -> None:
        sync(self.set(store, "foo/zarr.json", buf(group_doc())))
        with pytest.raises(ReadOnlyStoreError, match=READ_ONLY_MESSAGE):
            store.delete_sync("foo/zarr.json")
        assert store.get_sync("foo/zarr.json") is not None

    def test_delete_sync_missing(self, store: IcechunkStore) -> None:
        """Changed: even a missing key cannot be deleted through a read-only store."""
        with pytest.raises(ReadOnlyStoreError, match=READ_ONLY_MESSAGE):
            store.delete_sync("nonexistent_sync")

"""Checks of ``StorageTests`` on listings, deletes, ``exists``, ``get_many``, the keys the
format uses, and a reopened handle."""

from __future__ import annotations

import pickle
import time

import pytest

from ..errors import NotFoundError
from ..format.ids import new_object_id
from ..storage.base import ObjectInfo, Storage
from .assertions import keys_of, must_not_raise, put_all
from .hooks import StorageHooks


class ListingChecks(StorageHooks):
    def test_list_by_folder_prefix(self, storage: Storage) -> None:
        keys = ["c/AAA", "c/BBB", "c/sub/CCC", "c/sub/deeper/DDD", "cx/EEE", "m/FFF", "top"]
        for key in keys:
            storage.put(key, key.encode())
        expected = {
            "c/": {"c/AAA", "c/BBB", "c/sub/CCC", "c/sub/deeper/DDD"},
            "c/sub/": {"c/sub/CCC", "c/sub/deeper/DDD"},
            "cx/": {"cx/EEE"},
            "m/": {"m/FFF"},
            "nothing/": set(),
            "": set(keys),  # everything in the location, and nothing outside it
        }
        for prefix, wanted in expected.items():
            found = keys_of(storage.list(prefix))
            assert sorted(found) == sorted(wanted), (
                f"list({prefix!r}) gave {sorted(found)}, expected {sorted(wanted)}"
            )

    def test_list_prefix_is_a_string_prefix(self, storage: Storage) -> None:
        # Callers list an exact key to learn its size and time (gc, scans), and list("") means
        # everything: a prefix matches keys that start with it, not only whole folders.
        keys = ["t/00000000000000000007", "t/00000000000000000012", "c/AB1", "c/AB2", "cx/AB"]
        for key in keys:
            storage.put(key, b"x")
        expected = {
            "t/0000000000000000000": {"t/00000000000000000007"},
            "t/0000000000000000001": {"t/00000000000000000012"},
            "t/00000000000000000007": {"t/00000000000000000007"},
            "c/AB": {"c/AB1", "c/AB2"},
            "c/AB2": {"c/AB2"},
            "c": {"c/AB1", "c/AB2", "cx/AB"},
            "c/ABX": set(),
            "q": set(),
        }
        for prefix, wanted in expected.items():
            found = keys_of(storage.list(prefix))
            assert sorted(found) == sorted(wanted), (
                f"list({prefix!r}) gave {sorted(found)}, expected {sorted(wanted)}"
            )

    def test_list_reports_sizes_and_times(self, storage: Storage) -> None:
        objects = {"s/empty": b"", "s/small": b"abc", "s/big": bytes(100_000)}
        before = time.time()
        for key, data in objects.items():
            storage.put(key, data)
        storage.put_if_absent("s/created", b"12345")
        after = time.time()
        objects["s/created"] = b"12345"
        infos = list(storage.list("s/"))
        assert all(isinstance(info, ObjectInfo) for info in infos), "list yields ObjectInfo"
        sizes = {info.key: info.size for info in infos}
        assert sizes == {k: len(v) for k, v in objects.items()}, f"sizes listed: {sizes}"
        # A listed time t stands for [t, t + mtime_resolution_ms): that span must meet the
        # span in which we wrote, give or take clock_slack_ms.
        low = before * 1000 - self.clock_slack_ms - storage.mtime_resolution_ms
        high = after * 1000 + self.clock_slack_ms
        for info in infos:
            assert isinstance(info.modified_ms, int), "modified_ms is an int (ms since 1970)"
            assert low < info.modified_ms <= high, (
                f"{info.key} listed modified_ms={info.modified_ms}, but it was written between "
                f"{int(before * 1000)} and {int(after * 1000)} (ms since 1970, with "
                f"mtime_resolution_ms={storage.mtime_resolution_ms} and "
                f"clock_slack_ms={self.clock_slack_ms})"
            )

    def test_list_temporary_is_empty_on_a_clean_store(self, storage: Storage) -> None:
        assert list(storage.list_temporary()) == [], "a fresh location has no temporary files"
        storage.put("c/a", b"a")
        storage.put("c/a", b"replaced")
        assert storage.put_if_absent("t/00000000000000000000", b"won")
        assert not storage.put_if_absent("t/00000000000000000000", b"lost")
        storage.delete(["c/a"])
        left = list(storage.list_temporary())
        assert left == [], f"finished writes left temporary files behind: {left}"
        listed = keys_of(storage.list(""))
        assert listed == ["t/00000000000000000000"], f"list('') shows {listed}"

    def test_ready_for_writes_changes_nothing_a_caller_sees(self, storage: Storage) -> None:
        # Called behind every commit: whatever a backend makes ahead (local disk: spare
        # temporary files) is never listed, never in the way, no leftover of an interrupted
        # write, and gone once the storage is closed.
        keys = ["m/AAA", "s/BBB", "t/00000000000000000001", "top"]
        for key in keys[:2]:
            storage.put(key, b"first")
        assert storage.put_if_absent(keys[2], b"first")
        storage.put_best_effort(keys[3], b"first")
        storage.ready_for_writes()
        assert sorted(keys_of(storage.list(""))) == keys, "ready_for_writes made a listed object"
        for key in keys[:2]:
            storage.put(key, b"second")
        assert storage.put_if_absent("t/00000000000000000002", b"second")
        assert not storage.put_if_absent(keys[2], b"second")
        storage.put_best_effort(keys[3], b"second")
        storage.ready_for_writes()
        wanted = {"m/AAA": b"second", "s/BBB": b"second", keys[2]: b"first", "top": b"second"}
        assert {k: storage.get(k) for k in wanted} == wanted
        assert len(keys_of(storage.list(""))) == 5
        left = list(storage.list_temporary())
        assert left == [], f"what ready_for_writes made is listed as left behind: {left}"
        other = pickle.loads(pickle.dumps(self.opener(storage)))()
        storage.close()
        left = list(other.list_temporary())
        assert left == [], f"closed, the storage left temporary files behind: {left}"

    # -- delete, exists, get_many -----------------------------------------------------------
    def test_delete_removes_present_keys_and_ignores_missing_ones(self, storage: Storage) -> None:
        storage.put("c/gone", b"x")
        storage.put("c/kept", b"y")
        storage.delete(["c/gone"])
        assert not storage.exists("c/gone"), "a deleted object does not exist"
        with pytest.raises(NotFoundError):
            storage.get("c/gone")
        assert keys_of(storage.list("c/")) == ["c/kept"], "delete removed only what it was given"
        for keys in (["c/gone", "c/never-was", "z/nowhere/at/all"], [], iter(())):
            must_not_raise("delete of missing keys (they are ignored)", storage.delete, keys)
        assert storage.get("c/kept") == b"y", "deleting missing keys touched an existing one"

    def test_delete_of_many_keys(self, storage: Storage) -> None:
        doomed = [f"c/{i:05d}" for i in range(self.delete_many)]
        kept = [f"c/kept-{i}" for i in range(3)] + ["m/M0"]
        put_all(storage, doomed + kept)
        missing = ["c/missing-1", "m/missing-2"]
        keys = iter(doomed[: len(doomed) // 2] + missing + doomed[len(doomed) // 2 :])
        must_not_raise("delete of many keys, some missing", storage.delete, keys)
        left = keys_of(storage.list(""))
        assert left == sorted(kept), (
            f"after deleting {len(doomed)} keys in one call, the listing shows {len(left)} "
            f"objects: {left[:10]}{'...' if len(left) > 10 else ''}"
        )

    def test_exists_is_true_for_objects_only(self, storage: Storage) -> None:
        storage.put("c/sub/AAA", b"x")
        storage.put("c/empty", b"")
        assert storage.exists("c/sub/AAA") is True
        assert storage.exists("c/empty") is True, "an empty object exists"
        for key in ("c/sub/BBB", "c/sub/AA", "x/AAA"):
            assert storage.exists(key) is False, f"exists({key!r}) of a missing object"
        for folder in ("c", "c/sub", "c/sub/"):
            assert storage.exists(folder) is False, (
                f"exists({folder!r}) is true, but only objects below it exist (no object has "
                "that key)"
            )

    def test_get_many_keeps_the_order_asked_for(self, storage: Storage) -> None:
        for key in ("m/1", "m/2", "m/3"):
            storage.put(key, f"value of {key}".encode())
        order = ["m/3", "m/1", "m/2", "m/1"]
        got = storage.get_many(order)
        assert got == [f"value of {k}".encode() for k in order], f"get_many gave {got}"
        assert storage.get_many(iter(["m/2"])) == [b"value of m/2"], "keys may be an iterator"
        assert storage.get_many([]) == []
        with pytest.raises(NotFoundError):
            storage.get_many(["m/1", "m/absent"])

    def test_keys_the_format_uses(self, storage: Storage) -> None:
        write_id = new_object_id()
        keys = [
            "icechunk.json",
            "t/00000000000000000000",
            "t/00000000000000000007",
            *(f"{folder}/{new_object_id()}" for folder in ("s", "m", "a", "c", "x")),
            f"staging/{write_id}/journal/0-1",
            f"staging/{write_id}/manifests/{new_object_id()}",
        ]
        for key in keys:
            storage.put(key, key.encode())
        for key in keys:
            assert storage.get(key) == key.encode(), f"get({key!r}) after put"
            assert storage.exists(key), f"exists({key!r}) after put"
            assert keys_of(storage.list(key)) == [key], f"list of the exact key {key!r}"
        assert keys_of(storage.list("")) == sorted(keys), "list('') shows exactly the keys written"
        assert keys_of(storage.list("t/")) == ["t/00000000000000000000", "t/00000000000000000007"]
        assert keys_of(storage.list(f"staging/{write_id}/")) == sorted(keys[-2:])

    def test_a_reopened_handle_reaches_the_same_objects(self, storage: Storage) -> None:
        # The recipe is pickled, as it is on its way to another process.
        other = pickle.loads(pickle.dumps(self.opener(storage)))()
        try:
            storage.put("c/from-first", b"1")
            seen = must_not_raise(
                "the reopened handle sees the first's puts", other.get, "c/from-first"
            )
            assert seen == b"1", "the reopened handle sees the first's puts"
            assert other.put_if_absent("c/from-second", b"2")
            seen = must_not_raise(
                "the first sees the reopened's puts", storage.get, "c/from-second"
            )
            assert seen == b"2", "the first sees the reopened's puts"
            assert not storage.put_if_absent("c/from-second", b"3"), (
                "put_if_absent through one handle sees what the other created"
            )
            other.delete(["c/from-first"])
            assert not storage.exists("c/from-first"), "the first sees the reopened's deletes"
        finally:
            if other is not storage:  # an in-process store may hand back the same instance
                other.close()
        assert storage.get("c/from-second") == b"2", "closing another handle keeps the objects"

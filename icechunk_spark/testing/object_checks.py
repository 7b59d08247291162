"""Checks of ``StorageTests`` on objects: round trips, missing keys, ranged reads, and
put-if-absent, alone and raced by threads and processes."""

from __future__ import annotations

import multiprocessing
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from ..errors import NotFoundError
from ..storage.base import Storage
from .assertions import show
from .hooks import StorageHooks
from .races import check_race, collect, keys_to_race, race, race_in_process

if TYPE_CHECKING:
    from multiprocessing.queues import Queue


class ObjectChecks(StorageHooks):
    def test_put_then_get_round_trips(self, storage: Storage) -> None:
        objects = {
            "a/empty": b"",
            "a/one": b"\x00",
            "a/every-byte": bytes(range(256)) * 4,
            "a/text": "grüße, 温度\n".encode(),
            "a/large": random.Random(7).randbytes(256 * 1024),
        }
        for key, data in objects.items():
            storage.put(key, data)
        for key, data in objects.items():
            got = storage.get(key)
            assert isinstance(got, bytes), f"get({key!r}) returned {type(got).__name__}, not bytes"
            assert got == data, f"get({key!r}) returned {show(got)}, stored {show(data)}"

    def test_get_of_a_missing_key_raises_not_found(self, storage: Storage) -> None:
        storage.put("a/present", b"here")
        for key in ("a/absent", "absent", "a/presen", "b/present"):
            with pytest.raises(NotFoundError):
                storage.get(key)
        assert issubclass(NotFoundError, KeyError)  # callers may catch KeyError

    def test_put_replaces_an_object(self, storage: Storage) -> None:
        storage.put("a/k", b"first version, the longer one")
        storage.put("a/k", b"second")
        assert storage.get("a/k") == b"second", "put must replace the object's bytes"
        sizes = {info.key: info.size for info in storage.list("a/")}
        assert sizes == {"a/k": 6}, f"after replacing, the listing shows {sizes}"

    # -- ranged reads -----------------------------------------------------------------------
    def test_get_range_returns_the_bytes_asked_for(self, storage: Storage) -> None:
        data = bytes(range(256)) * 40
        storage.put("c/k", data)
        size = len(data)
        for start, end in [(0, 16), (0, 1), (1000, 1100), (size - 16, size), (size - 1, size)]:
            got = storage.get_range("c/k", start, end)
            assert isinstance(got, bytes), f"get_range returned {type(got).__name__}, not bytes"
            assert got == data[start:end], (
                f"get_range('c/k', {start}, {end}) of a {size}-byte object returned "
                f"{show(got)}, expected {show(data[start:end])}"
            )
        assert storage.get_range("c/k", 0, size) == data, "the whole object as one range"

    def test_get_range_is_clipped_to_the_object(self, storage: Storage) -> None:
        # The contract (storage/base.py): bytes [start, end) of the object as data[start:end]
        # gives them for 0 <= start, end. Readers ask for a Parquet footer or a chunk by its
        # recorded offset and length; clipping (not an error) keeps every backend alike.
        data = b"0123456789"
        storage.put("c/k", data)
        storage.put("c/empty", b"")
        cases = [
            ("c/k", 5, 100),  # runs past the end: the bytes that exist
            ("c/k", 9, 11),
            ("c/k", 10, 12),  # starts at the end
            ("c/k", 50, 60),  # starts past the end
            ("c/k", 4, 4),  # empty range
            ("c/k", 6, 2),  # end before start
            ("c/empty", 0, 0),
            ("c/empty", 0, 8),
        ]
        for key, start, end in cases:
            expected = (data if key == "c/k" else b"")[start:end]
            try:
                got = storage.get_range(key, start, end)
            except Exception as exc:
                raise AssertionError(
                    f"get_range({key!r}, {start}, {end}) raised {type(exc).__name__}: {exc}; "
                    f"a range is clipped to the object, expected {show(expected)}"
                ) from exc
            assert got == expected, (
                f"get_range({key!r}, {start}, {end}) returned {show(got)}, expected "
                f"{show(expected)} (ranges are clipped to the object)"
            )

    def test_get_range_of_a_missing_key_raises_not_found(self, storage: Storage) -> None:
        storage.put("c/present", b"0123456789")
        for start, end in [(0, 4), (3, 3), (0, 0), (20, 30)]:
            with pytest.raises(NotFoundError):
                storage.get_range("c/absent", start, end)

    # -- put-if-absent ----------------------------------------------------------------------
    def test_put_if_absent_creates_once(self, storage: Storage) -> None:
        key = "t/00000000000000000001"
        assert storage.put_if_absent(key, b"first") is True, "creating a new key returns True"
        assert storage.put_if_absent(key, b"second") is False, "an existing key returns False"
        assert storage.put_if_absent(key, b"") is False, "an existing key returns False"
        assert storage.get(key) == b"first", "a refused put_if_absent must not change the object"
        storage.put("t/00000000000000000002", b"put")
        assert storage.put_if_absent("t/00000000000000000002", b"other") is False, (
            "an object written by put exists for put_if_absent"
        )
        assert storage.get("t/00000000000000000002") == b"put"
        storage.delete([key])
        assert storage.put_if_absent(key, b"again") is True, "a deleted key is absent again"
        assert storage.get(key) == b"again"
        assert storage.put_if_absent("t/empty", b"") is True, "an empty object can be created"
        assert storage.get("t/empty") == b""

    def test_prepared_put_if_absent_is_a_put_if_absent(self, storage: Storage) -> None:
        key, other = "t/00000000000000000003", "t/00000000000000000004"
        mine = b"prepared"
        storage.prepare_put_if_absent(key, mine)
        with pytest.raises(NotFoundError):
            storage.get(key)  # nothing is visible before the create
        assert [i.key for i in storage.list("t/")] == [], "a prepared object was listed"
        assert storage.put_if_absent(key, mine) is True
        assert storage.get(key) == mine
        storage.prepare_put_if_absent(other, mine)
        assert storage.put_if_absent(other, b"theirs") is True  # another writer's bytes
        assert storage.put_if_absent(other, mine) is False, "a prepared create overwrote"
        assert storage.get(other) == b"theirs"
        storage.prepare_put_if_absent("t/dropped", mine)
        storage.drop_prepared("t/dropped", mine)
        with pytest.raises(NotFoundError):
            storage.get("t/dropped")
        assert list(storage.list_temporary()) == [], "prepared files were left behind"

    def test_put_if_absent_race_between_threads(self, storage: Storage) -> None:
        keys = keys_to_race(self.race_keys)
        barrier = threading.Barrier(self.race_threads)

        def racer(worker: int) -> list[bool]:
            try:
                return race(storage, keys, worker, lambda: barrier.wait(timeout=60))
            except BaseException:
                barrier.abort()  # the others stop waiting for this one
                raise

        with ThreadPoolExecutor(self.race_threads) as pool:
            outcomes = dict(enumerate(pool.map(racer, range(self.race_threads))))
        check_race(storage, keys, outcomes, "threads")

    def test_put_if_absent_race_between_processes(self, storage: Storage) -> None:
        if not self.shared_across_processes:
            pytest.skip(
                f"{type(storage).__name__} is not shared between processes "
                f"({type(self).__name__}.shared_across_processes is False)"
            )
        keys = keys_to_race(self.race_keys)
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(self.race_processes)
        results: Queue[tuple[int, list[bool] | str]] = context.Queue()
        opener = self.opener(storage)
        processes = [
            context.Process(
                target=race_in_process,
                args=(opener, keys, worker, barrier, results),
                daemon=True,
            )
            for worker in range(self.race_processes)
        ]
        for process in processes:
            process.start()
        try:
            outcomes = collect(processes, results, timeout=120.0)
        finally:
            for process in processes:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
                    process.join()
            results.close()
        check_race(storage, keys, outcomes, "processes")

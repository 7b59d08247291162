"""``StorageTests``: the behaviour every ``Storage`` backend must show, as a pytest base class.

Like zarr's ``zarr.testing.store.StoreTests``: subclass it in a test module, provide a fixture
that opens a fresh, empty location, and every check below runs against your backend::

    import pytest
    from icechunk_spark.testing import StorageTests

    class TestMyStorage(StorageTests):
        @pytest.fixture
        def storage(self, tmp_path):
            store = MyStorage(tmp_path / "repo")
            yield store
            store.close()

What is checked (each a test method): round trips of empty, binary and large objects;
``NotFoundError`` for missing objects, ranged reads included; ranged reads at the start, middle
and end, and clipped to the object like ``data[start:end]`` (a range past the end gives the
bytes that exist, possibly none; an empty range gives ``b""``); ``put`` replaces; put-if-absent
creates once and never changes what exists, exactly one winner per key when threads and
processes race for it; listing by string prefix (``c/`` never matches ``cx/``, nothing outside
the location), with sizes and modification times; deletes of present, missing and many keys;
``exists`` for objects only; ``get_many`` order; no temporary files left by writes; keys of
the shapes the format uses; a reopened handle (see ``opener``) reaches the same objects; and
retries as ``storage/base.py`` defines them: every operation but put-if-absent may be repeated
after a lost answer, transient errors (``ConnectionError``, ``TimeoutError``) are retried, a
refused connection is not, and retries end in a ``StorageError``.

Hooks a subclass may set or override:

* ``shared_across_processes = False`` when another process cannot reach the same objects (an
  in-process store): the cross-process race is skipped, saying so.
* ``opener(storage)``: a picklable zero-argument callable that opens the same location again.
  By default the storage pickles itself (repositories are pickled to worker processes too).
* the ``transient_faults`` fixture, for backends with a network transport: a handle whose
  transport fails requests transiently, to check they are retried (skipped by default).
* ``clock_slack_ms``: how far a listing's ``modified_ms`` may be from this machine's clock.

pytest rewrites asserts only in test modules, so every assert here carries its own message.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the test extra
    raise ImportError("icechunk_spark.testing needs pytest: pip install pytest") from exc

from ..errors import NotFoundError, StorageError
from ..format.ids import new_object_id
from ..retry import Backoff
from ..storage.base import TRANSIENT_ERRORS, ObjectInfo, Storage, with_retries

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

__all__ = ["StorageTests", "TransientFaults"]

Opener = Callable[[], Storage]

# The retry tests check what is retried, not how long it waits.
_NO_WAIT = Backoff(base_s=0.0, cap_s=0.0)


@dataclass(frozen=True, slots=True)
class TransientFaults:
    """A handle on the tested location whose transport fails some requests transiently.

    ``storage`` reaches the same objects as the tested storage, through a transport that fails
    requests the way a network does for a moment (a throttling answer, a reset connection)
    *before* they take effect. ``injected()`` says how many failures it has caused so far, so
    the test knows the retries were really exercised.
    """

    storage: Storage
    injected: Callable[[], int]


class StorageTests:
    """The conformance suite for ``Storage`` backends: subclass it and provide ``storage``."""

    #: Whether another process opening ``opener(storage)`` reaches the same objects.
    shared_across_processes: ClassVar[bool] = True
    #: Tolerated distance between a listing's ``modified_ms`` and this machine's clock, on top
    #: of ``storage.mtime_resolution_ms``: a server's clock is not ours, and file systems stamp
    #: files with a coarse clock that may lag ``time.time()`` by a tick.
    clock_slack_ms: ClassVar[int] = 5_000
    race_threads: ClassVar[int] = 8
    race_processes: ClassVar[int] = 4
    race_keys: ClassVar[int] = 4  # keys every racer tries to create, one after the other
    delete_many: ClassVar[int] = 120  # objects written, then deleted in one call

    # -- hooks ------------------------------------------------------------------------------
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        """A fresh, empty location of the backend under test (override it; close on teardown)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define a `storage` fixture that yields a fresh, empty "
            "Storage of the backend under test"
        )
        yield  # pragma: no cover - makes this a generator, like the overrides

    def opener(self, storage: Storage) -> Opener:
        """A picklable zero-argument callable that opens ``storage``'s location again.

        Used to reach the same objects from another handle and from other processes. The
        default pickles the storage itself; override it for a storage that does not pickle,
        e.g. ``functools.partial(open_storage, url, **options)``.
        """
        return functools.partial(_same_storage, storage)

    @pytest.fixture
    def transient_faults(self, storage: Storage) -> TransientFaults:
        """Override for a backend with a transport that can fail (see ``TransientFaults``)."""
        pytest.skip(f"{type(self).__name__} declares no transport faults to inject")

    # -- reading and writing ----------------------------------------------------------------
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
            assert got == data, f"get({key!r}) returned {_show(got)}, stored {_show(data)}"

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
                f"{_show(got)}, expected {_show(data[start:end])}"
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
                    f"a range is clipped to the object, expected {_show(expected)}"
                ) from exc
            assert got == expected, (
                f"get_range({key!r}, {start}, {end}) returned {_show(got)}, expected "
                f"{_show(expected)} (ranges are clipped to the object)"
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

    def test_put_if_absent_race_between_threads(self, storage: Storage) -> None:
        keys = _race_keys(self.race_keys)
        barrier = threading.Barrier(self.race_threads)

        def race(worker: int) -> list[bool]:
            try:
                return _race(storage, keys, worker, lambda: barrier.wait(timeout=60))
            except BaseException:
                barrier.abort()  # the others stop waiting for this one
                raise

        with ThreadPoolExecutor(self.race_threads) as pool:
            outcomes = dict(enumerate(pool.map(race, range(self.race_threads))))
        _check_race(storage, keys, outcomes, "threads")

    def test_put_if_absent_race_between_processes(self, storage: Storage) -> None:
        if not self.shared_across_processes:
            pytest.skip(
                f"{type(storage).__name__} is not shared between processes "
                f"({type(self).__name__}.shared_across_processes is False)"
            )
        keys = _race_keys(self.race_keys)
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(self.race_processes)
        results: Queue[tuple[int, list[bool] | str]] = context.Queue()
        opener = self.opener(storage)
        processes = [
            context.Process(
                target=_race_in_process,
                args=(opener, keys, worker, barrier, results),
                daemon=True,
            )
            for worker in range(self.race_processes)
        ]
        for process in processes:
            process.start()
        try:
            outcomes = _collect(processes, results, timeout=120.0)
        finally:
            for process in processes:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
                    process.join()
            results.close()
        _check_race(storage, keys, outcomes, "processes")

    # -- listing ----------------------------------------------------------------------------
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
            found = _keys(storage.list(prefix))
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
            found = _keys(storage.list(prefix))
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
        listed = _keys(storage.list(""))
        assert listed == ["t/00000000000000000000"], f"list('') shows {listed}"

    # -- delete, exists, get_many -----------------------------------------------------------
    def test_delete_removes_present_keys_and_ignores_missing_ones(self, storage: Storage) -> None:
        storage.put("c/gone", b"x")
        storage.put("c/kept", b"y")
        storage.delete(["c/gone"])
        assert not storage.exists("c/gone"), "a deleted object does not exist"
        with pytest.raises(NotFoundError):
            storage.get("c/gone")
        assert _keys(storage.list("c/")) == ["c/kept"], "delete removed only what it was given"
        for keys in (["c/gone", "c/never-was", "z/nowhere/at/all"], [], iter(())):
            _must_not_raise("delete of missing keys (they are ignored)", storage.delete, keys)
        assert storage.get("c/kept") == b"y", "deleting missing keys touched an existing one"

    def test_delete_of_many_keys(self, storage: Storage) -> None:
        doomed = [f"c/{i:05d}" for i in range(self.delete_many)]
        kept = [f"c/kept-{i}" for i in range(3)] + ["m/M0"]
        _put_all(storage, doomed + kept)
        missing = ["c/missing-1", "m/missing-2"]
        keys = iter(doomed[: len(doomed) // 2] + missing + doomed[len(doomed) // 2 :])
        _must_not_raise("delete of many keys, some missing", storage.delete, keys)
        left = _keys(storage.list(""))
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
            assert _keys(storage.list(key)) == [key], f"list of the exact key {key!r}"
        assert _keys(storage.list("")) == sorted(keys), "list('') shows exactly the keys written"
        assert _keys(storage.list("t/")) == ["t/00000000000000000000", "t/00000000000000000007"]
        assert _keys(storage.list(f"staging/{write_id}/")) == sorted(keys[-2:])

    def test_a_reopened_handle_reaches_the_same_objects(self, storage: Storage) -> None:
        # The recipe is pickled, as it is on its way to another process.
        other = pickle.loads(pickle.dumps(self.opener(storage)))()
        try:
            storage.put("c/from-first", b"1")
            assert other.get("c/from-first") == b"1", "the reopened handle sees the first's puts"
            assert other.put_if_absent("c/from-second", b"2")
            assert storage.get("c/from-second") == b"2", "the first sees the reopened's puts"
            assert not storage.put_if_absent("c/from-second", b"3"), (
                "put_if_absent through one handle sees what the other created"
            )
            other.delete(["c/from-first"])
            assert not storage.exists("c/from-first"), "the first sees the reopened's deletes"
        finally:
            if other is not storage:  # an in-process store may hand back the same instance
                other.close()
        assert storage.get("c/from-second") == b"2", "closing another handle keeps the objects"

    # -- retries (storage/base.py) -----------------------------------------------------------
    def test_operations_retried_after_a_lost_answer_act_once(self, storage: Storage) -> None:
        # "Everything but put-if-absent may be retried freely": an operation that took effect
        # but whose answer was lost (a transient error) is run again by ``with_retries``, and
        # the outcome must be that of one run.
        for error in TRANSIENT_ERRORS:
            _retry_after_a_lost_answer(storage, error)

    def test_put_if_absent_retried_after_a_lost_answer_is_settled_by_reading(
        self, storage: Storage
    ) -> None:
        # The one operation that must not be retried blindly: the retry of a write that landed
        # answers False. Callers settle it by reading the object back (the commit protocol
        # compares the state file's change-id): the object holds exactly what the first,
        # winning, attempt wrote.
        key = "t/00000000000000000003"
        attempt = _lose_first_answer(storage.put_if_absent, ConnectionError)
        created = with_retries(lambda: attempt(key, b"mine"), f"creating {key!r}", backoff=_NO_WAIT)
        assert attempt.calls == 2
        assert created is False, "the retry of a put_if_absent that landed finds the object"
        assert storage.get(key) == b"mine", "the object holds what the lost attempt wrote"

    def test_a_refused_connection_is_not_retried(self, storage: Storage) -> None:
        # Nothing listens there: a retry milliseconds later finds the same, so fail at once.
        runs = _lose_first_answer(storage.get, ConnectionRefusedError)
        storage.put("c/k", b"x")
        with pytest.raises(ConnectionRefusedError):
            with_retries(lambda: runs("c/k"), "reading 'c/k'", backoff=_NO_WAIT)
        assert runs.calls == 1, f"a refused connection was tried {runs.calls} times"

    def test_retries_are_bounded_and_end_in_a_storage_error(self, storage: Storage) -> None:
        storage.put("c/k", b"x")
        runs = _lose_first_answer(storage.get, TimeoutError, times=100)
        with pytest.raises(StorageError) as failure:
            with_retries(lambda: runs("c/k"), "reading 'c/k'", attempts=3, backoff=_NO_WAIT)
        assert runs.calls == 3, f"3 attempts were allowed, {runs.calls} were made"
        assert isinstance(failure.value, OSError), "StorageError is an OSError"
        assert isinstance(failure.value.__cause__, TimeoutError), "the last failure is the cause"

    def test_transient_transport_failures_are_retried(
        self, storage: Storage, transient_faults: TransientFaults
    ) -> None:
        flaky = transient_faults.storage
        flaky.put("c/k", b"0123456789")
        assert flaky.get("c/k") == b"0123456789"
        assert flaky.get_range("c/k", 2, 5) == b"234"
        assert flaky.exists("c/k")
        assert _keys(flaky.list("c/")) == ["c/k"]
        assert flaky.put_if_absent("t/00000000000000000000", b"once") is True, (
            "a put_if_absent that failed before taking effect and was retried creates the object"
        )
        assert flaky.put_if_absent("t/00000000000000000000", b"twice") is False
        flaky.delete(["c/k"])
        assert not storage.exists("c/k"), "the delete went through"
        assert storage.get("t/00000000000000000000") == b"once"
        assert transient_faults.injected() > 0, "the transport injected no failure to retry"


# -- helpers (module level: the process race pickles them) -----------------------------------
def _same_storage(storage: Storage) -> Storage:
    return storage


def _race_keys(count: int) -> list[str]:
    return [f"t/{generation:020d}" for generation in range(count)]


def _payload(worker: int, key: str) -> bytes:
    # Large enough that a write is not one syscall: a torn or mixed object cannot pass.
    return f"{key} created by racer {worker}\n".encode() * 1024


def _race(storage: Storage, keys: list[str], worker: int, wait: Callable[[], Any]) -> list[bool]:
    """put_if_absent every key, all racers starting each key together."""
    won = []
    for key in keys:
        wait()
        won.append(storage.put_if_absent(key, _payload(worker, key)))
    return won


def _race_in_process(
    opener: Opener,
    keys: list[str],
    worker: int,
    barrier: Barrier,
    results: Queue[tuple[int, list[bool] | str]],
) -> None:
    try:
        storage = opener()
        try:
            won = _race(storage, keys, worker, lambda: barrier.wait(timeout=60))
        finally:
            storage.close()
        results.put((worker, won))
    except BaseException:
        barrier.abort()  # the others stop waiting for this one
        results.put((worker, traceback.format_exc()))


def _collect(
    processes: Sequence[BaseProcess],
    results: Queue[tuple[int, list[bool] | str]],
    timeout: float,
) -> dict[int, list[bool]]:
    """Each racer's outcome; fails with the racer's traceback, or if one died silently."""
    outcomes: dict[int, list[bool]] = {}
    deadline = time.monotonic() + timeout
    while len(outcomes) < len(processes):
        try:
            worker, outcome = results.get(timeout=0.5)
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                pytest.fail(f"a racing process died (exit codes {dead}) before it answered")
            if time.monotonic() > deadline:
                pytest.fail(f"racing processes did not answer within {timeout:.0f} s")
            continue
        if isinstance(outcome, str):
            pytest.fail(f"racing process {worker} failed:\n{outcome}")
        outcomes[worker] = outcome
    return outcomes


def _check_race(
    storage: Storage, keys: list[str], outcomes: dict[int, list[bool]], who: str
) -> None:
    for index, key in enumerate(keys):
        winners = sorted(worker for worker, won in outcomes.items() if won[index])
        assert len(winners) == 1, (
            f"{len(outcomes)} {who} raced put_if_absent({key!r}): {len(winners)} were told "
            f"they created it (racers {winners}); exactly one must be"
        )
        stored = storage.get(key)
        assert stored == _payload(winners[0], key), (
            f"{key!r} was won by racer {winners[0]} but holds {_show(stored)}"
        )


def _retry_after_a_lost_answer(storage: Storage, error: type[BaseException]) -> None:
    name = error.__name__
    key = f"c/{name}"
    puts = _lose_first_answer(storage.put, error)
    with_retries(lambda: puts(key, b"payload"), f"writing {key!r}", backoff=_NO_WAIT)
    assert puts.calls == 2, f"a {name} after put was not retried ({puts.calls} run)"
    assert storage.get(key) == b"payload", f"a put retried after a {name}"
    assert _keys(storage.list(key)) == [key], f"a put retried after a {name} is listed once"

    deletes = _lose_first_answer(storage.delete, error)
    _must_not_raise(
        f"a delete retried after a {name} (a delete must be repeatable)",
        with_retries,
        lambda: deletes([key]),
        f"deleting {key!r}",
        backoff=_NO_WAIT,
    )
    assert deletes.calls == 2, f"a {name} after delete was not retried"
    assert not storage.exists(key), f"a delete retried after a {name}"

    reads = _lose_first_answer(storage.get_range, error)
    storage.put(key, b"0123456789")
    got = with_retries(lambda: reads(key, 2, 5), f"reading {key!r}", backoff=_NO_WAIT)
    assert (reads.calls, got) == (2, b"234"), f"a read retried after a {name}"


class _LoseFirstAnswer:
    """Run the real operation, then (the first ``times`` runs) raise ``error`` as if the
    answer had been lost on its way back. Counts runs in ``calls``."""

    def __init__(self, operation: Callable[..., Any], error: type[BaseException], times: int):
        self.operation = operation
        self.error = error
        self.times = times
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        result = self.operation(*args)
        if self.calls <= self.times:
            raise self.error(f"answer lost after the operation ran (injected, run {self.calls})")
        return result


def _lose_first_answer(
    operation: Callable[..., Any], error: type[BaseException], times: int = 1
) -> _LoseFirstAnswer:
    return _LoseFirstAnswer(operation, error, times)


def _must_not_raise(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def _keys(infos: Iterator[ObjectInfo]) -> list[str]:
    keys = [info.key for info in infos]
    assert len(keys) == len(set(keys)), f"a listing repeated keys: {sorted(keys)}"
    return sorted(keys)


def _put_all(storage: Storage, keys: list[str]) -> None:
    # Many small writes: a few threads, as a pipeline would, so slow backends stay quick.
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda key: storage.put(key, key.encode()), keys))


def _show(data: bytes) -> str:
    if len(data) <= 40:
        return repr(data)
    return f"{len(data)} bytes starting {data[:24]!r}"

"""The conformance suite fails on broken backends: each check here meets the bug it is for.

Every broken backend is a real one (memory or local files) with one method wrong the way a
backend author could get it wrong; the suite's method must then fail. For the retry checks,
which are about a backend's request path, the broken part is the retry loop of
``FlakyTransport`` (a simulated transport over memory storage). Every one of the 25 checks
has a broken backend here, and passes on that backend's unbroken base.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from icechunk_spark.errors import NotFoundError, StorageError, StorageUnreachableError
from icechunk_spark.storage import LocalStorage, MemoryStorage, ObjectInfo, Storage
from icechunk_spark.storage.spares import Spares
from icechunk_spark.testing import FlakyTransport, StorageTests, TransportFaults
from icechunk_spark.testing.transport import Fault

T = TypeVar("T")

# What a failing check raises: an assert, or pytest.raises(...) that saw nothing raised.
SUITE_FAILURE = (AssertionError, pytest.fail.Exception)


class CheckThenWrite(LocalStorage):
    """put_if_absent as exists() then put(): two racers can both see "absent"."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if self.exists(key):
            return False
        self.put(key, data)
        return True


class MissingReadsEmpty(MemoryStorage):
    def get(self, key: str) -> bytes:
        try:
            return super().get(key)
        except NotFoundError:
            return b""


class RangePastTheEndFails(MemoryStorage):
    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.get(key)
        if end > len(data):
            raise StorageError("the requested range is not satisfiable")
        return data[start:end]


class EmptyRangeSkipsTheObject(MemoryStorage):
    def get_range(self, key: str, start: int, end: int) -> bytes:
        return b"" if end <= start else super().get_range(key, start, end)


class PutIfAbsentOverwrites(MemoryStorage):
    def put_if_absent(self, key: str, data: bytes) -> bool:
        created = not self.exists(key)
        self.put(key, data)
        return created


class PrefixWithoutSlash(MemoryStorage):
    """Lists ``c/`` as every key starting with ``c``, so ``cx/`` leaks in."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return super().list(prefix.rstrip("/"))


class FoldersOnly(MemoryStorage):
    """Takes every prefix as a folder (what S3 did before): no exact keys, no name stems."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder = prefix if prefix.endswith("/") or not prefix else prefix + "/"
        return super().list(folder)


class SecondsNotMilliseconds(MemoryStorage):
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for info in super().list(prefix):
            yield ObjectInfo(info.key, info.size, info.modified_ms // 1000)


class WrongSizes(MemoryStorage):
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for info in super().list(prefix):
            yield ObjectInfo(info.key, 0, info.modified_ms)


class DeleteRefusesMissing(MemoryStorage):
    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self.get(key)
        super().delete(keys)


class ExistsForFolders(MemoryStorage):
    def exists(self, key: str) -> bool:
        return super().exists(key) or any(True for _ in self.list(key.rstrip("/") + "/"))


class GetManySorted(MemoryStorage):
    def get_many(self, keys: Iterable[str]) -> list[bytes]:
        return [self.get(k) for k in sorted(set(keys))]


class LeavesTemporaryFiles(LocalStorage):
    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        self.root.joinpath(key).with_name(".tmp-leftover").write_bytes(data)


class ListsItsSpares(LocalStorage):
    def list_temporary(self) -> Iterator[ObjectInfo]:
        held, self._spares = self._spares, Spares()  # as if it had made none
        try:
            return iter(list(super().list_temporary()))
        finally:
            self._spares = held


class SparesOutliveClose(LocalStorage):
    def close(self) -> None:
        pass


class CutsLargeWrites(MemoryStorage):
    """Keeps only what one write call took (128 KiB here): a short write goes unnoticed."""

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data[: 128 * 1024])


class RangeFromZeroReadsAll(MemoryStorage):
    """Reads a range from offset 0 as the whole object: meant for a range that covers it,
    but the end is never compared with the size."""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.get(key) if start == 0 else super().get_range(key, start, end)


class PicklesACopy(MemoryStorage):
    """Pickles its objects by value, not its name: a reopened handle holds a copy, and
    neither handle sees what the other writes afterwards."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        copy = MemoryStorage.named(uuid.uuid4().hex)
        copy._objects.update(self._objects)
        return (MemoryStorage.named, (copy.url.removeprefix("memory://"),))


class OwnBytesCountAsCreated(MemoryStorage):
    """put_if_absent answers True when the object holds the same bytes already ("it is
    ours"): the retry of a create that landed then claims a second win."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return super().put_if_absent(key, data) or self.get(key) == data


# Broken request paths of a network backend: FlakyTransport's transport over memory storage,
# with a retry loop of its own instead of ``with_retries``.
class RetriesEveryOSError(FlakyTransport):
    """Retries every OSError, a refused connection too: a wrong endpoint fails slowly."""

    def retry(self, operation: str, request: Callable[[], T]) -> T:
        for attempt in range(5):
            try:
                return request()
            except OSError as exc:
                if attempt == 4:
                    raise StorageError(f"{operation} failed 5 times") from exc
        raise AssertionError("unreachable")


class GivesUpWithTheTransportError(FlakyTransport):
    """Retries transient failures, then lets the last one out as it is, not a StorageError."""

    def retry(self, operation: str, request: Callable[[], T]) -> T:
        for attempt in range(5):
            try:
                return request()
            except ConnectionRefusedError as exc:
                raise StorageUnreachableError(f"{operation}: connection refused") from exc
            except (ConnectionError, TimeoutError):
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")


class RetriesReadsOnly(FlakyTransport):
    """Retries reads only: writes "must not be repeated" (they may: objects are immutable, and
    these failures came before the write took effect)."""

    def retry(self, operation: str, request: Callable[[], T]) -> T:
        if operation in ("get", "get_range", "list", "exists"):
            return super().retry(operation, request)
        try:
            return request()
        except (ConnectionError, TimeoutError) as exc:
            raise StorageError(f"{operation} failed: {exc}") from exc


class PreparedWritesThrough(MemoryStorage):
    """Prepares a put-if-absent by putting the object: visible before it is created, and a
    create over it by another writer is refused."""

    def prepare_put_if_absent(self, key: str, data: bytes) -> None:
        self.put(key, data)


# (broken backend, the suite's check, what its failure says)
BROKEN: list[tuple[type[Storage], str, str]] = [
    (ListsItsSpares, "test_ready_for_writes_changes_nothing_a_caller_sees", "is listed as left"),
    (SparesOutliveClose, "test_ready_for_writes_changes_nothing_a_caller_sees", "closed, the"),
    (CheckThenWrite, "test_put_if_absent_race_between_threads", "exactly one must be"),
    (CheckThenWrite, "test_put_if_absent_race_between_processes", "exactly one must be"),
    (MissingReadsEmpty, "test_get_of_a_missing_key_raises_not_found", "DID NOT RAISE"),
    (MissingReadsEmpty, "test_get_range_of_a_missing_key_raises_not_found", "DID NOT RAISE"),
    (RangePastTheEndFails, "test_get_range_is_clipped_to_the_object", "raised StorageError"),
    (EmptyRangeSkipsTheObject, "test_get_range_of_a_missing_key_raises_not_found", "DID NOT"),
    (PutIfAbsentOverwrites, "test_put_if_absent_creates_once", "must not change the object"),
    (PreparedWritesThrough, "test_prepared_put_if_absent_is_a_put_if_absent", "DID NOT RAISE"),
    (PrefixWithoutSlash, "test_list_by_folder_prefix", r"list\('c/'\) gave"),
    (FoldersOnly, "test_list_prefix_is_a_string_prefix", r"list\('t/0+'\) gave \[\]"),
    (FoldersOnly, "test_keys_the_format_uses", "list of the exact key"),
    (SecondsNotMilliseconds, "test_list_reports_sizes_and_times", "listed modified_ms="),
    (WrongSizes, "test_list_reports_sizes_and_times", "sizes listed"),
    (WrongSizes, "test_put_replaces_an_object", "after replacing"),
    (DeleteRefusesMissing, "test_delete_removes_present_keys_and_ignores_missing_ones", "ignored"),
    (DeleteRefusesMissing, "test_delete_of_many_keys", "raised NotFoundError"),
    (DeleteRefusesMissing, "test_operations_retried_after_a_lost_answer_act_once", "repeatable"),
    (ExistsForFolders, "test_exists_is_true_for_objects_only", r"exists\('c'\) is true"),
    (GetManySorted, "test_get_many_keeps_the_order_asked_for", "get_many gave"),
    (LeavesTemporaryFiles, "test_list_temporary_is_empty_on_a_clean_store", "left temporary"),
    (CutsLargeWrites, "test_put_then_get_round_trips", r"get\('a/large'\) returned 131072 bytes"),
    (RangeFromZeroReadsAll, "test_get_range_returns_the_bytes_asked_for", r"'c/k', 0, 16\)"),
    (PicklesACopy, "test_a_reopened_handle_reaches_the_same_objects", "sees the first's puts"),
    (
        OwnBytesCountAsCreated,
        "test_put_if_absent_retried_after_a_lost_answer_is_settled_by_reading",
        "the retry of a put_if_absent that landed finds the object",
    ),
    (RetriesEveryOSError, "test_a_refused_connection_is_not_retried", "was tried 5 times"),
    (
        GivesUpWithTheTransportError,
        "test_retries_are_bounded_and_end_in_a_storage_error",
        "gave up with TimeoutError",
    ),
    (RetriesReadsOnly, "test_transient_transport_failures_are_retried", "put after a transient"),
]
# The handle each fault fixture stands for: FlakyTransport's fault.
FAULTS: dict[str, Fault] = {
    "transient_faults": "first",
    "refused_connection": "refused",
    "failing_transport": "always",
}


@pytest.mark.parametrize(
    ("backend", "check", "says"), BROKEN, ids=[f"{b.__name__}-{c[5:]}" for b, c, _ in BROKEN]
)
def test_the_check_fails_on_a_broken_backend(
    backend: type[Storage], check: str, says: str, tmp_path: Path
) -> None:
    with pytest.raises(SUITE_FAILURE, match=says):
        _run(check, backend, tmp_path)


@pytest.mark.parametrize(
    ("backend", "check"),
    # Not the process race: tests/storage/test_local.py runs it on LocalStorage (3 s).
    sorted({(b.__bases__[0], c) for b, c, _ in BROKEN if "processes" not in c}, key=str),
    ids=lambda v: v.__name__ if isinstance(v, type) else v[5:],
)
def test_the_check_passes_on_the_backend_before_it_was_broken(
    backend: type[Storage], check: str, tmp_path: Path
) -> None:
    # Each failure above is the bug's, not the harness's: the same check, on the same kind
    # of backend without the bug, passes.
    _run(check, backend, tmp_path)


def _run(check: str, backend: type[Storage], tmp_path: Path) -> None:
    """The suite's ``check`` on a fresh location of ``backend``, given what it asks for: the
    storage, or a fault fixture's handle (a transport ``backend`` over memory storage)."""
    method = getattr(StorageTests(), check)
    wanted = inspect.signature(method).parameters
    if issubclass(backend, FlakyTransport):
        inner = MemoryStorage.named(uuid.uuid4().hex)
        arguments: dict[str, object] = {"storage": inner}
        for name, fault in FAULTS.items():
            if name in wanted:
                handle = backend(inner, fault)
                arguments[name] = TransportFaults(handle, _injected_by(handle))
        method(**{name: arguments[name] for name in wanted})
    else:
        method(_open(backend, tmp_path))


def _injected_by(handle: FlakyTransport) -> Callable[[], int]:
    return lambda: handle.injected


def _open(backend: type[Storage], tmp_path: Path) -> Storage:
    if issubclass(backend, LocalStorage):
        return backend(tmp_path / "repo")
    assert issubclass(backend, MemoryStorage)
    # By name, as memory://name opens it: a pickled memory storage reopens by its name.
    return backend.named(uuid.uuid4().hex)


def test_every_check_has_a_broken_backend() -> None:
    # A check no backend can fail tests nothing about backends: a new check comes with its bug.
    checks = {name for name in dir(StorageTests) if name.startswith("test_")}
    assert checks - {check for _, check, _ in BROKEN} == set()

"""Checks of ``StorageTests`` on retries, as ``storage/base.py`` defines them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import StorageError
from ..storage.base import TRANSIENT_ERRORS, Storage, with_retries
from .assertions import keys_of, must_not_raise
from .hooks import StorageHooks
from .transport import NO_WAIT, TransportFaults


class RetryChecks(StorageHooks):
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
        created = with_retries(lambda: attempt(key, b"mine"), f"creating {key!r}", backoff=NO_WAIT)
        assert attempt.calls == 2
        assert created is False, "the retry of a put_if_absent that landed finds the object"
        assert storage.get(key) == b"mine", "the object holds what the lost attempt wrote"

    def test_a_refused_connection_is_not_retried(self, refused_connection: TransportFaults) -> None:
        # Nothing listens there: a retry milliseconds later finds the same, so the backend
        # fails at once (a typo in an endpoint must fail fast), with one of our errors.
        refused = refused_connection.storage
        for operation, call in _each_operation(refused):
            before = refused_connection.injected()
            error = _failure_of(f"{operation} on a refused connection", call)
            assert isinstance(error, StorageError), (
                f"{operation} on a refused connection raised {type(error).__name__}: {error}; "
                "expected a StorageError"
            )
            tries = refused_connection.injected() - before
            assert tries == 1, f"{operation} on a refused connection was tried {tries} times"

    def test_retries_are_bounded_and_end_in_a_storage_error(
        self, failing_transport: TransportFaults
    ) -> None:
        # Every request fails transiently: the backend retries, then gives up (that the call
        # returns at all shows its retries are bounded) with a StorageError, whose cause is
        # the transport's last failure. Callers catch StorageError, not a client's exceptions.
        failing = failing_transport.storage
        for operation, call in _each_operation(failing):
            error = _failure_of(f"{operation} on a transport that always fails", call)
            assert isinstance(error, StorageError), (
                f"{operation} on a transport that always fails gave up with "
                f"{type(error).__name__}: {error}; expected a StorageError"
            )
            assert error.__cause__ is not None, (
                f"the StorageError of {operation} has no cause: keep the transport's failure"
            )
        assert failing_transport.injected() > 0, "the transport injected no failure"

    def test_transient_transport_failures_are_retried(
        self, storage: Storage, transient_faults: TransportFaults
    ) -> None:
        flaky = transient_faults.storage

        def retried(operation: str, call: Callable[..., Any], *args: Any) -> Any:
            return must_not_raise(f"{operation} after a transient failure", call, *args)

        retried("put", flaky.put, "c/k", b"0123456789")
        assert retried("get", flaky.get, "c/k") == b"0123456789"
        assert retried("get_range", flaky.get_range, "c/k", 2, 5) == b"234"
        assert retried("exists", flaky.exists, "c/k")
        assert keys_of(retried("list", lambda: iter([*flaky.list("c/")]))) == ["c/k"]
        assert retried("put_if_absent", flaky.put_if_absent, "t/00000000000000000000", b"once"), (
            "a put_if_absent that failed before taking effect and was retried creates the object"
        )
        assert flaky.put_if_absent("t/00000000000000000000", b"twice") is False
        retried("delete", flaky.delete, ["c/k"])
        assert not storage.exists("c/k"), "the delete went through"
        assert storage.get("t/00000000000000000000") == b"once"
        assert transient_faults.injected() > 0, "the transport injected no failure to retry"


def _each_operation(storage: Storage) -> list[tuple[str, Callable[[], object]]]:
    """One call of each operation, on the key ``c/k``."""
    return [
        ("get", lambda: storage.get("c/k")),
        ("get_range", lambda: storage.get_range("c/k", 0, 4)),
        ("put", lambda: storage.put("c/k", b"data")),
        ("put_if_absent", lambda: storage.put_if_absent("c/k", b"data")),
        ("list", lambda: [*storage.list("c/")]),
        ("delete", lambda: storage.delete(["c/k"])),
        ("exists", lambda: storage.exists("c/k")),
    ]


def _failure_of(what: str, call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError(f"{what} did not fail")


def _retry_after_a_lost_answer(storage: Storage, error: type[BaseException]) -> None:
    name = error.__name__
    key = f"c/{name}"
    puts = _lose_first_answer(storage.put, error)
    with_retries(lambda: puts(key, b"payload"), f"writing {key!r}", backoff=NO_WAIT)
    assert puts.calls == 2, f"a {name} after put was not retried ({puts.calls} run)"
    assert storage.get(key) == b"payload", f"a put retried after a {name}"
    assert keys_of(storage.list(key)) == [key], f"a put retried after a {name} is listed once"

    deletes = _lose_first_answer(storage.delete, error)
    must_not_raise(
        f"a delete retried after a {name} (a delete must be repeatable)",
        with_retries,
        lambda: deletes([key]),
        f"deleting {key!r}",
        backoff=NO_WAIT,
    )
    assert deletes.calls == 2, f"a {name} after delete was not retried"
    assert not storage.exists(key), f"a delete retried after a {name}"

    reads = _lose_first_answer(storage.get_range, error)
    storage.put(key, b"0123456789")
    got = with_retries(lambda: reads(key, 2, 5), f"reading {key!r}", backoff=NO_WAIT)
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

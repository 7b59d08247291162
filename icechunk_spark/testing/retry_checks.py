"""Checks of ``StorageTests`` on retries, as ``storage/base.py`` defines them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ..errors import StorageError
from ..retry import Backoff
from ..storage.base import TRANSIENT_ERRORS, Storage, with_retries
from .assertions import keys_of, must_not_raise
from .hooks import StorageHooks
from .transport import TransientFaults

# The retry tests check what is retried, not how long it waits.
_NO_WAIT = Backoff(base_s=0.0, cap_s=0.0)


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
        assert keys_of(flaky.list("c/")) == ["c/k"]
        assert flaky.put_if_absent("t/00000000000000000000", b"once") is True, (
            "a put_if_absent that failed before taking effect and was retried creates the object"
        )
        assert flaky.put_if_absent("t/00000000000000000000", b"twice") is False
        flaky.delete(["c/k"])
        assert not storage.exists("c/k"), "the delete went through"
        assert storage.get("t/00000000000000000000") == b"once"
        assert transient_faults.injected() > 0, "the transport injected no failure to retry"


def _retry_after_a_lost_answer(storage: Storage, error: type[BaseException]) -> None:
    name = error.__name__
    key = f"c/{name}"
    puts = _lose_first_answer(storage.put, error)
    with_retries(lambda: puts(key, b"payload"), f"writing {key!r}", backoff=_NO_WAIT)
    assert puts.calls == 2, f"a {name} after put was not retried ({puts.calls} run)"
    assert storage.get(key) == b"payload", f"a put retried after a {name}"
    assert keys_of(storage.list(key)) == [key], f"a put retried after a {name} is listed once"

    deletes = _lose_first_answer(storage.delete, error)
    must_not_raise(
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

"""A storage wrapper that injects faults into chosen calls, for adversarial tests.

It wraps a real backend (memory, local or S3), so every byte still goes through real storage;
only the *answers* the caller sees are changed, or a call is held at a point until the test
lets it go. Rules are keyed by the storage method and a key prefix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from icechunk_spark.errors import StorageError
from icechunk_spark.storage import ObjectInfo, Storage

T = TypeVar("T")


@dataclass
class Rule:
    method: str
    prefix: str
    action: Callable[[Callable[[], object]], object]
    times: int = 1  # how many matching calls it applies to (then it is spent)
    hits: int = field(default=0)
    when: Callable[[], bool] | None = None  # applies only while this says so


class FaultyStorage(Storage):
    """``inner`` with faults: ``lose_response``, ``answer``, ``hold`` on chosen calls."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self.mtime_resolution_ms = inner.mtime_resolution_ms
        self.remote = inner.remote
        self._rules: list[Rule] = []
        self._lock = threading.Lock()

    # -- fault rules ------------------------------------------------------------------------
    def lose_response(self, method: str, prefix: str, times: int = 1) -> None:
        """The call is applied, then the caller sees a storage error (a dropped connection)."""

        def action(call: Callable[[], object]) -> object:
            call()
            raise StorageError("connection dropped after the request was sent (injected)")

        self._add(Rule(method, prefix, action, times))

    def answer(self, method: str, prefix: str, value: object, times: int = 1) -> None:
        """The call is applied, then the caller sees ``value`` (e.g. a retry's "exists")."""

        def action(call: Callable[[], object]) -> object:
            call()
            return value

        self._add(Rule(method, prefix, action, times))

    def fail(
        self,
        method: str,
        prefix: str,
        times: int = 1,
        when: Callable[[], bool] | None = None,
        error: StorageError | None = None,
    ) -> Rule:
        """The call is not applied and the caller sees ``error`` (default: a 503)."""

        def action(call: Callable[[], object]) -> object:
            raise error or StorageError("service unavailable (injected)")

        return self._add(Rule(method, prefix, action, times, when=when))

    def hold(self, method: str, prefix: str) -> tuple[threading.Event, threading.Event]:
        """Pause the next matching call *before* it runs.

        Returns ``(reached, release)``: ``reached`` is set when a caller is waiting there;
        setting ``release`` lets it go on.
        """
        reached, release = threading.Event(), threading.Event()

        def action(call: Callable[[], object]) -> object:
            reached.set()
            release.wait()
            return call()

        self._add(Rule(method, prefix, action, 1))
        return reached, release

    def heal(self) -> None:
        """Drop every rule: storage answers truthfully again."""
        with self._lock:
            self._rules.clear()

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def _run(self, method: str, key: str, call: Callable[[], object]) -> object:
        with self._lock:
            rule = next(
                (
                    r
                    for r in self._rules
                    if r.method == method
                    and key.startswith(r.prefix)
                    and r.hits < r.times
                    and (r.when is None or r.when())
                ),
                None,
            )
            if rule is not None:
                rule.hits += 1
        return call() if rule is None else rule.action(call)

    # -- Storage ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._run("get", key, lambda: self.inner.get(key))  # type: ignore[return-value]

    def get_range(self, key: str, start: int, end: int) -> bytes:
        call = lambda: self.inner.get_range(key, start, end)  # noqa: E731
        return self._run("get_range", key, call)  # type: ignore[return-value]

    def put(self, key: str, data: bytes) -> None:
        self._run("put", key, lambda: self.inner.put(key, data))

    def prepare_put_if_absent(self, key: str, data: bytes) -> None:
        self._run("prepare_put_if_absent", key, lambda: self.inner.prepare_put_if_absent(key, data))

    def drop_prepared(self, key: str, data: bytes) -> None:
        self.inner.drop_prepared(key, data)

    def ready_for_writes(self) -> None:
        self.inner.ready_for_writes()

    def list_temporary(self) -> Iterator[ObjectInfo]:
        return self.inner.list_temporary()

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return bool(self._run("put_if_absent", key, lambda: self.inner.put_if_absent(key, data)))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Read whole inside the call, so a rule on "list" holds or fails the listing itself.
        listing = self._run("list", prefix, lambda: list(self.inner.list(prefix)))
        assert isinstance(listing, list)
        return iter(listing)

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._run("delete", keys[0] if keys else "", lambda: self.inner.delete(keys))

    def exists(self, key: str) -> bool:
        return bool(self._run("exists", key, lambda: self.inner.exists(key)))


def run_held(
    faulty: FaultyStorage,
    method: str,
    prefix: str,
    call: Callable[[], T],
    meanwhile: Callable[[], object],
) -> T | BaseException:
    """Run ``call`` on a thread until its first ``method`` call on ``prefix`` (held there),
    run ``meanwhile``, let it go on; returns what ``call`` returned or raised. E.g. a commit
    held where it creates its state file (``"put_if_absent", "t/"``) while others act."""
    reached, release = faulty.hold(method, prefix)
    outcome: list[T | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert reached.wait(30), f"{method} on {prefix!r} was never reached"
    try:
        meanwhile()
    finally:
        release.set()
        thread.join(60)
    assert len(outcome) == 1, "the held call did not finish"
    return outcome[0]

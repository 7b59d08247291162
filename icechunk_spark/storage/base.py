"""The storage interface: immutable objects by key, plus one atomic put-if-absent.

Keys are relative, ``/``-separated (``t/00000000000000000007``, ``m/<id>``). Every backend
implements the same small surface so the core never knows where bytes live.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ..errors import StorageError
from ..retry import STORAGE_BACKOFF, Backoff

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    modified_ms: int


class Storage(ABC):
    """Bytes by key. Everything but put-if-absent may be retried freely: objects are immutable.

    Keys form a tree: no key names both an object and a folder (no ``c`` beside ``c/x``). A
    storage pickles to a handle on the same location (repositories travel to worker processes
    that way). ``icechunk_spark.testing.StorageTests`` checks a backend against these rules.
    """

    url: str
    # How coarse ``ObjectInfo.modified_ms`` of a listing is: a time t stands for [t, t + this).
    mtime_resolution_ms: int = 1
    # Whether each request is a round trip over a network (object storage): worth sending
    # beside other work. A local file system or memory answers in microseconds, less than
    # handing the request to another thread costs.
    remote: bool = True

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes. Raises ``NotFoundError`` when absent."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, clipped to it as ``data[start:end]`` is.

        A range running past the end gives the bytes there are, possibly none; an empty range
        gives ``b""``. Raises ``NotFoundError`` when the object is absent, whatever the range.
        """

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or replace) an object."""

    def put_best_effort(self, key: str, data: bytes) -> None:
        """Write (or replace) an object whose readers take it stale, torn or missing without
        harm (the state hint, ``icechunk.json``): a backend may skip what makes ``put``
        durable across a crash. Replacing is still atomic for concurrent readers."""
        self.put(key, data)

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Atomically create an object; ``False`` (nothing written) when it exists already."""

    def prepare_put_if_absent(self, key: str, data: bytes) -> None:  # noqa: B027 - optional
        """A head start on ``put_if_absent(key, data)`` with these very bytes (the same
        object), which may follow: a backend may write them now where it would then, so the
        create itself is quick. Nothing is visible before ``put_if_absent``; a caller that
        will not create calls ``drop_prepared``. Default: nothing ahead."""

    def drop_prepared(self, key: str, data: bytes) -> None:  # noqa: B027 - optional
        """Forget ``prepare_put_if_absent(key, data)`` and what it wrote (nothing if none)."""

    def ready_for_writes(self) -> None:  # noqa: B027 - optional
        """A quiet moment, behind a commit: a backend may make its next writes quicker now
        (local disk: creates their temporary files, ``storage.spares``). Default: nothing."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in no set order.

        ``prefix`` is a string prefix: a folder like ``c/`` (never matching ``cx/``), an exact
        key, or ``""`` for every object of the location (and nothing outside it).
        """

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; missing ones are ignored (so a repeated delete is harmless)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object has this key (a folder that holds objects is not one).

        Never used to decide a write: see put_if_absent.
        """

    def list_temporary(self) -> Iterator[ObjectInfo]:
        """Temporary files that interrupted writes left behind (none on most backends).

        Their keys can be passed to ``delete``; garbage collection removes the old ones.
        """
        return iter(())

    def get_many(self, keys: Iterable[str]) -> builtins.list[bytes]:
        return [self.get(k) for k in keys]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and connections (and what ``ready_for_writes`` made)."""


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
# A refused connection means nothing listens there: a retry milliseconds later finds the same,
# and the clients below us have already retried it; a typo in an endpoint must fail fast.
NEVER_TRANSIENT: tuple[type[BaseException], ...] = (ConnectionRefusedError,)


def with_retries(
    operation: Callable[[], T],
    describe: str,
    attempts: int = 5,
    transient: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
    backoff: Backoff = STORAGE_BACKOFF,
) -> T:
    """Run ``operation``, retrying transient failures with jittered exponential backoff.

    Raises:
        StorageError: every attempt failed with a transient error.
    """
    for attempt in range(attempts):
        try:
            return operation()
        except transient as exc:
            if isinstance(exc, NEVER_TRANSIENT):
                raise
            if attempt == attempts - 1:
                raise StorageError(f"{describe} failed after {attempts} attempts: {exc}") from exc
            backoff.sleep(attempt)
    raise AssertionError("unreachable")  # pragma: no cover

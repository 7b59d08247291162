"""Transport faults for the retry checks of ``StorageTests``, and a simulated transport for
backends that have none (memory, local files).

A network backend retries what its transport fails transiently, does not retry a refused
connection, and gives up with a ``StorageError`` (``storage/base.py``). Those rules are about the
backend's request path, so the checks need a handle whose transport fails: S3, GCS and Azure put
a fault-injecting proxy in front of their server (``tests/storage/test_s3.py``); a backend
without a transport gets ``FlakyTransport``, which sends each request through a simulated one
and retries it as our network backends do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

import pytest

from ..errors import StorageUnreachableError
from ..retry import Backoff
from ..storage.base import ObjectInfo, Storage, with_retries

T = TypeVar("T")
Fault = Literal["first", "always", "refused"]
# The checks count attempts, they do not time them: no waiting between retries.
NO_WAIT = Backoff(base_s=0.0, cap_s=0.0)


@dataclass(frozen=True, slots=True)
class TransportFaults:
    """A handle on the tested location whose transport fails requests *before* they take
    effect, the way the fixture that made it says, and how many failures it has caused.

    ``injected()`` tells a check whether the failures really happened (and, when every
    request fails, how many requests were sent).
    """

    storage: Storage
    injected: Callable[[], int]


# The name of the first fault fixture (``transient_faults``); kept for backends that use it.
TransientFaults = TransportFaults


class FlakyTransport(Storage):
    """``inner`` behind a simulated transport that fails as ``fault`` says.

    Every operation is one request: it passes the transport, which may fail it before it
    reaches ``inner`` (so a failed request took no effect), and runs in ``retry``, the same
    loop our S3, GCS and Azure backends run (``with_retries``; a refused connection becomes
    ``StorageUnreachableError``, as they report it). Faults:

    * ``"first"``: the first request of each operation fails transiently (a reset connection);
    * ``"always"``: every request times out;
    * ``"refused"``: every connection is refused (nothing listens).

    >>> flaky = FlakyTransport(open_storage("memory://x"), "first")    # doctest: +SKIP
    >>> flaky.put("c/k", b"v")  # failed once, retried                 # doctest: +SKIP
    >>> flaky.injected                                                 # doctest: +SKIP
    1
    """

    def __init__(self, inner: Storage, fault: Fault = "first") -> None:
        self.inner = inner
        self.fault = fault
        self.url = inner.url
        self.mtime_resolution_ms = inner.mtime_resolution_ms
        self.remote = inner.remote
        self.injected = 0
        self._failed_once: set[str] = set()
        self._lock = threading.Lock()

    def retry(self, operation: str, request: Callable[[], T]) -> T:
        """Run ``request`` (one ``operation``) as our network backends run theirs."""
        try:
            return with_retries(request, f"{operation} in {self.url}", backoff=NO_WAIT)
        except ConnectionRefusedError as exc:
            raise StorageUnreachableError(
                f"cannot connect for {self.url} (simulated): connection refused"
            ) from exc

    def _request(self, operation: str, call: Callable[[], T]) -> T:
        return self.retry(operation, lambda: self._send(operation, call))

    def _send(self, operation: str, call: Callable[[], T]) -> T:
        error = self._fault_for(operation)
        if error is not None:
            raise error
        return call()

    def _fault_for(self, operation: str) -> OSError | None:
        with self._lock:
            if self.fault == "first" and operation in self._failed_once:
                return None
            self._failed_once.add(operation)
            self.injected += 1
        if self.fault == "refused":
            return ConnectionRefusedError(111, f"connection refused ({operation}, simulated)")
        if self.fault == "always":
            return TimeoutError(f"no answer in time ({operation}, simulated)")
        return ConnectionResetError(104, f"connection reset ({operation}, simulated)")

    # -- Storage: each operation one request ---------------------------------------------
    def get(self, key: str) -> bytes:
        return self._request("get", lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._request("get_range", lambda: self.inner.get_range(key, start, end))

    def put(self, key: str, data: bytes) -> None:
        self._request("put", lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._request("put_if_absent", lambda: self.inner.put_if_absent(key, data))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return iter(self._request("list", lambda: [*self.inner.list(prefix)]))

    def delete(self, keys: Iterable[str]) -> None:
        keys = [*keys]  # sent again on a retry, so not an iterator spent by the first
        self._request("delete", lambda: self.inner.delete(keys))

    def exists(self, key: str) -> bool:
        return self._request("exists", lambda: self.inner.exists(key))


class SimulatedTransport:
    """Mix into a ``StorageTests`` subclass of a backend without a network transport (memory,
    local files): the retry checks then run through ``FlakyTransport`` over its location.

    >>> class TestMyStorage(SimulatedTransport, StorageTests): ...     # doctest: +SKIP
    """

    @pytest.fixture
    def transient_faults(self, storage: Storage) -> TransportFaults:
        return self._faulty(storage, "first")

    @pytest.fixture
    def refused_connection(self, storage: Storage) -> TransportFaults:
        return self._faulty(storage, "refused")

    @pytest.fixture
    def failing_transport(self, storage: Storage) -> TransportFaults:
        return self._faulty(storage, "always")

    def _faulty(self, storage: Storage, fault: Fault) -> TransportFaults:
        flaky = FlakyTransport(storage, fault)
        return TransportFaults(flaky, lambda: flaky.injected)

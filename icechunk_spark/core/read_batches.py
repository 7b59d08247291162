"""Serving single reads in batches, so reads that arrive together share requests.

zarr asks for a selection's chunks one ``get`` at a time; served one by one, every chunk of a
virtual file would be a request of its own. ``ReadBatches`` collects single reads and hands
them to one ``execute`` call per batch (``virtual_reads`` merges the ranges of each file).

- **Threads** (``read``): a read with no other read in flight goes straight ahead; a read
  that finds company waits ``window`` seconds for more, then serves them all.
- **Coroutines** (``read_async``): one server thread serves batch after batch while reads keep
  coming (group commit). Before each batch it waits only while reads are still arriving, at
  most ``window``: a burst (zarr gathering a selection) becomes one batch, and a lone read
  (dask reading one chunk per task) waits a few hundred microseconds, not the whole window.
  A gather queues its reads in one turn of its event loop, so the server also waits for
  every turn that queued reads to end: a turn held up half way (its thread preempted on a
  busy machine) would otherwise look like the end of the burst, and its reads would be
  served in two batches or more.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

R = TypeVar("R")
Outcome = bytes | BaseException

# How often a server waiting for a burst to end looks whether it still grows: a lone read
# waits about this long (zarr queues a selection's gets far faster than this apart).
SETTLE_STEP_S = 0.00025


class ReadBatches(Generic[R]):
    """Single reads served through ``execute`` (one outcome per request, in order) in batches
    of the reads that arrive within ``window`` seconds of each other; ``window`` 0: no
    batching."""

    def __init__(self, execute: Callable[[list[R]], Sequence[Outcome]], window: float) -> None:
        self._execute = execute
        self._window = window
        self._lock = threading.Lock()
        self._batch: list[tuple[R, Future[bytes]]] | None = None  # threads' batch
        self._inflight = 0  # threads' reads in progress (to tell sequential from concurrent)
        self._queued: list[tuple[R, Future[bytes]]] = []  # coroutines' next batch
        # Event loops in a turn that queued reads: each is removed by a callback that runs
        # once the turn has ended (``_in_turn``).
        self._turns: set[asyncio.AbstractEventLoop] = set()
        self._serving = False
        self._server: ThreadPoolExecutor | None = None

    def read(self, request: R) -> bytes:
        """The bytes of one request, served with the threads' reads arriving meanwhile."""
        if self._window <= 0:
            return unwrap(self._execute([request])[0])
        future: Future[bytes] = Future()
        with self._lock:
            self._inflight += 1
            # A reader with no company (sequential reads) goes straight ahead: the window
            # would only add latency.
            alone = self._inflight == 1 and self._batch is None
            leader = not alone and self._batch is None
            if leader:
                self._batch = []
            if self._batch is not None and not alone:
                self._batch.append((request, future))
        try:
            if alone:
                return unwrap(self._execute([request])[0])
            if leader:
                time.sleep(self._window)  # let concurrent reads join
                with self._lock:
                    batch, self._batch = self._batch or [], None
                self._serve(batch)
            return future.result()
        finally:
            with self._lock:
                self._inflight -= 1

    async def read_async(self, request: R) -> bytes:
        """``read`` for coroutines: waits for its batch without holding a thread."""
        if self._window <= 0:
            return unwrap(self._execute([request])[0])
        future: Future[bytes] = Future()
        loop = asyncio.get_running_loop()
        with self._lock:
            self._queued.append((request, future))
            start, self._serving = not self._serving, True
            first_in_turn = loop not in self._turns
            self._turns.add(loop)
        if first_in_turn:
            # Runs after every callback ready in this turn: after the rest of a gather's
            # reads are queued.
            loop.call_soon(self._turn_ended, loop)
        if start:
            try:
                self._server_thread().submit(self._serve_queued)
            except BaseException as exc:  # e.g. closed meanwhile: no read may wait forever
                self._fail_queued(exc)
                raise
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown(wait=True)

    def _server_thread(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._server is None:  # one thread, kept: a thread per batch costs ~0.1 ms
                self._server = ThreadPoolExecutor(1, thread_name_prefix="icechunk-batches")
            return self._server

    def _serve_queued(self) -> None:
        """Serve the coroutines' reads, batch after batch, until none is left."""
        try:
            while True:
                self._settle()
                with self._lock:
                    batch, self._queued = self._queued, []
                    if not batch:
                        self._serving = False
                        return
                self._serve(batch)
        except BaseException as exc:  # the next read starts a server again; none waits forever
            self._fail_queued(exc)
            raise

    def _fail_queued(self, exc: BaseException) -> None:
        with self._lock:
            batch, self._queued = self._queued, []
            self._serving = False
        for _, waiting in batch:
            _settle_future(waiting, exc)

    def _turn_ended(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._turns.discard(loop)

    def _in_turn(self) -> bool:
        """Whether an event loop is still in a turn that queued reads. A loop that stopped or
        closed before its callback ran (its reader gave up) is forgotten: it must not hold
        later batches for the whole window."""
        with self._lock:
            self._turns = {loop for loop in self._turns if loop.is_running()}
            return bool(self._turns)

    def _settle(self) -> None:
        """Wait while reads keep arriving, or a turn that queued some goes on, at most the
        window."""
        deadline = time.monotonic() + self._window
        seen = len(self._queued)
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(SETTLE_STEP_S, left))
            now = len(self._queued)
            if now == seen and not self._in_turn():
                return
            seen = now

    def _serve(self, batch: list[tuple[R, Future[bytes]]]) -> None:
        try:
            outcomes = self._execute([r for r, _ in batch])
        except BaseException as exc:  # never leave the waiting reads waiting forever
            outcomes = [exc] * len(batch)
        for (_, waiting), outcome in zip(batch, outcomes, strict=True):
            _settle_future(waiting, outcome)


def _settle_future(waiting: Future[bytes], outcome: Outcome) -> None:
    """Give ``waiting`` its outcome, unless its reader gave up (cancelled it) meanwhile."""
    if not waiting.set_running_or_notify_cancel():
        return  # cancelled: a timeout, or a gather that another chunk's error cancelled
    if isinstance(outcome, BaseException):
        waiting.set_exception(outcome)
    else:
        waiting.set_result(outcome)


def unwrap(outcome: Outcome) -> bytes:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome

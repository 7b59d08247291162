"""Writing the hint (``icechunk.json``) behind a commit, on the I/O threads.

The hint only saves readers a listing: they probe forward from whatever generation it names
(``refs``), so a commit is complete once its state file exists, and returns then. Its hint
follows on the handle's I/O threads, newest first: while one write is in flight, later
commits replace the one waiting, so the hints this handle writes never go back a generation,
and a burst of commits costs one write per round trip, not one each. A process that exits
normally writes the last one (the I/O threads are joined at exit); one that is killed leaves
an older hint, which readers already survive (``refs``: a stale hint is harmless).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Executor

from ..errors import StorageError
from ..format.keys import HINT_KEY
from ..storage import Storage


class HintWriter:
    """The hint writes of one handle: at most one in flight, the newest one waiting."""

    def __init__(self, storage: Storage, pool: Executor) -> None:
        self._storage = storage
        self._pool = pool
        self._lock = threading.Lock()
        self._waiting: tuple[int, bytes] | None = None  # (generation, state file bytes)
        self._newest = -1  # the newest generation handed over, written or waiting
        self._idle = threading.Event()
        self._idle.set()

    def write(self, generation: int, data: bytes) -> None:
        """Write ``data`` (the state file of ``generation``) as the hint, soon; nothing when a
        newer generation was handed over already."""
        with self._lock:
            if generation <= self._newest:
                return
            self._newest = generation
            self._waiting = (generation, data)
            if not self._idle.is_set():
                return  # the write in flight takes this one next
            self._idle.clear()
        try:
            self._pool.submit(self._drain)
        except RuntimeError:  # the pool is shut down (the handle closed): write it here
            self._drain()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every hint handed over is written (or failed), waiting up to ``timeout``."""
        return self._idle.wait(timeout)

    def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    item, self._waiting = self._waiting, None
                    if item is None:
                        self._idle.set()
                        return
                # Best effort: a failed hint leaves an older one, which readers survive.
                with contextlib.suppress(StorageError):
                    self._storage.put_best_effort(HINT_KEY, item[1])
                    # Off the commit's path as the hint is: the next commit's writes start
                    # quicker (local disk: their files are created now, ``storage.spares``).
                    self._storage.ready_for_writes()
        except BaseException:
            with self._lock:  # never leave later hints waiting on a writer that died
                self._waiting = None
                self._idle.set()
            raise

"""Racing ``put_if_absent`` from threads and processes: exactly one winner per key.

Module-level functions: the process race pickles them to spawned processes.
"""

from __future__ import annotations

import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from ..storage.base import Storage
from .assertions import show

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

Opener = Callable[[], Storage]


def keys_to_race(count: int) -> list[str]:
    return [f"t/{generation:020d}" for generation in range(count)]


def payload(worker: int, key: str) -> bytes:
    # Large enough that a write is not one syscall: a torn or mixed object cannot pass.
    return f"{key} created by racer {worker}\n".encode() * 1024


def race(storage: Storage, keys: list[str], worker: int, wait: Callable[[], Any]) -> list[bool]:
    """put_if_absent every key, all racers starting each key together."""
    won = []
    for key in keys:
        wait()
        won.append(storage.put_if_absent(key, payload(worker, key)))
    return won


def race_in_process(
    opener: Opener,
    keys: list[str],
    worker: int,
    barrier: Barrier,
    results: Queue[tuple[int, list[bool] | str]],
) -> None:
    try:
        storage = opener()
        try:
            won = race(storage, keys, worker, lambda: barrier.wait(timeout=60))
        finally:
            storage.close()
        results.put((worker, won))
    except BaseException:
        barrier.abort()  # the others stop waiting for this one
        results.put((worker, traceback.format_exc()))


def collect(
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


def check_race(
    storage: Storage, keys: list[str], outcomes: dict[int, list[bool]], who: str
) -> None:
    for index, key in enumerate(keys):
        winners = sorted(worker for worker, won in outcomes.items() if won[index])
        assert len(winners) == 1, (
            f"{len(outcomes)} {who} raced put_if_absent({key!r}): {len(winners)} were told "
            f"they created it (racers {winners}); exactly one must be"
        )
        stored = storage.get(key)
        assert stored == payload(winners[0], key), (
            f"{key!r} was won by racer {winners[0]} but holds {show(stored)}"
        )

"""Running work on a shared thread pool (``Repository.pool``) without flooding it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def bounded_map(
    pool: Executor, fn: Callable[[T], R], items: Sequence[T], limit: int | None
) -> Iterator[R]:
    """``pool.map`` with at most ``limit`` calls in flight (all at once when ``None``).

    Results come in order; each window of ``limit`` items finishes before the next starts.
    One item runs on the calling thread: handing it to the pool and waiting costs a switch of
    the interpreter lock both ways (~0.3 ms of a small commit's ~7).
    """
    if len(items) == 1:
        yield fn(items[0])
        return
    if limit is None:
        yield from pool.map(fn, items)
        return
    for start in range(0, len(items), limit):
        yield from pool.map(fn, items[start : start + limit])

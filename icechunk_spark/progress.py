"""Progress of long operations (garbage collection, imports, manifest rewrites), reported in stages.

The engine only says what it is doing; how that is shown is the caller's business. The command
line draws tqdm bars; library callers pass nothing and pay nothing.

>>> class Printer:
...     def begin(self, stage, total): print(stage, total)
...     def advance(self, n=1): pass
...     def end(self): pass
>>> summary = repo.garbage_collect(cutoff, progress=Printer())  # doctest: +SKIP
reading snapshots 12
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")


class Progress(Protocol):
    """Receives the stages of an operation, one at a time: ``begin``, ``advance``…, ``end``."""

    def begin(self, stage: str, total: int | None) -> None:
        """A stage starts; ``total`` is the number of steps, ``None`` when unknown."""

    def advance(self, n: int = 1) -> None:
        """``n`` more steps of the current stage are done."""

    def end(self) -> None:
        """The current stage is over."""


class Silent:
    """Reports nowhere: the default."""

    def begin(self, stage: str, total: int | None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def end(self) -> None:
        pass


SILENT: Progress = Silent()


def track(
    progress: Progress | None,
    stage: str,
    items: Iterable[T],
    total: int | None = None,
    steps: Callable[[T], int] | None = None,
) -> Iterator[T]:
    """Yield ``items``, reporting ``steps(item)`` steps of ``stage`` (default one) once the
    caller is done with each item (consume it in one thread)."""
    reporter = progress or SILENT
    reporter.begin(stage, total)
    try:
        for item in items:
            yield item
            reporter.advance(steps(item) if steps is not None else 1)
    finally:
        reporter.end()


__all__ = ["SILENT", "Progress", "Silent", "track"]

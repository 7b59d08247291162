"""Progress listeners for tests: one remembers what it heard, to check what long operations
report; one runs an action when a stage begins, to hold an operation at that exact point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Stage:
    name: str
    total: int | None
    done: int = 0
    ended: bool = False


class Recorder:
    def __init__(self) -> None:
        self.stages: list[Stage] = []

    def begin(self, stage: str, total: int | None) -> None:
        assert not self.stages or self.stages[-1].ended, "a stage began before the last ended"
        self.stages.append(Stage(stage, total))

    def advance(self, n: int = 1) -> None:
        self.stages[-1].done += n

    def end(self) -> None:
        self.stages[-1].ended = True

    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def stage(self, name: str) -> Stage:
        (found,) = [s for s in self.stages if s.name == name and s.total != 0]
        return found

    def all_complete(self) -> bool:
        return all(s.ended and s.done == s.total for s in self.stages)


class AtStage:
    """Runs ``action`` once, in the operation's own thread, when ``stage`` begins.

    E.g. ``AtStage("listing objects", ...)`` acts while GC is past its fence and before it
    lists ``c/``, with no thread and no timing involved.
    """

    def __init__(self, stage: str, action: Callable[[], None]) -> None:
        self.stage = stage
        self.action = action
        self.ran = False

    def begin(self, stage: str, total: int | None) -> None:
        if stage == self.stage and not self.ran:
            self.ran = True
            self.action()

    def advance(self, n: int = 1) -> None:
        pass

    def end(self) -> None:
        pass

"""A Progress that remembers what it heard, to check what long operations report."""

from __future__ import annotations

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

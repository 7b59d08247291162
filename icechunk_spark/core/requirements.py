"""What a commit requires of the state its compare-and-swap replaces (pyiceberg's names).

Each requirement is a frozen value checked against a ``State``; ``core.commit`` checks them
on every state it reads before publishing, and decides what a failed one means (rebase,
protect from garbage collection, or refuse).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..format.state import SnapshotInfo, State
from .branches import walk


@dataclass(frozen=True, slots=True)
class AssertRefSnapshotId:
    """Requirement: branch ``ref`` still points at ``snapshot_id`` (the commit's parent)."""

    ref: str
    snapshot_id: str

    def holds(self, state: State) -> bool:
        return state.branch(self.ref).snapshot_id == self.snapshot_id


@dataclass(frozen=True, slots=True)
class AssertNoGCSince:
    """Requirement: no garbage collection fenced the repository after state ``generation``,
    which was published before any object the commit references was written."""

    generation: int

    def holds(self, state: State) -> bool:
        fence = state.gc_fence
        return fence is None or fence.generation <= self.generation


@dataclass(frozen=True, slots=True)
class AssertNotCommitted:
    """Requirement: no snapshot in branch ``ref``'s history answers for ``marks`` (a commit a
    retry or replay may repeat must land once).

    The one idempotency rule: a caller may look first (a Spark write before it stages
    anything), and the commit checks it again on the state it swaps.
    """

    ref: str
    marks: Mapping[str, Any]

    def landed(self, state: State) -> str | None:
        """The snapshot that already made this commit, if one did."""
        return landed_once(state, self.marks, branch=self.ref)


def landed_once(state: State, marks: Mapping[str, Any], branch: str | None = None) -> str | None:
    """The snapshot that answers for the commit named by ``marks``, if one does.

    With ``branch``: only that branch's history counts (``None`` if there is no such branch);
    without: every listed snapshot. A snapshot answers for its own commit's marks and for
    those expiry carried into it from the snapshots it removed below it.
    """
    if branch is None:
        candidates: Iterable[SnapshotInfo] = state.snapshots.values()
    else:
        tip = state.refs.get(branch)
        if tip is None or tip.type != "branch":
            return None
        candidates = walk(state, tip.snapshot_id)
    return next((info.id for info in candidates if info.answers_for(marks)), None)


__all__ = ["AssertNoGCSince", "AssertNotCommitted", "AssertRefSnapshotId", "landed_once"]

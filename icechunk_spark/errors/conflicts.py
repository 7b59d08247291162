"""Conflicts between a commit and a concurrently committed snapshot, and their error."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .general import IcechunkSparkError

# The kind of the one conflict a policy (on_conflict='ours' / 'theirs') can resolve.
CHUNK_CONFLICT = "chunk written concurrently"
# A bulk write's coords are known only as a range: ``ours`` resolves it (our chunks win
# wherever we wrote), ``theirs`` cannot (dropping ours from their whole range would drop
# chunks they never wrote).
RANGE_CONFLICT = "chunks written concurrently in the same range"


@dataclass(frozen=True, slots=True)
class Conflict:
    """One overlap between our changes and a concurrently committed snapshot."""

    path: str
    kind: str
    coords: tuple[tuple[int, ...], ...] = ()

    def describe(self) -> str:
        text = f"{self.kind} at {self.path!r}"
        if self.coords:
            shown = ", ".join(str(c) for c in self.coords[:5])
            more = f" and {len(self.coords) - 5} more" if len(self.coords) > 5 else ""
            text += f" (chunks {shown}{more})"
        return text


class ConflictError(IcechunkSparkError):
    """Our commit overlaps changes that another writer committed to the branch first.

    ``conflicts`` lists each overlap. Start a new session from the branch tip and redo the
    write, or commit with ``on_conflict="ours"`` / ``"theirs"`` to resolve chunk conflicts.
    """

    def __init__(self, conflicts: Sequence[Conflict], branch: str = "") -> None:
        self.conflicts = tuple(conflicts)
        self.branch = branch
        listed = "; ".join(c.describe() for c in self.conflicts[:10])
        more = f"; and {len(self.conflicts) - 10} more" if len(self.conflicts) > 10 else ""
        # Only same-chunk overlaps yield to on_conflict; advising it for others would mislead
        # (and under 'ours'/'theirs' only the others are left).
        kinds = {c.kind for c in self.conflicts}
        if kinds <= {CHUNK_CONFLICT}:
            advice = (
                "Open a new session from the branch tip and redo the change, or pass "
                "on_conflict='ours' or 'theirs' to resolve chunk conflicts."
            )
        elif kinds <= {CHUNK_CONFLICT, RANGE_CONFLICT}:
            advice = (
                "Open a new session from the branch tip and redo the change, or pass "
                "on_conflict='ours' to keep our chunks."
            )
        else:
            advice = (
                "Open a new session from the branch tip and redo the change; on_conflict "
                "resolves only chunks written by both, not these."
            )
        super().__init__(
            f"commit to branch {branch!r} conflicts with a concurrent commit: {listed}{more}. "
            + advice
        )

    def __reduce__(self) -> tuple[type[ConflictError], tuple[tuple[Conflict, ...], str]]:
        return (ConflictError, (self.conflicts, self.branch))

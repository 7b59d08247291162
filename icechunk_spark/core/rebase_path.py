"""Which snapshots a rebase must check: those committed on a branch since a session's base."""

from __future__ import annotations

from ..errors import Conflict, ConflictError
from ..format.state import State


def snapshots_since_base(state: State, branch: str, tip: str, base: str) -> list[str]:
    """The snapshots from ``tip`` down to ``base`` (excluded): all a rebase must check.

    Raises:
        ConflictError: the branch does not descend from ``base`` (it was reset elsewhere, or
            the base was expired), or the way down crosses a parent link that expiry
            re-linked, whose skipped snapshots' changes cannot be checked.
    """
    path: list[str] = []
    relinked: str | None = None
    cursor: str | None = tip if base in state.snapshots else None
    while cursor is not None and cursor != base:
        info = state.snapshots.get(cursor)
        if info is None:
            cursor = None
            break
        if info.parent_relinked and relinked is None:
            relinked = cursor
        path.append(cursor)
        cursor = info.parent_id
    if cursor is None:
        reason = (
            "branch was reset to a snapshot that does not descend from ours, or this "
            "session's base was expired"
        )
        raise ConflictError([Conflict(branch, reason)], branch)
    if relinked is not None:
        reason = (
            f"snapshots committed since this session's base were expired (below "
            f"{relinked}), so their changes cannot be checked"
        )
        raise ConflictError([Conflict(branch, reason)], branch)
    return path

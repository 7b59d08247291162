"""Squash: a range of a branch's history becomes one snapshot (icechunk#2121).

The new snapshot's content is the range's newest snapshot (it shares that structure file and
its manifests: nothing is copied), its parent the oldest one's parent, its transaction log the
range's logs merged. The range's snapshots stop being listed, so data written and deleted
inside it is reachable from nothing and the next garbage collection deletes it. The rules that
keep every guarantee (other refs, rebases, once-marks) are ``core/rewrite.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core import (
    RepoHandle,
    check_unheld,
    ensure_writable,
    merged_txlog,
    read_latest_state,
    replacement,
    rewritten,
    run_below,
    update_state,
)
from ..errors import RewriteRefusedError
from ..format.ids import new_object_id
from ..format.keys import txlog_key
from ..format.state import SnapshotInfo, State


def squash(
    handle: RepoHandle,
    branch: str,
    oldest: str,
    newest: str,
    message: str,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """Replace the snapshots from ``oldest`` up to ``newest`` (both included) on ``branch``
    with one; returns its id. Snapshots above ``newest`` stay, re-parented onto it.

    Raises:
        RewriteRefusedError: the range is not on the branch's line, starts at the first
            snapshot, is held by another branch or tag, or changed (an expiry, a reset) before
            the squash could publish; nothing changed.
        RepositoryReadOnlyError: the repository is read-only.
    """
    storage = handle.storage
    state = read_latest_state(storage)
    ensure_writable(state, storage.url)
    run = run_below(state, branch, newest, oldest)
    check_unheld(state, branch, run)  # before writing anything
    log = merged_txlog(storage, run[::-1])
    written = _Written(new_object_id(), state.generation)
    storage.put(txlog_key(written.snapshot_id), log)
    top = state.snapshots[newest]
    stored_metadata = {
        **(metadata or {}),
        "squashed": {"from": oldest, "to": newest, "n": len(run)},
    }

    def change(current: State) -> State:
        if run_below(current, branch, newest, oldest) != run:
            raise RewriteRefusedError(
                f"the range {oldest}..{newest} of {branch!r} changed while squashing (an "
                "expiry or a reset ran); nothing changed: squash again"
            )
        fence = current.gc_fence
        if fence is not None and fence.generation > written.generation:
            # A collection that began after our log was written may delete it by the key it
            # listed: write it again under a new snapshot id, which that listing never saw.
            written.snapshot_id, written.generation = new_object_id(), current.generation
            storage.put(txlog_key(written.snapshot_id), log)
        info = SnapshotInfo(
            id=written.snapshot_id,
            parent_id=None,
            timestamp_ms=top.timestamp_ms,  # the newest one's: as_of lookups stay ordered
            structure_file=top.structure_file,
            message=message,
            metadata=stored_metadata,
        )
        return rewritten(current, branch, run, replacement(current, run, info))

    update_state(storage, change)
    return written.snapshot_id


class _Written:
    """The new snapshot's id and the generation read before its log was (last) written."""

    def __init__(self, snapshot_id: str, generation: int) -> None:
        self.snapshot_id = snapshot_id
        self.generation = generation

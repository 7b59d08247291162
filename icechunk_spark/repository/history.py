"""History and maintenance: snapshots, ancestry, diff, expiry and garbage collection."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from ..core import DEFAULT_BRANCH, walk
from ..format.state import SnapshotInfo
from ..ops import gc, history, sources, squash
from ..progress import Progress
from .base import HandleOwner


class HistoryVerbs(HandleOwner):
    """``Repository``'s verbs over history and maintenance."""

    def lookup_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        """The listed snapshot ``snapshot_id``. Raises ``NotFoundError`` (also once expired)."""
        return self.state().snapshot(snapshot_id)

    def ancestry(
        self, *, branch: str | None = None, tag: str | None = None, snapshot_id: str | None = None
    ) -> Iterator[SnapshotInfo]:
        """Snapshots from the given one back to the first, newest first."""
        state = self.state()
        yield from walk(state, state.resolve(branch, tag, snapshot_id, DEFAULT_BRANCH))

    def sources(
        self, *, branch: str | None = None, tag: str | None = None, snapshot_id: str | None = None
    ) -> pa.Table:
        """Every file the snapshot's virtual refs point into (default: the tip of ``main``):
        columns ``location``, ``refs`` (how many chunk refs), ``bytes`` (their total length) and
        ``arrays``, one row per file, sorted by location. Read from the manifests only."""
        state = self.state()
        target = state.resolve(branch, tag, snapshot_id, DEFAULT_BRANCH)
        return sources.snapshot_sources(self._handle, target, state)

    def squash(
        self,
        branch: str,
        from_snapshot_id: str,
        to_snapshot_id: str,
        message: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Rewrite ``branch``'s history from ``from_snapshot_id`` up to ``to_snapshot_id``
        (both included) into one snapshot with the content of ``to_snapshot_id``; snapshots
        above it stay, on top of the new one. Data deleted inside the range is then reachable
        from no snapshot and the next ``garbage_collect`` deletes it (compliance deletions).

        Returns:
            The new snapshot's id.

        Raises:
            RewriteRefusedError: the range is not on the branch, starts at the repository's
                first snapshot, or another branch or tag holds part of it; nothing changed.
        """
        return squash.squash(
            self._handle, branch, from_snapshot_id, to_snapshot_id, message, metadata
        )

    def diff(
        self,
        *,
        from_snapshot_id: str | None = None,
        to_snapshot_id: str | None = None,
        from_branch: str | None = None,
        to_branch: str | None = None,
        from_tag: str | None = None,
        to_tag: str | None = None,
    ) -> history.Diff:
        """Nodes added, deleted and updated, and chunks changed per array, between two snapshots."""
        return history.diff(
            self._handle,
            from_snapshot_id=from_snapshot_id,
            to_snapshot_id=to_snapshot_id,
            from_branch=from_branch,
            to_branch=to_branch,
            from_tag=from_tag,
            to_tag=to_tag,
        )

    def expire_snapshots(
        self,
        older_than: datetime,
        *,
        delete_expired_branches: bool = False,
        delete_expired_tags: bool = False,
    ) -> frozenset[str]:
        """Stop listing snapshots older than ``older_than`` (branch and tag tips stay)."""
        return history.expire_snapshots(
            self._handle,
            older_than,
            delete_expired_branches=delete_expired_branches,
            delete_expired_tags=delete_expired_tags,
        )

    def garbage_collect(
        self,
        delete_object_older_than: datetime,
        *,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> gc.GCSummary:
        """Delete objects no listed snapshot reaches and older than the cut-off."""
        return gc.garbage_collect(
            self._handle, delete_object_older_than, dry_run=dry_run, progress=progress
        )

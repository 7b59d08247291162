"""How a commit is made besides its changes: one value, checked when made, before anything is
written (delta-rs's ``CommitProperties``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInputError
from ..progress import Progress
from .conflicts import ConflictPolicy, OnConflict
from .staged_writes import PieceRunner


@dataclass(frozen=True, slots=True)
class CommitOptions:
    """How a commit is made, besides its changes; checked when made, before anything is written.

    Attributes:
        message: the commit message.
        metadata: JSON-serialisable properties stored with the snapshot.
        on_conflict: what to do with chunks a concurrent commit wrote too: a
            ``ConflictPolicy`` or its name (``"fail"``, ``"ours"``, ``"theirs"``).
        once: metadata pairs naming a commit that a retry or replay may repeat (a streaming
            batch, a job's write id). They are stored with ``metadata``, and the commit
            refuses to land on a branch whose history holds a snapshot with all of them
            (``AssertNotCommitted``), checked on the very state it swaps.
        progress: hears the manifests being written.
        piece_runner: writes the manifest pieces of split arrays with staged refs elsewhere
            (e.g. on Spark executors); by default this process writes them, a few at a time.
        amend: replace the branch tip (the session's base) instead of adding a snapshot above
            it (``core/rewrite.py``); never rebases.

    Raises:
        InvalidInputError: a bad policy, metadata that is not JSON, or metadata that
            contradicts the same keys in ``once``.
    """

    message: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    on_conflict: OnConflict = "fail"
    once: Mapping[str, Any] = field(default_factory=dict)
    progress: Progress | None = None
    piece_runner: PieceRunner | None = None
    amend: bool = False

    def __post_init__(self) -> None:
        ConflictPolicy.parse(self.on_conflict)
        json.dumps(self.stored_metadata)  # metadata must be JSON: fail before writing anything

    @property
    def policy(self) -> ConflictPolicy:
        return ConflictPolicy.parse(self.on_conflict)

    @property
    def stored_metadata(self) -> dict[str, Any]:
        """``metadata`` with the ``once`` marks, which it must not contradict."""
        marks, metadata = self.once, self.metadata
        clash = sorted(k for k, v in marks.items() if k in metadata and metadata[k] != v)
        if clash:
            raise InvalidInputError(
                f"commit metadata {clash} differ from the same keys in once={dict(marks)!r}"
            )
        return {**metadata, **marks}

"""One error tree for everything icechunk-spark raises.

::

    IcechunkSparkError
    ├── ConflictError            a commit overlaps changes another writer committed first
    ├── NotFoundError(KeyError)  a branch, tag, snapshot, node, chunk or object does not exist
    ├── AlreadyExistsError       a repository, tag, branch or node of that name exists already
    ├── InvalidInputError(ValueError)  the caller passed something we cannot accept
    │   ├── ConfigError          a configuration file or value is invalid (names the YAML path)
    │   └── VirtualRefRefusedError  a virtual ref outside the containers, or not authorized
    ├── SourceChangedError       a virtual ref's target changed since the ref was written
    ├── ReadOnlyError            a write on a read-only session or store
    │   └── ReadOnlyStoreError   the same through the zarr store (also zarr's ValueError)
    ├── StorageError(OSError)    the storage backend failed (after retries)
    └── FormatError              a repository file is truncated, corrupt or of an unknown version

Every message says what went wrong and, where there is one, what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class IcechunkSparkError(Exception):
    """Base of every error icechunk-spark raises."""


class NotFoundError(IcechunkSparkError, KeyError):
    """A branch, tag, snapshot, node, chunk or stored object does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a readable sentence.
        return str(self.args[0]) if self.args else ""


class AlreadyExistsError(IcechunkSparkError):
    """Something that must be unique (repository, tag, branch, node path) exists already."""


class InvalidInputError(IcechunkSparkError, ValueError):
    """The caller passed a value we cannot accept."""


class ConfigError(InvalidInputError):
    """A configuration value is invalid; the message names its YAML path (``sets[1].x``)."""


class ReadOnlyError(IcechunkSparkError):
    """A write was attempted on a read-only session or store."""


class StorageError(IcechunkSparkError, OSError):
    """The storage backend failed, after bounded retries for transient errors."""


class FormatError(IcechunkSparkError):
    """A repository file is truncated, corrupt, or written by an unknown format version."""


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
        super().__init__(
            f"commit to branch {branch!r} conflicts with a concurrent commit: {listed}{more}. "
            "Open a new session from the branch tip and redo the change, or pass "
            "on_conflict='ours' or 'theirs' to resolve chunk conflicts."
        )

    def __reduce__(self) -> tuple[type[ConflictError], tuple[tuple[Conflict, ...], str]]:
        return (ConflictError, (self.conflicts, self.branch))


__all__ = [
    "AlreadyExistsError",
    "ConfigError",
    "Conflict",
    "ConflictError",
    "FormatError",
    "IcechunkSparkError",
    "InvalidInputError",
    "NotFoundError",
    "ReadOnlyError",
    "StorageError",
]

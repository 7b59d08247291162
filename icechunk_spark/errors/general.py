"""The error classes of the tree (see the package docstring); conflicts are in ``conflicts``."""

from __future__ import annotations

from collections.abc import Sequence


class IcechunkSparkError(Exception):
    """Base of every error icechunk-spark raises."""


class NotFoundError(IcechunkSparkError, KeyError):
    """A branch, tag, snapshot, node, chunk or stored object does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a readable sentence.
        return str(self.args[0]) if self.args else ""


class SnapshotCollectedError(NotFoundError):
    """A snapshot left the history while it was read (it expired, or an amend or squash
    replaced it), and garbage collection deleted its files (a manifest or chunk file the read
    needed).

    Files are never changed or reused, so nothing wrong was read: read a snapshot still in
    the history instead. ``snapshot_id`` names the snapshot; the message says what was being
    done and which object was found missing.
    """

    def __init__(self, snapshot_id: str, missing: str, during: str, advice: str) -> None:
        self.snapshot_id = snapshot_id
        self.missing = missing  # the object found missing, as the storage's error said
        self.during = during
        self.advice = advice
        super().__init__(
            f"snapshot {snapshot_id} left the repository's history {during} (it expired, or "
            f"an amend or squash replaced it, and garbage collection deleted its files: "
            f"{missing}): {advice}"
        )

    def __reduce__(self) -> tuple[type[SnapshotCollectedError], tuple[str, str, str, str]]:
        return (SnapshotCollectedError, (self.snapshot_id, self.missing, self.during, self.advice))


class AlreadyExistsError(IcechunkSparkError):
    """Something that must be unique (repository, tag, branch, node path) exists already."""


class InvalidInputError(IcechunkSparkError, ValueError):
    """The caller passed a value we cannot accept."""


class ConfigError(InvalidInputError):
    """A configuration value is invalid; the message names its YAML path (``sets[1].x``)."""


class ReadOnlyError(IcechunkSparkError):
    """A write was attempted on a read-only session or store."""


class ReadOnlyStorageError(ReadOnlyError):
    """A write to storage that can only be read (a repository served over plain HTTP)."""


class RepositoryReadOnlyError(ReadOnlyError):
    """The repository's status is read-only (``repo.set_status``): no writer may change it.

    Raised before anything is published, so nothing changed; ``reason`` is the one given when
    the status was set.
    """

    def __init__(self, url: str, reason: str, since: str) -> None:
        self.reason = reason
        super().__init__(
            f"the repository at {url} is read-only since {since}: {reason}; nothing was "
            "changed. Once it may be written again: repo.set_status('online') or "
            f"`icechunk-spark status {url} --set online`"
        )


class StorageError(IcechunkSparkError, OSError):
    """The storage backend failed, after bounded retries for transient errors."""


class StorageCredentialsError(StorageError):
    """The storage refused us: no credentials found, unknown or wrong ones, or access denied."""


class StorageNotFoundError(StorageError):
    """The bucket or container itself does not exist (a missing object is ``NotFoundError``)."""


class StorageUnreachableError(StorageError):
    """No answer we can use: no connection, a timeout, or an endpoint that is not that storage."""


class VirtualRangeError(StorageError):
    """A virtual ref asks for bytes past the end of its file (truncated or a wrong ref)."""


class VirtualRefRefusedError(InvalidInputError):
    """A virtual ref points outside the allowed containers, or its container is not authorized."""


class CoordinateOrderError(InvalidInputError):
    """Files cannot be put in order along the concat dimension: their coordinate values
    (times) repeat, overlap, do not increase, or fall before the dataset an ingest appends
    to. ``files`` names the file or the two files; nothing was imported."""

    def __init__(self, message: str, files: Sequence[str]) -> None:
        super().__init__(message)
        self.files = tuple(files)

    def __reduce__(self) -> tuple[type[CoordinateOrderError], tuple[str, tuple[str, ...]]]:
        return (CoordinateOrderError, (str(self.args[0]), self.files))


class ForkError(InvalidInputError):
    """A fork was used or merged against the rules of ``docs/forks.md``.

    The message says which rule: a fork merged already or into another session, a fork that
    tried to commit or change a node, a ``memory://`` repository reached from another process,
    or writes through pickled stores that never came back to be merged.
    """


class ForkConflictError(ForkError):
    """Two forks, or a fork and its session after the fork was made, wrote the same chunk.

    ``chunks`` lists ``(array path, chunk coord)`` of each such chunk. Nothing of the refused
    merge was applied: merge the forks that do not overlap, or redo the overlapping writes.
    """

    def __init__(self, chunks: Sequence[tuple[str, tuple[int, ...]]], detail: str) -> None:
        self.chunks = tuple(chunks)
        self.detail = detail
        shown = ", ".join(f"{path!r} {coord}" for path, coord in self.chunks[:5])
        more = f" and {len(self.chunks) - 5} more" if len(self.chunks) > 5 else ""
        super().__init__(
            f"{detail}: chunk {shown}{more}. Nothing was merged; merge the forks that do not "
            "overlap, or write each chunk from one fork only"
        )

    def __reduce__(
        self,
    ) -> tuple[type[ForkConflictError], tuple[tuple[tuple[str, tuple[int, ...]], ...], str]]:
        return (ForkConflictError, (self.chunks, self.detail))


class SourceChangedError(IcechunkSparkError):
    """The file a virtual ref points into changed after the ref was written (checksum differs)."""


class ReadOnlyStoreError(ReadOnlyError, ValueError):
    """A write through a read-only store.

    Also a ``ValueError``, with zarr's own wording, because zarr expects stores to raise that.
    """

    def __init__(self, detail: str = "") -> None:
        hint = detail or "write through repo.writable_session(branch).store instead"
        super().__init__(f"store was opened in read-only mode and does not support writing; {hint}")


class RetriesExhaustedError(IcechunkSparkError):
    """A commit or state change gave up after losing the race to other writers many times.

    Nothing was committed. The branch (or repository) is too busy: retry later, or spread the
    writers over time.
    """


class CommitStateUnknownError(IcechunkSparkError):
    """Storage failed in a way that leaves unknown whether a commit landed.

    Raised only when the writer could neither confirm nor rule out its own state file (every
    read-back failed). ``snapshot_id`` is the snapshot the commit would have created: if
    ``repo.lookup_snapshot(snapshot_id)`` finds it, the commit landed; if not, it did not.
    """

    def __init__(self, snapshot_id: str | None, reason: str) -> None:
        self.snapshot_id = snapshot_id
        self.reason = reason
        what = f"snapshot {snapshot_id}" if snapshot_id else "the state change"
        super().__init__(
            f"could not tell whether {what} was committed: {reason}. Look it up "
            f"(repo.lookup_snapshot({snapshot_id!r}) or repo.ancestry()) before retrying"
        )

    def __reduce__(self) -> tuple[type[CommitStateUnknownError], tuple[str | None, str]]:
        return (CommitStateUnknownError, (self.snapshot_id, self.reason))


class StaleSessionError(IcechunkSparkError):
    """Garbage collection ran while a session was writing, and deleted objects it wrote.

    Nothing was committed. Write the data again in a new session, and collect garbage with a
    cut-off older than the longest write (the CLI and jobs default to 7 days).
    """


class AlreadyCommittedError(IcechunkSparkError):
    """A commit that must land once (``Session.commit(once=...)``) already has.

    The branch's history holds ``snapshot_id``, whose metadata carries the same ``once``
    marks: a retry or replay of a commit that landed. Nothing was committed this time.
    """

    def __init__(self, snapshot_id: str, branch: str) -> None:
        self.snapshot_id = snapshot_id
        self.branch = branch
        super().__init__(
            f"branch {branch!r} already holds this commit as snapshot {snapshot_id}; "
            "nothing was committed again"
        )

    def __reduce__(self) -> tuple[type[AlreadyCommittedError], tuple[str, str]]:
        return (AlreadyCommittedError, (self.snapshot_id, self.branch))


class RepeatedCoordError(InvalidInputError):
    """One write gave a chunk coord more than once.

    The rows of one write (the staged files of Spark tasks that ran side by side) have no
    order among themselves, so no row can win: the commit is refused rather than keep
    whichever row happened to be read last. ``array`` is ``None`` until the array is known.
    """

    def __init__(self, coord: tuple[int, ...], repeated: int, array: str | None = None) -> None:
        self.coord, self.repeated, self.array = coord, repeated, array
        where = f"row for array {array!r} at coord {coord}" if array else f"chunk coord {coord}"
        others = f" (and {repeated - 1} more coords)" if repeated > 1 else ""
        super().__init__(
            f"{where}: given more than once in one write{others}; the rows of one write have "
            "no order, so none of them can win. Nothing was committed"
        )

    def for_array(self, array: str) -> RepeatedCoordError:
        return RepeatedCoordError(self.coord, self.repeated, array)

    def __reduce__(self) -> tuple[type[RepeatedCoordError], tuple[object, ...]]:
        return (RepeatedCoordError, (self.coord, self.repeated, self.array))


class RewriteRefusedError(IcechunkSparkError):
    """An amend or squash was refused: nothing changed.

    The branch tip moved since the session began (amend never rebases: it would replace a
    snapshot its writer did not see), the snapshots it would replace are held by another branch
    or tag (or are the parents of one's history), or the range is not one branch's history. The
    message says which, and names the ref.
    """


class HistoryRewrittenError(IcechunkSparkError):
    """A branch no longer holds a snapshot that a change feed had read up to.

    The branch was reset to other history (or that snapshot expired), so the changes after it
    can be neither listed without gaps nor skipped without loss. Nothing was read: start the
    stream again with a new checkpoint and option ``starting``, or read the ``changes`` table
    between two snapshots that are still in the branch's history.
    """


class HistoryExpiredError(HistoryRewrittenError):
    """Snapshots between a change feed's position and the snapshot it reads up to expired.

    Their transaction logs are gone (or will be, at the next garbage collection), so their
    changes can be neither listed nor skipped without loss. The message names the two listed
    snapshots on either side of the gap: read the state at the later one afresh, then follow
    the feed from there (option ``starting`` or ``from``).
    """


class FormatError(IcechunkSparkError):
    """A repository file is truncated, corrupt, or written by an unknown format version."""


class TruncatedChunkError(FormatError):
    """A chunk's stored object ends before the bytes the chunk's ref points to.

    ``key`` is the object; ``path`` and ``coord`` name the chunk (``None`` until the reader
    that knows them adds them). The object was cut short after it was written (an
    interrupted copy, a damaged disk): restore it from a backup, or write the chunk again.
    """

    def __init__(
        self,
        key: str,
        wanted: tuple[int, int],
        got: int,
        path: str | None = None,
        coord: tuple[int, ...] | None = None,
    ) -> None:
        self.key, self.wanted, self.got, self.path, self.coord = key, wanted, got, path, coord
        start, end = wanted
        chunk = f"chunk {coord} of array {path!r}" if path is not None else "a chunk"
        super().__init__(
            f"{chunk} is truncated: object {key!r} holds {got} of the {end - start} bytes "
            f"[{start}, {end}) its ref points to; restore the object from a backup, or write "
            "the chunk again"
        )

    def of_chunk(self, path: str, coord: tuple[int, ...]) -> TruncatedChunkError:
        """The same error, naming the chunk it was read for."""
        return TruncatedChunkError(self.key, self.wanted, self.got, path, coord)

    def __reduce__(self) -> tuple[type[TruncatedChunkError], tuple[object, ...]]:
        return (TruncatedChunkError, (self.key, self.wanted, self.got, self.path, self.coord))

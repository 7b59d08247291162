"""Sessions: a consistent view of one snapshot, and (when writable) a change set to commit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..chunks.stats import (
    StatsLog,
)
from ..errors import InvalidInputError, ReadOnlyError
from ..format.paths import normalize_path
from ..progress import Progress
from ..splitting import ManifestConfig
from .base_session import BaseSession
from .changes import ChangeSet
from .commit import Commit
from .commit_options import CommitOptions
from .conflicts import OnConflict
from .fork_merge import merge_forks
from .forks import ForkLedger, ForkSession, check_forks_merged, make_fork
from .handle import RepoHandle
from .moves import check_move, record_move
from .snapshot import SnapshotView
from .staged import StagedRefs
from .staged_writes import PieceRunner

if TYPE_CHECKING:
    from ..zarr_store import IcechunkStore


class Session(BaseSession):
    """A view of one snapshot; writable sessions also collect changes and commit them.

    >>> session = repo.writable_session("main")            # doctest: +SKIP
    >>> session.create_group("/")                          # doctest: +SKIP
    >>> session.commit("create the root group")            # doctest: +SKIP
    """

    def __init__(
        self,
        handle: RepoHandle,
        base: SnapshotView,
        branch: str | None,
        read_only: bool,
        fresh_since: int = -1,
    ) -> None:
        """Prefer ``repo.writable_session`` / ``repo.readonly_session``.

        ``fresh_since``: a state generation that had been published before any object this
        session's changes will reference was written (-1: unknown). It decides whether a
        garbage collection that starts later could have deleted those objects.
        """
        super().__init__(ChangeSet(), StatsLog(), branch)
        self._handle = handle
        self._fresh_since = fresh_since
        self._base = base
        self.read_only = read_only
        self._committed = False
        # A manifest config to build under, which the commit stores as the repository's
        # (repack_manifests); None: the repository's, unchanged.
        self._repack: ManifestConfig | None = None
        self._fork_ledger = ForkLedger()  # the forks of this change set (core/forks.py)

    # -- what a session decides (core/base_session.py) ----------------------------------------
    @property
    def handle(self) -> RepoHandle:
        """The repository handle this session reads and commits through."""
        return self._handle

    def _view(self) -> SnapshotView:
        return self._base

    def _require_writable(self) -> None:
        if self._committed:
            raise ReadOnlyError("this session has committed already; open a new writable session")
        if self.read_only:
            raise ReadOnlyError(
                "this session is read-only; open one with repo.writable_session(branch) to write"
            )

    @property
    def store(self) -> IcechunkStore:
        """A Zarr v3 store over this session (read-only for read-only sessions)."""
        from ..zarr_store import IcechunkStore

        return IcechunkStore(self)

    # -- writes too big for one process ---------------------------------------------------
    def add_staged_refs(self, path: str, staged: StagedRefs) -> None:
        """Add refs of one array that wait in staged Parquet files (see ``core.staged``).

        For writes too big for one process: the session keeps only where the rows are and
        their counts and bounds; the commit packs and splits manifests from those like any
        other change, then reads the rows manifest by manifest. Rows were checked when they
        were staged (grid, location, containers); staged rows win over committed refs, and
        a later call's rows over an earlier one's. The files of one call are one write whose
        rows have no order, so each coord may appear in only one of its rows: the commit
        raises ``RepeatedCoordError`` otherwise.

        Raises:
            InvalidInputError: the bounds do not fit the array's grid, or this session wrote
                chunks of the array (an array takes either kind of write in one session).
        """
        self._require_writable()
        node = self._array(path)
        assert node.meta is not None
        grid = node.meta.grid_shape
        if staged.ndim != node.meta.ndim or any(
            h >= g for h, g in zip(staged.hi, grid, strict=True)
        ):
            raise InvalidInputError(
                f"staged refs of {path!r} span {staged.extent()}, outside its chunk grid {grid}"
            )
        with self._changes.lock:
            self._changes.add_staged(node, staged)

    def repack_manifests(self, config: ManifestConfig | None = None) -> None:
        """Have the commit rewrite every manifest under the repository's manifest config.

        Args:
            config: repack under this manifest config instead; the commit then also stores
                it as the repository's, in the same compare-and-swap.
        """
        self._require_writable()
        self._changes.repack_all = True
        if config is not None:
            self._repack = config

    # -- commit ---------------------------------------------------------------------------
    def discard_changes(self) -> None:
        """Forget every uncommitted change (chunk files already written become garbage), and
        disown the forks made so far: they cannot be merged any more."""
        self._changes = ChangeSet()
        self._stats = StatsLog()
        self._fork_ledger = ForkLedger()

    def commit(
        self,
        message: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        on_conflict: OnConflict = "fail",
        progress: Progress | None = None,
        piece_runner: PieceRunner | None = None,
        once: Mapping[str, Any] | None = None,
    ) -> str:
        """Atomically publish the changes as a new snapshot on the session's branch.

        If the branch moved since the session started, non-overlapping changes are rebased onto
        the new tip (see ``core.commit``). The arguments are ``CommitOptions``'s (documented
        there); ``commit_with`` takes them as one value.

        Returns:
            The new snapshot's id.

        Raises:
            ConflictError: our changes overlap a concurrent commit (and ``on_conflict`` is
                ``"fail"``, or the overlap is not about chunks).
            ReadOnlyError: the session is read-only or has committed already.
            InvalidInputError: nothing to commit, a bad policy, or metadata that is not JSON.
            CommitStateUnknownError: storage could not say whether the commit landed.
            StaleSessionError: garbage collection deleted objects this session wrote.
            RetriesExhaustedError: the branch kept moving; nothing was committed.
            ForkError: a fork made by pickling this session or its store wrote chunks that
                were never merged (see ``fork``).
            AlreadyCommittedError: with ``once``: the branch holds that commit already
                (``snapshot_id`` says which); nothing was committed.
        """
        self._require_writable()
        options = CommitOptions(
            message, metadata or {}, on_conflict, once or {}, progress, piece_runner
        )
        return self.commit_with(options)

    def move(self, src: str, dst: str) -> None:
        """Move (or rename) the group or array at ``src`` to ``dst``, with everything below it.

        Metadata only: the node keeps its id, and manifests hold refs by id, so no chunk or
        manifest is copied or rewritten (``core/moves.py``). Chunks this session wrote to it
        follow it. A concurrent commit that wrote chunks to the node rebases onto its new path;
        one that changed its metadata, deleted it, moved it or created a node below its old
        path is a ``ConflictError``.

        Raises:
            NotFoundError: nothing at ``src``, or no group to hold ``dst``.
            AlreadyExistsError: a node is at ``dst`` already.
            InvalidInputError: the root, into itself, or under an array.
        """
        self._require_writable()
        src, dst = normalize_path(src), normalize_path(dst)
        with self._changes.lock:
            carried = check_move(self._nodes(), src, dst)
            record_move(self._changes, self._base, carried, src, dst)

    def amend(self, message: str, metadata: Mapping[str, Any] | None = None) -> str:
        """Replace the branch tip (this session's base) with a snapshot holding it and this
        session's changes, on the tip's parent: the tip stops being listed (``core/rewrite.py``).

        Keeps the tip's once-marks, so exactly-once holds across it. Never rebases.

        Returns:
            The new snapshot's id.

        Raises:
            RewriteRefusedError: the tip moved since this session began, another branch or tag
                points at it (a tag included) or descends from it, or it is the repository's
                first snapshot; nothing changed.
            As ``commit`` otherwise.
        """
        self._require_writable()
        return self.commit_with(CommitOptions(message, metadata or {}, amend=True))

    def commit_with(self, options: CommitOptions) -> str:
        """``commit`` with its options as one value (a Spark write makes them from its plan).

        Raises:
            As ``commit``.
        """
        self._require_writable()
        check_forks_merged(self._handle.storage, self._fork_ledger)
        if self._changes.is_empty():
            raise InvalidInputError("no changes to commit; write something first")
        assert self.branch is not None
        commit = Commit(
            self._handle,
            self.branch,
            self._base,
            self._changes,
            self._stats,
            fresh_since=self._fresh_since,
            repack=self._repack,
            options=options,
        )
        try:
            committed = commit.run()
        finally:  # a failed commit leaves the session rebased as far as it got
            self._base, self._fresh_since = commit.base, commit.fresh_since
        if self._repack is not None:
            self._handle.adopt_config(committed.state.config)
        self._committed = True
        self.read_only = True
        built = committed.built
        self._base = SnapshotView(built.snapshot_id, built.nodes, self._handle.manifest_cache)
        self._handle.remember_view(self._base, built.structure)
        return built.snapshot_id

    # -- forks (core/forks.py) ------------------------------------------------------------
    def fork(self) -> ForkSession:
        """A writable, picklable fork, to write chunks from another thread or process.

        The fork reads this session's snapshot and its changes so far, writes chunks (native,
        inline or virtual; directly or through ``fork.store``) and travels with its writes to
        Dask workers or a process pool and back; ``merge`` brings them in. It never commits
        and never changes a group or array. The rules are in ``docs/forks.md``.

        >>> fork = session.fork()                                        # doctest: +SKIP
        >>> fork = executor.submit(write_block, fork, 3).result()        # doctest: +SKIP
        >>> session.merge(fork)                                          # doctest: +SKIP
        >>> session.commit("written in parallel")                        # doctest: +SKIP

        Raises:
            ReadOnlyError: the session is read-only or has committed already.
        """
        self._require_writable()
        return make_fork(
            self._handle, self._base, self.branch, self._changes, self._fork_ledger, implicit=False
        )

    def merge(self, *forks: ForkSession) -> None:
        """Bring the writes of ``forks`` into this session, all of them or none.

        Afterwards they are this session's own changes: ``commit`` publishes them, checking
        them against concurrent commits and garbage collection like any other change.

        Raises:
            ForkError: a fork of another session, passed twice or merged already, made
                before this session rebased, or writing to an array deleted or reshaped here
                since.
            ForkConflictError: two forks wrote the same chunk, or a fork and this session
                (after the fork was made); names the chunks.
            ReadOnlyError: the session is read-only or has committed already.
        """
        self._require_writable()
        merge_forks(self._fork_ledger, self._base, self._changes, self._stats, forks)

    def __reduce__(self) -> tuple[Any, ...]:
        """A read-only session pickles as its snapshot; a writable one as a new fork (whose
        unmerged writes stop this session's commit, see ``fork``)."""
        if self.read_only:
            return (_open_snapshot, (self._handle, self.snapshot_id))
        fork = make_fork(
            self._handle, self._base, self.branch, self._changes, self._fork_ledger, implicit=True
        )
        return fork.__reduce__()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writable"
        return f"<Session {mode} branch={self.branch!r} snapshot={self.snapshot_id}>"


def _open_snapshot(handle: RepoHandle, snapshot_id: str) -> Session:
    """Unpickling a read-only session: the same snapshot of the (reopened) repository."""
    return Session(handle, handle.snapshot_view(snapshot_id), None, read_only=True)

"""The commit protocol: how a session's changes become a snapshot on a branch.

1. **Build**: write the new manifests, the transaction log and the structure file (``flush``).
   All are new immutable objects; nothing is visible yet.
2. **Check the requirements** (``core.requirements``) against the latest state (read while
   the build's last objects are written, so its round trips overlap theirs):

   - ``AssertRefSnapshotId``: the branch still points at our base. This is the one
     requirement that decides a commit (the name is pyiceberg's). If another writer moved the
     branch, our changes are checked against what it committed (``conflicts``): no overlap
     means we *rebase* onto the new tip and build again; an overlap is a ``ConflictError``,
     unless the session's ``ConflictPolicy`` resolves it.
   - ``AssertNoGCSince``: no garbage collection fenced the repository after our objects were
     written. Otherwise GC could have deleted them: the chunk files are copied to new ids (or
     ``StaleSessionError`` when already gone) and we build again.
   - ``AssertNotCommitted`` (with ``once`` marks): no snapshot in the branch's history made
     this commit already; otherwise ``AlreadyCommittedError``.
3. **Publish**: create state file ``t/<g+1>`` with put-if-absent (``refs.publish_state``), the
   commit point. Losing that race means another writer took generation ``g+1``: back to 2.
   Its bytes were prepared while the build's last objects were written, when the state read
   then let the commit publish as it is (``prepared``). The hint ``icechunk.json`` is written
   behind the commit (``hints``).

A commit that loses a round (the branch moved, or the race) waits its turn among the writers
on the branch, oldest first, before it rebases (``waiters``): advisory markers that decide
when it attempts, never what lands.

A failure anywhere leaves the repository at its previous snapshot; objects written before it
are orphans that garbage collection removes. How a commit is made besides its changes
(message, metadata, conflict policy, once-marks, progress, piece runner) is one value,
``CommitOptions`` (``commit_options``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..chunks.stats import StatsLog
from ..errors import (
    AlreadyCommittedError,
    CommitStateUnknownError,
    ConflictError,
    NotFoundError,
    RetriesExhaustedError,
    StaleSessionError,
)
from ..format.keys import state_key, txlog_key
from ..format.state import Ref, SnapshotInfo, State
from ..format.txlog import decode_txlog
from ..retry import CAS_BACKOFF, REBASE_BACKOFF
from ..splitting import ManifestConfig
from .changes import ChangeSet
from .chunk_writes import copy_chunk_files
from .commit_options import CommitOptions
from .config import RepositoryConfig
from .conflicts import ConflictPolicy, Theirs, find_conflicts, resolve
from .flush import BuiltSnapshot, build_snapshot
from .overlay import current_nodes
from .prepared import PreparedState
from .rebase_path import snapshots_since_base
from .refs import ensure_writable, lists_snapshot, publish_state, read_latest_state
from .requirements import AssertNoGCSince, AssertNotCommitted, AssertRefSnapshotId
from .rewrite import check_amendable, merged_txlog, replacement, rewritten
from .snapshot import SnapshotView
from .waiters import TurnTaking

if TYPE_CHECKING:
    from .handle import RepoHandle

# Rebases onto concurrent commits, and lost compare-and-swap races, before giving up.
MAX_REBASES = 200
MAX_LOST_RACES = 100


@dataclass(frozen=True, slots=True)
class Committed:
    """A published commit: the snapshot built and the state that made it visible."""

    built: BuiltSnapshot
    state: State


class Commit:
    """One commit of a change set onto ``branch``; ``run`` publishes it.

    ``base`` and ``fresh_since`` move forward as the commit rebases and protects its objects
    from GC; the session reads them back, whether the commit succeeds or not. ``repack``: a
    manifest config to build under, which the commit also stores as the repository's, in the
    same compare-and-swap (``None``: the repository's, unchanged).
    """

    def __init__(
        self,
        handle: RepoHandle,
        branch: str,
        base: SnapshotView,
        changes: ChangeSet,
        stats: StatsLog,
        *,
        fresh_since: int,
        repack: ManifestConfig | None,
        options: CommitOptions,
    ) -> None:
        self._handle = handle
        self._branch = branch
        self.base = base
        self._changes = changes
        self._stats = stats
        self.fresh_since = fresh_since
        # The newest fence already checked against our objects' age. Kept apart from
        # fresh_since: a fence whose cut-off spares our objects says nothing about a later
        # one's, so it must not make them look as young as its own state file.
        self._fences_checked = fresh_since
        self._repack = repack
        self._options = options
        self._once = AssertNotCommitted(branch, dict(options.once)) if options.once else None
        self._state_read: State | None = None  # read while a build's last objects were written
        self._prepared = PreparedState(handle.storage)  # its successor (``_prepare``)

    def run(self) -> Committed:
        """Build, check the requirements, publish; rebase and retry while the branch moves.

        Raises:
            ConflictError: our changes overlap a concurrent commit and the options' policy
                leaves some.
            StaleSessionError: garbage collection deleted objects of ours.
            CommitStateUnknownError: storage could not say whether the state file was written.
            RetriesExhaustedError: the branch kept moving (or races kept being lost).
            AlreadyCommittedError: the branch holds a snapshot with our ``once`` marks.
        """
        storage = self._handle.storage
        if self._options.amend:  # refused before anything is written
            check_amendable(read_latest_state(storage), self._branch, self.base.snapshot_id)
        turns = TurnTaking(storage, self._branch)

        def first_look(snapshot_id: str, structure_id: str) -> None:
            # The waiters' first listing goes beside the first read of the state, and both
            # beside the build's last writes: on object storage an uncontended commit waits
            # for one round of them, not for each in turn.
            turns.look_ahead(self._handle.pool)
            self._read_state(snapshot_id, structure_id)

        try:
            built = self._build(first_look)
            return self._land(built, turns)
        finally:
            turns.leave()
            self._prepared.drop()

    def _land(self, built: BuiltSnapshot, turns: TurnTaking) -> Committed:
        """Check, publish, and rebase and retry while the branch moves: ``run``'s loop. After
        a lost round the commit waits its turn among the branch's waiters (``waiters``)."""
        storage, policy = self._handle.storage, self._options.policy
        rebases = lost_races = 0
        # The first look at the waiters and the first state were read during the build
        # (``run``'s first_look). An amend never rebases: waiting in line it must not move
        # onto a commit landing meanwhile (it would replace that one); at its turn
        # check_amendable refuses.
        catch_up = None if self._options.amend else self._catch_up
        first: State | None = self._take_state_read() or read_latest_state(storage)
        in_turn = turns.take_turn(lost=False, when_next=catch_up)
        if turns.queued:
            first = None  # it waited in line: the branch moved on
        while rebases < MAX_REBASES and lost_races < MAX_LOST_RACES:
            state, first = first or self._take_state_read() or read_latest_state(storage), None
            ensure_writable(state, storage.url)
            # Checked on the state the compare-and-swap replaces: a duplicate published after
            # this read takes that generation, so we read again and see it here.
            landed = self._once.landed(state) if self._once else None
            if landed is not None:
                raise AlreadyCommittedError(landed, self._branch)
            if self._fenced_since_ours(state):
                self._protect_from_gc(state)
                rebases += 1
                built = self._build()
                continue
            if self._branch_moved(state):
                if self._options.amend:
                    check_amendable(state, self._branch, self.base.snapshot_id)  # raises
                if not turns.queued:  # lost a round: queue, and rebase once it is our turn
                    in_turn = turns.take_turn(lost=True, when_next=catch_up)
                    continue
                self._rebase(state, policy)
                if not in_turn:  # no turn taken (waited too long): take turns by backoff
                    REBASE_BACKOFF.sleep(rebases)
                rebases += 1
                built = self._build()
                continue
            if built.base_id != self.base.snapshot_id:
                # Rebased while waiting in line (_catch_up): a snapshot built on the old base
                # lacks what landed since, and must never be published.
                built = self._build()
                continue
            proposed, data = self._prepared.take(state, built.snapshot_id) or (
                self._next_state(state, built.snapshot_id, built.structure_id),
                None,
            )
            try:
                holds_ours = lists_snapshot(built.snapshot_id)
                if publish_state(storage, proposed, self._handle.hints, data, holds_ours):
                    self._handle.known_state = proposed
                    return Committed(built, proposed)
            except CommitStateUnknownError as unknown:
                raise CommitStateUnknownError(built.snapshot_id, unknown.reason) from unknown
            lost_races += 1  # another writer took the generation
            in_turn = turns.take_turn(lost=True, when_next=catch_up)
            if not in_turn:
                CAS_BACKOFF.sleep(lost_races)
        raise RetriesExhaustedError(
            f"gave up committing to {self._branch!r} after {rebases} rebases onto concurrent "
            f"commits and {lost_races} lost races; the branch is too busy, retry later"
        )

    def _build(self, while_writing: Callable[[str, str], None] | None = None) -> BuiltSnapshot:
        """Build on ``base``; ``while_writing`` (default: reading the state to swap) runs while
        the last objects are written."""
        built = self._build_snapshot(while_writing or self._read_state)
        if self._options.amend:  # the log must say what changed since the new parent
            storage, key = self._handle.storage, txlog_key(built.snapshot_id)
            own = storage.get(key)
            storage.put(key, merged_txlog(storage, [self.base.snapshot_id], extra=own))
        return built

    def _build_snapshot(self, while_writing: Callable[[str, str], None]) -> BuiltSnapshot:
        try:
            return build_snapshot(
                self._handle.storage,
                self.base,
                self._changes,
                self._repack or self._handle.manifest_config,
                self._handle.pool,
                self._stats.tables(),
                self._options.progress,
                self._options.piece_runner,
                self._handle.structure_of(self.base.snapshot_id),
                while_writing=while_writing,
            )
        except NotFoundError as missing:
            self._stale_if_collected(missing)
            raise

    def _read_state(self, snapshot_id: str, structure_id: str) -> None:
        """Read the state to swap while the build's last objects are written: on object
        storage its round trips (from the newest state the handle knows: probe and check)
        overlap their one. Then prepare its successor (``_prepare``)."""
        self._state_read = read_latest_state(self._handle.storage, self._handle.known_state)
        self._prepare(self._state_read, snapshot_id, structure_id)

    def _take_state_read(self) -> State | None:
        state, self._state_read = self._state_read, None
        return state

    def _prepare(self, state: State, snapshot_id: str, structure_id: str) -> None:
        """When ``state`` lets the snapshot being built be published as it is, prepare the
        state that publishes it (``core.prepared``); ``_land`` takes it if it publishes on
        this very state, after the same checks."""
        self._prepared.drop()
        if not self._options.amend and self._publishable_as_is(state):
            proposed = self._next_state(state, snapshot_id, structure_id)
            self._prepared.prepare(state, snapshot_id, proposed)

    def _publishable_as_is(self, state: State) -> bool:
        """Whether ``_land`` would publish on ``state`` as it is (its checks, by the same calls)."""
        return (
            state.status.writable
            and (self._once is None or self._once.landed(state) is None)
            and not self._fenced_since_ours(state)
            and not self._branch_moved(state)
        )

    def _fenced_since_ours(self, state: State) -> bool:  # GC fenced after our oldest object
        return not AssertNoGCSince(max(self.fresh_since, self._fences_checked)).holds(state)

    def _branch_moved(self, state: State) -> bool:  # the branch left this commit's base
        return not AssertRefSnapshotId(self._branch, self.base.snapshot_id).holds(state)

    def _stale_if_collected(self, missing: NotFoundError) -> None:
        """An object this commit reads (a staged ref file, a chunk file) is gone: when a GC
        fenced the repository after our write began, that explains it, and says what to do.

        Raises:
            StaleSessionError: GC ran since the write began (nothing was committed).
        """
        state = read_latest_state(self._handle.storage)
        fence = state.gc_fence
        if fence is None or AssertNoGCSince(self.fresh_since).holds(state):
            return  # no collection since we began: the object is missing for another reason
        cutoff = datetime.fromtimestamp(fence.cutoff_ms / 1000, tz=UTC).isoformat()
        raise StaleSessionError(
            f"garbage collection with a cut-off of {cutoff} ran while this write was in "
            f"flight and deleted what it had written ({missing}); nothing was committed: run "
            "the write again (a streaming query: restart it, and the batch is replayed), and "
            "collect garbage with a cut-off older than the longest write (e.g. 7 days)"
        ) from missing

    def _next_state(self, state: State, snapshot_id: str, structure_id: str) -> State:
        tip = self.base.snapshot_id
        parent = state.snapshots.get(tip)
        now = int(time.time() * 1000)
        info = SnapshotInfo(
            id=snapshot_id,
            parent_id=tip,
            # Never before the parent, so as_of lookups stay ordered along a branch.
            timestamp_ms=max(now, parent.timestamp_ms if parent else now),
            structure_file=structure_id,
            message=self._options.message,
            metadata=self._options.stored_metadata,
            once_marks=(dict(self._once.marks),) if self._once else (),
        )
        config = state.config
        if self._repack is not None:
            stored = RepositoryConfig.from_dict(config)
            config = stored.with_manifests(self._repack.to_dict()).to_dict()
        if self._options.amend:
            replaced = [tip]  # check_amendable passed, and an amend never rebases
            amended = rewritten(state, self._branch, replaced, replacement(state, replaced, info))
            return replace(amended, config=config)
        return state.next(
            snapshots={**state.snapshots, info.id: info},
            refs={**state.refs, self._branch: Ref(self._branch, info.id, "branch")},
            config=config,
        )

    # -- rebase ---------------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Next in line: rebase onto the branch tip while the head lands, so at our turn only
        the commits landed since remain to check (a writer queued behind thirty others would
        otherwise read thirty transaction logs while every other writer waits)."""
        state = read_latest_state(self._handle.storage)
        if self._branch_moved(state):
            self._rebase(state, self._options.policy)

    def _rebase(self, state: State, policy: ConflictPolicy) -> None:
        """Move ``base`` to the branch tip, or raise ``ConflictError`` if our changes overlap
        what was committed since (after ``policy`` resolved what it can)."""
        tip = state.branch(self._branch).snapshot_id
        storage = self._handle.storage
        # Read side by side: on object storage a rebase over k commits is one round trip, not k.
        since = snapshots_since_base(state, self._branch, tip, self.base.snapshot_id)
        keys = [txlog_key(s) for s in since]
        logs = list(self._handle.pool.map(lambda key: decode_txlog(storage.get(key), key), keys))
        tip_view = self._handle.snapshot_view(tip, state)
        with self._changes.lock:
            nodes = current_nodes(self.base, self._changes)
            found = find_conflicts(
                self._changes,
                Theirs.from_logs(logs),
                {n.id: n for n in nodes.values()},
                {n.id: n for n in tip_view.nodes.values()},
            )
            left = resolve(found, self._changes, policy)
            if left:
                raise ConflictError(left, self._branch)
        self.base = tip_view

    # -- garbage collection -----------------------------------------------------------------
    def _protect_from_gc(self, state: State) -> None:
        """Make sure GC (whose fence ``state`` carries) cannot delete what we will publish.

        GC deletes only objects older than its cut-off and older than its fence. If this
        commit's objects all postdate the cut-off, nothing is to do. Otherwise the chunk files
        our changes reference are copied to new ids (written after the fence, so GC keeps
        them); manifests and the structure are rebuilt anyway. What is already gone cannot be
        saved: then the commit stops before publishing.

        Raises:
            StaleSessionError: GC deleted a chunk file this session wrote, or refs were staged
                (their chunk files cannot be re-checked here).
        """
        fence = state.gc_fence
        assert fence is not None
        began_ms = self._fresh_since_ms()
        if began_ms is not None and fence.cutoff_ms <= began_ms:
            self._fences_checked = state.generation  # its cut-off predates every object of ours
            return
        cutoff = datetime.fromtimestamp(fence.cutoff_ms / 1000, tz=UTC).isoformat()
        if self._changes.staged:
            raise StaleSessionError(
                f"garbage collection with a cut-off of {cutoff} started while this session "
                "was writing, and may delete the chunk files of its staged refs; "
                "nothing was committed: run the write again"
            )
        with self._changes.lock:
            chunk_ids = sorted(self._changes.chunk_ids())
            renamed = copy_chunk_files(self._handle.storage, self._handle.pool, chunk_ids, cutoff)
            self._changes.rename_chunks(renamed)
            self._stats.rename_chunks(renamed)
        # Every object we will publish is written from now on: after this fence's state file.
        self.fresh_since = self._fences_checked = state.generation

    def _fresh_since_ms(self) -> int | None:
        """When (storage clock) state ``fresh_since`` was written; None if unknown or gone."""
        if self.fresh_since < 0:
            return None
        key = state_key(self.fresh_since)
        return next((i.modified_ms for i in self._handle.storage.list(key) if i.key == key), None)

"""The commit coordinator: turn staged task results into one atomic commit, or clean up.

Shared by both front doors. ``DataSourceWriter.commit()`` runs in a Python worker on the
driver host with no SparkSession; the driver API runs in the user's driver. Either way:

1. open a writable session at the plan's base snapshot (so a concurrent commit touching the
   same chunks is detected as a conflict when the commit rebases, not silently overwritten);
2. make each array of the write ready (``Session.ensure_array``: create, grow along the
   append axis, or recreate for an overwrite);
3. hand the session each array's staged refs (``Session.add_staged_refs``: where the staged
   rows are, their count and bounds) and commit, tagging the snapshot with the write id. The
   core packs manifest sets and splits arrays from those counts, exactly as for refs in
   memory, and reads the staged rows manifest by manifest (``piece_runner`` may write the
   pieces of split arrays on executors);
4. delete the staging area, and on a *certain* failure every chunk object the write made.

The write id in the snapshot metadata makes commit and abort idempotent: whichever runs after
a commit landed sees it and only sweeps the staging area.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.commit import landed_once
from ..core.flush import PieceRunner
from ..core.repository import Repository
from ..core.session import Session
from ..core.staged import StagedFile, StagedRefs
from ..errors import AlreadyCommittedError
from ..format.keys import chunk_key
from ..storage import Storage
from .chunks import read_journal
from .plan import WRITE_ID_KEY, WritePlan
from .staging import ArrayStaged, StageResult, merge_results

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StagedWrite:
    """What the tasks of a write staged, reduced: per array its staged refs; the attempts.

    Built on the driver from the tasks' commit messages (``df.write``) or by a Spark
    aggregation (the driver API); ``attempts`` are the task attempts whose files count.
    """

    arrays: Mapping[str, StagedRefs]
    attempts: frozenset[str]

    @classmethod
    def of(cls, results: Sequence[StageResult]) -> StagedWrite:
        """Reduce the results of the successful task attempts."""
        arrays = {
            path: staged_refs(
                path, stats, [f for r in results if path in r.arrays for f in r.files]
            )
            for path, stats in merge_results(results).items()
        }
        return cls(arrays, frozenset(r.attempt for r in results))


def staged_refs(path: str, stats: ArrayStaged, files: Iterable[StagedFile]) -> StagedRefs:
    """The core's view of one array's staged rows: one write, so its files have no order
    among themselves (key order only makes the value the same on every run)."""
    ordered = tuple(sorted(files, key=lambda f: f.key))
    return StagedRefs(
        path,
        stats.count,
        tuple(int(i) for i in stats.lo),
        tuple(int(i) for i in stats.hi),
        tuple(stats.indices),
        ordered,
    )


def committed_snapshot(repo: Repository, write_id: str) -> str | None:
    """The snapshot that holds the write with this id, if it landed (on any branch; after
    expiry, a later snapshot carrying the write's marks)."""
    return landed_once(repo.state(), {WRITE_ID_KEY: write_id})


def stage_into(session: Session, plan: WritePlan, staged: StagedWrite) -> None:
    """Make every array of the write ready, and give the session its staged refs."""
    for path in sorted(plan.groups):  # an existing group keeps its attributes
        _ensure_group(session, path, plan.groups[path])
    declared_only = {p for p, t in plan.arrays.items() if not t.exists} - set(staged.arrays)
    for path in sorted({*staged.arrays, *declared_only}):
        target = plan.arrays[path]
        refs = staged.arrays.get(path)
        min_shape: list[int] | tuple[int, ...] | None = target.final_shape
        if target.grow_axis is not None and refs is not None:
            needed = [0] * target.meta.ndim
            axis = target.grow_axis
            needed[axis] = (refs.hi[axis] + 1) * target.meta.chunk_shape[axis]
            min_shape = needed
        recreate = plan.mode == "overwrite" and refs is not None
        session.ensure_array(path, target.zarr_json, min_shape=min_shape, recreate=recreate)
        if refs is not None:
            session.add_staged_refs(path, refs)


def _ensure_group(session: Session, path: str, attributes: Mapping[str, object]) -> None:
    """Create the group at ``path`` (and missing parents, without attributes) if missing."""
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts) + 1):
        here = "/" + "/".join(parts[:depth])
        if session.find_node(here) is None:
            session.create_group(here, attributes if depth == len(parts) else None)


def run_commit(
    plan: WritePlan,
    staged: StagedWrite,
    piece_runner: PieceRunner | None = None,
    once: Mapping[str, Any] | None = None,
) -> str | None:
    """Commit a write whose tasks all succeeded; ``None`` when there was nothing to commit.

    The commit lands once: a snapshot on the branch carrying ``once`` (by default the write
    id) means it landed already, and that snapshot is returned (see ``Session.commit``).

    Raises:
        ConflictError: the write overlaps a concurrent commit (with ``on_conflict='fail'``).
        InvalidInputError: staged refs outside an array's grid, or a group at an array's path.
    """
    repo = plan.repo.open()
    try:
        landed = committed_snapshot(repo, plan.write_id)
        if landed is not None:  # a retried commit: it landed already
            sweep(repo.storage, plan, staged.attempts)
            return landed
        try:
            session = repo.writable_session(
                plan.branch, base_snapshot_id=plan.base_snapshot, fresh_since=plan.base_generation
            )
            stage_into(session, plan, staged)
            snapshot = None
            if session.has_uncommitted_changes():
                metadata = {**plan.metadata, WRITE_ID_KEY: plan.write_id}
                snapshot = session.commit(
                    plan.message,
                    metadata,
                    on_conflict=plan.on_conflict,  # type: ignore[arg-type]  # checked by make_plan
                    piece_runner=piece_runner,
                    once=once or {WRITE_ID_KEY: plan.write_id},
                )
        except AlreadyCommittedError as done:  # a retry or replay of a commit that landed
            _after_failure(repo, plan)  # our objects go, unless this very write landed
            sweep(repo.storage, plan, staged.attempts)
            return done.snapshot_id
        except BaseException:
            _after_failure(repo, plan)
            raise
        sweep(repo.storage, plan, staged.attempts)
        return snapshot
    finally:
        repo.close()


def commit_staged(plan: WritePlan, results: Sequence[StageResult]) -> str | None:
    """The data source's commit: reduce the tasks' messages here, write manifests here."""
    return run_commit(plan, StagedWrite.of(results))


def abort_write(plan: WritePlan, results: Iterable[StageResult | None]) -> None:
    """Remove what a failed write staged and wrote (nothing referenced by a landed commit)."""
    repo = plan.repo.open()
    try:
        if committed_snapshot(repo, plan.write_id) is not None:
            sweep(repo.storage, plan, frozenset(r.attempt for r in results if r is not None))
        else:
            delete_everything(repo.storage, plan)
    finally:
        repo.close()


def _after_failure(repo: Repository, plan: WritePlan) -> None:
    try:
        landed = committed_snapshot(repo, plan.write_id) is not None
    except Exception as exc:  # the state is unreadable: we cannot know, so keep chunk objects
        log.warning(
            "write %s: commit state unknown (%s); only staging is removed", plan.write_id, exc
        )
        repo.storage.delete([i.key for i in repo.storage.list(plan.staging_prefix)])
        return
    if landed:
        return
    delete_everything(repo.storage, plan)


def delete_everything(storage: Storage, plan: WritePlan) -> None:
    """Delete the staging area and every chunk object the write journaled."""
    staged = [i.key for i in storage.list(plan.staging_prefix)]
    chunks = [chunk_key(i) for _, ids in _journals(storage, plan, staged) for i in ids]
    storage.delete(chunks)
    storage.delete(staged)  # journals last: if deleting objects fails, a retry still finds them


def sweep(storage: Storage, plan: WritePlan, attempts: frozenset[str]) -> None:
    """After a commit: delete the staging area and chunk objects of attempts that failed.

    Failing here does not undo the commit, so problems are logged, not raised (whatever is
    left is unreferenced and garbage collection removes it).
    """
    try:
        staged = [i.key for i in storage.list(plan.staging_prefix)]
        orphans = [
            chunk_key(i)
            for attempt, ids in _journals(storage, plan, staged)
            if attempt not in attempts
            for i in ids
        ]
        storage.delete(orphans)
        storage.delete(staged)
    except Exception as exc:
        log.warning(
            "write %s committed, but cleaning its staging area failed: %s", plan.write_id, exc
        )


def _journals(
    storage: Storage, plan: WritePlan, staged: Iterable[str]
) -> Iterable[tuple[str, list[str]]]:
    """(attempt, object ids) of every chunk journal of the write."""
    prefix = plan.journal_prefix
    for key in staged:
        if key.startswith(prefix):
            attempt = key[len(prefix) :].rsplit("-", 1)[0]
            yield attempt, read_journal(storage.get(key))


__all__ = [
    "StagedWrite",
    "abort_write",
    "commit_staged",
    "committed_snapshot",
    "delete_everything",
    "run_commit",
    "stage_into",
    "staged_refs",
    "sweep",
]

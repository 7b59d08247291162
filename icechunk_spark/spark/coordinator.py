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

One write is one transaction on one open repository (``run_commit``), and it lands once. The
plan names the commit by its once-marks (``WritePlan.once``: the write id, or a stream's
query and batch ids), and one rule, ``AssertNotCommitted`` on the plan's branch, is checked
before anything is staged into a session and again by the commit on the state its
compare-and-swap replaces: a commit that landed already commits nothing. Which objects may
be deleted afterwards is another question, answered by the write id alone, in every listed
snapshot: the objects of a write that any snapshot holds are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..core import (
    AssertNotCommitted,
    CommitOptions,
    ConflictPolicy,
    PieceRunner,
    Session,
    StagedFile,
    StagedRefs,
    landed_once,
)
from ..errors import AlreadyCommittedError
from ..format.keys import chunk_key
from ..repository import Repository
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


def landed_already(repo: Repository, plan: WritePlan) -> str | None:
    """The snapshot in the plan's branch history that made this commit already, if one did
    (the look before staging; the commit checks the same requirement again)."""
    return AssertNotCommitted(plan.branch, plan.once).landed(repo.state())


def commit_options(plan: WritePlan, piece_runner: PieceRunner | None = None) -> CommitOptions:
    """How the write commits: the plan's message and metadata, tagged with the write id."""
    return CommitOptions(
        plan.message,
        {**plan.metadata, WRITE_ID_KEY: plan.write_id},
        ConflictPolicy.parse(plan.on_conflict),
        plan.once,
        piece_runner=piece_runner,
    )


def _write_landed(repo: Repository, plan: WritePlan) -> bool:
    """Whether a snapshot holds the write's objects: one listed anywhere (after expiry, a
    later snapshot carrying the write's marks) answers for its write id."""
    return landed_once(repo.state(), {WRITE_ID_KEY: plan.write_id}) is not None


def stage_into(session: Session, plan: WritePlan, staged: StagedWrite) -> None:
    """Make every array of the write ready, and give the session its staged refs."""
    for path in plan.replaced:
        if session.find_node(path) is not None:
            session.delete_node(path)
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
    *,
    repo: Repository | None = None,
) -> str | None:
    """Commit a write whose tasks all succeeded; ``None`` when there was nothing to commit.

    The commit lands once: a snapshot on the branch answering for ``plan.once`` means it
    landed already, and that snapshot is returned (see the module doc). ``repo``: the
    repository the caller opened already (and closes); by default opened here.

    Raises:
        ConflictError: the write overlaps a concurrent commit (with ``on_conflict='fail'``).
        InvalidInputError: staged refs outside an array's grid, or a group at an array's path.
    """
    with plan.repo.opened(repo) as repo:
        landed = landed_already(repo, plan)
        if landed is None:
            try:
                snapshot = _stage_and_commit(repo, plan, staged, piece_runner)
            except AlreadyCommittedError as done:  # a duplicate landed after our look
                landed = done.snapshot_id
            except BaseException:
                _after_failure(repo, plan)
                raise
            else:
                sweep(repo.storage, plan, staged.attempts)
                return snapshot
        log.info("write %s: committed already as %s; committing nothing", plan.write_id, landed)
        _after_failure(repo, plan)  # our objects go, unless this very write landed
        sweep(repo.storage, plan, staged.attempts)
        return landed


def _stage_and_commit(
    repo: Repository, plan: WritePlan, staged: StagedWrite, piece_runner: PieceRunner | None
) -> str | None:
    session = repo.writable_session(
        plan.branch, base_snapshot_id=plan.base_snapshot, fresh_since=plan.base_generation
    )
    stage_into(session, plan, staged)
    if not session.has_uncommitted_changes():
        return None
    return session.commit_with(commit_options(plan, piece_runner))


def commit_staged(plan: WritePlan, results: Sequence[StageResult]) -> str | None:
    """The data source's commit: reduce the tasks' messages here, write manifests here."""
    return run_commit(plan, StagedWrite.of(results))


def abort_write(
    plan: WritePlan, results: Iterable[StageResult | None], repo: Repository | None = None
) -> None:
    """Remove what a failed write staged and wrote (nothing referenced by a landed commit)."""
    with plan.repo.opened(repo) as repo:
        if _write_landed(repo, plan):
            sweep(repo.storage, plan, frozenset(r.attempt for r in results if r is not None))
        else:
            delete_everything(repo.storage, plan)


def _after_failure(repo: Repository, plan: WritePlan) -> None:
    try:
        landed = _write_landed(repo, plan)
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
    "commit_options",
    "commit_staged",
    "delete_everything",
    "landed_already",
    "run_commit",
    "stage_into",
    "staged_refs",
    "sweep",
]

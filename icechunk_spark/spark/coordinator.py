"""The commit coordinator: turn staged task results into one atomic commit, or clean up.

Shared by both front doors. ``DataSourceWriter.commit()`` runs in a Python worker on the
driver host with no SparkSession, so everything here is plain Python over the repository:

1. start a writable session at the plan's base snapshot (so a concurrent commit touching the
   same chunks is detected as a conflict when we rebase, not silently overwritten);
2. declare new arrays (and missing parent groups), grow append axes, recreate overwritten
   arrays (:func:`apply_arrays`);
3. attach the refs (``set_chunk_refs`` from staged files here; the driver API attaches
   manifests its executors wrote) and commit, tagging the snapshot with the write id;
4. delete the staging area, and on a *certain* failure every chunk object the write made.

The write id in the snapshot metadata makes commit and abort idempotent: whichever runs after
a commit landed sees it and only sweeps the staging area.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.compute as pc

from ..core.repository import Repository
from ..core.session import Session
from ..errors import ConflictError, InvalidInputError, NotFoundError
from ..format.keys import MANIFESTS_PREFIX, chunk_key, manifest_key, object_id
from ..format.structure import ArrayMeta, Node
from ..storage import Storage
from .chunks import read_journal
from .plan import WRITE_ID_KEY, WritePlan
from .staging import ArrayStaged, StageResult, merge_results, read_staged, staged_keys

log = logging.getLogger(__name__)


def committed_snapshot(repo: Repository, write_id: str) -> str | None:
    """The snapshot a write with this id committed, if it did."""
    for info in repo.state().snapshots.values():
        if info.metadata.get(WRITE_ID_KEY) == write_id:
            return info.id
    return None


def open_write_session(repo: Repository, plan: WritePlan) -> Session:
    """A writable session on the plan's branch, based on the snapshot the plan was made from.

    Not the branch tip: if the branch moved while tasks ran, commit() rebases over what moved
    and reports chunks both wrote as conflicts. (Core API wish: ``writable_session(branch,
    base_snapshot_id=...)``; until then the session is built the way the repository does.)
    """
    view = repo.snapshot_view(plan.base_snapshot)
    return Session(repo, view, plan.branch, read_only=False, fresh_since=plan.base_generation)


def grown_shape(meta: ArrayMeta, axis: int | None, hi: np.ndarray | None) -> tuple[int, ...]:
    """The array's shape, grown along ``axis`` (if any) to hold chunk index ``hi``."""
    shape = list(meta.shape)
    if axis is not None and hi is not None:
        needed = (int(hi[axis]) + 1) * meta.chunk_shape[axis]
        shape[axis] = max(shape[axis], needed)
    return tuple(shape)


def apply_arrays(
    session: Session, plan: WritePlan, written: Mapping[str, ArrayStaged]
) -> dict[str, Node]:
    """Create, grow or recreate the arrays of the write; returns their nodes by path.

    Existing arrays are taken from the session (not the plan), so a write re-planned on a
    newer tip grows what is there now instead of shrinking it to what the plan saw.
    """
    nodes: dict[str, Node] = {}
    declared_only = {p for p, t in plan.arrays.items() if not t.exists} - set(written)
    for path in sorted({*written, *declared_only}):
        target = plan.arrays[path]
        stats = written.get(path)
        current = _array_or_none(session, path)
        zarr_json = current.zarr_json if current is not None else target.zarr_json
        meta = current.meta if current is not None and current.meta else target.meta
        shape = grown_shape(meta, target.grow_axis, stats.hi if stats is not None else None)
        if shape != meta.shape:
            doc = json.loads(zarr_json)
            doc["shape"] = list(shape)
            zarr_json = json.dumps(doc).encode()
        if current is not None and plan.mode == "overwrite" and stats is not None:
            # A fresh node (new id) holds no refs: the array's old chunks are all replaced.
            session.delete_node(path, recursive=False)
            nodes[path] = session.set_node_metadata(path, zarr_json)
        elif current is not None:
            if zarr_json != current.zarr_json:
                session.set_node_metadata(path, zarr_json)
            nodes[path] = session.get_node(path)
        else:
            _ensure_parents(session, path)
            nodes[path] = session.set_node_metadata(path, zarr_json, create_only=True)
    return nodes


def _array_or_none(session: Session, path: str) -> Node | None:
    try:
        node = session.get_node(path)
    except NotFoundError:
        return None
    if node.type != "array":
        raise InvalidInputError(f"{path!r} is a group in the repository, not an array")
    return node


def _ensure_parents(session: Session, path: str) -> None:
    # Like zarr's create_array: parent groups are created so the hierarchy can be opened.
    parts = path.strip("/").split("/")[:-1]
    for depth in range(len(parts) + 1):
        parent = "/" + "/".join(parts[:depth])
        try:
            session.get_node(parent)
        except NotFoundError:
            session.create_group(parent)


def feed_staged(session: Session, storage: Storage, keys: Sequence[str]) -> int:
    """Give every staged ref to the session, file by file and array by array."""
    total = 0
    for key in sorted(keys):
        table = read_staged(storage, key)
        arrays = table.column("array")
        for path in pc.unique(arrays).to_pylist():
            rows = table.filter(pc.equal(arrays, path)).drop_columns(["array"])
            total += session.set_chunk_refs(path, rows)
    return total


def commit_session(session: Session, plan: WritePlan) -> str:
    metadata = {**plan.metadata, WRITE_ID_KEY: plan.write_id}
    on_conflict: Any = plan.on_conflict  # validated by make_plan
    return session.commit(plan.message, metadata, on_conflict=on_conflict)


Attach = Callable[[Repository, Session, dict[str, Node]], frozenset[str]]
MAX_REPLANS = 5


def run_commit(
    plan: WritePlan, results: Sequence[StageResult], attach: Attach, replan: bool = False
) -> str | None:
    """Commit a write whose tasks all succeeded; ``None`` when there was nothing to commit.

    ``attach`` gives the session the write's refs and returns the ids of manifests it wrote
    and attached (the driver API's executors journal every manifest they write; journaled
    ones not attached are orphans of retried tasks and are deleted after the commit).
    ``replan``: on a conflict the core cannot resolve (attached manifests replace all of an
    array's refs, so any concurrent change to the array conflicts), run ``attach`` again on
    the new branch tip, up to ``MAX_REPLANS`` times. Only right for ``on_conflict='ours'``.

    Raises:
        ConflictError: the write overlaps a concurrent commit (with ``on_conflict='fail'``).
        InvalidInputError: a ref the session refuses (grid, location, container).
    """
    repo = plan.repo.open()
    attached: frozenset[str] = frozenset()
    try:
        done = committed_snapshot(repo, plan.write_id)
        if done is not None:  # a retried commit: it landed already
            sweep(repo.storage, plan, results, _attached_of(repo, done))
            return done
        try:
            for attempt in range(MAX_REPLANS + 1):
                session = open_write_session(repo, plan)
                nodes = apply_arrays(session, plan, merge_results(results))
                attached = attach(repo, session, nodes)
                if not session.has_uncommitted_changes():
                    snapshot = None
                    break
                try:
                    snapshot = commit_session(session, plan)
                    break
                except ConflictError:
                    if not replan or attempt == MAX_REPLANS:
                        raise
                    # Our refs win; the new tip's other refs are kept by laying out again.
                    plan = replace(plan, base_snapshot=repo.lookup_branch(plan.branch))
        except BaseException:
            _after_failure(repo, plan)
            raise
        sweep(repo.storage, plan, results, attached)
        return snapshot
    finally:
        repo.close()


def _attached_of(repo: Repository, snapshot_id: str) -> frozenset[str]:
    nodes = repo.readonly_session(snapshot_id=snapshot_id).list_nodes()
    return frozenset(m.manifest_id for n in nodes for m in n.manifests)


def commit_staged(plan: WritePlan, results: Sequence[StageResult]) -> str | None:
    """The data source's commit: staged refs go through ``set_chunk_refs``, flush packs them."""
    keys = staged_keys(results)

    def attach(repo: Repository, session: Session, nodes: dict[str, Node]) -> frozenset[str]:
        feed_staged(session, repo.storage, keys)
        return frozenset()

    return run_commit(plan, results, attach)


def abort_write(plan: WritePlan, results: Iterable[StageResult | None]) -> None:
    """Remove what a failed write staged and wrote (nothing referenced by a landed commit)."""
    repo = plan.repo.open()
    try:
        if committed_snapshot(repo, plan.write_id) is not None:
            sweep(repo.storage, plan, [r for r in results if r is not None])
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
    """Delete the staging area and every chunk object and manifest the write journaled."""
    staged = [i.key for i in storage.list(plan.staging_prefix)]
    chunks = [chunk_key(i) for _, ids in _journals(storage, plan, staged) for i in ids]
    storage.delete([*chunks, *_journaled_manifests(plan, staged)])
    storage.delete(staged)  # journals last: if deleting objects fails, a retry still finds them


def sweep(
    storage: Storage,
    plan: WritePlan,
    results: Sequence[StageResult],
    attached: frozenset[str] = frozenset(),
) -> None:
    """After a commit: delete the staging area and objects of attempts that failed.

    Failing here does not undo the commit, so problems are logged, not raised (whatever is
    left is unreferenced and garbage collection removes it).
    """
    try:
        kept = {r.attempt for r in results}
        staged = [i.key for i in storage.list(plan.staging_prefix)]
        orphans = [
            chunk_key(i)
            for attempt, ids in _journals(storage, plan, staged)
            if attempt not in kept
            for i in ids
        ]
        orphans += [
            k
            for k in _journaled_manifests(plan, staged)
            if object_id(k, MANIFESTS_PREFIX) not in attached
        ]
        storage.delete(orphans)
        storage.delete(staged)
    except Exception as exc:
        log.warning(
            "write %s committed, but cleaning its staging area failed: %s", plan.write_id, exc
        )


def _journaled_manifests(plan: WritePlan, staged: Iterable[str]) -> list[str]:
    prefix = plan.manifest_journal_prefix
    return [manifest_key(k[len(prefix) :]) for k in staged if k.startswith(prefix)]


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
    "abort_write",
    "apply_arrays",
    "commit_session",
    "commit_staged",
    "committed_snapshot",
    "delete_everything",
    "feed_staged",
    "grown_shape",
    "open_write_session",
    "run_commit",
    "sweep",
]

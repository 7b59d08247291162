"""Repository history: what changed between two snapshots, and expiry of old snapshots.

``diff`` compares two snapshots' structure files and, only for arrays whose manifest refs differ,
their chunk refs. Nodes are matched by path: a path whose node id changed (deleted and created
again) counts as deleted *and* added; ``chunks_changed`` still compares the refs found at that
path on either side (an absent node or a group has no refs).

``expire_snapshots`` edits only the state file; ``gc.garbage_collect`` deletes the files that no
listed snapshot needs any more. Decisions, following Iceberg and Icechunk:

* A snapshot is expired when its timestamp is older than ``older_than`` and no branch or tag
  points at it. Tips stay, however old, unless ``delete_expired_branches`` /
  ``delete_expired_tags`` delete the refs whose tip is older than ``older_than``; the ``main``
  branch is never deleted. The repository's first snapshot is not special: it may be expired.
* The remaining history is re-linked: each kept snapshot's ``parent_id`` becomes its nearest
  kept ancestor, or ``None`` when none is left, and the snapshot is marked ``parent_relinked``.
  So ``ancestry`` walks only listed snapshots. A rebase never reads the transaction log of an
  expired snapshot (GC may delete it); instead it refuses to cross a re-linked edge, since the
  changes of the snapshots skipped there are unknown (a session based on a tagged snapshot
  could otherwise overwrite an expired commit's chunks without a conflict).
* Expiry is a pure change of the latest state, applied with compare-and-swap by
  ``refs.update_state`` and recomputed after every lost race, so it is safe while others commit.
  A session whose parent was expired meanwhile can only be one whose branch moved on (tips are
  never expired); its commit then fails to find its parent in the re-linked history and raises
  ``ConflictError`` instead of landing on history that no longer exists.
* Naive datetimes are taken as UTC, as ``readonly_session(as_of=...)`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import (
    DEFAULT_BRANCH,
    SnapshotView,
    raise_if_collected,
    read_latest_state,
    update_state,
)
from ..errors import InvalidInputError, NotFoundError
from ..format.coords import coord_keys
from ..format.merge import merge_refs
from ..format.state import SnapshotInfo, State, union_marks
from ..format.structure import Node

if TYPE_CHECKING:
    from ..core import RepoHandle


# The columns that locate a chunk's bytes; two refs are equal when all of them are.
_LOCATION_COLUMNS = ("inline_data", "chunk_id", "virtual_path", "offset", "length", "checksum")


@dataclass(frozen=True, slots=True)
class Diff:
    """What changed from one snapshot to another.

    ``nodes_*`` are sorted paths; ``nodes_updated`` are nodes whose ``zarr.json`` changed.
    ``chunks_changed`` maps an array path to the number of chunk coords whose ref differs
    (added, removed or pointing elsewhere); arrays without such coords are left out.
    """

    from_snapshot_id: str
    to_snapshot_id: str
    nodes_added: tuple[str, ...] = ()
    nodes_deleted: tuple[str, ...] = ()
    nodes_updated: tuple[str, ...] = ()
    chunks_changed: Mapping[str, int] = field(default_factory=dict)
    nodes_moved: Mapping[str, str] = field(default_factory=dict)  # old path -> new path

    def is_empty(self) -> bool:
        nodes = self.nodes_added or self.nodes_deleted or self.nodes_updated or self.nodes_moved
        return not (nodes or self.chunks_changed)


def diff(
    handle: RepoHandle,
    *,
    from_snapshot_id: str | None = None,
    to_snapshot_id: str | None = None,
    from_branch: str | None = None,
    to_branch: str | None = None,
    from_tag: str | None = None,
    to_tag: str | None = None,
) -> Diff:
    """Compare two snapshots, each named by exactly one of snapshot id, branch or tag.

    >>> d = diff(repo.handle, from_tag="v1", to_branch="main")     # doctest: +SKIP
    >>> d.nodes_added, d.chunks_changed                      # doctest: +SKIP
    (('/new',), {'/temperature': 12})

    Raises:
        InvalidInputError: not exactly one "from" and one "to" was given.
        NotFoundError: an unknown (or expired) snapshot, or an unknown branch or tag.
        SnapshotCollectedError: one of them left the history (expired, or replaced by an
            amend or squash), and GC deleted a file the comparison read, while it ran.
    """
    state = read_latest_state(handle.storage)
    old_id = _resolve(state, "from", from_snapshot_id, from_branch, from_tag)
    new_id = _resolve(state, "to", to_snapshot_id, to_branch, to_tag)
    try:
        return _diff(handle.snapshot_view(old_id, state), handle.snapshot_view(new_id, state))
    except NotFoundError as missing:  # a structure file or manifest
        during, advice = "while it was compared", "compare snapshots still in the history"
        raise_if_collected(handle.storage, (old_id, new_id), missing, during, advice)
        raise


def _diff(old: SnapshotView, new: SnapshotView) -> Diff:
    old_paths, new_paths = set(old.nodes), set(new.nodes)
    same_node = {p for p in old_paths & new_paths if old.nodes[p].id == new.nodes[p].id}
    # A node is the same node wherever it is (ids are never reused): at another path, moved.
    new_by_id = {n.id: p for p, n in new.nodes.items()}
    moved = {
        p: new_by_id[n.id]
        for p, n in old.nodes.items()
        if p not in same_node and new_by_id.get(n.id, p) != p
    }
    pairs = {p: (old.nodes.get(p), new.nodes.get(p)) for p in old_paths | new_paths}
    for was, now in moved.items():
        pairs.pop(was, None)
        pairs[now] = (old.nodes[was], new.nodes[now])
    updated = {
        p for p, (a, b) in pairs.items() if a and b and a.id == b.id and a.zarr_json != b.zarr_json
    }
    chunks: dict[str, int] = {}
    for path, (a, b) in sorted(pairs.items()):
        count = _chunks_changed(old, new, a, b)
        if count:
            chunks[path] = count
    return Diff(
        from_snapshot_id=old.snapshot_id,
        to_snapshot_id=new.snapshot_id,
        nodes_added=tuple(sorted(new_paths - same_node - set(moved.values()))),
        nodes_deleted=tuple(sorted(old_paths - same_node - set(moved))),
        nodes_updated=tuple(sorted(updated)),
        chunks_changed=chunks,
        nodes_moved=dict(sorted(moved.items())),
    )


def _resolve(
    state: State, side: str, snapshot_id: str | None, branch: str | None, tag: str | None
) -> str:
    named = (("snapshot_id", snapshot_id), ("branch", branch), ("tag", tag))
    given = [name for name, value in named if value is not None]
    if len(given) != 1:
        shown = ", ".join(f"{side}_{g}" for g in given) or "none"
        raise InvalidInputError(
            f"give exactly one of {side}_snapshot_id, {side}_branch and {side}_tag (got {shown})"
        )
    return state.resolve(branch, tag, snapshot_id)


def _chunks_changed(old: SnapshotView, new: SnapshotView, a: Node | None, b: Node | None) -> int:
    a = a if a is not None and a.type == "array" else None
    b = b if b is not None and b.type == "array" else None
    if a is None or b is None:
        # Only one side has refs: every one of them is a change, counted from the structure.
        return (a.ref_count if a else 0) + (b.ref_count if b else 0)
    if a.id == b.id and a.manifests == b.manifests:
        return 0  # manifests are immutable: the same manifests hold the same refs (common case)
    assert a.meta is not None and b.meta is not None
    refs_a = merge_refs(old.array_refs(a), a.meta.ndim)
    refs_b = merge_refs(new.array_refs(b), b.meta.ndim)
    if a.meta.ndim != b.meta.ndim:
        return int(refs_a.num_rows + refs_b.num_rows)  # coords of different widths never match
    return count_changed_refs(refs_a, refs_b, a.meta.ndim)


def count_changed_refs(a: pa.Table, b: pa.Table, ndim: int) -> int:
    """Coords in exactly one of two ref tables, plus coords in both whose locations differ.

    Each table holds at most one ref per coord (``merge_refs`` output). Vectorised: no Python
    loop per chunk.
    """
    keys_a = coord_keys(a.column("coord"), ndim)
    keys_b = coord_keys(b.column("coord"), ndim)
    common, idx_a, idx_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    same = same_refs(a.take(pa.array(idx_a)), b.take(pa.array(idx_b)))
    return len(keys_a) + len(keys_b) - len(common) - int(same.sum())


def same_refs(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Per row, whether two ref tables of equal length point at the same bytes.

    A ref's identity is its inline bytes, chunk file, or virtual path, with offset, length and
    (virtual) checksum: a rewritten chunk always gets a new chunk file, so equal identity means
    the chunk was not written again.
    """
    same = np.ones(a.num_rows, dtype=bool)
    for name in _LOCATION_COLUMNS:
        x, y = a.column(name), b.column(name)
        equal = pc.or_(pc.fill_null(pc.equal(x, y), False), pc.and_(pc.is_null(x), pc.is_null(y)))
        same &= np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
    return same


def expire_snapshots(
    handle: RepoHandle,
    older_than: datetime,
    *,
    delete_expired_branches: bool = False,
    delete_expired_tags: bool = False,
) -> frozenset[str]:
    """Drop snapshots older than ``older_than`` from the state, keeping every branch and tag tip.

    Returns the ids of the snapshots no longer listed. Their files stay until
    ``garbage_collect``. See the module docstring for how history is re-linked.

    >>> cutoff = datetime.now(UTC) - timedelta(days=30)                # doctest: +SKIP
    >>> expired = expire_snapshots(repo.handle, cutoff)                # doctest: +SKIP

    Raises:
        InvalidInputError: ``older_than`` is not a datetime.
    """
    limit_ms = utc_ms(older_than, "older_than")
    expired: frozenset[str] = frozenset()

    def change(state: State) -> State | None:
        nonlocal expired
        proposed, expired = expire_state(
            state,
            limit_ms,
            delete_expired_branches=delete_expired_branches,
            delete_expired_tags=delete_expired_tags,
        )
        return proposed

    update_state(handle.storage, change)
    return expired


def expire_state(
    state: State,
    limit_ms: int,
    *,
    delete_expired_branches: bool = False,
    delete_expired_tags: bool = False,
) -> tuple[State | None, frozenset[str]]:
    """The next state with snapshots older than ``limit_ms`` expired, and the expired ids.

    Pure: the same state in gives the same result out. ``None`` when there is nothing to do.
    """

    def is_old(snapshot_id: str) -> bool:
        info = state.snapshots.get(snapshot_id)
        return info is None or info.timestamp_ms < limit_ms

    refs = {
        name: ref
        for name, ref in state.refs.items()
        if not (
            is_old(ref.snapshot_id)
            and (
                (ref.type == "branch" and delete_expired_branches and name != DEFAULT_BRANCH)
                or (ref.type == "tag" and delete_expired_tags)
            )
        )
    }
    tips = {ref.snapshot_id for ref in refs.values()}
    kept = {i for i, info in state.snapshots.items() if info.timestamp_ms >= limit_ms or i in tips}
    expired = frozenset(state.snapshots) - kept
    if not expired and len(refs) == len(state.refs):
        return None, expired
    nearest: dict[str, _Below] = {}
    snapshots = {
        i: _relinked(info, state, kept, nearest) for i, info in state.snapshots.items() if i in kept
    }
    return state.next(snapshots=snapshots, refs=refs), expired


@dataclass(frozen=True, slots=True)
class _Below:
    """What lies below an expired snapshot: its nearest kept ancestor, and the once-marks of
    the expired snapshots from it down to that ancestor (itself included)."""

    kept_ancestor: str | None
    once_marks: tuple[Mapping[str, Any], ...]


def _relinked(
    info: SnapshotInfo, state: State, kept: set[str], below: dict[str, _Below]
) -> SnapshotInfo:
    """``info`` with its parent replaced by its nearest kept ancestor, carrying the once-marks
    of the expired snapshots in between (``below`` memoises the walk per expired snapshot)."""
    if info.parent_id is None or info.parent_id in kept:
        return info
    skipped = _below(info.parent_id, state, kept, below)
    # The snapshots skipped over are gone from every listed transaction log: mark the link so
    # a rebase never crosses it believing it saw every change (see Session._rebase). Their
    # once-marks move here, so a replay of one of their commits is still refused.
    return replace(
        info,
        parent_id=skipped.kept_ancestor,
        parent_relinked=True,
        once_marks=union_marks(info.once_marks, skipped.once_marks),
    )


def _below(expired_id: str, state: State, kept: set[str], below: dict[str, _Below]) -> _Below:
    """The nearest kept ancestor of an expired snapshot and the marks on the way to it."""
    walked: list[SnapshotInfo] = []
    cursor: str | None = expired_id
    seen: set[str] = set()
    while cursor is not None and cursor not in kept and cursor not in below:
        if cursor in seen:
            cursor = None  # a (corrupt) cycle: treat as the start of history
            break
        seen.add(cursor)
        ancestor = state.snapshots.get(cursor)
        if ancestor is None:
            cursor = None
            break
        walked.append(ancestor)
        cursor = ancestor.parent_id
    done = below.get(cursor) if cursor is not None else None
    result = done if done is not None else _Below(cursor, ())
    for ancestor in reversed(walked):  # oldest first, so each entry builds on the one below
        result = _Below(result.kept_ancestor, union_marks(ancestor.once_marks, result.once_marks))
        below[ancestor.id] = result
    return result


def utc_ms(when: datetime, name: str) -> int:
    """Milliseconds since the epoch; a naive datetime is taken as UTC."""
    if not isinstance(when, datetime):
        raise InvalidInputError(f"{name} must be a datetime, not {type(when).__name__}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


__all__ = [
    "Diff",
    "count_changed_refs",
    "diff",
    "expire_snapshots",
    "expire_state",
    "same_refs",
    "utc_ms",
]

"""Rewriting a branch's history: an amend replaces the tip, a squash replaces a range of it.

Both replace a run of snapshots on one branch's first-parent line with one new snapshot whose
content is the newest one's (plus, for an amend, the session's changes) and whose parent is the
oldest one's parent. The replaced snapshots stop being listed, so what only they reached (data
deleted inside the range: icechunk#2121's compliance deletions) becomes garbage for GC.

What must hold, so that no guarantee breaks:

* **Nothing else holds the replaced snapshots.** No other branch or tag points at one, and no
  snapshot outside the run has one as its parent (another branch's history); otherwise that
  history would lose its snapshots. Refused (``RewriteRefusedError``) naming the ref.
* **Rebases and the change feed still see every change.** The new snapshot's transaction log
  is the replaced snapshots' logs merged, so a writer based below the run rebases over all of
  them; a writer based *inside* the run finds its base gone and gets ``ConflictError``, as
  after a reset. A run crossing a link expiry re-linked stays marked ``parent_relinked``.
* **Exactly-once survives.** The new snapshot answers for every once-mark of the replaced ones
  (as expiry carries them), so a replayed stream batch or job is still recognised.
* **The snapshot above the run keeps its content.** Its parent becomes the new snapshot, whose
  content equals the run's newest, so its own transaction log stays true.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RewriteRefusedError
from ..format.keys import txlog_key
from ..format.state import Ref, SnapshotInfo, State, union_marks
from ..format.txlog import ChangeKind, NodeChange, decode_txlog, encode_txlog
from ..storage import Storage
from .branches import walk


def run_below(state: State, branch: str, newest: str, oldest: str) -> list[str]:
    """The snapshots from ``newest`` down to ``oldest`` (both included) on ``branch``'s line,
    newest first.

    Raises:
        RewriteRefusedError: either is not on the branch's line, ``oldest`` is above
            ``newest``, or ``oldest`` is the repository's first snapshot (nothing to hang the
            replacement from).
    """
    line = [info.id for info in walk(state, state.branch(branch).snapshot_id)]
    if newest not in line or oldest not in line:
        missing = newest if newest not in line else oldest
        raise RewriteRefusedError(f"snapshot {missing} is not in the history of {branch!r}")
    top, bottom = line.index(newest), line.index(oldest)
    if bottom < top:
        raise RewriteRefusedError(f"snapshot {oldest} is newer than {newest} on {branch!r}")
    if state.snapshots[oldest].parent_id is None:
        raise RewriteRefusedError(
            f"snapshot {oldest} is the first of the repository: squash from its child"
        )
    return line[top : bottom + 1]


def check_unheld(state: State, branch: str, replaced: Collection[str]) -> None:
    """Refuse when a ref other than ``branch`` points into ``replaced``, or a snapshot outside
    it, other than the one just above the run on ``branch``, has a parent in it.

    Raises:
        RewriteRefusedError: naming the ref or the snapshot.
    """
    for ref in state.refs.values():
        if ref.snapshot_id in replaced and ref.name != branch:
            raise RewriteRefusedError(
                f"{ref.type} {ref.name!r} points at snapshot {ref.snapshot_id}, which would be "
                f"replaced: delete or move the {ref.type} first; nothing changed"
            )
    above = _child_on_line(state, branch, replaced)
    for info in state.snapshots.values():
        if info.parent_id in replaced and info.id not in replaced and info.id != above:
            raise RewriteRefusedError(
                f"snapshot {info.id} (another branch's history) has parent {info.parent_id}, "
                "which would be replaced; nothing changed"
            )


def _child_on_line(state: State, branch: str, replaced: Collection[str]) -> str | None:
    """The snapshot just above the replaced run on ``branch`` (``None``: the run is the tip)."""
    child = None
    for info in walk(state, state.branch(branch).snapshot_id):
        if info.id in replaced:
            break
        child = info.id
    return child


def replacement(state: State, replaced: Sequence[str], new: SnapshotInfo) -> SnapshotInfo:
    """``new`` hung where the run ``replaced`` (newest first) was: the oldest one's parent,
    carrying every once-mark of the run, and re-linked if any link in it was."""
    infos = [state.snapshots[i] for i in replaced]
    oldest = infos[-1]
    return replace(
        new,
        parent_id=oldest.parent_id,
        parent_relinked=any(i.parent_relinked for i in infos),
        once_marks=union_marks(new.once_marks, *(i.once_marks for i in infos)),
    )


def rewritten(state: State, branch: str, replaced: Sequence[str], new: SnapshotInfo) -> State:
    """The next state: the run ``replaced`` gone, ``new`` in its place on ``branch``."""
    check_unheld(state, branch, replaced)
    gone = set(replaced)
    above = _child_on_line(state, branch, gone)
    snapshots = {k: v for k, v in state.snapshots.items() if k not in gone}
    snapshots[new.id] = new
    refs = dict(state.refs)
    if above is None:
        refs[branch] = Ref(branch, new.id, "branch")
    else:
        snapshots[above] = replace(snapshots[above], parent_id=new.id)
    return state.next(snapshots=snapshots, refs=refs)


def merged_txlog(
    storage: Storage, snapshot_ids: Sequence[str], extra: bytes | None = None
) -> bytes:
    """One transaction log for the changes of ``snapshot_ids`` (oldest first) and then
    ``extra`` (an encoded log): node changes in order, each changed chunk once. A node created
    and deleted inside the run leaves no trace (no writer below the run could have seen it)."""
    logs = [decode_txlog(storage.get(txlog_key(i)), txlog_key(i)) for i in snapshot_ids]
    if extra is not None:
        logs.append(decode_txlog(extra, "the new transaction log"))
    nodes = [n for log in logs for n in log.nodes]
    created = {n.node_id for n in nodes if n.kind in (ChangeKind.NEW_ARRAY, ChangeKind.NEW_GROUP)}
    deleted = {n.node_id for n in nodes if n.kind == ChangeKind.DELETE_NODE}
    transient = created & deleted
    kept: list[NodeChange] = [n for n in nodes if n.node_id not in transient]
    chunks = pa.concat_tables([log.chunks for log in logs])
    if transient:
        ids = pa.array(sorted(transient), pa.uint64())
        chunks = chunks.filter(pc.invert(pc.is_in(chunks["node_id"], ids)))
    unique = chunks.group_by(["node_id", "coord"]).aggregate([]).select(["node_id", "coord"])
    return encode_txlog(kept, [unique])


def check_amendable(state: State, branch: str, base: str) -> list[str]:
    """The run an amend of ``base`` replaces (``[base]``), when it may.

    Raises:
        RewriteRefusedError: ``branch``'s tip is no longer ``base``, ``base`` is the first
            snapshot, or another ref holds it.
    """
    tip = state.branch(branch).snapshot_id
    if tip != base:
        raise RewriteRefusedError(
            f"the tip of {branch!r} moved ({base} -> {tip}) since this session began: an amend "
            "replaces only the snapshot its writer saw; commit instead, or amend from a new "
            "session; nothing changed"
        )
    replaced = run_below(state, branch, base, base)
    check_unheld(state, branch, replaced)
    return replaced


__all__ = [
    "check_amendable",
    "check_unheld",
    "merged_txlog",
    "replacement",
    "rewritten",
    "run_below",
]

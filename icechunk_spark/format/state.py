"""The state file: JSON listing every live snapshot, branch and tag of a repository.

One state file per generation lives at ``t/<generation>``; ``icechunk.json`` holds a copy of
the latest. Encoding is pure: values in, bytes out, and back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import FormatError, InvalidInputError, NotFoundError
from .ids import new_object_id
from .snapshot_memo import SnapshotMemo
from .state_text import StateText, split_state

FORMAT_VERSION = 1
RefType = Literal["branch", "tag"]
Availability = Literal["online", "read-only"]
AVAILABILITIES: tuple[Availability, ...] = ("online", "read-only")


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One committed snapshot: what it points to and why it was made."""

    id: str
    parent_id: str | None
    timestamp_ms: int
    structure_file: str
    message: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Set when expiry replaced this snapshot's parent with a farther ancestor: the changes of
    # the expired snapshots in between are not in any listed transaction log, so a rebase
    # must not cross this link (it could not see them).
    parent_relinked: bool = False
    # The once-marks this snapshot answers for: its own commit's (``Session.commit(once=)``)
    # and those expiry carried forward from the snapshots it removed below this one, so a
    # replayed commit is still recognised after its own snapshot was expired.
    once_marks: tuple[Mapping[str, Any], ...] = ()

    def answers_for(self, marks: Mapping[str, Any]) -> bool:
        """Whether this snapshot made (or, after expiry, holds) the commit named by ``marks``.

        The metadata counts too: snapshots written before ``once-marks`` existed kept their
        marks only there.
        """
        return any(
            all(known.get(k) == v for k, v in marks.items())
            for known in (self.metadata, *self.once_marks)
        )

    @property
    def written_at(self) -> Any:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(self.timestamp_ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class Ref:
    """A branch (moves with commits) or a tag (fixed) naming a snapshot."""

    name: str
    snapshot_id: str
    type: RefType


@dataclass(frozen=True, slots=True)
class GCFence:
    """The newest garbage collection: from which generation on it ran, and its cut-off.

    GC publishes this (a compare-and-swap like a commit) before deleting anything, and
    deletes only objects older than both ``cutoff_ms`` and the moment this generation was
    written. A commit whose objects may predate the fence refreshes them first.
    """

    generation: int
    cutoff_ms: int


@dataclass(frozen=True, slots=True)
class RepoStatus:
    """Whether writers may change the repository: ``online`` (the default) or ``read-only``,
    with the reason given and when it was set (ms since the epoch; 0: never set)."""

    availability: Availability = "online"
    reason: str = ""
    set_at_ms: int = 0

    @property
    def writable(self) -> bool:
        return self.availability == "online"

    @property
    def set_at(self) -> Any:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(self.set_at_ms / 1000, tz=UTC) if self.set_at_ms else None


ONLINE = RepoStatus()


@dataclass(frozen=True, slots=True)
class State:
    """The whole state of a repository at one generation."""

    id: str
    generation: int
    store_root: str
    snapshots: Mapping[str, SnapshotInfo]
    refs: Mapping[str, Ref]
    config: Mapping[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    gc_fence: GCFence | None = None
    # A random id per written state file, so a writer can recognise its own file after a
    # lost response (two writers never write the same bytes, even for the same change).
    change_id: str = ""
    status: RepoStatus = ONLINE
    # The change id of the state this one replaced: which state file ``t/<g>`` it was built
    # on, so a writer whose ``t/<g>`` GC overtook can tell whether ``t/<g+1>`` follows its own
    # (``core.refs``). Empty in a state written before it was recorded, and in generation 0.
    parent_change_id: str = ""

    def snapshot(self, snapshot_id: str) -> SnapshotInfo:
        try:
            return self.snapshots[snapshot_id]
        except KeyError:
            raise NotFoundError(
                f"snapshot {snapshot_id!r} not found; it may have been expired "
                "(list snapshots with repo.ancestry())"
            ) from None

    def branch(self, name: str) -> Ref:
        ref = self.refs.get(name)
        if ref is None or ref.type != "branch":
            raise NotFoundError(f"branch {name!r} not found; branches: {sorted(self.branches())}")
        return ref

    def tag(self, name: str) -> Ref:
        ref = self.refs.get(name)
        if ref is None or ref.type != "tag":
            raise NotFoundError(f"tag {name!r} not found; tags: {sorted(self.tags())}")
        return ref

    def resolve(
        self,
        branch: str | None = None,
        tag: str | None = None,
        snapshot_id: str | None = None,
        default_branch: str = "main",
    ) -> str:
        """The snapshot id named by at most one of branch, tag and snapshot id.

        None given means the tip of ``default_branch``. Raises ``NotFoundError`` for an
        unknown name and ``InvalidInputError`` when more than one is given.
        """
        if sum(x is not None for x in (branch, tag, snapshot_id)) > 1:
            raise InvalidInputError("give at most one of branch, tag and snapshot_id")
        if tag is not None:
            return self.tag(tag).snapshot_id
        if snapshot_id is not None:
            return self.snapshot(snapshot_id).id
        return self.branch(branch or default_branch).snapshot_id

    def branches(self) -> dict[str, str]:
        return {r.name: r.snapshot_id for r in self.refs.values() if r.type == "branch"}

    def tags(self) -> dict[str, str]:
        return {r.name: r.snapshot_id for r in self.refs.values() if r.type == "tag"}

    def next(self, **changes: Any) -> State:
        """The state of the next generation, with ``changes`` applied: a change id of its own,
        and this state's as its parent's."""
        return replace(
            self,
            generation=self.generation + 1,
            change_id=new_object_id(),
            parent_change_id=self.change_id,
            **changes,
        )


def union_marks(*groups: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The once-marks of every group, each once, in order (what a snapshot that replaces or
    re-links others must answer for)."""
    out: list[Mapping[str, Any]] = []
    for group in groups:
        out.extend(m for m in group if m not in out)
    return tuple(out)


def encode_state(state: State) -> bytes:
    head = {
        "id": state.id,
        "generation": state.generation,
        "format_version": state.format_version,
        "store_root": state.store_root,
    }
    doc = {
        "refs": {
            r.name: {"name": r.name, "snapshot-id": r.snapshot_id, "type": r.type}
            for r in state.refs.values()
        },
        "config": dict(state.config),
        "change-id": state.change_id,
    }
    if state.parent_change_id:
        doc["parent-change-id"] = state.parent_change_id
    if state.gc_fence is not None:
        doc["gc-fence"] = {
            "generation": state.gc_fence.generation,
            "cutoff-ms": state.gc_fence.cutoff_ms,
        }
    if state.status != ONLINE:
        doc["status"] = {
            "availability": state.status.availability,
            "reason": state.status.reason,
            "set-at-ms": state.status.set_at_ms,
        }
    # The snapshots' texts come from the memo; the rest is spliced around them, so the bytes
    # are those of one json.dumps of the whole document (keys in the same order).
    snapshots = _MEMO.encode_all(state.snapshots.values(), _snapshot_json)
    text = f'{_dumps(head)[:-1]},"snapshots":{snapshots},{_dumps(doc)[1:]}'
    return text.encode("utf-8")


def _dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=False)


def _snapshot_json(s: SnapshotInfo) -> str:
    return _dumps(_encode_snapshot(s))


def _encode_snapshot(s: SnapshotInfo) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "snapshot-id": s.id,
        "parent-snapshot-id": s.parent_id,
        "timestamp-ms": s.timestamp_ms,
        "structure-file": s.structure_file,
        "properties": {"message": s.message, "metadata": dict(s.metadata)},
    }
    if s.parent_relinked:
        doc["parent-relinked"] = True
    if s.once_marks:
        doc["once-marks"] = [dict(m) for m in s.once_marks]
    return doc


def decode_state(data: bytes, name: str) -> State:
    """Decode a state file; ``name`` (its key) goes into every error message.

    The last few decodings are kept by their bytes: every commit and session start reads the
    hint, which mostly holds the state read last time, and its JSON lists every snapshot
    (a tenth of a small commit's time after a few hundred commits). ``State`` is frozen and
    nothing changes its mappings in place, so sharing one is safe.
    """
    cached = _DECODED.get(data)
    if cached is not None:
        return cached
    state = _decode_state(data, name)
    with _DECODED_LOCK:  # sessions commit from many threads (Spark's driver, Dask)
        if len(_DECODED) >= _DECODED_MAX:
            del _DECODED[next(iter(_DECODED))]  # the oldest: dicts keep insertion order
        _DECODED[data] = state
    return state


# Few: a state lists every snapshot, so a long history makes each entry megabytes; the hits
# that matter are the same newest state read again (the hint, then ``t/<g>``, commit after
# commit).
_DECODED_MAX = 2
_DECODED: dict[bytes, State] = {}
_DECODED_LOCK = threading.Lock()
_MEMO: SnapshotMemo[SnapshotInfo] = SnapshotMemo()
# The last state text split in parts, and its snapshots (one assignment: threads see one).
_LAST_TEXT: tuple[StateText, dict[str, SnapshotInfo]] | None = None


def _decode_state(data: bytes, name: str) -> State:
    try:
        doc, snapshots = _document(data)
        version = int(doc.get("format_version", FORMAT_VERSION))
        if version > FORMAT_VERSION:
            raise FormatError(
                f"state file {name!r} has format version {version}; this icechunk-spark reads "
                f"up to {FORMAT_VERSION}: upgrade icechunk-spark"
            )
        refs = {
            key: Ref(name=r["name"], snapshot_id=r["snapshot-id"], type=_ref_type(r["type"]))
            for key, r in doc.get("refs", {}).items()
        }
        return State(
            id=str(doc["id"]),
            generation=int(doc["generation"]),
            store_root=str(doc["store_root"]),
            snapshots=snapshots,
            refs=refs,
            config=dict(doc.get("config") or {}),
            format_version=version,
            gc_fence=_decode_fence(doc.get("gc-fence")),
            change_id=str(doc.get("change-id", "")),
            status=_decode_status(doc.get("status")),
            parent_change_id=str(doc.get("parent-change-id", "")),
        )
    except FormatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"state file {name!r} is corrupt or truncated: {exc!r}") from exc


def _document(data: bytes) -> tuple[Mapping[str, Any], dict[str, SnapshotInfo]]:
    """The state's top-level fields and its snapshots. A state that lists the last one's
    snapshots and more (the next commit) has only the new entries parsed (``state_text``)."""
    global _LAST_TEXT
    last = _LAST_TEXT
    text = split_state(data, last[0] if last else None)
    if text is None:
        doc = json.loads(data)
        return doc, _MEMO.decode_all(doc["snapshots"], _decode_snapshot)
    if text.reused and last is not None:
        snapshots = dict(last[1])
        for entry in text.entries:
            snapshots[entry["snapshot-id"]] = _decode_snapshot(entry)
    else:
        snapshots = _MEMO.decode_all(text.entries, _decode_snapshot)
    # Reusable only where every entry is one snapshot: a repeated id keeps one of them.
    _LAST_TEXT = (text, snapshots) if len(snapshots) == text.count else None
    return text.fields, snapshots


def _decode_snapshot(s: Mapping[str, Any]) -> SnapshotInfo:
    props = s.get("properties") or {}
    return SnapshotInfo(
        id=str(s["snapshot-id"]),
        parent_id=s["parent-snapshot-id"],
        timestamp_ms=int(s["timestamp-ms"]),
        structure_file=str(s["structure-file"]),
        message=str(props.get("message", "")),
        metadata=dict(props.get("metadata") or {}),
        parent_relinked=bool(s.get("parent-relinked", False)),
        once_marks=tuple(dict(m) for m in s.get("once-marks") or ()),
    )


def _decode_fence(doc: Mapping[str, Any] | None) -> GCFence | None:
    if doc is None:
        return None
    return GCFence(generation=int(doc["generation"]), cutoff_ms=int(doc["cutoff-ms"]))


def _decode_status(doc: Mapping[str, Any] | None) -> RepoStatus:
    if doc is None:
        return ONLINE
    availability = doc["availability"]
    if availability not in AVAILABILITIES:
        # A status this version does not know may forbid writes it would make: not a guess.
        raise ValueError(f"unknown availability {availability!r}; upgrade icechunk-spark")
    return RepoStatus(availability, str(doc.get("reason", "")), int(doc.get("set-at-ms", 0)))


def _ref_type(value: str) -> RefType:
    if value == "branch":
        return "branch"
    if value == "tag":
        return "tag"
    raise ValueError(f"unknown ref type {value!r}")

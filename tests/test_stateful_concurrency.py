"""Hypothesis state machine: concurrent sessions, rebases and maintenance against a plain model.

Two session slots write chunks on branches ``main`` and ``dev`` and commit with
``on_conflict`` fail/ours/theirs, interleaved with branch resets, tags, ``expire_snapshots`` and
``garbage_collect`` at cut-offs from "a day ago" to "an hour ahead" (with sessions in flight, and
optionally a session opened and writing while GC is past its fence, before it lists). The model is
plain Python: per snapshot its parent, the chunks it reads, the chunks its commit touched, its
timestamp and whether expiry re-linked its parent. A commit's outcome is predicted from it the
way the spec says a rebase works: walk from the branch tip back to the session's base, collect
what those commits touched, refuse (``ConflictError``) on an overlap under ``fail``, when the
base is no longer listed, when the base is not an ancestor (a reset), or when the walk crosses a
link that expiry re-made (changes in between are unknown).

After every step: each branch and tag reads what the model says, the listed snapshots are the
model's, sessions read their base plus their changes, and (after GC, when objects can vanish)
every listed snapshot reads completely through a fresh handle.

GC with a cut-off later than a session's start may delete that session's chunk files; the commit
must then either land with every chunk readable (the commit copies them), or fail with
``StaleSessionError`` before publishing (issue 11, item 1). Both are accepted; a landed snapshot
missing a chunk is not. A session opened after GC published its fence is never fenced, whatever
the cut-off asked for: GC's cut-off in effect is never later than its fence, so that session's
chunk files are kept and its commit must land (or conflict as predicted) and read completely.

Every draw depends only on the model: snapshots are drawn by position among the listed ones.
It runs on memory, local files and S3 (moto); S3 with fewer examples (``S3_SETTINGS``), as each
step is slower there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from icechunk_spark import (
    AlreadyExistsError,
    ConflictError,
    InvalidInputError,
    Repository,
    StaleSessionError,
)
from tests.support.progress import AtStage

ARRAYS = ("/a", "/b")
CHUNKS = 4
BRANCHES = ("main", "dev")
TAGS = ("v1", "v2", "v3")
SLOTS = (0, 1)
CHUNK = st.integers(0, CHUNKS - 1)
INLINE_THRESHOLD = 16

Key = tuple[str, int]  # (array path, chunk index)
Content = dict[Key, bytes]


@dataclass
class Snap:
    """What the model knows of one snapshot."""

    id: str
    parent: str | None
    content: Content | None  # None: the repository's first snapshot, which has no arrays
    touched: frozenset[Key]  # chunks its commit changed (what a rebase over it must see)
    timestamp_ms: int
    relinked: bool = False


@dataclass
class Slot:
    """A writable session and what the model expects of it."""

    session: object
    branch: str
    base: str
    opened_ms: int  # a little before the session opened: no object of it is older
    changes: dict[Key, bytes | None] = field(default_factory=dict)
    fenced: bool = False  # a GC with a later cut-off ran: its own files may be gone


def _at_ms(ms: int) -> datetime:
    # Half a millisecond in, so the repository's float conversion back lands on ``ms``.
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms, microseconds=500)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ConcurrencyMachine(RuleBasedStateMachine):
    # Set by the test: () -> (url, storage options, cleanup)
    make_location: Callable[[], tuple[str, dict[str, str], Callable[[], None]]]

    def __init__(self) -> None:
        super().__init__()
        self.cleanup: Callable[[], None] = lambda: None

    @initialize()
    def start(self) -> None:
        self.url, self.options, self.cleanup = self.make_location()
        self.repo = Repository.create(
            self.url,
            storage_options=self.options,
            config={"inline_chunk_threshold_bytes": INLINE_THRESHOLD},
        )
        first = self.repo.lookup_branch("main")
        info = self.repo.lookup_snapshot(first)
        # Listed snapshots, in commit order; ``known`` keeps expired ones too (sessions' bases).
        self.snaps: dict[str, Snap] = {
            first: Snap(first, None, None, frozenset(), info.timestamp_ms)
        }
        self.known: dict[str, Snap] = dict(self.snaps)
        session = self.repo.writable_session("main")
        session.create_group("/")
        for path in ARRAYS:
            session.create_array(path, shape=(CHUNKS,), chunk_shape=(1,), dtype="uint8")
        arrays = session.commit("arrays")
        self._record(arrays, first, {}, frozenset())
        self.repo.create_branch("dev", arrays)
        self.branches = {"main": arrays, "dev": arrays}
        self.tags: dict[str, str] = {}
        self.counter = 0
        self.gc_ran = False
        self.slots = {n: self._open(BRANCHES[n % len(BRANCHES)]) for n in SLOTS}

    def teardown(self) -> None:
        self.cleanup()

    # -- model helpers --------------------------------------------------------------------
    def _record(
        self, snapshot: str, parent: str, content: Content, touched: frozenset[Key]
    ) -> None:
        ts = self.repo.lookup_snapshot(snapshot).timestamp_ms
        self.snaps[snapshot] = self.known[snapshot] = Snap(snapshot, parent, content, touched, ts)

    def _open(self, branch: str) -> Slot:
        opened = _now_ms() - 50 - self.repo.storage.mtime_resolution_ms
        session = self.repo.writable_session(branch)
        assert session.snapshot_id == self.branches[branch]
        return Slot(session, branch, self.branches[branch], opened)

    def _choosable(self) -> list[str]:
        """Listed snapshots with arrays, in commit order: what resets and tags may target."""
        return [s.id for s in self.snaps.values() if s.content is not None]

    def _refs(self) -> set[str]:
        return set(self.branches.values()) | set(self.tags.values())

    def _pending(self, slot: Slot) -> Content:
        content = dict(self.known[slot.base].content or {})
        for key, value in slot.changes.items():
            if value is None:
                content.pop(key, None)
            else:
                content[key] = value
        return content

    def _predict(self, slot: Slot, on_conflict: str) -> tuple[Content, frozenset[Key]] | None:
        """The commit's content and touched chunks, or None when it must raise ConflictError."""
        tip = self.branches[slot.branch]
        changes = dict(slot.changes)
        if tip != slot.base:
            if slot.base not in self.snaps:
                return None  # our base was expired
            theirs: set[Key] = set()
            cursor: str | None = tip
            while cursor != slot.base:
                if cursor is None or self.snaps[cursor].relinked:
                    return None  # not an ancestor (reset), or expiry hid changes in between
                theirs |= self.snaps[cursor].touched
                cursor = self.snaps[cursor].parent
            overlap = theirs & set(changes)
            if overlap and on_conflict == "fail":
                return None
            if on_conflict == "theirs":
                changes = {k: v for k, v in changes.items() if k not in overlap}
        content = dict(self.snaps[tip].content or {})
        for key, value in changes.items():
            if value is None:
                content.pop(key, None)
            else:
                content[key] = value
        return content, frozenset(changes)

    # -- sessions -------------------------------------------------------------------------
    @rule(slot=st.sampled_from(SLOTS), branch=st.sampled_from(BRANCHES))
    def open_session(self, slot: int, branch: str) -> None:
        self.slots[slot] = self._open(branch)

    @rule(
        slot=st.sampled_from(SLOTS),
        array=st.sampled_from(ARRAYS),
        index=CHUNK,
        native=st.booleans(),
    )
    def write_chunk(self, slot: int, array: str, index: int, native: bool) -> None:
        self._write(slot, array, index, native)

    def _write(self, slot: int, array: str, index: int, native: bool) -> None:
        self.counter += 1
        value = f"{slot}:{self.counter};".encode()
        if native:  # longer than the inline threshold: a chunk file GC could delete
            value *= INLINE_THRESHOLD
        s = self.slots[slot]
        s.session.set_chunk(array, (index,), value)  # type: ignore[attr-defined]
        s.changes[(array, index)] = value

    @rule(slot=st.sampled_from(SLOTS), array=st.sampled_from(ARRAYS), index=st.integers(0, 3))
    def delete_chunk(self, slot: int, array: str, index: int) -> None:
        s = self.slots[slot]
        s.session.delete_chunk(array, (index,))  # type: ignore[attr-defined]
        s.changes[(array, index)] = None

    @rule(slot=st.sampled_from(SLOTS), on_conflict=st.sampled_from(["fail", "ours", "theirs"]))
    def commit(self, slot: int, on_conflict: str) -> None:
        s = self.slots[slot]
        session = s.session
        if not s.changes:
            with pytest.raises(InvalidInputError):
                session.commit("nothing", on_conflict=on_conflict)  # type: ignore[attr-defined]
            return
        predicted = self._predict(s, on_conflict)
        parent = self.branches[s.branch]
        try:
            snapshot = session.commit(f"slot {slot}", on_conflict=on_conflict)  # type: ignore[attr-defined]
        except ConflictError:
            assert predicted is None or s.fenced, f"unexpected conflict ({on_conflict})"
            snapshot = None
        except StaleSessionError:
            # Only a session whose files GC may have deleted may fail so (and must, rather
            # than publish a snapshot that misses them).
            assert s.fenced, "StaleSessionError for a session no GC cut-off reached"
            snapshot = None
        if snapshot is None:
            assert self.repo.lookup_branch(s.branch) == parent, "a failed commit moved the branch"
        else:
            assert predicted is not None, (
                f"commit landed, the model expected a conflict ({on_conflict})"
            )
            content, touched = predicted
            self._record(snapshot, parent, content, touched)
            self.branches[s.branch] = snapshot
            self._assert_reads(self.repo, snapshot, content)
        self.slots[slot] = self._open(s.branch)

    # -- refs -----------------------------------------------------------------------------
    @rule(branch=st.sampled_from(BRANCHES), data=st.data())
    def reset_branch(self, branch: str, data: st.DataObject) -> None:
        choosable = self._choosable()
        target = choosable[data.draw(st.integers(0, len(choosable) - 1), label="snapshot number")]
        self.repo.reset_branch(branch, target)
        self.branches[branch] = target

    @rule(name=st.sampled_from(TAGS), data=st.data())
    def create_tag(self, name: str, data: st.DataObject) -> None:
        choosable = self._choosable()
        target = choosable[data.draw(st.integers(0, len(choosable) - 1), label="snapshot number")]
        if name in self.tags:
            with pytest.raises(AlreadyExistsError):
                self.repo.create_tag(name, target)
            return
        self.repo.create_tag(name, target)
        self.tags[name] = target

    # -- maintenance ----------------------------------------------------------------------
    @rule(data=st.data())
    def expire_snapshots(self, data: st.DataObject) -> None:
        order = list(self.snaps)
        position = data.draw(st.integers(0, len(order)), label="older than snapshot (or now)")
        limit_ms = self.snaps[order[position]].timestamp_ms if position < len(order) else _now_ms()
        refs = self._refs()
        doomed = {i for i, s in self.snaps.items() if s.timestamp_ms < limit_ms and i not in refs}
        expired = self.repo.expire_snapshots(_at_ms(limit_ms))
        assert set(expired) == doomed
        self._relink(doomed)

    def _relink(self, doomed: set[str]) -> None:
        for snap in self.snaps.values():
            if snap.id in doomed:
                continue
            parent = snap.parent
            while parent is not None and parent in doomed:
                parent = self.snaps[parent].parent
            if parent != snap.parent:
                snap.parent, snap.relinked = parent, True
        for snapshot in doomed:
            del self.snaps[snapshot]

    @rule(
        cutoff=st.sampled_from(["a day ago", "a snapshot's time", "now", "an hour ahead"]),
        during=st.none() | st.tuples(st.sampled_from(SLOTS), st.sampled_from(ARRAYS), CHUNK),
        data=st.data(),
    )
    def garbage_collect(
        self, cutoff: str, during: tuple[int, str, int] | None, data: st.DataObject
    ) -> None:
        """GC; with ``during``, that slot opens a new session and writes a chunk file while GC
        is past its fence and before it lists objects (the session sees the fence)."""
        if cutoff == "a day ago":
            cutoff_ms = _now_ms() - 86_400_000
        elif cutoff == "now":
            cutoff_ms = _now_ms()
        elif cutoff == "an hour ahead":
            cutoff_ms = _now_ms() + 3_600_000
        else:
            order = list(self.snaps)
            position = data.draw(st.integers(0, len(order) - 1), label="snapshot number")
            cutoff_ms = self.snaps[order[position]].timestamp_ms
        for s in self.slots.values():
            # Its own files may be older than the cut-off, or its base's files unreachable.
            s.fenced |= cutoff_ms > s.opened_ms or s.base not in self.snaps
        hook = None if during is None else AtStage("listing objects", self._opener(*during))
        self.repo.garbage_collect(_at_ms(cutoff_ms), progress=hook)
        self.gc_ran = True

    def _opener(self, slot: int, array: str, index: int) -> Callable[[], None]:
        def open_and_write() -> None:
            self.slots[slot] = self._open(self.slots[slot].branch)  # not fenced: after the fence
            self._write(slot, array, index, native=True)

        return open_and_write

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def refs_and_listing_match_the_model(self) -> None:
        if not hasattr(self, "repo"):
            return
        fresh = Repository.open(self.url, storage_options=self.options)
        assert fresh.list_branches() == self.branches
        assert fresh.list_tags() == self.tags
        assert set(fresh.state().snapshots) == set(self.snaps)
        for branch, snapshot in self.branches.items():
            self._assert_reads(fresh, snapshot, self.snaps[snapshot].content, branch=branch)
        for tag, snapshot in self.tags.items():
            self._assert_reads(fresh, snapshot, self.snaps[snapshot].content, tag=tag)
        if self.gc_ran:  # objects may have vanished: every listed snapshot must still read
            for snap in self.snaps.values():
                self._assert_reads(fresh, snap.id, snap.content)
            self.gc_ran = False

    @invariant()
    def sessions_read_base_plus_changes(self) -> None:
        if not hasattr(self, "repo"):
            return
        for s in self.slots.values():
            if s.fenced:
                continue  # GC may have taken its files; its commit is checked instead
            _assert_content(s.session, self._pending(s))

    def _assert_reads(
        self,
        repo: Repository,
        snapshot: str,
        content: Content | None,
        branch: str | None = None,
        tag: str | None = None,
    ) -> None:
        if branch is not None:
            reader = repo.readonly_session(branch=branch)
        elif tag is not None:
            reader = repo.readonly_session(tag=tag)
        else:
            reader = repo.readonly_session(snapshot_id=snapshot)
        assert reader.snapshot_id == snapshot
        if content is None:
            assert [n.path for n in reader.list_nodes()] == []
        else:
            _assert_content(reader, content)


def _assert_content(session: object, content: Content) -> None:
    for path in ARRAYS:
        coords = session.chunk_coords(path).ravel().tolist()  # type: ignore[attr-defined]
        assert set(coords) == {i for (p, i) in content if p == path}, path
        for index in coords:
            got = session.get_chunk(path, (index,))  # type: ignore[attr-defined]
            assert got == content[(path, index)], (path, index)


SETTINGS = settings(
    max_examples=int(os.environ.get("ICECHUNK_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# On S3 (moto, one request at a time, ~20 ms each) an example takes seconds: by default a few
# short ones, enough to run the same rules over whole-second listing times in every test run;
# raise ICECHUNK_STATEFUL_S3_EXAMPLES to explore more.
S3_SETTINGS = settings(
    SETTINGS,
    max_examples=int(os.environ.get("ICECHUNK_STATEFUL_S3_EXAMPLES", "4")),
    stateful_step_count=15,
)


def _memory() -> tuple[str, dict[str, str], Callable[[], None]]:
    return f"memory://{uuid.uuid4().hex}", {}, lambda: None


def _local() -> tuple[str, dict[str, str], Callable[[], None]]:
    root = Path(tempfile.mkdtemp(prefix="icechunk-machine-"))
    return (root / "repo").as_uri(), {}, lambda: shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("backend_name", ["memory", "local", "s3"])
def test_concurrency_and_maintenance_machine(backend_name: str, request: pytest.FixtureRequest):
    if backend_name == "memory":
        make = _memory
    elif backend_name == "local":
        make = _local
    else:
        from tests.conftest import new_s3_bucket, s3_options

        endpoint = request.getfixturevalue("s3_endpoint")

        def make() -> tuple[str, dict[str, str], Callable[[], None]]:
            url = f"s3://{new_s3_bucket(endpoint)}/{uuid.uuid4().hex}"
            return url, s3_options(endpoint), lambda: None

    machine = type(f"ConcurrencyMachine_{backend_name}", (ConcurrencyMachine,), {})
    machine.make_location = staticmethod(make)  # type: ignore[assignment]
    run_state_machine_as_test(machine, settings=S3_SETTINGS if backend_name == "s3" else SETTINGS)

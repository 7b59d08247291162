"""Amend and squash rewrite a branch's history (core/rewrite.py). What must never happen: a ref
left pointing at nothing, a concurrent writer's overlap missed because the log it rebases over
lost a change, a replayed ``once`` commit landing twice, a snapshot left unreadable by the GC that
follows, or a rewrite slipping past a commit, an expiry or a GC that ran between its steps."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from icechunk_spark import (
    AlreadyCommittedError,
    ConflictError,
    Repository,
    RewriteRefusedError,
)
from icechunk_spark.format.keys import chunk_key, txlog_key
from icechunk_spark.storage import open_storage
from tests.support.faults import FaultyStorage, run_held
from tests.support.helpers import cutoff_after_writes, make_array
from tests.trust.conftest import create

SECRET = np.full(4, 666, dtype="int32")  # 16 bytes: stored as a chunk file, not inline


def with_array(storage: Any) -> Repository:
    repo = create(storage, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session("main")
    make_array(session, "/a", shape=(16,), chunks=(4,))
    session.commit("array")
    return repo


@pytest.fixture
def repo(faulty) -> Repository:
    """On every backend: for the races, and the GC that must find what a rewrite freed."""
    return with_array(faulty)


@pytest.fixture
def mem() -> Repository:
    """In memory: for the rules, which no backend changes (the suite's time goes to races)."""
    return with_array(FaultyStorage(open_storage(f"memory://{uuid.uuid4().hex}")))


def write(repo: Repository, chunks: dict[int, int], message: str, **kw: Any) -> str:
    session = repo.writable_session("main")
    for i, value in chunks.items():
        session.set_chunk_values("/a", (i,), np.full(4, value, dtype="int32"))
    return session.commit(message, **kw)


def contents(repo: Repository, snapshot_id: str) -> dict[int, int]:
    """Every chunk of /a at a snapshot, read in full (a missing object raises)."""
    session = repo.readonly_session(snapshot_id=snapshot_id)
    out: dict[int, int] = {}
    if session.find_node("/a") is None:
        return out
    for i in range(4):
        data = session.get_chunk("/a", (i,))
        if data is not None:
            out[i] = int(np.frombuffer(data, dtype="int32")[0])
    return out


def every_listed_snapshot_reads(repo: Repository) -> None:
    for snapshot_id in repo.state().snapshots:
        contents(repo, snapshot_id)


def messages(repo: Repository, branch: str = "main") -> list[str]:
    return [s.message for s in repo.ancestry(branch=branch)]


# -- amend -----------------------------------------------------------------------------------
def test_amend_replaces_the_tip_with_it_and_the_changes(mem):
    repo = mem
    tip = write(repo, {0: 1}, "one")
    parent = repo.lookup_snapshot(tip).parent_id
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    amended = session.amend("one and two")
    assert repo.lookup_branch("main") == amended
    assert repo.lookup_snapshot(amended).parent_id == parent
    assert tip not in repo.state().snapshots
    assert messages(repo) == ["one and two", "array", "Repository initialized"]
    assert contents(repo, amended) == {0: 1, 1: 2}


def test_amend_refuses_a_tip_held_by_a_tag_or_branch_or_history(mem):
    repo = mem
    tip = write(repo, {0: 1}, "one")
    for hold, release in (
        (lambda: repo.create_tag("v1", tip), lambda: repo.delete_tag("v1")),
        (lambda: repo.create_branch("dev", tip), lambda: repo.delete_branch("dev")),
    ):
        hold()
        session = repo.writable_session("main")
        session.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
        with pytest.raises(RewriteRefusedError, match="points at snapshot"):
            session.amend("refused")
        assert repo.lookup_branch("main") == tip
        release()
    repo.create_branch("dev", tip)
    dev = repo.writable_session("dev")
    dev.set_chunk_values("/a", (3,), np.full(4, 3, dtype="int32"))
    dev.commit("on dev")  # dev no longer points at the tip, but its history holds it
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    with pytest.raises(RewriteRefusedError):
        session.amend("dev descends from the tip")
    assert repo.lookup_branch("main") == tip


def test_amend_refuses_the_first_snapshot():
    repo = create(FaultyStorage(open_storage(f"memory://{uuid.uuid4().hex}")))
    session = repo.writable_session("main")
    make_array(session, "/a", shape=(4,), chunks=(4,))
    with pytest.raises(RewriteRefusedError, match="first"):
        session.amend("nothing below")
    assert messages(repo) == ["Repository initialized"]


def test_amend_when_the_tip_moved_is_refused_not_rebased(repo, faulty):
    write(repo, {0: 1}, "one")
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    other = Repository.open(faulty.inner)
    landed: list[str] = []
    outcome = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: session.amend("amend"),
        lambda: landed.append(write(other, {2: 3}, "landed meanwhile")),
    )
    assert isinstance(outcome, RewriteRefusedError), outcome
    assert repo.lookup_branch("main") == landed[0]
    assert messages(repo) == ["landed meanwhile", "one", "array", "Repository initialized"]


def test_a_writer_below_the_amended_tip_still_meets_its_changes(mem):
    repo = mem
    below = repo.writable_session("main")  # based on the parent of what becomes the tip
    write(repo, {0: 1}, "one")
    amend = repo.writable_session("main")
    amend.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    amend.amend("one and two")
    below.set_chunk_values("/a", (0,), np.full(4, 9, dtype="int32"))  # the amended-away chunk
    with pytest.raises(ConflictError):
        below.commit("overlaps the old tip's change")
    disjoint = repo.writable_session("main")
    write(repo, {3: 4}, "three")
    disjoint.set_chunk_values("/a", (2,), np.full(4, 5, dtype="int32"))
    landed = disjoint.commit("rebased over the amended tip")
    assert contents(repo, landed) == {0: 1, 1: 2, 2: 5, 3: 4}


def test_a_writer_on_the_replaced_tip_gets_a_conflict(mem):
    repo = mem
    write(repo, {0: 1}, "one")
    stale = repo.writable_session("main")
    amend = repo.writable_session("main")
    amend.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    amended = amend.amend("one and two")
    stale.set_chunk_values("/a", (2,), np.full(4, 3, dtype="int32"))
    with pytest.raises(ConflictError):
        stale.commit("its base was amended away")
    assert repo.lookup_branch("main") == amended


def test_an_amended_once_commit_still_lands_once(mem):
    repo = mem
    write(repo, {0: 1}, "batch 7", once={"stream": "q", "batch": 7})
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (1,), np.full(4, 2, dtype="int32"))
    session.amend("batch 7, fixed")
    with pytest.raises(AlreadyCommittedError):
        write(repo, {0: 1}, "batch 7 replayed", once={"stream": "q", "batch": 7})


def test_expiry_between_the_amend_steps_hangs_it_where_expiry_left_the_tip(repo, faulty):
    write(repo, {0: 1}, "one")
    tip = write(repo, {1: 2}, "two")
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (2,), np.full(4, 3, dtype="int32"))
    other = Repository.open(faulty.inner)
    expired: set[str] = set()
    amended = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: session.amend("two, amended"),
        # Its state file takes the generation the amend wanted, re-linking the tip's parent.
        lambda: expired.update(other.expire_snapshots(datetime.now(UTC))),
    )
    assert isinstance(amended, str), amended
    state = repo.state()
    assert expired and tip not in expired and tip not in state.snapshots
    info = state.snapshots[amended]
    # Hung from the tip's parent as expiry left it, and marked as re-linked as the tip was.
    assert info.parent_relinked
    assert info.parent_id not in expired
    assert contents(repo, amended) == {0: 1, 1: 2, 2: 3}
    every_listed_snapshot_reads(repo)


def test_gc_between_the_amend_steps_cannot_take_what_it_publishes(repo, faulty, backend):
    write(repo, {0: 1}, "one")
    session = repo.writable_session("main")
    session.create_group("/g")  # no chunk file, which GC would take from the session first
    other = Repository.open(faulty.inner)
    amended = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: session.amend("one, amended"),
        # Its fence takes the generation the amend wanted; it deletes the amend's first build.
        lambda: other.garbage_collect(cutoff_after_writes(backend)),
    )
    assert isinstance(amended, str), amended
    assert repo.storage.exists(txlog_key(amended))
    other.garbage_collect(cutoff_after_writes(backend))
    every_listed_snapshot_reads(repo)
    assert contents(repo, amended) == {0: 1}
    assert repo.readonly_session(snapshot_id=amended).find_node("/g") is not None
    assert messages(repo) == ["one, amended", "array", "Repository initialized"]


# -- squash ----------------------------------------------------------------------------------
def leak(repo: Repository) -> tuple[Repository, list[str]]:
    """main: array, secret written (A), secret overwritten (B), more (C)."""
    a = write(repo, {0: 666, 1: 1}, "A: a secret", once={"job": "a"})
    b = write(repo, {0: 7}, "B: the secret overwritten")
    c = write(repo, {2: 3}, "C: more")
    return repo, [a, b, c]


@pytest.fixture
def leaked(repo) -> tuple[Repository, list[str]]:
    return leak(repo)


@pytest.fixture
def leaked_mem(mem) -> tuple[Repository, list[str]]:
    return leak(mem)


def secret_chunk_ids(repo: Repository, snapshot_id: str) -> set[str]:
    ref = repo.readonly_session(snapshot_id=snapshot_id).get_chunk_ref("/a", (0,))
    assert ref is not None and ref.chunk_id is not None
    return {ref.chunk_id}


def test_squash_then_gc_deletes_the_secret_and_every_snapshot_reads(leaked, backend):
    repo, (a, b, c) = leaked
    secret = secret_chunk_ids(repo, a)
    squashed = repo.squash("main", a, b, "A+B")
    assert messages(repo) == ["C: more", "A+B", "array", "Repository initialized"]
    assert repo.lookup_snapshot(c).parent_id == squashed
    assert contents(repo, squashed) == {0: 7, 1: 1}
    assert contents(repo, c) == {0: 7, 1: 1, 2: 3}
    assert a not in repo.state().snapshots and b not in repo.state().snapshots
    repo.garbage_collect(cutoff_after_writes(backend))
    for chunk_id in secret:
        assert not repo.storage.exists(chunk_key(chunk_id)), "the squashed-away chunk stays"
    every_listed_snapshot_reads(repo)
    assert repo.storage.exists(txlog_key(squashed))


def test_squash_carries_once_marks(leaked_mem):
    repo, (a, b, _) = leaked_mem
    repo.squash("main", a, b, "A+B")
    with pytest.raises(AlreadyCommittedError):
        write(repo, {3: 1}, "job a again", once={"job": "a"})


def test_a_writer_below_the_squashed_range_meets_its_changes(mem):
    repo = mem
    below = repo.writable_session("main")
    a = write(repo, {0: 1}, "A")
    b = write(repo, {1: 2}, "B")
    repo.squash("main", a, b, "A+B")
    below.set_chunk_values("/a", (0,), np.full(4, 9, dtype="int32"))
    with pytest.raises(ConflictError):
        below.commit("overlaps A")


@pytest.mark.parametrize("holder", ["tag", "branch", "history"])
def test_squash_refuses_a_range_another_ref_holds(leaked_mem, holder):
    repo, (a, b, _) = leaked_mem
    if holder == "tag":
        repo.create_tag("audit", a)
    elif holder == "branch":
        repo.create_branch("dev", b)
    else:
        repo.create_branch("dev", a)
        dev = repo.writable_session("dev")
        dev.set_chunk_values("/a", (3,), np.full(4, 1, dtype="int32"))
        dev.commit("dev's own")
    before = repo.state()
    with pytest.raises(RewriteRefusedError):
        repo.squash("main", a, b, "refused")
    assert repo.state().snapshots.keys() == before.snapshots.keys()
    assert messages(repo)[0] == "C: more"


def test_squash_refuses_ranges_that_are_not_the_branch(leaked_mem):
    repo, (a, b, c) = leaked_mem
    first = list(repo.ancestry())[-1].id
    with pytest.raises(RewriteRefusedError, match="newer"):
        repo.squash("main", b, a, "backwards")
    with pytest.raises(RewriteRefusedError, match="first"):
        repo.squash("main", first, a, "from the root")
    repo.create_branch("dev", a)
    with pytest.raises(RewriteRefusedError, match="not in the history"):
        repo.squash("dev", a, c, "c is not on dev")


def test_expiry_between_the_squash_steps_refuses_it(leaked, faulty):
    repo, (a, b, _) = leaked
    other = Repository.open(faulty.inner)
    expired: set[str] = set()
    outcome = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: repo.squash("main", a, b, "A+B"),
        lambda: expired.update(other.expire_snapshots(datetime.now(UTC))),
    )
    assert a in expired and b in expired
    assert isinstance(outcome, RewriteRefusedError), outcome
    assert messages(repo)[0] == "C: more"
    every_listed_snapshot_reads(repo)


def test_gc_between_the_squash_steps_cannot_take_its_log(leaked, faulty, backend):
    repo, (a, b, _) = leaked
    other = Repository.open(faulty.inner)
    squashed = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: repo.squash("main", a, b, "A+B"),
        # Its fence takes the generation the squash wanted.
        lambda: other.garbage_collect(cutoff_after_writes(backend)),
    )
    assert isinstance(squashed, str), squashed
    assert repo.storage.exists(txlog_key(squashed))
    assert repo.lookup_snapshot(squashed).message == "A+B"
    other.garbage_collect(cutoff_after_writes(backend))
    every_listed_snapshot_reads(repo)
    below = repo.writable_session("main")
    below.set_chunk_values("/a", (3,), np.full(4, 1, dtype="int32"))
    below.commit("after it all")

"""Garbage collection never deletes an object that a snapshot which later lands references.

GC records its cut-off in the state (the fence); a commit whose session predates it copies its
chunk files or stops before publishing. Every case here lost data before the fence existed.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from icechunk_spark import InvalidInputError, Repository, StaleSessionError
from icechunk_spark.core.config import RepositoryConfig
from icechunk_spark.ops.gc import garbage_collect
from tests.support.faults import Rule
from tests.support.progress import AtStage
from tests.trust.conftest import create

BIG = b"x" * 64  # over the inline threshold below: a chunk file in c/


def _now_plus(seconds: float = 2.0) -> datetime:
    # A cut-off a little after now: every object written so far is older, on every backend.
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _let_time_pass(faulty) -> None:
    """Let the storage clock move past what was written so far.

    GC keeps an object written in the same clock tick as its fence (S3 lists whole seconds),
    which is right, so a test that wants an object collected must outlive that tick.
    """
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)


@pytest.fixture
def repo(faulty) -> Repository:
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 8})
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), BIG)
    session.commit("base")
    return repo


def _read_all(repo: Repository) -> dict[int, bytes | None]:
    reader = repo.readonly_session()
    return {i: reader.get_chunk("/a", (i,)) for i in range(4)}


def test_session_whose_chunk_gc_deleted_fails_before_publishing(repo, faulty):
    session = repo.writable_session()
    session.set_chunk("/a", (1,), BIG)  # an unreferenced chunk file: GC deletes it
    _let_time_pass(faulty)
    summary = repo.garbage_collect(_now_plus())
    assert summary.chunks_deleted == 1
    tip = repo.lookup_branch("main")
    with pytest.raises(StaleSessionError, match="deleted chunk file"):
        session.commit("would reference a deleted chunk")
    assert repo.lookup_branch("main") == tip
    assert _read_all(repo) == {0: BIG, 1: None, 2: None, 3: None}


def test_commit_landing_while_gc_deletes_keeps_its_chunks(repo, faulty):
    session = repo.writable_session()
    session.set_chunk("/a", (1,), BIG)
    session.set_chunk("/a", (2,), BIG)
    _let_time_pass(faulty)
    # GC stops right before deleting: it has listed, and read the state a second time.
    reached, release = faulty.hold("delete", "c/")
    done: list[object] = []
    gc = threading.Thread(target=lambda: done.append(repo.garbage_collect(_now_plus())))
    gc.start()
    assert reached.wait(60)
    snapshot = session.commit("lands while GC is deleting")
    release.set()
    gc.join(60)
    assert done, "garbage collection failed"
    assert repo.lookup_branch("main") == snapshot
    assert _read_all(repo) == {0: BIG, 1: BIG, 2: BIG, 3: None}


def test_chunks_written_after_the_fence_survive_a_future_cutoff(repo):
    # GC asked for a cut-off an hour ahead. A session opens after its fence and writes a chunk
    # before GC lists c/; the session saw the fence, so its commit will not copy the chunk.
    # Only the cut-off in effect (never later than the fence) keeps that chunk.
    sessions = []

    def open_a_session_and_write() -> None:
        state = repo.state()
        assert state.gc_fence is not None and state.gc_fence.generation == state.generation
        session = repo.writable_session()
        session.set_chunk("/a", (1,), BIG)
        sessions.append(session)

    # GC stops right after publishing its fence, before it lists c/.
    hook = AtStage("listing objects", open_a_session_and_write)
    summary = repo.garbage_collect(_now_plus(3600), progress=hook)
    assert hook.ran
    sessions[0].commit("written after the fence, before GC listed c/")
    assert _read_all(repo) == {0: BIG, 1: BIG, 2: None, 3: None}
    assert summary.chunks_deleted == 0


def test_session_started_after_the_fence_commits_without_copying(repo, faulty):
    repo.garbage_collect(_now_plus(-60))  # a fence with a cut-off long before this session
    session = repo.writable_session()
    session.set_chunk("/a", (1,), BIG)
    chunk_id = session.get_chunk_ref("/a", (1,)).chunk_id
    session.commit("after GC")
    assert repo.readonly_session().get_chunk_ref("/a", (1,)).chunk_id == chunk_id


def test_session_older_than_a_fence_with_an_old_cutoff_does_not_copy(repo):
    session = repo.writable_session()
    session.set_chunk("/a", (1,), BIG)
    chunk_id = session.get_chunk_ref("/a", (1,)).chunk_id
    repo.garbage_collect(datetime.now(UTC) - timedelta(days=7))
    session.commit("the cut-off predates the session")
    assert repo.readonly_session().get_chunk_ref("/a", (1,)).chunk_id == chunk_id


def test_dry_run_writes_nothing(repo):
    before = repo.state()
    repo.garbage_collect(_now_plus(), dry_run=True)
    assert repo.state().generation == before.generation
    assert RepositoryConfig.from_dict(repo.state().config) == RepositoryConfig.from_dict(
        before.config
    )


def test_as_if_is_for_dry_runs_only(repo):
    # A real run with a state change it would not make: refused, before anything is written.
    before = repo.state().generation
    with pytest.raises(InvalidInputError, match="dry runs"):
        garbage_collect(repo.handle, _now_plus(), as_if=lambda state: state)
    assert repo.state().generation == before


def test_gc_sweeps_abandoned_staging_areas(repo, faulty):
    faulty.inner.put("staging/W1/part-0.parquet", b"abandoned")
    faulty.inner.put("staging/W1/journal/0", b"c1\n")
    _let_time_pass(faulty)
    dry = repo.garbage_collect(_now_plus(), dry_run=True)
    assert dry.staging_files_deleted == 2
    assert [i.key for i in faulty.inner.list("staging/")]  # a dry run deletes nothing
    summary = repo.garbage_collect(_now_plus())
    assert summary.staging_files_deleted == 2
    assert not list(faulty.inner.list("staging/"))


def test_gc_keeps_a_young_staging_area(repo, faulty):
    faulty.inner.put("staging/W2/part-0.parquet", b"a write in progress")
    assert repo.garbage_collect(datetime.now(UTC) - timedelta(hours=1)).staging_files_deleted == 0
    assert [i.key for i in faulty.inner.list("staging/")] == ["staging/W2/part-0.parquet"]


def test_gc_sweeps_old_local_temporary_files(tmp_path):
    repo = Repository.create(tmp_path.as_uri())
    leftover = Path(tmp_path, "c", ".tmp-interrupted")
    leftover.parent.mkdir(exist_ok=True)
    leftover.write_bytes(b"half a chunk")
    young = Path(tmp_path, ".tmp-in-progress")
    young.write_bytes(b"being written")
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    cutoff = datetime.now(UTC) - timedelta(minutes=30)
    assert repo.garbage_collect(cutoff, dry_run=True).temporary_files_deleted == 1
    assert leftover.exists()
    assert repo.garbage_collect(cutoff).temporary_files_deleted == 1
    assert not leftover.exists()
    assert young.exists()


def test_a_second_collection_during_the_commit_cannot_take_a_chunk_the_first_spared(repo, faulty):
    """A collection whose cut-off predates a session spares its chunk files, and the commit
    need not copy them; but that must not make the session look younger than it is. Here a
    second collection, with a cut-off between the session's chunk write and the first fence,
    runs while the commit rebuilds: the chunk file is gone, and the commit must stop, not
    publish a snapshot that references it. (The soak in test_soak.py found this: the commit
    took the first fence's state file as its objects' age, and skipped the copy again.)"""
    session = repo.writable_session()
    session.set_chunk("/a", (1,), BIG)  # a chunk file, older than the second cut-off
    _let_time_pass(faulty)
    second_cutoff = datetime.now(UTC)
    _let_time_pass(faulty)
    repo.garbage_collect(datetime.now(UTC) - timedelta(hours=1))  # spares everything
    seen = [0]

    def collect_on_the_second_state_read(call):
        seen[0] += 1
        if seen[0] == 2:  # the commit has skipped the copy for the first fence and rebuilt
            Repository.open(faulty.inner).garbage_collect(second_cutoff)
        return call()

    tip = repo.lookup_branch("main")
    # Each state read probes t/<g+1> once here (nothing lands meanwhile); from its newest
    # known state a commit reads no hint.
    faulty._add(Rule("get", "t/", collect_on_the_second_state_read, times=2))
    with pytest.raises(StaleSessionError, match="deleted chunk file"):
        session.commit("would reference a chunk the second collection deleted")
    assert seen[0] == 2
    assert repo.lookup_branch("main") == tip
    assert _read_all(repo) == {0: BIG, 1: None, 2: None, 3: None}

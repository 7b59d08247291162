"""Forks and merges, attacked: a merge is part of a commit and must be as truthful as one.

A fork carries writes from another thread or process back to its session; ``merge`` brings
them in, and the session's commit publishes them with the usual protocol (conflicts, rebase,
the GC fence). Each test here is a way to lose or double a write if merging were naive.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from icechunk_spark import (
    ConflictError,
    ForkConflictError,
    ForkError,
    ForkSession,
    InvalidInputError,
    Repository,
)
from tests.support import fork_workers
from tests.support.helpers import create_repo, cutoff_after_writes

BIG = 64  # bytes: over the inline threshold below, so a chunk file in c/
CONFIG = {"inline_chunk_threshold_bytes": 8}


def chunk(tag: str) -> bytes:
    """A recognisable chunk file's bytes."""
    return tag.encode().ljust(BIG, b".")


def _repo(backend) -> Repository:
    repo = create_repo(backend, config=CONFIG)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/b", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), chunk("base-0"))
    session.commit("base")
    return repo


def _pool(size: int = 2) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))


def _read(repo: Repository, path: str = "/a") -> dict[int, bytes]:
    reader = repo.readonly_session()
    found = {i: reader.get_chunk(path, (i,)) for i in range(8)}
    return {i: v for i, v in found.items() if v is not None}


# -- the fork's identity: merged once, into its own session ------------------------------
def test_a_fork_merged_twice_is_refused(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (1,), chunk("fork"))
    session.merge(fork)
    with pytest.raises(ForkError, match="merged already"):
        session.merge(fork)
    # A copy of it carries the same writes: merging the copy would apply them twice.
    with pytest.raises(ForkError, match="merged already"):
        session.merge(pickle.loads(pickle.dumps(fork)))
    with pytest.raises(ForkError, match="merged already"):
        session.merge(*[session.fork(), fork][::-1])
    session.commit("one merge")
    assert _read(repo) == {0: chunk("base-0"), 1: chunk("fork")}


def test_the_same_fork_twice_in_one_merge_is_refused(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (1,), chunk("fork"))
    with pytest.raises(ForkError, match="more than once"):
        session.merge(fork, fork)
    assert not session.has_uncommitted_changes()


def test_a_fork_of_another_session_is_refused(backend):
    repo = _repo(backend)
    mine, other = repo.writable_session(), repo.writable_session()
    stranger = other.fork()
    stranger.set_chunk("/a", (1,), chunk("stranger"))
    with pytest.raises(ForkError, match="another session"):
        mine.merge(stranger)
    assert not mine.has_uncommitted_changes()
    other.merge(stranger)  # its own session takes it
    assert other.status().chunks == {"/a": 1}


def test_forks_of_a_discarded_change_set_are_refused(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (1,), chunk("old"))
    session.discard_changes()
    with pytest.raises(ForkError, match=r"another session|discarded"):
        session.merge(fork)


def test_a_fork_does_not_commit_and_does_not_change_nodes(backend):
    repo = _repo(backend)
    fork = repo.writable_session().fork()
    with pytest.raises(ForkError, match="merge"):
        fork.commit("from a fork")
    with pytest.raises(ForkError, match="parent session"):
        fork.create_array("/c", shape=(1,), chunk_shape=(1,), dtype="uint8")
    with pytest.raises(ForkError, match="parent session"):
        fork.create_group("/g")
    with pytest.raises(ForkError, match="parent session"):
        fork.delete_node("/a")
    with pytest.raises(ForkError, match="fork"):
        fork.fork()


def test_a_read_only_session_does_not_fork_or_merge(backend):
    repo = _repo(backend)
    with pytest.raises(Exception, match="read-only"):
        repo.readonly_session().fork()
    fork = repo.writable_session().fork()
    with pytest.raises(Exception, match="read-only"):
        repo.readonly_session().merge(fork)


# -- the same chunk written twice ---------------------------------------------------------
def test_two_forks_writing_the_same_chunk_is_an_error_naming_the_chunk(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    first, second, third = session.fork(), session.fork(), session.fork()
    first.set_chunk("/a", (3,), chunk("first"))
    second.set_chunk("/a", (3,), chunk("second"))
    second.set_chunk("/b", (0,), chunk("second-b"))
    third.set_chunk("/a", (4,), chunk("third"))
    with pytest.raises(ForkConflictError, match=r"'/a'.*\(3,\)") as caught:
        session.merge(first, second, third)
    assert caught.value.chunks == (("/a", (3,)),)
    # Nothing of a refused merge is applied, not even the forks that did not overlap.
    assert not session.has_uncommitted_changes()
    session.merge(first, third)
    # Merged one call later, the overlap is still found (the first fork's write is ours now).
    with pytest.raises(ForkConflictError, match=r"\(3,\)"):
        session.merge(second)
    session.commit("first and third")
    assert _read(repo) == {0: chunk("base-0"), 3: chunk("first"), 4: chunk("third")}
    assert _read(repo, "/b") == {}


def test_a_chunk_deleted_by_one_fork_and_written_by_another_overlaps(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    deleter, writer = session.fork(), session.fork()
    deleter.delete_chunk("/a", (0,))
    writer.set_chunk("/a", (0,), chunk("writer"))
    with pytest.raises(ForkConflictError, match=r"\(0,\)"):
        session.merge(deleter, writer)


def test_a_chunk_the_session_wrote_after_forking_overlaps(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), chunk("before the fork"))
    fork = session.fork()
    assert fork.get_chunk("/a", (1,)) == chunk("before the fork")  # the fork reads it
    fork.set_chunk("/a", (1,), chunk("fork"))
    fork.set_chunk("/a", (2,), chunk("fork-2"))
    session.set_chunk("/a", (2,), chunk("session after the fork"))
    with pytest.raises(ForkConflictError, match=r"\(2,\)"):
        session.merge(fork)
    # Overwriting what the session wrote *before* forking is fine: the fork saw it.
    clean = session.fork()
    clean.set_chunk("/a", (1,), chunk("clean"))
    session.merge(clean)
    session.commit("session and clean fork")
    assert _read(repo) == {
        0: chunk("base-0"),
        1: chunk("clean"),
        2: chunk("session after the fork"),
    }


def test_a_fork_writing_to_an_array_deleted_or_reshaped_after_forking_is_refused(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (5,), chunk("fork"))
    session.delete_node("/a")
    with pytest.raises(ForkError, match=r"'/a'.*deleted"):
        session.merge(fork)

    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/b", (5,), chunk("fork"))
    session.delete_node("/b")
    session.create_array("/b", shape=(8,), chunk_shape=(2,), dtype="uint8")
    with pytest.raises(ForkError, match="'/b'"):
        session.merge(fork)


# -- a merge is part of a commit: conflicts and rebase as for any other --------------------
def test_merged_chunks_conflict_with_a_concurrent_commit_of_the_same_chunk(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (6,), chunk("fork"))
    other = repo.writable_session()
    other.set_chunk("/a", (6,), chunk("other"))
    other.commit("lands first")
    session.merge(fork)
    with pytest.raises(ConflictError, match=r"'/a'.*\(6,\)"):
        session.commit("merged fork")
    assert _read(repo)[6] == chunk("other")


def test_merged_chunks_rebase_over_a_concurrent_commit_elsewhere(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (6,), chunk("fork"))
    other = repo.writable_session()
    other.set_chunk("/a", (7,), chunk("other"))
    other.commit("lands first")
    session.merge(fork)
    session.commit("merged fork, rebased")
    assert _read(repo) == {0: chunk("base-0"), 6: chunk("fork"), 7: chunk("other")}
    assert len(list(repo.ancestry(branch="main"))) == 4


def test_a_committed_merge_is_seen_by_later_conflict_checks(backend):
    repo = _repo(backend)
    late = repo.writable_session()  # opened before the merge lands
    late.set_chunk("/a", (5,), chunk("late"))
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (5,), chunk("fork"))
    session.merge(fork)
    session.commit("merged")
    with pytest.raises(ConflictError, match=r"\(5,\)"):
        late.commit("too late")


def test_a_merge_racing_a_concurrent_commit_lands_exactly_one(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    forks = [session.fork() for _ in range(4)]
    for i, fork in enumerate(forks):
        fork.set_chunk("/a", (i + 1,), chunk(f"fork-{i}"))
    other = repo.writable_session()
    other.set_chunk("/a", (2,), chunk("other"))  # overlaps fork 1
    barrier = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def merge_and_commit() -> None:
        session.merge(*forks)
        barrier.wait()
        try:
            outcome["merged"] = session.commit("merged forks")
        except ConflictError as exc:
            outcome["merged"] = exc

    def commit_other() -> None:
        barrier.wait()
        try:
            outcome["other"] = other.commit("other")
        except ConflictError as exc:
            outcome["other"] = exc

    threads = [threading.Thread(target=merge_and_commit), threading.Thread(target=commit_other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [k for k, v in outcome.items() if isinstance(v, str)]
    lost = [k for k, v in outcome.items() if isinstance(v, ConflictError)]
    assert len(won) == 1 and len(lost) == 1, outcome
    assert "(2,)" in str(outcome[lost[0]])
    data = _read(repo)
    if won == ["merged"]:
        assert data == {0: chunk("base-0"), **{i + 1: chunk(f"fork-{i}") for i in range(4)}}
    else:
        assert data == {0: chunk("base-0"), 2: chunk("other")}


# -- other processes ----------------------------------------------------------------------
@pytest.mark.parametrize("process_backend", ["local", "s3"], indirect=True)
def test_forks_write_native_inline_and_virtual_chunks_from_other_processes(
    process_backend, tmp_path
):
    data_dir = tmp_path / "virtual"
    data_dir.mkdir()
    (data_dir / "v.bin").write_bytes(bytes(range(1, 9)))
    container = data_dir.as_uri() + "/"
    repo = Repository.create(
        process_backend.url,
        storage_options=process_backend.options,
        config={**CONFIG, "virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/v", shape=(16,), chunk_shape=(8,), dtype="uint8")
    session.commit("arrays")

    session = repo.writable_session()
    with _pool() as pool:
        futures = [
            pool.submit(fork_workers.write_chunks, session.fork(), "/a", {(0,): chunk("native")}),
            pool.submit(fork_workers.write_chunks, session.fork(), "/a", {(1,): b"inl"}),
            pool.submit(
                fork_workers.write_values,
                session.fork(),
                "/v",
                (1,),
                np.arange(8, dtype="uint8"),
            ),
            pool.submit(
                fork_workers.write_virtual, session.fork(), "/v", (0,), container + "v.bin", 8
            ),
        ]
        forks = [f.result() for f in futures]
    session.merge(*forks)
    session.commit("from four processes")

    reader = repo.readonly_session()
    assert reader.get_chunk("/a", (0,)) == chunk("native")
    assert reader.get_chunk("/a", (1,)) == b"inl"
    assert reader.get_chunk_ref("/a", (1,)).kind == "inline"
    assert reader.get_chunk("/v", (0,)) == bytes(range(1, 9))
    assert reader.get_chunk_ref("/v", (0,)).kind == "virtual"
    assert reader.get_chunk("/v", (1,)) == np.arange(8, dtype="uint8").tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("process_backend", ["local", "s3"], indirect=True)
def test_a_fork_whose_process_dies_mid_write_loses_only_its_own_writes(process_backend):
    repo = _repo(process_backend)
    session = repo.writable_session()
    doomed_writes = {(5,): chunk("doomed-5"), (6,): chunk("doomed-6")}
    with _pool(1) as pool:
        survivor = pool.submit(
            fork_workers.write_chunks, session.fork(), "/a", {(1,): chunk("survivor")}
        ).result()
    with _pool(1) as pool:
        doomed = pool.submit(fork_workers.write_then_die, session.fork(), "/a", doomed_writes)
        with pytest.raises(BrokenProcessPool):
            doomed.result()
    session.merge(survivor)
    session.commit("the survivor only")
    assert _read(repo) == {0: chunk("base-0"), 1: chunk("survivor")}

    # The dead fork's chunk file is garbage: GC deletes it once older than the cut-off.
    summary = repo.garbage_collect(cutoff_after_writes(process_backend))
    assert summary.chunks_deleted == 1
    assert _read(repo) == {0: chunk("base-0"), 1: chunk("survivor")}


def test_a_memory_repository_refuses_forks_in_other_processes_saying_why():
    repo = Repository.create("memory://fork-refused", config=CONFIG)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    with _pool(1) as pool:
        future = pool.submit(fork_workers.write_chunks, session.fork(), "/a", {(0,): b"x"})
        with pytest.raises(ForkError, match=r"memory://fork-refused.*process") as caught:
            future.result()
    assert "file://" in str(caught.value)


def test_memory_repository_forks_work_across_threads():
    repo = Repository.create("memory://fork-threads", config=CONFIG)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    forks = [session.fork() for _ in range(8)]
    threads = [
        threading.Thread(target=fork_workers.write_chunks, args=(f, "/a", {(i,): chunk(str(i))}))
        for i, f in enumerate(forks)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    session.merge(*forks)
    session.commit("eight threads")
    assert _read(repo) == {i: chunk(str(i)) for i in range(8)}


# -- pickling a writable store makes a fork -------------------------------------------------
@pytest.mark.parametrize("process_backend", ["local"], indirect=True)
def test_a_pickled_writable_store_whose_writes_come_back_merges(process_backend):
    repo = _repo(process_backend)
    session = repo.writable_session()
    with _pool(1) as pool:
        store = pool.submit(
            fork_workers.write_through_store_and_return, session.store, "a/c/2", chunk("store")
        ).result()
    session.merge(store.session)
    session.commit("through a pickled store")
    assert _read(repo)[2] == chunk("store")


@pytest.mark.parametrize("process_backend", ["local", "s3"], indirect=True)
def test_writes_through_a_pickled_store_that_never_come_back_stop_the_commit(process_backend):
    repo = _repo(process_backend)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), chunk("session"))
    with _pool(1) as pool:
        pool.submit(
            fork_workers.write_through_store, session.store, "a/c/2", chunk("lost")
        ).result()
    tip = repo.lookup_branch("main")
    with pytest.raises(ForkError, match="never merged") as caught:
        session.commit("would silently drop the worker's write")
    assert "to_repository" in str(caught.value)
    assert repo.lookup_branch("main") == tip
    # The marker is garbage once older than GC's cut-off, like any abandoned staging area.
    summary = repo.garbage_collect(cutoff_after_writes(process_backend))
    assert summary.staging_files_deleted == 1
    assert summary.chunks_deleted == 2  # the lost write's chunk file and the session's own


def test_a_pickled_writable_store_that_only_reads_does_not_stop_the_commit(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), chunk("session"))
    copy = pickle.loads(pickle.dumps(session.store))
    assert copy.session.get_chunk("/a", (1,)) == chunk("session")  # it sees our changes
    session.commit("the copy only read")
    assert _read(repo)[1] == chunk("session")


# -- GC and forks -------------------------------------------------------------------------
def test_a_never_merged_fork_leaves_only_garbage(backend):
    repo = _repo(backend)
    session = repo.writable_session()
    fork = session.fork()
    fork.set_chunk("/a", (3,), chunk("never merged"))
    session.set_chunk("/a", (4,), chunk("session"))
    session.commit("without the fork")
    assert _read(repo) == {0: chunk("base-0"), 4: chunk("session")}
    assert repo.garbage_collect(datetime.now(UTC) - timedelta(days=1)).chunks_deleted == 0
    assert repo.garbage_collect(cutoff_after_writes(backend)).chunks_deleted == 1


def test_merge_refuses_non_forks():
    repo = Repository.create("memory://fork-non-fork")
    session = repo.writable_session()
    with pytest.raises(InvalidInputError, match="fork"):
        session.merge(repo.writable_session())  # type: ignore[arg-type]


def test_sessions_pickle_read_only_as_their_snapshot_and_writable_as_a_fork(backend):
    repo = _repo(backend)
    reader = repo.readonly_session()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.read_only and copy.snapshot_id == reader.snapshot_id
    assert copy.get_chunk("/a", (0,)) == chunk("base-0")
    writer = repo.writable_session()
    writer.set_chunk("/a", (2,), chunk("uncommitted"))
    fork = pickle.loads(pickle.dumps(writer))
    assert isinstance(fork, ForkSession)
    assert fork.get_chunk("/a", (2,)) == chunk("uncommitted")
    fork.set_chunk("/a", (3,), chunk("through the pickled session"))
    writer.merge(fork)
    writer.commit("both")
    assert _read(repo) == {
        0: chunk("base-0"),
        2: chunk("uncommitted"),
        3: chunk("through the pickled session"),
    }

"""A commit's state file, prepared while its build is written (``core/prepared.py``), never
publishes over another writer, survives expiry and GC between preparing and publishing, and
never outlives the commit as a temporary file."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from icechunk_spark import Repository, StorageError
from tests.support.faults import FaultyStorage, run_held
from tests.support.helpers import cutoff_after_writes, hints_written
from tests.test_history import read_all
from tests.trust.conftest import create


@pytest.fixture
def repo(faulty: FaultyStorage) -> Repository:
    # Chunks inline: the writes below leave no chunk file for GC to take from a session.
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 64})
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    return repo


def _write(repo: Repository, coord: int, value: bytes) -> str:
    session = repo.writable_session()
    session.set_chunk("/a", (coord,), value)
    return session.commit(f"write {coord}")


def _commit_held_at_publish(
    faulty: FaultyStorage, repo: Repository, meanwhile: Callable[[], None]
) -> str:
    """Commit a write of chunk 0 that stops when its state file is prepared and it is about
    to create it; run ``meanwhile``; let it go on. Returns the snapshot it committed."""
    session = repo.writable_session()
    session.set_chunk("/a", (0,), b"mine")
    outcome = run_held(faulty, "put_if_absent", "t/", lambda: session.commit("mine"), meanwhile)
    assert isinstance(outcome, str), outcome
    return outcome


def _temporary_files(faulty: FaultyStorage, *repos: Repository) -> list[str]:
    """Temporary files left once every commit's hint (written behind it) is written."""
    for repo in repos:
        hints_written(repo)
    return [info.key for info in faulty.list_temporary()]


def _ancestry(repo: Repository, snapshot_id: str) -> list[str]:
    return [s.id for s in repo.ancestry(snapshot_id=snapshot_id)]


def test_a_commit_landing_between_prepare_and_publish_is_kept(faulty, repo):
    other = Repository.open(faulty.inner)
    theirs: list[str] = []
    mine = _commit_held_at_publish(faulty, repo, lambda: theirs.append(_write(other, 1, b"t")))

    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == mine
    assert theirs[0] in _ancestry(fresh, mine), "the prepared state file replaced their commit"
    reader = fresh.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in (0, 1)] == [b"mine", b"t"]
    assert _temporary_files(faulty, repo, other) == [], "a prepared state file was left behind"


def test_expiry_and_gc_between_prepare_and_publish(faulty, repo, backend):
    _write(repo, 5, b"old")
    base = _write(repo, 6, b"base")
    repo.create_tag("keep", base)  # the held commit's base stays listed through expiry
    other = Repository.open(faulty.inner)

    def land_expire_and_collect() -> None:
        _write(other, 1, b"t")
        cutoff = cutoff_after_writes(backend)
        assert other.expire_snapshots(cutoff), "expiry had nothing to expire"
        # Takes the held commit's build and its prepared state file: both are older than the
        # cut-off and named by no state file.
        other.garbage_collect(cutoff)

    mine = _commit_held_at_publish(faulty, repo, land_expire_and_collect)

    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == mine
    listed = sorted(fresh.state().snapshots)
    contents = read_all(backend, listed)  # every listed snapshot reads in full
    chunks = contents[mine]["/a"][1]
    assert chunks == {(0,): b"mine", (1,): b"t", (5,): b"old", (6,): b"base"}
    assert _temporary_files(faulty, repo, other) == [], "a prepared state file was left behind"


def test_a_prepared_file_deleted_before_the_create_is_written_again(faulty, repo, backend):
    """A temporary file can vanish under a writer (a sweep of old ones): the create then
    fails, is read back as not done, and is made again from the bytes."""
    swept: list[str] = []

    def sweep_temporary_files() -> None:
        swept.extend(info.key for info in faulty.inner.list_temporary())
        faulty.inner.delete(swept)

    mine = _commit_held_at_publish(faulty, repo, sweep_temporary_files)
    if backend.name == "local":
        assert any(key.startswith("t/") for key in swept), "no prepared state file was swept"
    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == mine
    assert fresh.readonly_session().get_chunk("/a", (0,)) == b"mine"
    assert _temporary_files(faulty, repo) == []


def test_a_build_failing_after_prepare_leaves_nothing(faulty, repo):
    before = repo.lookup_branch("main")
    session = repo.writable_session()
    session.set_chunk("/a", (0,), b"doomed")
    # The transaction log is written on the I/O threads while the state file is prepared;
    # its failure surfaces when the build waits for its writes, after preparing.
    faulty.fail("put", "x/", times=100)
    with pytest.raises(StorageError):
        session.commit("doomed")
    faulty.heal()

    assert Repository.open(faulty.inner).lookup_branch("main") == before
    assert _temporary_files(faulty, repo) == [], "the prepared state file outlived its commit"


def test_threads_of_one_process_preparing_one_generation(faulty, repo):
    """Commits on threads of one process share a storage object and read the same state, so
    they prepare the same generation with different bytes: each publishes its own or loses."""
    landed: list[str] = []
    errors: list[BaseException] = []

    def writer(coord: int) -> None:
        try:
            for k in range(6):
                landed.append(_write(repo, coord, bytes([k + 1])))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(c,)) for c in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    tip = repo.lookup_branch("main")
    assert set(landed) <= set(_ancestry(repo, tip)), "a commit reported landed is not in history"
    reader = repo.readonly_session()
    assert [reader.get_chunk("/a", (c,)) for c in (1, 2, 3)] == [bytes([6])] * 3
    assert _temporary_files(faulty, repo) == [], "a prepared state file was left behind"

"""A commit whose compare-and-swap was applied but whose answer was lost still reports success.

The state file write ``t/<g+1>`` reaches storage, then the writer sees an error (connection
dropped, 500 after the write) or, after its client's own retry, "exists already" (412). The
writer must recognise its own state file: report the snapshot id, land once, never a conflict.
"""

from __future__ import annotations

import pytest

from icechunk_spark import Repository
from icechunk_spark.errors import CommitStateUnknownError, StorageCredentialsError
from tests.trust.conftest import create


def _commit_one(repo: Repository, path: str, value: bytes) -> str:
    session = repo.writable_session()
    session.create_array(path, shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk(path, (0,), value)
    return session.commit(f"write {path}")


@pytest.mark.parametrize("fault", ["lose_response", "answer_exists"])
def test_commit_with_lost_answer_reports_success_once(faulty, fault):
    repo = create(faulty)
    base = repo.lookup_branch("main")
    if fault == "lose_response":
        faulty.lose_response("put_if_absent", "t/")
    else:
        faulty.answer("put_if_absent", "t/", False)

    snapshot = _commit_one(repo, "/a", b"x")

    history = [s.id for s in repo.ancestry(branch="main")]
    assert history == [snapshot, base], "landed exactly once, on the base"
    assert repo.readonly_session().get_chunk("/a", (0,)) == b"x"


def test_lost_answer_on_a_moved_branch_is_a_rebase_not_a_duplicate(faulty):
    repo = create(faulty)
    _commit_one(repo, "/a", b"a")
    slow = repo.writable_session()
    slow.create_array("/b", shape=(2,), chunk_shape=(1,), dtype="uint8")
    slow.set_chunk("/b", (0,), b"b")
    other = _commit_one(repo, "/c", b"c")  # the branch moves: the slow writer must rebase
    faulty.lose_response("put_if_absent", "t/")
    snapshot = slow.commit("write /b")

    history = [s.id for s in repo.ancestry(branch="main")]
    assert history[:2] == [snapshot, other]
    assert len(history) == len(set(history)) == 4
    reader = repo.readonly_session()
    assert [reader.get_chunk(p, (0,)) for p in ("/a", "/b", "/c")] == [b"a", b"b", b"c"]


def test_create_with_lost_answer_succeeds(faulty):
    faulty.lose_response("put_if_absent", "t/")
    repo = create(faulty)
    assert [s.message for s in repo.ancestry(branch="main")] == ["Repository initialized"]


def test_branch_and_tag_changes_with_lost_answers(faulty):
    repo = create(faulty)
    tip = repo.lookup_branch("main")
    faulty.lose_response("put_if_absent", "t/")
    repo.create_tag("v1", tip)  # must not raise AlreadyExistsError for our own write
    faulty.answer("put_if_absent", "t/", False)
    repo.create_branch("dev", tip)
    assert repo.list_tags() == {"v1": tip}
    assert repo.list_branches() == {"main": tip, "dev": tip}


def test_unreadable_outcome_is_commit_state_unknown(faulty):
    repo = create(faulty)
    before = repo.lookup_branch("main")
    session = repo.writable_session()
    session.create_group("/")
    # The write is not applied, and storage cannot answer whether it was: never guess.
    writes = faulty.fail("put_if_absent", "t/", times=100)
    faulty.fail("get", "t/", times=100, when=lambda: writes.hits > 0)
    with pytest.raises(CommitStateUnknownError) as info:
        session.commit("unknown outcome")
    assert info.value.snapshot_id
    faulty.heal()
    assert repo.lookup_branch("main") == before
    with pytest.raises(KeyError):
        repo.lookup_snapshot(info.value.snapshot_id)  # what the message tells the user to do


def test_refused_credentials_are_reported_at_once_not_as_unknown(faulty):
    repo = create(faulty)
    session = repo.writable_session()
    session.create_group("/")
    denied = StorageCredentialsError("access denied (injected)")
    writes = faulty.fail("put_if_absent", "t/", times=100, error=denied)
    with pytest.raises(StorageCredentialsError):
        session.commit("refused")
    assert writes.hits == 1  # nothing can have been written: no read-back, no retry

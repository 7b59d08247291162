"""Rebase sees every change between its base and the tip, even after expiry, or refuses; a
move (metadata only) is rebased by the same rule, with garbage collection between too."""

from __future__ import annotations

import time

import pytest

from icechunk_spark import ConflictError, Repository
from tests.support.helpers import create_repo, cutoff_after_writes


def _write(repo: Repository, coord: int, value: bytes) -> str:
    session = repo.writable_session()
    session.set_chunk("/a", (coord,), value)
    snapshot = session.commit(f"write {coord}")
    time.sleep(0.002)  # distinct commit timestamps, so expiry can split them
    return snapshot


@pytest.fixture
def repo(backend) -> Repository:
    repo = create_repo(backend)
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    base = session.commit("create /a")
    repo.create_tag("base", base)  # keeps the base listed through expiry
    time.sleep(0.002)
    return repo


def test_stale_session_does_not_overwrite_an_expired_commit(repo):
    stale = repo.writable_session()
    stale.set_chunk("/a", (0,), b"stale")
    _write(repo, 0, b"c1")  # conflicts with the stale session
    c2 = _write(repo, 1, b"c2")
    expired = repo.expire_snapshots(repo.lookup_snapshot(c2).written_at)
    assert len(expired) == 2  # the initial snapshot and C1; the tag keeps the base

    with pytest.raises(ConflictError) as info:
        stale.commit("would overwrite C1's chunk")
    assert "expired" in str(info.value)
    reader = repo.readonly_session()
    assert reader.get_chunk("/a", (0,)) == b"c1"
    assert repo.lookup_branch("main") == c2


def test_without_expiry_the_same_race_is_a_chunk_conflict(repo):
    stale = repo.writable_session()
    stale.set_chunk("/a", (0,), b"stale")
    _write(repo, 0, b"c1")
    _write(repo, 1, b"c2")
    with pytest.raises(ConflictError) as info:
        stale.commit("overlaps C1")
    assert [c.kind for c in info.value.conflicts] == ["chunk written concurrently"]


def test_expiry_below_the_base_does_not_block_a_rebase(repo):
    _write(repo, 2, b"old")
    session = repo.writable_session()
    session.set_chunk("/a", (3,), b"mine")
    _write(repo, 1, b"theirs")
    # Expire everything older than the session's base; the edges above it stay intact.
    repo.expire_snapshots(repo.lookup_snapshot(session.snapshot_id).written_at)
    session.commit("rebases over a listed history")
    reader = repo.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in (1, 2, 3)] == [b"theirs", b"old", b"mine"]


def test_relinked_marker_survives_a_second_expiry(repo):
    stale = repo.writable_session()
    stale.set_chunk("/a", (0,), b"stale")
    _write(repo, 0, b"c1")
    c2 = _write(repo, 1, b"c2")
    repo.expire_snapshots(repo.lookup_snapshot(c2).written_at)
    repo.expire_snapshots(repo.lookup_snapshot(c2).written_at)  # nothing more to expire
    assert repo.lookup_snapshot(c2).parent_relinked
    with pytest.raises(ConflictError):
        stale.commit("still refused")


def _chunks(repo: Repository, path: str) -> list[bytes | None]:
    reader = repo.readonly_session()
    return [reader.get_chunk(path, (i,)) for i in range(4)]


def test_a_move_over_an_expired_and_collected_history_is_refused(repo, backend):
    mover = repo.writable_session()
    mover.move("/a", "/b")
    _write(repo, 0, b"c1")
    c2 = _write(repo, 1, b"c2")
    assert len(repo.expire_snapshots(repo.lookup_snapshot(c2).written_at)) == 2
    repo.garbage_collect(cutoff_after_writes(backend))
    # The move's base and C1 are gone with their logs: what C1 changed cannot be checked
    # against the move, so it is refused, and the history stays as it was.
    with pytest.raises(ConflictError, match="expired"):
        mover.commit("move over a history that expired")
    assert repo.lookup_branch("main") == c2
    assert _chunks(repo, "/a") == [b"c1", b"c2", None, None]
    assert repo.readonly_session().find_node("/b") is None


def test_a_move_rebases_over_writes_when_expiry_and_gc_stay_below_its_base(repo, backend):
    _write(repo, 2, b"old")
    mover = repo.writable_session()
    mover.move("/a", "/b")
    _write(repo, 1, b"theirs")
    repo.expire_snapshots(repo.lookup_snapshot(mover.snapshot_id).written_at)
    repo.garbage_collect(cutoff_after_writes(backend))
    mover.commit("move after the writes")
    assert _chunks(repo, "/b") == [None, b"theirs", b"old", None]
    assert repo.readonly_session().find_node("/a") is None

"""A commit that must land once still lands once after maintenance removed its snapshot.

The story of the bug: a stream's batch commits; its driver dies before Spark records the batch
as done; another writer commits; old snapshots are expired (and their files collected); the
query restarts and replays the batch. The replay's duplicate check walked the branch's listed
history, where the batch's snapshot no longer was, and appended the batch a second time.

Expiry now carries the once-marks of the snapshots it removes into the snapshot it re-links,
so the branch still answers for every commit whose changes it holds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from icechunk_spark.core.requirements import landed_once
from icechunk_spark.errors import AlreadyCommittedError
from icechunk_spark.ops.gc import garbage_collect
from icechunk_spark.ops.history import expire_snapshots
from tests.support.helpers import repo_with_byte_array

MARKS = {"stream.query_id": "q1", "stream.batch_id": 1}


def _write(repo, coord: int, value: bytes, branch: str = "main"):
    session = repo.writable_session(branch)
    session.set_chunk("/a", (coord,), value)
    return session


def _now() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


@pytest.mark.parametrize("collect", [False, True], ids=["expire", "expire+gc"])
def test_a_replay_after_its_snapshot_was_expired_is_refused(backend, collect: bool) -> None:
    repo = repo_with_byte_array(backend, 8)
    landed = _write(repo, 0, b"\x01").commit("batch 1", once=MARKS)
    other = _write(repo, 1, b"\x02").commit("another writer")

    expired = expire_snapshots(repo.handle, _now())
    assert landed in expired  # the batch's own snapshot is gone from the history
    if collect:
        garbage_collect(repo.handle, _now())

    with pytest.raises(AlreadyCommittedError) as info:
        _write(repo, 2, b"\x01").commit("batch 1, replayed", once=MARKS)
    # The branch answers for the batch through the snapshot that holds its changes now.
    assert info.value.snapshot_id == other
    assert landed_once(repo.state(), MARKS, branch="main") == other
    reader = repo.readonly_session("main")
    assert reader.get_chunk("/a", (2,)) is None
    assert next(h.id for h in repo.ancestry(branch="main")) == other


def test_marks_survive_expiry_twice_and_stay_on_their_own_branch(backend) -> None:
    repo = repo_with_byte_array(backend, 8)
    base = next(repo.ancestry()).id
    _write(repo, 0, b"\x01").commit("batch 1", once=MARKS)
    _write(repo, 1, b"\x02").commit("middle")
    repo.create_branch("side", base)  # side never held the batch
    expire_snapshots(repo.handle, _now())
    tip = _write(repo, 3, b"\x03").commit("later")
    _write(repo, 4, b"\x04").commit("tip")
    expire_snapshots(repo.handle, _now())  # the snapshot carrying the marks is expired in turn

    assert landed_once(repo.state(), MARKS, branch="main") is not None
    assert tip not in repo.state().snapshots
    with pytest.raises(AlreadyCommittedError):
        _write(repo, 5, b"\x01").commit("replay", once=MARKS)
    # Another branch's history does not hold the batch: there it may land.
    assert landed_once(repo.state(), MARKS, branch="side") is None
    _write(repo, 5, b"\x01", branch="side").commit("batch 1 on side", once=MARKS)


def test_any_branch_lookup_finds_marks_carried_by_expiry(backend) -> None:
    """A ``df.write`` retry looks for its write id in every listed snapshot, not one branch."""
    repo = repo_with_byte_array(backend, 8)
    marks = {"icechunk_spark.write_id": "w-1"}
    _write(repo, 0, b"\x01").commit("write", once=marks)
    tip = _write(repo, 1, b"\x02").commit("next")
    expire_snapshots(repo.handle, _now())
    assert landed_once(repo.state(), marks) == tip
    assert landed_once(repo.state(), {"icechunk_spark.write_id": "w-2"}) is None
    assert landed_once(repo.state(), marks, branch="no-such-branch") is None

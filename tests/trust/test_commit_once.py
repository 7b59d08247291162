"""A commit that a retry may repeat (a replayed micro-batch, a retried job commit) lands once.

``Session.commit(once={...})`` names the commit by metadata pairs; the commit refuses to
publish onto a branch whose history already holds a snapshot with all of them. The check is
made on the very state the compare-and-swap replaces, so it holds even when the duplicate
lands between a caller's own look at the history and its commit: the race here.
"""

from __future__ import annotations

import pytest

from icechunk_spark.errors import AlreadyCommittedError, InvalidInputError
from tests.support.helpers import repo_with_byte_array

MARKS = {"stream.query_id": "q1", "stream.batch_id": 7}


def _session_writing(repo, value: bytes):
    session = repo.writable_session("main")
    session.set_chunk("/a", (0,), value)
    return session


def test_a_duplicate_that_lands_first_is_never_committed_twice(backend) -> None:
    repo = repo_with_byte_array(backend, 4)
    # Both writers looked at the history before either committed: neither saw the batch.
    first, second = _session_writing(repo, b"\x01"), _session_writing(repo, b"\x02")
    landed = first.commit("batch 7", once=MARKS)

    with pytest.raises(AlreadyCommittedError) as info:
        second.commit("batch 7 again", once=MARKS)

    assert info.value.snapshot_id == landed
    history = list(repo.ancestry(branch="main"))
    assert history[0].id == landed
    assert [h for h in history if h.metadata.get("stream.batch_id") == 7] == [history[0]]
    reader = repo.readonly_session("main")
    assert reader.get_chunk("/a", (0,)) == b"\x01"


def test_other_marks_and_other_branches_do_not_count(backend) -> None:
    repo = repo_with_byte_array(backend, 4)
    array = repo.lookup_branch("main")
    seven = _session_writing(repo, b"\x01").commit("batch 7", once=MARKS)
    eight_marks = {**MARKS, "stream.batch_id": 8}
    eight = _session_writing(repo, b"\x03").commit("batch 8", once=eight_marks)

    # "side" starts at batch 7: its history holds batch 7, not batch 8 (which is on main).
    repo.create_branch("side", seven)
    side = repo.writable_session("side")
    side.set_chunk("/a", (1,), b"\x04")
    on_side = side.commit("batch 8 on side", once=eight_marks)

    def history(branch: str) -> list[str]:
        return [info.id for info in repo.ancestry(branch=branch)][:-1]  # without the first

    assert history("main") == [eight, seven, array]
    assert history("side") == [on_side, seven, array]
    assert dict(repo.lookup_snapshot(eight).metadata) == eight_marks
    assert dict(repo.lookup_snapshot(on_side).metadata) == eight_marks
    main, side_reader = repo.readonly_session("main"), repo.readonly_session("side")
    assert [main.get_chunk("/a", (i,)) for i in (0, 1)] == [b"\x03", None]
    assert [side_reader.get_chunk("/a", (i,)) for i in (0, 1)] == [b"\x01", b"\x04"]


def test_the_marks_go_into_the_metadata_and_must_agree_with_it(backend) -> None:
    repo = repo_with_byte_array(backend, 4)
    snapshot = _session_writing(repo, b"\x01").commit("batch", {"user": 1}, once=MARKS)
    assert dict(repo.lookup_snapshot(snapshot).metadata) == {"user": 1, **MARKS}
    with pytest.raises(InvalidInputError, match="once"):
        _session_writing(repo, b"\x02").commit("x", {"stream.batch_id": 9}, once=MARKS)

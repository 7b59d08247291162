"""A commit whose branch was reset to a snapshot that does not descend from its base.

Found by tests/test_stateful_concurrency.py. The rebase used to read each snapshot's transaction
log while walking from the new tip back towards the session's base; when it never met the base it
reached the repository's first snapshot, which has no transaction log (``Repository.create``
writes none), and failed with ``NotFoundError`` on ``x/<first snapshot>`` instead of the
documented ``ConflictError``. Now it finds the way down to the base first, then reads the logs.
"""

from __future__ import annotations

import uuid

import pytest

from icechunk_spark import ConflictError, Repository


def test_commit_after_a_reset_to_a_non_descendant_is_a_conflict():
    repo = Repository.create(f"memory://{uuid.uuid4().hex}")
    first = repo.lookup_branch("main")
    session = repo.writable_session()
    session.create_array("/a", shape=(2,), chunk_shape=(1,), dtype="uint8")
    arrays = session.commit("array")
    stale = repo.writable_session()
    stale.set_chunk("/a", (0,), b"x")
    repo.reset_branch("main", first)
    with pytest.raises(ConflictError):
        stale.commit("after the reset")
    assert repo.lookup_branch("main") == first
    assert arrays in repo.state().snapshots

"""A read-only repository (``repo.set_status``) refuses every writer, with the reason, until it
is set back; the status is part of the state, so it goes through the same compare-and-swap as
commits and a commit racing it cannot slip past."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from icechunk_spark import InvalidInputError, Repository, RepositoryReadOnlyError
from icechunk_spark.storage import open_storage
from tests.support.faults import FaultyStorage, run_held
from tests.support.helpers import make_array
from tests.trust.conftest import create

REASON = "migrating to the new bucket (ticket 42)"


def _session_with_a_change(repo: Repository, path: str = "/x"):
    session = repo.writable_session("main")
    make_array(session, path, shape=(4,), chunks=(2,))
    session.set_chunk_values(path, (0,), np.arange(2, dtype="int32"))
    return session


def test_every_writer_is_refused_with_the_reason_and_nothing_changes(faulty):
    repo = create(faulty)
    first = _session_with_a_change(repo).commit("first")
    repo.create_branch("dev", first)
    pending = _session_with_a_change(repo, "/y")  # opened before the status changed
    repo.set_status("read-only", REASON)
    before = repo.state()
    old = datetime.now(UTC) - timedelta(days=1)
    writers = {
        "commit": lambda: pending.commit("late"),
        "writable_session": lambda: repo.writable_session("main"),
        "create_branch": lambda: repo.create_branch("b", first),
        "reset_branch": lambda: repo.reset_branch("dev", before.branch("main").snapshot_id),
        "delete_branch": lambda: repo.delete_branch("dev"),
        "create_tag": lambda: repo.create_tag("t", first),
        "set_config": lambda: repo.set_config({"inline_chunk_threshold_bytes": 7}),
        "expire_snapshots": lambda: repo.expire_snapshots(old),
        "garbage_collect": lambda: repo.garbage_collect(old),
    }
    for name, write in writers.items():
        with pytest.raises(RepositoryReadOnlyError, match="ticket 42") as refused:
            write()
        assert refused.value.reason == REASON, name
    after = repo.state()
    assert after.generation == before.generation
    assert after.branches() == before.branches() and after.tags() == before.tags()
    # Reading goes on: sessions, history, a dry-run collection.
    assert repo.readonly_session("main").get_chunk("/x", (0,))
    assert next(repo.ancestry()).id == first
    repo.garbage_collect(old, dry_run=True)

    repo.set_status("online")
    landed = pending.commit("late")  # the refused session was not spoiled
    assert repo.lookup_branch("main") == landed


def test_a_commit_about_to_publish_when_the_status_changes_is_refused(faulty):
    repo = create(faulty)
    other = Repository.open(faulty.inner)
    session = _session_with_a_change(repo)
    outcome = run_held(
        faulty,
        "put_if_absent",
        "t/",
        lambda: session.commit("raced"),
        lambda: other.set_status("read-only", REASON),  # takes the generation it wanted
    )
    assert isinstance(outcome, RepositoryReadOnlyError), outcome
    assert repo.status().availability == "read-only"
    assert [s.message for s in repo.ancestry()] == ["Repository initialized"]


def test_the_status_is_stored_in_the_state_and_read_by_every_handle(faulty):
    repo = create(faulty)
    assert repo.status().availability == "online"
    repo.set_status("read-only", REASON)
    status = Repository.open(faulty.inner).status()
    assert (status.availability, status.reason) == ("read-only", REASON)
    assert status.set_at is not None
    repo.set_status("read-only", "a second reason")  # the reason may change while read-only
    assert repo.status().reason == "a second reason"
    repo.set_status("online")
    assert Repository.open(faulty.inner).status().availability == "online"


@pytest.mark.parametrize(
    ("availability", "reason", "match"),
    [
        ("readonly", REASON, "online.*read-only"),
        ("read-only", "", "reason"),
        ("read-only", " ", "reason"),
    ],
)
def test_bad_status_input_is_refused_and_changes_nothing(availability, reason, match):
    repo = create(FaultyStorage(open_storage(f"memory://{uuid.uuid4().hex}")))
    generation = repo.state().generation
    with pytest.raises(InvalidInputError, match=match):
        repo.set_status(availability, reason)  # type: ignore[arg-type]
    assert repo.state().generation == generation

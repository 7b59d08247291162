"""A branch or tag change that GC overtook right after its create is reported done.

A state change creates ``t/<g+1>`` and then checks that ``t/<g>`` still exists (docs/format.md,
"Commits", step 3). When GC fences on top of the new state and deletes ``t/<g>`` in between,
the change has landed: the fence's state holds it. A commit tells this apart from a fork by
its snapshot id; a branch or tag change has none, and was taken back and applied again, so
the writer was told "the branch exists" of the branch it had just created. The state that
follows names the one it replaced (``parent-change-id``), which tells the two apart for any
change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from icechunk_spark import Repository
from icechunk_spark.format.keys import STATE_PREFIX
from tests.support.faults import FaultyStorage, Rule
from tests.trust.conftest import create


def _collect_right_after_the_create(faulty: FaultyStorage, other: Repository) -> None:
    """GC runs once the writer's next state file is created, before the writer checks on it
    (its cut-off later than every state file, so it deletes all but its own fence's)."""

    def create_then_collect(call: Callable[[], object]) -> object:
        created = call()
        other.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
        return created

    faulty._add(Rule("put_if_absent", STATE_PREFIX, create_then_collect))


CHANGES: dict[str, tuple[Callable[[Repository, str], None], Callable[[Repository, str], bool]]] = {
    "create a branch": (
        lambda repo, tip: repo.create_branch("dev", tip),
        lambda repo, tip: repo.list_branches().get("dev") == tip,
    ),
    "delete a branch": (
        lambda repo, tip: repo.delete_branch("old"),
        lambda repo, tip: "old" not in repo.list_branches(),
    ),
    "create a tag": (
        lambda repo, tip: repo.create_tag("v1", tip),
        lambda repo, tip: repo.list_tags().get("v1") == tip,
    ),
    "delete a tag": (
        lambda repo, tip: repo.delete_tag("v0"),
        lambda repo, tip: "v0" not in repo.list_tags(),
    ),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_state_change_gc_overtook_right_after_its_create_is_reported_done(faulty, name):
    repo = create(faulty)
    tip = repo.lookup_branch("main")
    repo.create_branch("old", tip)
    repo.create_tag("v0", tip)
    other = Repository.open(faulty.inner)
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    change, done = CHANGES[name]
    _collect_right_after_the_create(faulty, other)

    change(repo, tip)  # raised "exists" / "not found" when taken back and applied again

    fresh = Repository.open(faulty.inner)
    assert done(fresh, tip)
    assert fresh.state().gc_fence is not None  # GC did overtake it


def test_a_change_forked_past_by_gc_is_still_taken_back(faulty):
    """The other side: GC deleted ``t/<g>`` *before* the create (the writer stalled after its
    read while others landed and GC ran), so the new state file is a fork no reader follows,
    though a state after it exists (GC kept the states younger than its cut-off). That state
    names another as its parent: the change is taken back, applied again on the newest state,
    and is in the history."""
    repo = create(faulty)
    tip = repo.lookup_branch("main")
    other = Repository.open(faulty.inner)
    reached, release = faulty.hold("put_if_absent", STATE_PREFIX)
    errors: list[BaseException] = []

    def stalled() -> None:
        try:
            repo.create_branch("dev", tip)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=stalled)
    thread.start()
    assert reached.wait(30)  # state g read, t/<g+1> about to be created
    other.create_tag("t0", tip)  # t/<g+1>
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)
    cutoff = datetime.now(UTC)
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)
    other.create_tag("t1", tip)  # t/<g+2>, younger than the cut-off: kept
    summary = other.garbage_collect(cutoff)
    assert summary.state_files_deleted == 2  # t/<g> and t/<g+1>
    release.set()
    thread.join(60)

    assert not errors
    fresh = Repository.open(faulty.inner)
    assert fresh.list_branches().get("dev") == tip, "the writer was told of a change no one sees"
    assert {"t0", "t1"} <= set(fresh.list_tags())

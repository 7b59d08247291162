"""Writers that lost a round take turns, oldest first (core/waiters.py): the markers decide
only when a commit attempts, never what lands, and a dead or stuck writer's marker delays
others for a bounded time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from icechunk_spark import Repository
from icechunk_spark.core import waiters
from icechunk_spark.core.waiters import TurnTaking, waiters_prefix
from icechunk_spark.errors import ConflictError, RewriteRefusedError
from icechunk_spark.storage import Storage, open_storage
from tests.support.counting import CountingStorage

MAIN = waiters_prefix("main")


def _markers(storage: Storage, branch: str = "main") -> list[str]:
    return sorted(i.key for i in storage.list(waiters_prefix(branch)))


class Pauses:
    """A ``sleep`` for TurnTaking that passes no time and runs ``steps[k]`` on pause k."""

    def __init__(self, *steps: Callable[[], object] | None) -> None:
        self.calls = 0
        self._steps = steps

    def __call__(self, seconds: float) -> None:
        step = self._steps[self.calls] if self.calls < len(self._steps) else None
        self.calls += 1
        if step is not None:
            step()


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return open_storage(tmp_path.as_uri())


def test_an_uncontended_commit_puts_no_marker_and_never_waits(storage: Storage) -> None:
    pauses = Pauses()
    turns = TurnTaking(storage, "main", sleep=pauses)
    assert turns.take_turn(lost=False)
    assert not turns.queued and pauses.calls == 0 and _markers(storage) == []


def test_waiters_go_oldest_first(storage: Storage) -> None:
    first = TurnTaking(storage, "main")
    assert first.take_turn(lost=True)  # lost a round, queued, and alone: its turn at once
    assert _markers(storage) == [first.marker]
    # The second lost a round too: it looks three times, and the first leaves meanwhile.
    pauses = Pauses(None, None, first.leave)
    second = TurnTaking(storage, "main", sleep=pauses)
    assert second.take_turn(lost=True)
    assert pauses.calls == 3 and _markers(storage) == [second.marker]
    # A first attempt that finds a waiter queues behind it instead of barging in.
    pauses = Pauses(None, second.leave)
    third = TurnTaking(storage, "main", sleep=pauses)
    assert third.take_turn(lost=False)
    assert pauses.calls == 2 and third.queued and _markers(storage) == [third.marker]
    third.leave()
    assert _markers(storage) == []


def test_a_marker_not_refreshed_within_the_lease_is_ignored(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer killed while queued leaves its marker: the others go on once it is stale.
    storage.put(f"{MAIN}0000000000001-KILLED", b"")
    later = TurnTaking(storage, "main", clock=lambda: time.time() + waiters.LEASE_S + 1)
    assert later.take_turn(lost=False) and not later.queued
    # The same marker within its lease is deferred to (here until MAX_WAIT_S).
    monkeypatch.setattr(waiters, "MAX_WAIT_S", 0.05)
    now = TurnTaking(storage, "main", sleep=Pauses())
    assert not now.take_turn(lost=False)
    now.leave()


def test_no_writer_defers_longer_than_max_wait_to_a_marker_kept_alive(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stuck writer keeps its marker fresh but never commits.
    stuck = TurnTaking(storage, "main")
    stuck.take_turn(lost=True)
    monkeypatch.setattr(waiters, "MAX_WAIT_S", 0.5)
    pauses = Pauses(*[stuck._refresh] * 1000)
    waiting = TurnTaking(storage, "main", sleep=pauses)
    assert waiting.take_turn(lost=True) is False
    assert pauses.calls >= 1  # it did defer, then stopped
    for t in (stuck, waiting):
        t.leave()


def test_a_marker_deleted_under_its_waiter_is_put_back(storage: Storage) -> None:
    # Garbage collection deletes old staging objects; a live waiter keeps its place.
    head = TurnTaking(storage, "main")
    head.take_turn(lost=True)
    # Markers queued in one millisecond sort by their random ids: a later one may go first.
    time.sleep(0.002)
    seen: list[list[str]] = []

    def collect() -> None:
        storage.delete([waiting.marker])  # type: ignore[list-item]
        seen.append(_markers(storage))

    def head_leaves() -> None:
        seen.append(_markers(storage))
        head.leave()

    waiting = TurnTaking(storage, "main", sleep=Pauses(collect, head_leaves))
    assert waiting.take_turn(lost=True)
    assert waiting.marker not in seen[0] and waiting.marker in seen[1]
    waiting.leave()


def _repository(storage: Storage) -> Repository:
    repo = Repository.create(storage)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    return repo


def _commit(repo: Repository, coord: int, value: int) -> str:
    session = repo.writable_session()
    session.set_chunk("/a", (coord,), bytes([value]))
    return session.commit(f"write {coord}")


def test_a_commit_waits_for_an_older_waiter_and_leaves_no_marker(storage: Storage) -> None:
    repo = _repository(storage)
    older = TurnTaking(storage, "main")
    older.take_turn(lost=True)
    landed: list[str] = []
    writer = threading.Thread(target=lambda: landed.append(_commit(repo, 1, 1)))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive() and not landed, "the commit did not wait for the older waiter"
    assert len(_markers(storage)) == 2  # it queued behind
    older.leave()
    writer.join(30)
    assert landed and repo.lookup_branch("main") == landed[0]
    assert _markers(storage) == []


def test_a_commit_that_lost_a_round_and_then_failed_removes_its_marker(tmp_path: Path) -> None:
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    session = repo.writable_session()
    session.set_chunk("/a", (3,), b"\1")
    _commit(repo, 3, 9)  # a concurrent commit writes the same chunk: a conflict
    storage.reset()
    with pytest.raises(ConflictError):
        session.commit("conflicting")
    assert storage.puts["staging"] == 1  # it queued when it found the branch moved
    assert _markers(storage) == []


def test_a_writer_queues_behind_every_marker_it_saw_whatever_their_clocks(
    storage: Storage,
) -> None:
    # Names sort by the time their writer queued; a newcomer must not sort ahead of a marker
    # it saw, though that writer's clock runs an hour ahead or queued in the same millisecond.
    now = time.time()
    for since in (now + 3600, now):
        older = f"{MAIN}{int(since * 1000):013d}-OTHER"
        storage.put(older, b"")
        pauses = Pauses(lambda older=older: storage.delete([older]))  # type: ignore[misc]
        newcomer = TurnTaking(storage, "main", clock=lambda: now, sleep=pauses)
        assert newcomer.take_turn(lost=False)
        assert pauses.calls == 1, "the newcomer went ahead of a marker it had seen"
        newcomer.leave()


def test_objects_that_are_not_markers_are_ignored(storage: Storage) -> None:
    storage.put(f"{MAIN}notes.txt", b"")
    turns = TurnTaking(storage, "main", sleep=Pauses())
    assert turns.take_turn(lost=False) and not turns.queued


class QueueBlind(CountingStorage):
    """A writer that takes no turns (an older release, another tool): it lists no markers."""

    def list(self, prefix: str):  # type: ignore[no-untyped-def]
        return iter(()) if prefix.startswith(waiters.WAITERS_PREFIX) else super().list(prefix)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def test_a_waiter_that_caught_up_in_line_publishes_nothing_built_on_its_old_base(
    tmp_path: Path,
) -> None:
    # Next in line, a waiter rebases onto each commit that lands meanwhile. Its turn must
    # then build on that base: the snapshot it built before would drop what landed.
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    head = TurnTaking(storage, "main")
    head.take_turn(lost=True)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\1")
    landed: list[str] = []
    writer = threading.Thread(target=lambda: landed.append(session.commit("next in line")))
    writer.start()
    _wait_for(lambda: len(_markers(storage)) == 2, "the writer queued behind the head")
    other = _commit(Repository.open(QueueBlind(storage.inner)), 2, 2)
    _wait_for(lambda: storage.keys_read[f"x/{other}"] > 0, "the waiter caught up")
    head.leave()
    writer.join(30)
    assert landed
    assert [s.id for s in repo.ancestry(branch="main")][:2] == [landed[0], other]
    reader = repo.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in (1, 2)] == [b"\1", b"\2"]


class ListCounting(CountingStorage):
    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.lists: list[str] = []

    def list(self, prefix: str):  # type: ignore[no-untyped-def]
        self.lists.append(prefix)
        return super().list(prefix)


def test_an_uncontended_commit_lists_the_markers_once_and_puts_none(tmp_path: Path) -> None:
    # The one listing runs while the commit builds: no round trip of its own on S3.
    storage = ListCounting(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    storage.lists.clear()
    storage.reset()
    _commit(repo, 1, 1)
    assert storage.lists.count(MAIN) == 1
    assert storage.puts["staging"] == 0


def test_an_amend_queued_in_line_never_catches_up_onto_another_writers_commit(
    tmp_path: Path,
) -> None:
    # An amend replaces its session's base and never rebases. Waiting in line, it must not
    # move onto a commit landing meanwhile: it would replace that writer's snapshot.
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    _commit(repo, 0, 1)
    head = TurnTaking(storage, "main")
    head.take_turn(lost=True)
    session = repo.writable_session()
    session.set_chunk("/a", (0,), b"\2")
    errors: list[BaseException] = []

    def amend() -> None:
        try:
            session.amend("amended")
        except BaseException as exc:  # the test looks at it below
            errors.append(exc)

    writer = threading.Thread(target=amend)
    writer.start()
    _wait_for(lambda: len(_markers(storage)) == 2, "the amend queued behind the head")
    other = _commit(Repository.open(QueueBlind(storage.inner)), 2, 2)
    time.sleep(0.3)  # next in line: a catch-up, were there one, would have run by now
    head.leave()
    writer.join(30)
    assert errors and isinstance(errors[0], RewriteRefusedError), errors
    assert repo.lookup_branch("main") == other
    assert repo.readonly_session().get_chunk("/a", (2,)) == b"\2"

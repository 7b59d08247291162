"""A writer stalled between creating ``t/<g>`` and writing ``icechunk.json`` forks nothing.

It resumes after other commits and a GC that deleted the state files above its generation,
and writes an old hint. Readers must notice the hint is stale, or the next commit would create
``t/<g+1>`` a second time and history would fork.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from icechunk_spark import Repository
from icechunk_spark.core.refs import read_hint, read_latest_state
from icechunk_spark.format.keys import HINT_KEY, STATE_PREFIX, state_key
from icechunk_spark.format.state import State
from icechunk_spark.storage import Storage
from tests.support.faults import FaultyStorage, Rule
from tests.support.helpers import hints_written
from tests.trust.conftest import create


def _commit(repo: Repository, coord: int) -> str:
    session = repo.writable_session()
    session.set_chunk("/a", (coord,), bytes([coord]))
    return session.commit(f"write {coord}")


def test_stalled_hint_writer_after_gc_loses_nothing(faulty):
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")

    hints_written(repo)
    reached, release = faulty.hold("put", "icechunk.json")
    stalled: list[str] = []
    # A handle of its own, as another process has: this one's later hints would otherwise
    # take the stalled one's place (a handle writes only its newest hint).
    stalled_repo = Repository.open(faulty)
    stalled.append(_commit(stalled_repo, 0))  # returns: its hint is written behind it
    assert reached.wait(30)  # t/<g> exists; the hint is not written yet

    others = [_commit(repo, c) for c in (1, 2, 3)]
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    summary = repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
    assert summary.state_files_deleted >= 4
    hints_written(repo)
    release.set()  # the stalled writer now puts back its old hint
    hints_written(stalled_repo)

    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == others[-1]
    after = _commit(fresh, 4)
    history = [s.id for s in fresh.ancestry(branch="main")]
    assert history[:5] == [after, *reversed(others), stalled[0]]
    reader = fresh.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(5)] == [bytes([i]) for i in range(5)]
    assert Repository.open(faulty.inner).state().generation == fresh.state().generation


def test_a_writer_stalled_before_creating_its_state_file_forks_nothing(faulty):
    """It read state ``g``; others land ``g+1``… and GC deletes them all but the newest before
    it creates ``t/<g+1>``, which is absent again: it must not report a commit no one sees."""
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 8})  # no chunk files
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    other = Repository.open(faulty.inner)

    stalled = repo.writable_session()
    stalled.set_chunk("/a", (0,), b"\0")
    reached, release = faulty.hold("put_if_absent", "t/")
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(stalled.commit("stalled")))
    thread.start()
    assert reached.wait(30)  # state g read, t/<g+1> about to be created
    others = [_commit(other, c) for c in (1, 2, 3)]
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    summary = other.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
    assert summary.state_files_deleted >= 4  # t/<g+1> among them
    release.set()
    thread.join(60)

    (committed,) = outcome
    fresh = Repository.open(faulty.inner)
    history = [s.id for s in fresh.ancestry(branch="main")]
    assert committed in history, "the writer was told of a commit that is not in the history"
    assert history[:4] == [committed, *reversed(others)]
    reader = fresh.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(4)] == [bytes([i]) for i in range(4)]


def test_a_commit_gc_overtook_right_after_its_create_is_reported_landed(faulty):
    """The other side of the check above: GC fences after the create and deletes ``t/<g>``
    (and the new ``t/<g+1>``) before the writer looks. Its commit landed, and the fence's
    state holds it: the writer must say so, not take it back and then conflict with itself."""
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 8})  # no chunk files
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    other = Repository.open(faulty.inner)
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)
    looks = [0]

    def collect_before_the_check(call: Callable[[], object]) -> object:
        looks[0] += 1
        if looks[0] == 2:  # the first is the state read's, the second the check's
            other.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
        return call()

    writer = repo.writable_session()
    writer.set_chunk("/a", (0,), b"\0")
    faulty._add(Rule("exists", STATE_PREFIX, collect_before_the_check, times=2))
    committed = writer.commit("overtaken")
    assert looks[0] == 2

    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == committed
    assert [s.message for s in fresh.ancestry(branch="main")][:2] == ["overtaken", "create /a"]


def _state_files(storage: FaultyStorage) -> list[int]:
    return sorted(int(i.key[len(STATE_PREFIX) :]) for i in storage.list(STATE_PREFIX))


def test_a_reader_overtaken_by_gc_between_two_probes_finds_the_latest(faulty):
    """A reader follows an old hint forward, and GC deletes the state files under its feet.

    GC deletes old state files oldest first; the reader has read ``t/<g+1>`` and is about to
    probe ``t/<g+2>`` when GC deletes everything up to ``t/<g+2>``. The miss must not be taken
    for the end of the history: the next commit would create ``t/<g+2>`` a second time.
    """
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    old = repo.state().generation
    old_hint = faulty.inner.get(state_key(old))
    tips = [_commit(repo, c) for c in (1, 2, 3, 4)]
    hints_written(repo)
    faulty.inner.put(HINT_KEY, old_hint)  # a stalled writer puts back its old hint

    overtaken = state_key(old + 2)

    def collect_then_probe(call: Callable[[], object]) -> object:
        for generation in range(old + 3):  # GC passes the reader, oldest first
            faulty.inner.delete([state_key(generation)])
        return call()

    latest = repo.state()
    faulty._add(Rule("get", overtaken, collect_then_probe))
    assert read_latest_state(faulty).generation == latest.generation
    after = _commit(repo, 5)
    assert [s.id for s in repo.ancestry(branch="main")][:5] == [after, *reversed(tips)]
    assert _state_files(faulty) == list(range(old + 3, latest.generation + 2))


def test_gc_deletes_state_files_one_at_a_time_oldest_first(faulty):
    """What the reader's check above relies on: while GC runs, the state files that are left
    are always the newest ones, never a newer one gone while an older one stays."""
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    for c in range(6):
        _commit(repo, c)
    deletes: list[list[str]] = []
    delete = faulty.inner.delete

    def recorded(keys: Iterable[str]) -> None:
        keys = list(keys)
        deletes.append(keys)
        delete(keys)

    faulty.inner.delete = recorded  # type: ignore[method-assign]
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    summary = repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
    state_deletes = [keys for keys in deletes if any(k.startswith(STATE_PREFIX) for k in keys)]
    assert summary.state_files_deleted >= 7
    assert all(len(keys) == 1 for keys in state_deletes)
    generations = [int(keys[0][len(STATE_PREFIX) :]) for keys in state_deletes]
    assert generations == sorted(generations) and len(generations) == summary.state_files_deleted
    assert _state_files(faulty) == list(range(generations[-1] + 1, repo.state().generation + 1))


def test_a_hint_a_crash_left_empty_or_torn_is_read_as_missing(faulty):
    # Local storage writes the hint without fsync (Storage.put_best_effort): after a power
    # loss it may be empty or hold part of its bytes. Readers must find the latest state all
    # the same, and the next commit must land on the next generation.
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    landed = [_commit(repo, 0)]
    hints_written(repo)
    whole = faulty.inner.get(HINT_KEY)
    for coord, damaged in enumerate((b"", whole[: len(whole) // 2]), start=1):
        faulty.inner.put(HINT_KEY, damaged)
        fresh = Repository.open(faulty.inner)
        assert fresh.lookup_branch("main") == landed[-1]
        landed.append(_commit(fresh, coord))
        hints_written(fresh)
        assert [s.id for s in fresh.ancestry(branch="main")][: coord + 1] == landed[::-1]
    reader = Repository.open(faulty.inner).readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(3)] == [bytes([i]) for i in range(3)]


def test_a_commit_returns_before_its_hint_and_readers_find_it_all_the_same(faulty):
    """The hint follows a commit on the I/O threads: the commit is complete once ``t/<g>``
    exists. While a hint write hangs, readers probe past the old hint, later commits of the
    handle wait behind it as one newest hint, and the hint never goes back a generation."""
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    hints_written(repo)
    hints: list[int] = []  # each hint write, by the generation the hint named before it
    reached, release = threading.Event(), threading.Event()

    def count_and_hold_the_first(call: Callable[[], object]) -> object:
        hints.append(_hinted(faulty))
        if len(hints) == 1:
            reached.set()
            release.wait()
        return call()

    faulty._add(Rule("put", HINT_KEY, count_and_hold_the_first, times=99))
    landed: list[str] = []
    writer = threading.Thread(target=lambda: landed.append(_commit(repo, 1)))
    writer.start()
    try:
        assert reached.wait(30)
        writer.join(10)
        assert landed and not repo.handle.hints.wait(0), "the commit waited for its hint"
        assert Repository.open(faulty.inner).lookup_branch("main") == landed[0]
        later = [_commit(repo, c) for c in (2, 3, 4)]
        assert Repository.open(faulty.inner).lookup_branch("main") == later[-1]
    finally:
        release.set()
        writer.join(30)
    hints_written(repo)
    newest = repo.state().generation
    assert read_hint(faulty.inner).generation == newest  # type: ignore[union-attr]
    assert len(hints) == 2  # the held one, then the newest of the three waiting behind it
    reader = Repository.open(faulty.inner).readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(1, 5)] == [bytes([i]) for i in (1, 2, 3, 4)]


def _hinted(storage: FaultyStorage) -> int:
    hint = read_hint(storage.inner)
    return -1 if hint is None else hint.generation


def _history(faulty: FaultyStorage, commits: int) -> tuple[Repository, list[State]]:
    """A repository and each state after its ``commits`` commits, read back."""
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    states = []
    for c in range(commits):
        _commit(repo, c)
        states.append(read_latest_state(faulty.inner))
    hints_written(repo)
    return repo, states


class Reads(FaultyStorage):
    """Records the keys read."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.read: list[str] = []

    def get(self, key: str) -> bytes:
        self.read.append(key)
        return super().get(key)


def test_a_state_read_from_the_newest_known_state_skips_the_hint(faulty):
    _, states = _history(faulty, 2)
    reads = Reads(faulty.inner)
    assert read_latest_state(reads, states[-1]) is states[-1]
    assert reads.read == [state_key(states[-1].generation + 1)]  # the probe, no hint


def test_a_state_read_from_an_older_known_state_finds_the_newest(faulty):
    _, states = _history(faulty, 4)
    newest = states[-1].generation
    reads = Reads(faulty.inner)
    assert read_latest_state(reads, states[0]).generation == newest
    # Behind: the hint, not a probe per state file landed since.
    first = state_key(states[0].generation + 1)
    assert reads.read == [first, HINT_KEY, state_key(newest + 1)]
    # The hint stale or gone: the probe goes on from the newer known state.
    faulty.inner.put(HINT_KEY, faulty.inner.get(state_key(states[1].generation)))
    assert read_latest_state(faulty, states[0]).generation == newest
    faulty.inner.delete([HINT_KEY])
    assert read_latest_state(faulty, states[0]).generation == newest


def test_a_known_state_gc_deleted_is_not_taken_for_the_newest(faulty):
    repo, states = _history(faulty, 4)
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
    assert states[0].generation not in _state_files(faulty)
    latest = read_latest_state(faulty.inner)
    assert read_latest_state(faulty, states[0]).generation == latest.generation
    # Known newest and t/<g+1> gone: checked, never assumed.
    assert read_latest_state(faulty, latest) is latest

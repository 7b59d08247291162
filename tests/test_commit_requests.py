"""What a small commit asks of storage: each round trip is latency on object storage
(bench/bench_commit_requests.py counts them beside Icechunk's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from icechunk_spark import Repository
from icechunk_spark.core import manifest_writes
from icechunk_spark.core.waiters import WAITERS_PREFIX
from icechunk_spark.format.keys import HINT_KEY, STATE_PREFIX
from icechunk_spark.storage import ObjectInfo, Storage, open_storage
from tests.support.counting import CountingStorage


def _repository(storage: Storage) -> Repository:
    repo = Repository.create(storage)
    session = repo.writable_session()
    session.create_group("/")
    for name in ("a", "b"):
        session.create_array(f"/{name}", shape=(10,), chunk_shape=(1,), dtype="uint8")
        session.set_chunk(f"/{name}", (0,), b"\0")
    session.commit("two arrays sharing a manifest")
    return repo


class MeetingPuts(CountingStorage):
    """Every put of a manifest, structure file or transaction log waits until all three are
    in flight: a commit that wrote them one round after another never gets past the first."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.meeting: threading.Barrier | None = None

    def put(self, key: str, data: bytes) -> None:
        if self.meeting is not None and key[:2] in ("m/", "s/", "x/"):
            self.meeting.wait()
        super().put(key, data)


def test_a_small_commit_writes_its_manifest_structure_and_log_in_one_round(
    tmp_path: Path,
) -> None:
    storage = MeetingPuts(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\1")
    storage.meeting = threading.Barrier(3, timeout=10)  # broken (an error) if one waits alone
    session.commit("one chunk")
    assert storage.puts["m"] == 2  # the first commit's and this one's


class MeetingStateRead(MeetingPuts):
    """``MeetingPuts``, and the state read (its first request: the probe of the state after
    the newest one the writer knows, or the hint) and the listing of the branch's waiters join
    the meeting. Remote, as object storage is: on local storage the listing is made in line
    (``Storage.remote``)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.remote = True
        self.state_read_met = False  # the state read's later requests follow its first

    def get(self, key: str) -> bytes:
        state_read = key == HINT_KEY or key.startswith(STATE_PREFIX)
        if self.meeting is not None and state_read and not self.state_read_met:
            self.state_read_met = True
            self.meeting.wait()
        return super().get(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if self.meeting is not None and prefix.startswith(WAITERS_PREFIX):
            self.meeting.wait()
        return super().list(prefix)


def test_a_small_commit_reads_the_state_while_its_objects_are_written(tmp_path: Path) -> None:
    # On object storage the state read is two round trips (probe, check; three when the hint
    # is read) and the waiters' listing one; made after the writes they would add to the
    # commit's latency instead of overlapping it.
    storage = MeetingStateRead(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\1")
    storage.meeting = threading.Barrier(5, timeout=10)  # broken (an error) if one waits alone
    snapshot = session.commit("one chunk")
    storage.meeting = None
    assert Repository.open(storage.inner).lookup_branch("main") == snapshot


def test_the_next_commit_does_not_read_back_the_manifest_this_process_wrote(
    tmp_path: Path,
) -> None:
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    for value in (1, 2):
        session = repo.writable_session()
        session.set_chunk("/a", (value,), bytes([value]))
        storage.reset()
        session.commit(f"chunk {value}")
        assert storage.gets["m"] == 0
    assert repo.readonly_session().get_chunk("/b", (0,)) == b"\0"  # b's refs carried over


class MeetingLogReads(CountingStorage):
    """Every read of a transaction log waits until ``parties`` are in flight: a rebase that
    read the logs it rebases over one after another never gets past the first."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.meeting: threading.Barrier | None = None

    def get(self, key: str) -> bytes:
        if self.meeting is not None and key.startswith("x/"):
            self.meeting.wait()
        return super().get(key)


def test_a_rebase_reads_the_logs_it_rebases_over_in_one_round(tmp_path: Path) -> None:
    storage = MeetingLogReads(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)
    behind = repo.writable_session()
    behind.set_chunk("/b", (9,), b"\x09")
    for value in (1, 2, 3):  # three commits land after `behind` began
        session = repo.writable_session()
        session.set_chunk("/a", (value,), bytes([value]))
        session.commit(f"chunk {value}")
    storage.meeting = threading.Barrier(3, timeout=10)  # broken (an error) if one waits alone
    behind.commit("rebased over three")
    storage.meeting = None
    reader = repo.readonly_session()
    assert [reader.get_chunk("/a", (v,)) for v in (1, 2, 3)] == [b"\1", b"\2", b"\3"]
    assert reader.get_chunk("/b", (9,)) == b"\x09"


def test_a_bigger_manifest_is_kept_decoded_only_when_few_of_its_rows_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many changed rows (an import) would hold tens of MB of decoded strings in the cache; a
    # committed manifest rewritten for a chunk is what the next commit would read back.
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    repo = _repository(storage)  # a manifest of two refs
    monkeypatch.setattr(manifest_writes, "REMEMBERED_ROWS", 2)
    monkeypatch.setattr(manifest_writes, "SPLICE_MAX_ROWS", 1)  # two changed rows are many here
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\1")
    session.set_chunk("/a", (2,), b"\2")  # four refs: over the limit, two changed: not kept
    session.commit("four refs")
    for refs in (5, 6):  # one changed each: kept from the second on
        session = repo.writable_session()
        session.set_chunk("/a", (refs - 2,), bytes([refs]))
        storage.reset()
        session.commit(f"{refs} refs")
        assert storage.gets["m"] == (1 if refs == 5 else 0)  # read back once, then kept


def test_a_builds_small_objects_are_held_until_started_and_none_is_left_unwritten(
    tmp_path: Path,
) -> None:
    storage = CountingStorage(open_storage(tmp_path.as_uri()))
    with ThreadPoolExecutor(2) as pool:
        deferred = manifest_writes.DeferredPuts(storage, pool, budget=100)
        deferred.put("s/structure", lambda: b"s")
        deferred.put("x/log", lambda: b"x")
        assert sum(storage.puts.values()) == 0, "an object was written before start"
        deferred.start()
        deferred.put("a/attributes", lambda: b"a")  # held after start: wait writes it too
        deferred.wait()
    assert [storage.get(k) for k in ("s/structure", "x/log", "a/attributes")] == [b"s", b"x", b"a"]


class ListingThreads(CountingStorage):
    """Records the thread of each listing of the branch's waiters."""

    def __init__(self, inner: Storage, remote: bool) -> None:
        super().__init__(inner)
        self.remote = remote
        self.threads: list[threading.Thread] = []

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if prefix.startswith(WAITERS_PREFIX):
            self.threads.append(threading.current_thread())
        return super().list(prefix)


@pytest.mark.parametrize("remote", [True, False])
def test_the_waiters_are_listed_beside_the_state_read_only_on_remote_storage(
    tmp_path: Path, remote: bool
) -> None:
    # A round trip is worth overlapping; a local listing costs less than the handover.
    storage = ListingThreads(open_storage(tmp_path.as_uri()), remote)
    repo = _repository(storage)
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\1")
    storage.threads.clear()
    session.commit("one chunk")
    assert len(storage.threads) == 1
    on_the_calling_thread = storage.threads[0] is threading.current_thread()
    assert on_the_calling_thread is not remote

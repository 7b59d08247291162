"""A writer stalled between creating ``t/<g>`` and writing ``icechunk.json`` forks nothing.

It resumes after other commits and a GC that deleted the state files above its generation,
and writes an old hint. Readers must notice the hint is stale, or the next commit would create
``t/<g+1>`` a second time and history would fork.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from icechunk_spark import Repository
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

    reached, release = faulty.hold("put", "icechunk.json")
    stalled: list[str] = []
    writer = threading.Thread(target=lambda: stalled.append(_commit(repo, 0)))
    writer.start()
    assert reached.wait(30)  # t/<g> exists; the hint is not written yet

    others = [_commit(repo, c) for c in (1, 2, 3)]
    time.sleep(faulty.mtime_resolution_ms / 1000 + 0.05)  # the state files age past the cut-off
    summary = repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=2))
    assert summary.state_files_deleted >= 4
    release.set()  # the stalled writer now puts back its old hint
    writer.join(30)
    assert stalled, "the stalled commit failed"

    fresh = Repository.open(faulty.inner)
    assert fresh.lookup_branch("main") == others[-1]
    after = _commit(fresh, 4)
    history = [s.id for s in fresh.ancestry(branch="main")]
    assert history[:5] == [after, *reversed(others), stalled[0]]
    reader = fresh.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(5)] == [bytes([i]) for i in range(5)]
    assert Repository.open(faulty.inner).state().generation == fresh.state().generation

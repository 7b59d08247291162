"""The state caches (format/state_text.py, format/snapshot_memo.py) never change what a
process reads or writes: through commits of two writers, expiry, garbage collection and tag
changes, every state a long-lived process reads equals what a fresh process decodes from the
same file, and every state file it writes is what an encoder remembering nothing makes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import icechunk_spark.format.state as state_format
from icechunk_spark import Repository
from icechunk_spark.core.refs import read_latest_state
from icechunk_spark.format import encode_state
from icechunk_spark.format.keys import state_key
from icechunk_spark.storage import open_storage
from tests.support.state_codec import fresh_decode, fresh_encode


@pytest.fixture
def url(tmp_path: Path) -> str:
    return tmp_path.as_uri()


@pytest.fixture
def repo(url: str) -> Iterator[Repository]:
    state_format._LAST_TEXT = None
    repo = Repository.create(url)
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.commit("create /a")
    yield repo
    state_format._LAST_TEXT = None


def test_a_long_lived_reader_sees_what_a_fresh_process_decodes(repo: Repository, url: str) -> None:
    storage = open_storage(url)
    other = Repository.open(url)  # a second writer, with handles of its own

    def write(writer: Repository, k: int) -> None:
        session = writer.writable_session()
        session.set_chunk("/a", (k % 8,), bytes([k]))
        session.commit(f"write {k}", metadata={"k": k, "z": [k], "a": {"b": k}})
        time.sleep(0.002)  # distinct timestamps, so expiry can split them

    reused = 0
    steps = [*(("write", k) for k in range(6)), ("expire", 3), ("gc", 0), ("tag", 0)]
    steps += [("other", 6), ("write", 7), ("expire", 8), ("other", 9), ("write", 10)]
    for step, k in steps:
        if step == "write":
            write(repo, k)
        elif step == "other":
            write(other, k)
        elif step == "expire":
            cutoff = repo.lookup_snapshot(repo.lookup_branch("main")).written_at
            repo.expire_snapshots(cutoff)
        elif step == "gc":
            repo.garbage_collect(datetime.now(UTC))
        else:
            repo.create_tag(f"t{k}", repo.lookup_branch("main"))
        seen = read_latest_state(storage)
        data = storage.get(state_key(seen.generation))
        assert seen == fresh_decode(data), step
        assert encode_state(seen) == fresh_encode(seen), step
        last = state_format._LAST_TEXT
        reused += bool(last and last[0].reused)
    # The reads after the commits took the short way; expiry's rewritten states did not.
    assert reused >= 5

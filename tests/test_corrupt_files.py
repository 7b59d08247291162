"""Garbage or truncated repository files give FormatError naming the file; nothing else breaks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from icechunk_spark import FormatError, Repository
from tests.support.faults import FaultyStorage
from tests.support.helpers import create_repo, make_array, open_repo


def _committed(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"data")
    session.commit("one")
    return repo


def _truncate(storage, key: str) -> None:
    data = storage.get(key)
    storage.put(key, data[: len(data) // 2])


def test_a_truncated_state_hint_is_ignored_like_a_missing_one(backend):
    # icechunk.json is only a copy of the newest t/<g>: readers list t/ instead, as when the
    # hint is missing, and the next commit writes a whole hint again.
    repo = _committed(backend)
    tip = repo.lookup_branch("main")
    _truncate(repo.storage, "icechunk.json")
    reopened = open_repo(backend)
    assert reopened.lookup_branch("main") == tip
    assert reopened.readonly_session().get_chunk("/a", (0, 0)) == b"data"
    session = reopened.writable_session()
    session.set_chunk("/a", (0, 1), b"more")
    two = session.commit("two")
    assert open_repo(backend).lookup_branch("main") == two


def test_garbage_collection_runs_past_a_truncated_state_hint(backend):
    repo = _committed(backend)
    _truncate(repo.storage, "icechunk.json")
    # The fence GC publishes would write a whole hint; failing that write (best effort, as
    # in publish_state) leaves GC to read the truncated one.
    storage = FaultyStorage(repo.storage)
    storage.fail("put", "icechunk.json")
    Repository.open(storage).garbage_collect(datetime(2000, 1, 1, tzinfo=UTC))
    assert open_repo(backend).readonly_session().get_chunk("/a", (0, 0)) == b"data"


def test_a_truncated_newest_state_file_is_an_error_not_an_older_state(backend):
    # Falling back past the hint must not fall back in history: the newest t/<g> decides.
    repo = _committed(backend)
    newest = max(i.key for i in repo.storage.list("t/"))
    _truncate(repo.storage, "icechunk.json")
    _truncate(repo.storage, newest)
    with pytest.raises(FormatError, match=newest):
        open_repo(backend)


def test_truncated_structure_file(backend):
    repo = _committed(backend)
    [key] = [
        i.key
        for i in repo.storage.list("s/")
        if i.key.endswith(repo.lookup_snapshot(repo.lookup_branch("main")).structure_file)
    ]
    data = repo.storage.get(key)
    repo.storage.put(key, data[: len(data) // 3])
    with pytest.raises(FormatError, match=key):
        open_repo(backend).readonly_session()


def test_garbage_manifest_fails_the_read_not_the_open(backend):
    repo = _committed(backend)
    [key] = [i.key for i in repo.storage.list("m/")]
    repo.storage.put(key, b"PAR1garbagePAR1")
    reader = open_repo(backend).readonly_session()
    assert [n.path for n in reader.list_nodes()] == ["/", "/a"]
    with pytest.raises(FormatError, match=key):
        reader.get_chunk("/a", (0, 0))

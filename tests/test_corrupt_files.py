"""Garbage or truncated repository files give FormatError naming the file; nothing else breaks."""

from __future__ import annotations

import pytest

from icechunk_spark import FormatError
from tests.support.helpers import create_repo, make_array, open_repo


def _committed(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"data")
    session.commit("one")
    return repo


def test_garbage_state_hint(backend):
    repo = _committed(backend)
    repo.storage.put("icechunk.json", b"\x00garbage")
    with pytest.raises(FormatError, match=r"icechunk\.json"):
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

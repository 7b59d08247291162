"""Garbage or truncated repository files give FormatError naming the file; nothing else breaks."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pytest
import zarr

from icechunk_spark import FormatError, Repository, TruncatedChunkError
from tests.support.faults import FaultyStorage
from tests.support.helpers import create_repo, hints_written, make_array, open_repo


def _committed(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"data")
    session.commit("one")
    hints_written(repo)  # its hint follows the commit: it must not overwrite the damage
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


@pytest.fixture
def truncated_chunk(backend):
    """A repository whose one chunk, (0, 1) of ``/a``, lost the second half of its object."""
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    make_array(session)
    zarr.open_array(session.store, path="a")[0:5, 5:10] = np.arange(25).reshape(5, 5)
    session.commit("one chunk")
    [key] = [i.key for i in repo.storage.list("c/")]
    _truncate(repo.storage, key)
    return open_repo(backend), key


def _names_the_chunk(error: pytest.ExceptionInfo[TruncatedChunkError], key: str) -> None:
    assert isinstance(error.value, FormatError)
    assert (error.value.path, error.value.coord, error.value.key) == ("/a", (0, 1), key)
    for part in ("'/a'", "(0, 1)", repr(key)):
        assert part in str(error.value), (part, str(error.value))
    # Spark tasks send it back to the driver pickled.
    again = pickle.loads(pickle.dumps(error.value))
    assert (again.path, again.coord, again.key, str(again)) == ("/a", (0, 1), key, str(error.value))


def test_a_truncated_chunk_object_is_named_by_get_chunk(truncated_chunk):
    repo, key = truncated_chunk
    with pytest.raises(TruncatedChunkError) as error:
        repo.readonly_session().get_chunk("/a", (0, 1))
    _names_the_chunk(error, key)
    # A range inside what is left is still whole: only reads past the cut fail.
    assert repo.readonly_session().get_chunk("/a", (0, 1), (0, 8)) == bytes(
        np.arange(2, dtype="<i4")
    )


def test_a_truncated_chunk_object_is_named_by_zarr_reads(truncated_chunk):
    repo, key = truncated_chunk
    array = zarr.open_array(repo.readonly_session().store, path="a", mode="r")
    assert (array[5:, :] == 0).all()  # the other chunks were never written: fill values
    with pytest.raises(TruncatedChunkError) as error:
        array[:]
    _names_the_chunk(error, key)


def test_a_truncated_chunk_object_is_named_by_a_fork(truncated_chunk):
    repo, key = truncated_chunk
    with pytest.raises(TruncatedChunkError) as error:
        repo.writable_session().fork().get_chunk("/a", (0, 1))
    _names_the_chunk(error, key)

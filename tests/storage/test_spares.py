"""Spare temporary files of local storage (``storage.spares``): made behind a commit, taken
by the next writes, never a leftover to the storage holding them, and never a reason for a
write to fail when another process's GC sweeps them."""

from __future__ import annotations

import os
import pickle
import time
import warnings
from pathlib import Path

import pytest

from icechunk_spark import Repository
from icechunk_spark.storage.local import LocalStorage
from tests.support.helpers import hints_written


def _temporary_files(storage: LocalStorage) -> list[str]:
    """Temporary files on disk, as any other process lists them."""
    return sorted(info.key for info in LocalStorage(storage.root).list_temporary())


class SweptBeforeTheRename(LocalStorage):
    """GC sweeps a spare between its write and its rename (its listed time was old)."""

    def _write_temp(self, key: str, data: bytes, durable: bool = True, spare: bool = False) -> str:
        tmp = super()._write_temp(key, data, durable, spare)
        if spare:
            os.unlink(tmp)
        return tmp


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "repo")


def test_a_write_takes_the_spare_made_behind_the_last_one(storage: LocalStorage) -> None:
    storage.put("m/first", b"x")
    assert _temporary_files(storage) == []
    storage.ready_for_writes()
    [spare] = _temporary_files(storage)
    assert spare.startswith("m/.tmp-")
    assert list(storage.list_temporary()) == [], "its own spare is no leftover to the storage"
    inode = os.stat(storage.root / spare).st_ino
    storage.put("m/second", b"mine")
    assert _temporary_files(storage) == [], "the write made a file of its own beside the spare"
    assert os.stat(storage.root / "m/second").st_ino == inode, "the spare was not taken"
    assert storage.get("m/second") == b"mine"
    storage.ready_for_writes()
    storage.ready_for_writes()  # no write since: nothing more
    assert len(_temporary_files(storage)) == 1, "one spare a folder"


def test_a_spare_swept_before_it_is_taken(storage: LocalStorage) -> None:
    storage.put("m/first", b"x")
    storage.ready_for_writes()
    storage.delete(_temporary_files(storage))  # another process's GC: an old temporary file
    storage.put("m/second", b"mine")
    assert storage.get("m/second") == b"mine"
    assert _temporary_files(storage) == []


def test_a_spare_swept_before_its_rename_is_written_again(tmp_path: Path) -> None:
    storage = SweptBeforeTheRename(tmp_path / "repo")
    storage.put("m/first", b"x")
    storage.ready_for_writes()
    storage.put("m/second", b"mine")
    assert storage.get("m/second") == b"mine"
    assert _temporary_files(storage) == []


def test_the_hint_and_an_unprepared_create_take_no_spare(storage: LocalStorage) -> None:
    # The hint follows the commit, and a create not prepared ahead is a retry's or
    # maintenance's: no commit waits for a file of theirs made ahead.
    storage.put_best_effort("hint", b"x")
    assert storage.put_if_absent("t/00000000000000000001", b"x")
    storage.ready_for_writes()
    assert _temporary_files(storage) == []


def test_a_prepared_state_file_takes_the_spare(storage: LocalStorage) -> None:
    """A commit's state file is prepared beside its objects, on the calling thread: its
    create costs that thread an inode as much as a put does (0.933 of the wall time, paired
    after 30,000 deletions; 0.987 without them)."""
    first, second = "t/00000000000000000001", "t/00000000000000000002"
    storage.prepare_put_if_absent(first, data := b"first")
    assert storage.put_if_absent(first, data)
    storage.ready_for_writes()
    [spare] = _temporary_files(storage)
    assert spare.startswith("t/.tmp-")
    inode = os.stat(storage.root / spare).st_ino
    storage.prepare_put_if_absent(second, data := b"second")
    assert storage.put_if_absent(second, data)
    assert os.stat(storage.root / second).st_ino == inode, "the spare was not taken"
    assert storage.get(second) == b"second"
    assert _temporary_files(storage) == []


def test_a_state_file_prepared_after_its_spare_was_swept(storage: LocalStorage) -> None:
    storage.prepare_put_if_absent("t/00000000000000000001", data := b"first")
    assert storage.put_if_absent("t/00000000000000000001", data)
    storage.ready_for_writes()
    storage.delete(_temporary_files(storage))  # another process's GC: an old temporary file
    storage.prepare_put_if_absent("t/00000000000000000002", data := b"second")
    assert storage._prepared, "no head start: the swept spare was not replaced"
    assert storage.put_if_absent("t/00000000000000000002", data)
    assert storage.get("t/00000000000000000002") == b"second"
    assert _temporary_files(storage) == []


def test_close_and_a_pickled_copy(storage: LocalStorage) -> None:
    storage.put("m/a", b"x")
    storage.put("s/b", b"x")
    storage.ready_for_writes()
    assert len(_temporary_files(storage)) == 2
    copy = pickle.loads(pickle.dumps(storage))
    assert len(list(copy.list_temporary())) == 2, "another handle's spares are temporary files"
    copy.put("m/c", b"y")  # its own files: the original's spare stays where it was
    assert len(_temporary_files(storage)) == 2
    storage.close()
    assert _temporary_files(storage) == []
    storage.put("m/d", b"z")  # a closed local storage still writes, making its own file
    assert storage.get("m/d") == b"z"


def test_a_forked_child_leaves_its_parents_spares_alone(storage: LocalStorage) -> None:
    storage.put("m/a", b"x")
    storage.ready_for_writes()
    [spare] = _temporary_files(storage)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork beside pytest's threads
        pid = os.fork()
    if pid == 0:  # the child: writes in the same folder, then reports what it held
        try:
            held = sorted(storage._spares.held())
            storage.put("m/child", b"child")
            os.write(write, repr(held).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        assert answer.read() == "[]", "the child took its parent's spares for its own"
    os.waitpid(pid, 0)
    assert _temporary_files(storage) == [spare], "the child wrote into its parent's spare"
    storage.put("m/parent", b"parent")
    assert [storage.get(k) for k in ("m/child", "m/parent")] == [b"child", b"parent"]


@pytest.mark.parametrize("opened_from", ["url", "storage"])
def test_a_repository_closes_only_the_storage_it_opened(tmp_path: Path, opened_from: str) -> None:
    storage = LocalStorage(tmp_path / "repo")
    repo = Repository.create(storage.url if opened_from == "url" else storage)
    session = repo.writable_session()
    session.create_group("/")
    session.commit("a commit, and behind it the spares of the next")
    hints_written(repo)
    assert _temporary_files(storage), "no spare was made behind the commit"
    repo.close()
    if opened_from == "url":
        assert _temporary_files(storage) == [], "closed, the repository left its spares"
    else:  # the caller's storage, still open: its spares are its own to close
        assert _temporary_files(storage)
        storage.close()
        assert _temporary_files(storage) == []


def _spare_made_an_hour_ago(storage: LocalStorage) -> float:
    """Make the spare behind the last write an hour old; returns the time after that."""
    storage.ready_for_writes()
    [spare] = _temporary_files(storage)
    an_hour_ago = time.time() - 3600
    os.utime(storage.root / spare, (an_hour_ago, an_hour_ago))
    return time.time()


def _written_since(storage: LocalStorage, key: str, since: float) -> bool:
    [info] = storage.list(key)
    return info.modified_ms + storage.mtime_resolution_ms >= since * 1000


@pytest.mark.parametrize("data", [b"", b"bytes"], ids=["empty", "bytes"])
def test_an_object_put_through_a_spare_is_as_young_as_its_put(
    storage: LocalStorage, data: bytes
) -> None:
    # GC takes an unreferenced object older than its cut-off: an object must carry the time
    # of its put, not of the spare made long before (an empty one writes no byte).
    storage.put("c/first", b"x")
    before = _spare_made_an_hour_ago(storage)
    storage.put("c/new", data)
    assert storage.get("c/new") == data
    assert _written_since(storage, "c/new", before), "an old time"


@pytest.mark.parametrize("data", [b"", b"bytes"], ids=["empty", "bytes"])
def test_a_prepared_create_through_a_spare_is_as_young_as_its_write(
    storage: LocalStorage, data: bytes
) -> None:
    # The same rule as for a put: prepare_put_if_absent takes spares too (a commit's state
    # file), and no bytes written would leave the new file the spare's old time.
    storage.prepare_put_if_absent("t/00000000000000000001", b"first")
    assert storage.put_if_absent("t/00000000000000000001", b"first")
    before = _spare_made_an_hour_ago(storage)
    storage.prepare_put_if_absent("t/00000000000000000002", data)
    assert storage.put_if_absent("t/00000000000000000002", data)
    assert _written_since(storage, "t/00000000000000000002", before), "an old time"

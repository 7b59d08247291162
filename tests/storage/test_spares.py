"""Spare temporary files of local storage (``storage.spares``): made behind a commit, taken
by the next writes, and never a reason for a write to fail when GC sweeps them."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from icechunk_spark.storage.local import LocalStorage

WRITES = {
    "put": lambda s, key: s.put(key, b"mine"),
    "put_best_effort": lambda s, key: s.put_best_effort(key, b"mine"),
    "put_if_absent": lambda s, key: s.put_if_absent(key, b"mine"),
}


def _temporary(storage: LocalStorage) -> list[str]:
    return sorted(info.key for info in storage.list_temporary())


class SweptBeforeTheRename(LocalStorage):
    """GC sweeps a spare between its write and its rename (its listed time was old)."""

    def _write_temp(self, key: str, data: bytes, durable: bool = True, spare: bool = True) -> str:
        tmp = super()._write_temp(key, data, durable, spare)
        if spare:
            os.unlink(tmp)
        return tmp


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "repo")


def test_a_write_takes_the_spare_made_behind_the_last_one(storage: LocalStorage) -> None:
    storage.put("m/first", b"x")
    assert _temporary(storage) == []
    storage.ready_for_writes()
    [spare] = _temporary(storage)
    assert spare.startswith("m/.tmp-")
    inode = os.stat(storage.root / spare).st_ino
    storage.put("m/second", b"mine")
    assert _temporary(storage) == [], "the write made a file of its own beside the spare"
    assert os.stat(storage.root / "m/second").st_ino == inode, "the spare was not taken"
    assert storage.get("m/second") == b"mine"
    storage.ready_for_writes()
    storage.ready_for_writes()  # no write since: nothing more
    assert len(_temporary(storage)) == 1, "one spare a folder"


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_spare_swept_before_it_is_taken(storage: LocalStorage, write: str) -> None:
    WRITES[write](storage, "t/00000000000000000001")
    storage.ready_for_writes()
    storage.delete(_temporary(storage))  # GC: an old temporary file
    WRITES[write](storage, "t/00000000000000000002")
    assert storage.get("t/00000000000000000002") == b"mine"
    assert _temporary(storage) == []


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_spare_swept_before_its_rename_is_written_again(tmp_path: Path, write: str) -> None:
    storage = SweptBeforeTheRename(tmp_path / "repo")
    WRITES[write](storage, "t/00000000000000000001")
    assert storage.get("t/00000000000000000001") == b"mine"
    storage.ready_for_writes()
    WRITES[write](storage, "t/00000000000000000002")
    assert storage.get("t/00000000000000000002") == b"mine"
    assert _temporary(storage) == []


def test_close_and_a_pickled_copy(storage: LocalStorage) -> None:
    storage.put("m/a", b"x")
    storage.put("s/b", b"x")
    storage.ready_for_writes()
    assert len(_temporary(storage)) == 2
    copy = pickle.loads(pickle.dumps(storage))
    copy.put("m/c", b"y")  # its own files: the original's spare stays where it was
    assert len(_temporary(storage)) == 2
    storage.close()
    assert _temporary(storage) == []
    storage.put("m/d", b"z")  # a closed local storage still writes, making its own file
    assert storage.get("m/d") == b"z"

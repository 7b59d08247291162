"""Spare temporary files: the files of a local disk's next writes, created ahead of them.

Creating a file allocates an inode, at a cost set by the file system's state rather than by
the write. ext4 without a journal (the root of this kind of VM) skips, and checks one by one,
every inode freed in the last minute (six, while their table block is dirty), so after a
burst of deletions nearby (a test suite's or a benchmark's temporary folders) every create
scans past thousands of them. A small commit waits for three puts and the preparation of
its state file, each creating a file; after 30,000 deletions beside the repository it took
7.4 ms, and 5.9 with spares for the puts (5.7 and 5.6 without the deletions:
``bench/pair_small_commits.py df3622d 99a4b0e --churn 30000``); a spare for the state file
too took 0.933 of the time after the deletions, 0.987 without.

So a local storage keeps one empty temporary file ready in each folder where a commit puts
objects or prepares its state file: behind a commit (``Storage.ready_for_writes``, on the
I/O threads after the hint) it creates what that commit's writes took, and the next such
writes there take it instead of creating one.

A spare is a temporary file (``.tmp-``), never listed as an object. The storage holding it
leaves it out of its ``list_temporary`` (it is no leftover of an interrupted write, and GC
run from that process neither counts nor sweeps it); to another process it is a temporary
file like any other, which GC sweeps when older than its cut-off, as a spare may be while it
waits. A write that finds its spare gone, or loses it before the rename, writes a new
temporary file instead (``LocalStorage``). The spares of a storage are deleted when it is
closed, garbage-collected or the interpreter exits; a crash leaves them to GC. A forked
child forgets its parent's spares: two processes writing one file would mix their bytes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import weakref

TEMP_PREFIX = ".tmp-"  # a write in progress (or one a crash interrupted), or a spare


def new_temp_path(folder: str) -> str:
    # Not tempfile.mkstemp: its name generator costs more than the write of a small object
    # (0.21 ms against 0.15 ms); a random name made once is as unique.
    return f"{folder}/{TEMP_PREFIX}{secrets.token_hex(8)}"


def create_temp(path: str) -> int:
    """Create ``path`` (which must not exist) for writing; mode 0o666 under the umask, as any
    file: readable by those the folder allows."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)


class Spares:
    """At most one empty temporary file by folder, made by ``replenish`` and taken by writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[str, str] = {}  # folder -> its spare
        self._wanted: set[str] = set()  # folders written to since the last replenish
        # Holds the dict, not self: the spares go when this object does, or at exit.
        weakref.finalize(self, _delete_all, self._ready)
        _LIVE.add(self)

    def take(self, folder: str) -> str | None:
        """The spare of ``folder`` (now the caller's to write, rename or delete), if any."""
        with self._lock:
            self._wanted.add(folder)
            return self._ready.pop(folder, None)

    def replenish(self) -> None:
        """Create a spare in each folder whose spare was taken (or found missing) since."""
        with self._lock:
            missing = [f for f in self._wanted if f not in self._ready]
            self._wanted.clear()
        for folder in missing:
            path = new_temp_path(folder)
            try:
                os.close(create_temp(path))
            except OSError:
                continue  # a head start only: the next write there creates its own
            with self._lock:
                kept = self._ready.setdefault(folder, path) == path
            if not kept:
                _delete(path)  # another thread made one meanwhile

    def held(self) -> frozenset[str]:
        """The paths of the spares waiting to be taken."""
        with self._lock:
            return frozenset(self._ready.values())

    def discard(self) -> None:
        """Delete every spare."""
        with self._lock:
            ready = dict(self._ready)
            self._ready.clear()
        _delete_all(ready)

    def _forget(self) -> None:
        """In a forked child: the parent's spares are the parent's (left on disk)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._ready.clear()
        self._wanted.clear()


_LIVE: weakref.WeakSet[Spares] = weakref.WeakSet()


def _forget_all_in_child() -> None:
    for spares in list(_LIVE):
        spares._forget()


os.register_at_fork(after_in_child=_forget_all_in_child)


def _delete_all(ready: dict[str, str]) -> None:
    # No lock: for a copy (discard), or when the Spares is unreachable or the interpreter
    # exits, once the threads have ended.
    paths = list(ready.values())
    ready.clear()
    for path in paths:
        _delete(path)


def _delete(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)

"""Local-filesystem storage.

Writes go to a temporary file in the same folder, are fsync'ed, and are published atomically:
``os.replace`` for plain puts, ``os.link`` for put-if-absent (link fails if the name exists, so
exactly one writer wins and no reader ever sees a half-written file). A put-if-absent may be
prepared: its temporary file written and synced ahead, the link left for later. The
temporary file of a put, or of a prepared put-if-absent, is made ahead when it can be: a
spare, created behind the last commit (``spares``), so that the writes a commit waits for
allocate no inode.

Durability: a name is an entry in its folder, and a folder is an entry in its parent; fsync of
a file makes its bytes durable, not its name. So after publishing, the folder is fsync'ed too,
and so is the parent of every folder we create. When ``put`` or ``put_if_absent`` returns, the
object survives a power loss. A commit writes everything a state file names (chunks, manifests,
structure, transaction log) before it creates the state file, so no state file can survive a
crash that the files it names did not.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import (
    NotFoundError,
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
)
from .base import ObjectInfo, Storage
from .spares import TEMP_PREFIX, Spares, create_temp, new_temp_path


class LocalStorage(Storage):
    # File times come from the kernel's clock tick (up to 10 ms, at HZ=100), not the fine
    # clock: since Linux 6.13 (multigrain timestamps) a file no one has stat'ed since its last
    # write carries the time of the last tick, a few ms before the write. GC must take such
    # a time as "written within the next tick" or it would delete a file written after its
    # cut-off.
    mtime_resolution_ms = 10
    remote = False

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.url = self.root.as_uri()
        self._root = str(self.root)
        # (key, id of the bytes) -> (the bytes, their temporary file), for put_if_absent. By
        # the bytes' identity: two commits of a process may prepare one generation, each its
        # own bytes. The entry holds them, so no other object can take their id meanwhile.
        self._prepared: dict[tuple[str, int], tuple[bytes, str]] = {}
        self._spares = Spares()

    def __getstate__(self) -> dict[str, object]:
        # A handle on the same folder: another process has its own prepared and spare files.
        state = {**self.__dict__, "_prepared": {}}
        del state["_spares"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._spares = Spares()

    def ready_for_writes(self) -> None:
        """A spare temporary file in each folder whose last one a write took (``spares``)."""
        self._spares.replenish()

    def close(self) -> None:
        self._spares.discard()

    def _path(self, key: str) -> str:
        # A string, not a Path: pathlib costs tens of microseconds a write, and a small
        # commit makes five of them.
        return f"{self._root}/{key}"

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None
        except OSError as exc:
            raise self._failure(exc, f"reading {key!r}") from exc

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except FileNotFoundError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None
        except OSError as exc:
            raise self._failure(exc, f"reading {key!r}") from exc

    def _write_temp(self, key: str, data: bytes, durable: bool = True, spare: bool = False) -> str:
        """A temporary file in ``key``'s folder holding ``data``: with ``spare``, the folder's
        spare if it has one (``spares``), else a new one. Never a spare for no bytes: a write
        of none leaves a file's time as it was, and the object would carry its spare's, maybe
        older than a GC's cut-off that must spare it."""
        fd, tmp = self._open_temp(os.path.dirname(self._path(key)), spare and bool(data))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _open_temp(self, folder: str, spare: bool) -> tuple[int, str]:
        """Raises ``FileNotFoundError`` when the spare taken was swept by GC (an old
        temporary file): the caller writes once more, without one."""
        tmp = self._spares.take(folder) if spare else None
        if tmp is not None:
            return os.open(tmp, os.O_WRONLY | os.O_CLOEXEC), tmp
        _make_folders(folder)
        tmp = new_temp_path(folder)
        return create_temp(tmp), tmp

    def put(self, key: str, data: bytes) -> None:
        # A spare here and for a prepared state file (prepare_put_if_absent): the writes a
        # commit waits for. The hint is written behind it.
        path = self._path(key)
        try:
            try:
                os.replace(self._write_temp(key, data, spare=True), path)
            except FileNotFoundError:
                # GC swept the spare before or during its write: once more, in a new file.
                os.replace(self._write_temp(key, data), path)
            _fsync_folder(os.path.dirname(path))
        except OSError as exc:
            raise self._failure(exc, f"writing {key!r}") from exc

    def put_best_effort(self, key: str, data: bytes) -> None:
        """``put`` without its two fsyncs (~0.2 ms on a commit's path here): a crash may leave
        the object old, empty or missing, never a torn mix seen by a running reader (the
        rename is atomic), and the hint's readers take a bad one as missing."""
        try:
            os.replace(self._write_temp(key, data, durable=False), self._path(key))
        except OSError as exc:
            raise self._failure(exc, f"writing {key!r}") from exc

    def prepare_put_if_absent(self, key: str, data: bytes) -> None:
        """Write and fsync the temporary file now; ``put_if_absent`` then only links it (a
        commit's state file: synced beside the build's last objects, not after them). The
        file is the folder's spare when it has one: the calling thread prepares it while the
        objects are encoded and written, and an inode's allocation takes CPU from them."""
        try:
            try:
                tmp = self._write_temp(key, data, spare=True)
            except FileNotFoundError:  # GC swept the spare: once more, in a new file
                tmp = self._write_temp(key, data)
        except OSError:
            return  # a head start only: put_if_absent writes it, and reports what fails
        self._prepared[(key, id(data))] = (data, tmp)

    def drop_prepared(self, key: str, data: bytes) -> None:
        tmp = self._take_prepared(key, data)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _take_prepared(self, key: str, data: bytes) -> str | None:
        """The temporary file prepared for these very bytes; put_if_absent removes it, linked
        or not. Gone meanwhile (GC sweeps old temporary files)? Then the link fails, and
        ``refs.publish_state`` reads back and tries again, unprepared."""
        entry = self._prepared.pop((key, id(data)), None)
        return None if entry is None else entry[1]

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            tmp = self._take_prepared(key, data) or self._write_temp(key, data)
        except OSError as exc:
            raise self._failure(exc, f"creating {key!r}") from exc
        path = self._path(key)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise self._failure(exc, f"creating {key!r}") from exc
        finally:
            # The temporary name may outlive a crash; GC sweeps it. No fsync needed for that.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        try:
            _fsync_folder(os.path.dirname(path))
        except OSError as exc:
            raise self._failure(exc, f"creating {key!r}") from exc
        return True

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # The folder that holds every key starting with prefix ("" is the root itself, not
        # its parent: a listing never reaches outside the location).
        folder = self.root / prefix.rpartition("/")[0]
        if not folder.is_dir():
            return
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue
                full = os.path.join(dirpath, name)
                key = os.path.relpath(full, self.root).replace(os.sep, "/")
                if not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # deleted while listing
                yield ObjectInfo(key, st.st_size, int(st.st_mtime * 1000))

    def list_temporary(self) -> Iterator[ObjectInfo]:
        held = self._spares.held()  # made for our next writes, not left behind by any
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith(TEMP_PREFIX):
                    continue
                full = os.path.join(dirpath, name)
                if full in held:
                    continue
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # its write finished (or was cleaned up) meanwhile
                key = os.path.relpath(full, self.root).replace(os.sep, "/")
                yield ObjectInfo(key, st.st_size, int(st.st_mtime * 1000))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise self._failure(exc, f"deleting {key!r}") from exc

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def _failure(self, exc: OSError, describe: str) -> StorageError:
        """One sentence naming the repository and what to check (no raw errno text)."""
        if isinstance(exc, PermissionError):
            return StorageCredentialsError(
                f"permission denied while {describe} in {self.url}: check that this user may "
                "read and write that folder"
            )
        if isinstance(exc, NotADirectoryError | FileExistsError):  # a file where a folder goes
            return StorageNotFoundError(
                f"{self.url} is not a folder (a file is in the way) while {describe}: check the "
                "path"
            )
        reason = exc.strerror or type(exc).__name__
        return StorageError(
            f"{describe} in {self.url} failed ({reason}): check the path, the free disk space "
            "and the file system"
        )


def _make_folders(folder: str) -> None:
    """Create ``folder`` and its missing parents, each durably (its parent fsync'ed)."""
    if os.path.isdir(folder):
        return
    missing = []
    cursor = folder
    while not os.path.isdir(cursor):
        missing.append(cursor)
        cursor = os.path.dirname(cursor)
    for path in reversed(missing):
        # Made by another writer meanwhile? Its entry may not be durable yet: fsync anyway.
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        _fsync_folder(os.path.dirname(path))


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

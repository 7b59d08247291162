"""Local-filesystem storage.

Writes go to a temporary file in the same folder, are fsync'ed, and are published atomically:
``os.replace`` for plain puts, ``os.link`` for put-if-absent (link fails if the name exists, so
exactly one writer wins and no reader ever sees a half-written file).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import NotFoundError, StorageError
from .base import ObjectInfo, Storage

_TEMP_PREFIX = ".tmp-"  # a write in progress (or one a crash interrupted)


class LocalStorage(Storage):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None
        except OSError as exc:
            raise StorageError(f"reading {key!r} from {self.url} failed: {exc}") from exc

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except FileNotFoundError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None

    def _write_temp(self, key: str, data: bytes) -> str:
        folder = self._path(key).parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def put(self, key: str, data: bytes) -> None:
        tmp = self._write_temp(key, data)
        os.replace(tmp, self._path(key))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        tmp = self._write_temp(key, data)
        try:
            os.link(tmp, self._path(key))
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder = self._path(prefix) if prefix.endswith("/") else self._path(prefix).parent
        if not folder.is_dir():
            return
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith(_TEMP_PREFIX):
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
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith(_TEMP_PREFIX):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # its write finished (or was cleaned up) meanwhile
                key = os.path.relpath(full, self.root).replace(os.sep, "/")
                yield ObjectInfo(key, st.st_size, int(st.st_mtime * 1000))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(key))

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

"""Reading parts of stored objects: a seekable file over ranged GETs (Parquet row groups)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pyarrow.parquet as pq

from ..errors import NotFoundError
from .base import Storage


def object_size(storage: Storage, key: str) -> int:
    """The size of one stored object (listing is the only size query storages offer)."""
    for info in storage.list(key):
        if info.key == key:
            return info.size
    raise NotFoundError(f"object {key!r} not found in {storage.url}")


class _RangedFile(io.RawIOBase):
    """A read-only, seekable file over ``storage.get_range``: Parquet reads only what it needs."""

    def __init__(self, storage: Storage, key: str, size: int) -> None:
        self._storage, self._key, self._size, self._pos = storage, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        end = min(self._size, self._pos + len(buffer))
        if end <= self._pos:
            return 0
        data = self._storage.get_range(self._key, self._pos, end)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


@contextlib.contextmanager
def open_parquet(storage: Storage, key: str, size: int | None) -> Iterator[pq.ParquetFile]:
    """A Parquet file in storage, read with ranged GETs (footer, then chosen column chunks)."""
    if size is None:
        size = object_size(storage, key)
    with io.BufferedReader(_RangedFile(storage, key, size), buffer_size=1 << 20) as file:
        yield pq.ParquetFile(file)


__all__ = ["object_size", "open_parquet"]

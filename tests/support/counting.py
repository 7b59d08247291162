"""A storage wrapper that counts requests and bytes by key prefix (for I/O assertions)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from icechunk_spark.storage import ObjectInfo, Storage


class CountingStorage(Storage):
    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self.mtime_resolution_ms = inner.mtime_resolution_ms
        self.remote = inner.remote
        self.gets: Counter[str] = Counter()
        self.get_bytes: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()
        self.keys_read: Counter[str] = Counter()

    def reset(self) -> None:
        self.gets.clear()
        self.get_bytes.clear()
        self.puts.clear()
        self.keys_read.clear()

    @staticmethod
    def _kind(key: str) -> str:
        return key.split("/", 1)[0] if "/" in key else key

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self.gets[self._kind(key)] += 1
        self.keys_read[key] += 1
        self.get_bytes[self._kind(key)] += len(data)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        self.gets[self._kind(key)] += 1
        self.keys_read[key] += 1
        self.get_bytes[self._kind(key)] += len(data)
        return data

    def put(self, key: str, data: bytes) -> None:
        self.puts[self._kind(key)] += 1
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.puts[self._kind(key)] += 1
        return self.inner.put_if_absent(key, data)

    def put_best_effort(self, key: str, data: bytes) -> None:
        self.puts[self._kind(key)] += 1
        self.inner.put_best_effort(key, data)

    def prepare_put_if_absent(self, key: str, data: bytes) -> None:
        self.inner.prepare_put_if_absent(key, data)  # counted when put_if_absent creates it

    def drop_prepared(self, key: str, data: bytes) -> None:
        self.inner.drop_prepared(key, data)

    def ready_for_writes(self) -> None:
        self.inner.ready_for_writes()

    def list_temporary(self) -> Iterator[ObjectInfo]:
        return self.inner.list_temporary()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(keys)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

"""In-process storage, for tests and scratch work. ``memory://name`` opens the same store again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from ..errors import NotFoundError
from .base import ObjectInfo, Storage

_REGISTRY: dict[str, MemoryStorage] = {}
_REGISTRY_LOCK = threading.Lock()


class MemoryStorage(Storage):
    remote = False

    def __init__(self, name: str = "") -> None:
        self.url = f"memory://{name}"
        self._objects: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # Pickle by name: unpickling in this process finds the same objects again.
        return (MemoryStorage.named, (self.url[len("memory://") :],))

    @classmethod
    def named(cls, name: str) -> MemoryStorage:
        """The process-wide store called ``name`` (created on first use)."""
        with _REGISTRY_LOCK:
            if name not in _REGISTRY:
                _REGISTRY[name] = cls(name)
            return _REGISTRY[name]

    def get(self, key: str) -> bytes:
        try:
            return self._objects[key][0]
        except KeyError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.get(key)[start:end]

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._objects[key] = (bytes(data), _now_ms())

    def put_if_absent(self, key: str, data: bytes) -> bool:
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = (bytes(data), _now_ms())
            return True

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        with self._lock:
            items = [(k, v) for k, v in self._objects.items() if k.startswith(prefix)]
        for key, (data, modified) in items:
            yield ObjectInfo(key, len(data), modified)

    def delete(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                self._objects.pop(key, None)

    def exists(self, key: str) -> bool:
        return key in self._objects


def _now_ms() -> int:
    return int(time.time() * 1000)

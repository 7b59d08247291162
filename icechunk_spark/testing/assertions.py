"""Small helpers the checks of ``StorageTests`` share: listing keys, showing bytes, failing
with a sentence.

pytest rewrites asserts only in test modules, so every assert carries its own message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..storage.base import ObjectInfo, Storage


def must_not_raise(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def keys_of(infos: Iterator[ObjectInfo]) -> list[str]:
    keys = [info.key for info in infos]
    assert len(keys) == len(set(keys)), f"a listing repeated keys: {sorted(keys)}"
    return sorted(keys)


def put_all(storage: Storage, keys: list[str]) -> None:
    # Many small writes: a few threads, as a pipeline would, so slow backends stay quick.
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda key: storage.put(key, key.encode()), keys))


def show(data: bytes) -> str:
    if len(data) <= 40:
        return repr(data)
    return f"{len(data)} bytes starting {data[:24]!r}"

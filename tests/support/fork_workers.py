"""Entry points that fork tests run in other processes: each writes through a fork it was sent.

Every function returns the fork (pickled back with its changes) or dies on purpose.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np


def write_chunks(fork: Any, path: str, chunks: dict[tuple[int, ...], bytes]) -> Any:
    """Write encoded ``chunks`` of array ``path`` through ``fork``; return it for merging."""
    for coord, data in chunks.items():
        fork.set_chunk(path, coord, data)
    return fork


def write_values(fork: Any, path: str, coord: tuple[int, ...], values: np.ndarray) -> Any:
    fork.set_chunk_values(path, coord, values)
    return fork


def write_virtual(fork: Any, path: str, coord: tuple[int, ...], url: str, length: int) -> Any:
    fork.set_virtual_ref(path, coord, url, offset=0, length=length)
    return fork


def write_then_die(fork: Any, path: str, chunks: dict[tuple[int, ...], bytes]) -> None:
    """Write the first chunk, then die with SIGKILL before writing the rest (mid-write)."""
    items = list(chunks.items())
    coord, data = items[0]
    fork.set_chunk(path, coord, data)
    os.kill(os.getpid(), signal.SIGKILL)


def write_through_store(store: Any, key: str, data: bytes) -> None:
    """Write one chunk through a pickled zarr store (an implicit fork) and return nothing:
    the writes stay in this process, as with ``ds.to_zarr(session.store)`` on Dask workers."""
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    sync(store.set(key, cpu.Buffer.from_bytes(data)))


def write_through_store_and_return(store: Any, key: str, data: bytes) -> Any:
    write_through_store(store, key, data)
    return store

"""Reading one chunk's bytes from its ref: inline, a chunk file in ``c/``, or a virtual file.

A chunk file that ends early (cut short after it was written: an interrupted copy, a damaged
disk) is reported as such, naming the object: storage clips a range read to the object's end,
so without the length check a short read would reach the codecs as if whole, and fail there
with an error that names nothing (numpy's "size must be a divisor"), or decode wrong values.
The reader that knows which chunk it asked for adds the array and the coord
(``naming_chunk``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..errors import TruncatedChunkError
from ..format.keys import chunk_key
from ..storage import Storage
from .manifest_cache import ChunkRef

if TYPE_CHECKING:
    from .virtual_reads import VirtualReader


def read_ref(
    storage: Storage,
    virtual: VirtualReader,
    ref: ChunkRef,
    byte_range: tuple[int, int | None] | None = None,
) -> bytes:
    """The bytes a chunk ref points to (a sub-range of them with ``byte_range``).

    Raises:
        TruncatedChunkError: the chunk file ends before the bytes asked for.
    """
    start, end = _bounds(ref, byte_range)
    if ref.kind == "inline":
        assert ref.inline_data is not None
        return ref.inline_data[start:end]
    if ref.kind == "native":
        assert ref.chunk_id is not None
        return _read_native(storage, chunk_key(ref.chunk_id), ref.offset + start, ref.offset + end)
    # A virtual file that ends early is the VirtualReader's to report (VirtualRangeError).
    assert ref.virtual_path is not None
    return virtual.read(ref.virtual_path, ref.offset + start, end - start, ref.checksum)


async def read_ref_async(
    storage: Storage,
    virtual: VirtualReader,
    ref: ChunkRef,
    byte_range: tuple[int, int | None] | None = None,
) -> bytes:
    """``read_ref`` for an event loop: a virtual read is awaited, so every concurrent read joins
    one coalesced batch (not a thread each); a chunk file is read in a thread, so the loop
    keeps going; inline bytes are at hand."""
    if ref.kind == "virtual":
        assert ref.virtual_path is not None
        start, end = _bounds(ref, byte_range)
        return await virtual.read_async(
            ref.virtual_path, ref.offset + start, end - start, ref.checksum
        )
    if ref.kind == "native":
        return await asyncio.to_thread(read_ref, storage, virtual, ref, byte_range)
    return read_ref(storage, virtual, ref, byte_range)


def _bounds(ref: ChunkRef, byte_range: tuple[int, int | None] | None) -> tuple[int, int]:
    """``[start, end)`` of the ref's bytes, clipped to its length."""
    if byte_range is None:
        return 0, ref.length
    start = min(byte_range[0], ref.length)
    return start, ref.length if byte_range[1] is None else min(byte_range[1], ref.length)


def _read_native(storage: Storage, key: str, start: int, end: int) -> bytes:
    data = storage.get_range(key, start, end)
    if len(data) != end - start:
        raise TruncatedChunkError(key, (start, end), len(data))
    return data


@contextmanager
def naming_chunk(path: str, coord: Sequence[int]) -> Iterator[None]:
    """Within: a ``TruncatedChunkError`` names chunk ``coord`` of the array at ``path``."""
    try:
        yield
    except TruncatedChunkError as exc:
        raise exc.of_chunk(path, tuple(coord)) from None

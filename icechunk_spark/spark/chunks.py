"""Executor-side chunk work: encode raw chunk bytes with the array's Zarr codecs, write them.

Encoding uses zarr's own codec pipeline built from the array's ``zarr.json``, so whatever
codecs the array declares (bytes, transpose, zstd, blosc, sharding...) are applied exactly as
zarr-python would. Writing puts one object per chunk, or packs many chunks of one task into
one object (``pack_chunks``) to save requests, and journals every object id *before* writing
it, so an attempt that dies midway leaves a list of what to delete.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..format.ids import new_object_id
from ..format.keys import chunk_key
from ..storage import Storage

DEFAULT_PACK_BYTES = 64 * 1024 * 1024
_IO_THREADS = 8


class ChunkCodec:
    """Zarr's codec pipeline of one array: raw C-order chunk bytes <-> stored bytes."""

    def __init__(self, zarr_json: bytes) -> None:
        self._doc = json.loads(zarr_json)

    @cached_property
    def _zarr(self) -> tuple[Any, Any, Any]:
        # Imported lazily: zarr's import is not free and readers never need it.
        from zarr.core.array import create_codec_pipeline
        from zarr.core.array_spec import ArrayConfig
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.metadata.v3 import ArrayV3Metadata

        meta = ArrayV3Metadata.from_dict(dict(self._doc))
        spec = meta.get_chunk_spec(
            (0,) * len(meta.shape), ArrayConfig.from_dict({}), default_buffer_prototype()
        )
        return meta, create_codec_pipeline(meta), spec

    @cached_property
    def dtype(self) -> np.dtype[Any]:
        native: np.dtype[Any] = np.dtype(self._zarr[0].dtype.to_native_dtype())
        return native

    @cached_property
    def chunk_shape(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self._zarr[2].shape)

    @property
    def chunk_nbytes(self) -> int:
        """The size of one chunk's raw bytes: the full chunk shape (edge chunks are padded)."""
        return int(np.prod(self.chunk_shape, dtype=np.int64)) * self.dtype.itemsize

    def encode(self, raw: Sequence[Any]) -> list[bytes]:
        """Encode raw chunks in one pipeline batch.

        Each item is any buffer (bytes, memoryview, ``pyarrow.Buffer``) of exactly
        ``chunk_nbytes`` bytes: the chunk's values in C order, in the array's dtype.
        """
        from zarr.core.buffer.cpu import NDBuffer
        from zarr.core.sync import sync

        _, pipeline, spec = self._zarr
        arrays = [
            NDBuffer.from_numpy_array(np.frombuffer(r, self.dtype).reshape(self.chunk_shape))
            for r in raw
        ]
        encoded = sync(pipeline.encode([(a, spec) for a in arrays]))
        out = []
        for buffer in encoded:
            if buffer is None:  # only a codec bug would do this; never store a silent gap
                raise InvalidInputError("the array's codec pipeline returned no bytes for a chunk")
            out.append(buffer.to_bytes())
        return out

    def decode(self, stored: bytes) -> np.ndarray:
        """Decode one stored chunk to an array of the chunk shape (tests and tools use this)."""
        from zarr.core.buffer.cpu import Buffer
        from zarr.core.sync import sync

        _, pipeline, spec = self._zarr
        decoded = sync(pipeline.decode([(Buffer.from_bytes(stored), spec)]))
        return np.asarray(decoded[0].as_numpy_array())


class ChunkObjectWriter:
    """Writes encoded chunks to ``c/<id>`` objects; packs them when asked.

    Every id is appended to the journal (an object under the write's staging prefix) before
    its object is written: the coordinator deletes journaled objects of failed attempts.
    """

    def __init__(
        self,
        storage: Storage,
        journal_prefix: str,
        pack: bool,
        pack_bytes: int = DEFAULT_PACK_BYTES,
    ) -> None:
        self._storage = storage
        self._journal_prefix = journal_prefix
        self._pack = pack
        self._pack_bytes = pack_bytes
        self._journals = 0
        self.written: list[str] = []
        self._pool = ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="icechunk-chunks")

    def write(self, chunks: Sequence[bytes]) -> tuple[list[str], list[int], list[int]]:
        """Store ``chunks``; returns each chunk's object id, offset and length."""
        if not chunks:
            return [], [], []
        ids: list[str] = []
        offsets: list[int] = []
        objects: list[tuple[str, list[bytes]]] = []
        if self._pack:
            current: list[bytes] = []
            size = 0
            object_id = new_object_id()
            for data in chunks:
                if current and size + len(data) > self._pack_bytes:
                    objects.append((object_id, current))
                    object_id, current, size = new_object_id(), [], 0
                ids.append(object_id)
                offsets.append(size)
                current.append(data)
                size += len(data)
            objects.append((object_id, current))
        else:
            for data in chunks:
                object_id = new_object_id()
                ids.append(object_id)
                offsets.append(0)
                objects.append((object_id, [data]))
        self._journal([object_id for object_id, _ in objects])
        keys = [chunk_key(object_id) for object_id, _ in objects]
        list(
            self._pool.map(
                lambda kv: self._storage.put(kv[0], b"".join(kv[1])),
                zip(keys, (parts for _, parts in objects), strict=True),
            )
        )
        return ids, offsets, [len(c) for c in chunks]

    def _journal(self, object_ids: list[str]) -> None:
        key = f"{self._journal_prefix}{self._journals:06d}"
        self._journals += 1
        self._storage.put(key, "\n".join(object_ids).encode())
        self.written.extend(object_ids)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def read_journal(data: bytes) -> list[str]:
    """The object ids a journal lists."""
    return [line for line in data.decode().split("\n") if line]


__all__ = ["DEFAULT_PACK_BYTES", "ChunkCodec", "ChunkObjectWriter", "read_journal"]

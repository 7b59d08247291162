"""Executor-side chunk writing (encoding is ``chunks.codec.ChunkCodec``, shared with the core).

Writing puts one object per chunk, or packs many chunks of one task into
one object (``pack_chunks``) to save requests, and journals every object id *before* writing
it, so an attempt that dies midway leaves a list of what to delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..format.ids import new_object_id
from ..format.keys import chunk_key
from ..storage import Storage

DEFAULT_PACK_BYTES = 64 * 1024 * 1024
_IO_THREADS = 8


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


__all__ = ["DEFAULT_PACK_BYTES", "ChunkObjectWriter", "read_journal"]

"""Manifests in memory: decoded manifests cached by id, loaded once however many threads
ask, and one array's refs of one manifest indexed for point lookups."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np
import pyarrow as pa

from ..format.coords import coord_keys
from ..format.keys import manifest_key
from ..format.manifest import decode_manifest, refs_of_array
from ..format.manifest_file import ManifestFile
from ..storage import Storage

RefKind = Literal["inline", "native", "virtual"]


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where one chunk's bytes are."""

    kind: RefKind
    inline_data: bytes | None = None
    chunk_id: str | None = None
    virtual_path: str | None = None
    offset: int = 0
    length: int = 0
    checksum: str | None = None


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Loads(Generic[K, V]):
    """Values loaded once per key and shared by threads, least recently used dropped first.

    Each entry is a future, so a reader asking for a value that another thread (the preloader)
    is loading waits for that load instead of starting a second one. Loaded entries beyond
    ``budget`` (summed ``weight``) are dropped; a failed load is forgotten, so a later read
    tries again.
    """

    def __init__(self, budget: int, weight: Callable[[V], int]) -> None:
        self._budget = budget
        self._weight = weight
        self._entries: OrderedDict[K, Future[V]] = OrderedDict()
        self._weights: dict[K, int] = {}  # of loaded entries; their sum is kept in _total
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        with self._lock:
            future = self._entries.get(key)
            owner = future is None
            if future is None:
                future = Future()
                self._entries[key] = future
            else:
                self._entries.move_to_end(key)
        if owner:
            try:
                value = load()
            except BaseException as exc:
                with self._lock:
                    self._entries.pop(key, None)
                future.set_exception(exc)
                raise
            future.set_result(value)
            self._count(key, future, value)
            self._evict()
        return future.result()

    def __contains__(self, key: K) -> bool:
        with self._lock:
            return key in self._entries

    def loaded(self, key: K) -> V | None:
        """The value if it is loaded already (never waits, never loads)."""
        with self._lock:
            future = self._entries.get(key)
        if future is None or not future.done() or future.exception() is not None:
            return None
        return future.result()

    def _count(self, key: K, future: Future[V], value: V) -> None:
        weight = self._weight(value)
        with self._lock:
            if self._entries.get(key) is future:
                self._weights[key] = weight
                self._total += weight

    def _evict(self) -> None:
        """Drop the least recently used loaded entries until the rest fit the budget (a
        running total: every commit loads a few entries, and summing all of them each time
        grew with the cache)."""
        with self._lock:
            if self._total <= self._budget:
                return
            for key in list(self._entries):
                if self._total <= self._budget:
                    break
                weight = self._weights.pop(key, None)
                if weight is not None:  # None: still loading
                    del self._entries[key]
                    self._total -= weight


class ManifestCache:
    """Manifests shared by every session of a repository, bounded by rows and bytes.

    Two ways in: ``get`` decodes a whole manifest (scans, array reads, rewrites); ``lookup``
    finds one ref by decoding only the row group whose statistics may hold it, from the
    manifest's bytes kept as a ``ManifestFile``. A cold process reading one chunk of a 1 M-ref
    array so decodes 16 Ki rows, not a million (bench/bench_lookup.py).
    """

    def __init__(
        self, storage: Storage, max_rows: int = 50_000_000, max_bytes: int = 256 << 20
    ) -> None:
        self._storage = storage
        self._tables: _Loads[str, pa.Table] = _Loads(max_rows, lambda t: t.num_rows)
        self._files: _Loads[str, ManifestFile] = _Loads(max_bytes, lambda f: len(f.data or b""))
        self._groups: _Loads[tuple[str, int, int], RefIndex] = _Loads(max_rows, len)
        self.fetches = 0  # manifest objects read from storage
        self.groups_decoded = 0  # row groups decoded for point lookups

    def get(self, manifest_id: str) -> pa.Table:
        """The whole manifest, decoded."""
        return self._tables.get(manifest_id, lambda: self._decode(manifest_id))

    def remember(self, manifest_id: str, table: pa.Table) -> None:
        """Keep a manifest this process just wrote, as ``get`` would decode it: the next commit
        on the branch rewrites it, and would otherwise read back and decode what it had."""
        self._tables.get(manifest_id, lambda: table)

    def is_cached(self, manifest_id: str) -> bool:
        """Whether the whole manifest is decoded (or being decoded) already."""
        return manifest_id in self._tables

    def file(self, manifest_id: str) -> ManifestFile:
        """The manifest's bytes with its footer parsed, for reads of single row groups."""
        return self._files.get(
            manifest_id,
            lambda: ManifestFile(self._fetch(manifest_id), manifest_key(manifest_id)),
        )

    def lookup(self, manifest_id: str, array_id: int, ndim: int, key: bytes) -> ChunkRef | None:
        """The ref of coord ``key`` of array ``array_id``, decoding only the row groups whose
        statistics may hold it (one, unless the file has no statistics)."""
        file = self.file(manifest_id)
        for group in file.groups_holding(array_id, key):
            index = self._groups.get(
                (manifest_id, group, array_id),
                lambda group=group: self._group_index(file, group, array_id, ndim),  # type: ignore[misc]
            )
            found = index.lookup(key)
            if found is not None:
                return found
        return None

    def _group_index(self, file: ManifestFile, group: int, array_id: int, ndim: int) -> RefIndex:
        self.groups_decoded += 1
        return RefIndex(refs_of_array(file.read_groups([group]), array_id), ndim)

    def _decode(self, manifest_id: str) -> pa.Table:
        key = manifest_key(manifest_id)
        file = self._files.loaded(manifest_id)
        data = file.data if file is not None and file.data is not None else None
        if data is None:
            data = self._fetch(manifest_id)
        return decode_manifest(data, key)

    def _fetch(self, manifest_id: str) -> bytes:
        # One GET of the whole object: the storage interface has no size query short of a
        # listing, and a footer-first ranged read needs the size (see docs/format.md).
        self.fetches += 1
        return self._storage.get(manifest_key(manifest_id))


class RefIndex:
    """One array's refs from one manifest, sorted by coord, searchable without a Python dict."""

    def __init__(self, refs: pa.Table, ndim: int) -> None:
        self.table = refs.combine_chunks()
        self.keys = coord_keys(self.table.column("coord"), ndim)
        if len(self.keys) > 1 and not np.all(self.keys[:-1] <= self.keys[1:]):
            order = np.argsort(self.keys, kind="stable")
            self.table = self.table.take(pa.array(order))
            self.keys = self.keys[order]

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def lookup(self, key: bytes) -> ChunkRef | None:
        probe = np.frombuffer(key, dtype=self.keys.dtype) if key else np.zeros(1, self.keys.dtype)
        i = int(np.searchsorted(self.keys, probe[0]))
        if i >= len(self.keys) or self.keys[i : i + 1].tobytes() != key.ljust(
            self.keys.itemsize, b"\0"
        ):
            return None
        return self.ref_at(i)

    def ref_at(self, i: int) -> ChunkRef:
        ref = row_ref(self.table, i)
        assert ref is not None, "manifests never hold tombstones"
        return ref


def row_ref(table: pa.Table, i: int) -> ChunkRef | None:
    """The ref in row ``i`` of a ref table; ``None`` for a tombstone (a deletion)."""
    inline = table.column("inline_data")[i].as_py()
    if inline is not None:
        return ChunkRef("inline", inline_data=inline, length=len(inline))
    offset = table.column("offset")[i].as_py() or 0
    length = table.column("length")[i].as_py() or 0
    chunk_id = table.column("chunk_id")[i].as_py()
    if chunk_id is not None:
        return ChunkRef("native", chunk_id=chunk_id, offset=offset, length=length)
    path = table.column("virtual_path")[i].as_py()
    if path is None:
        return None
    return ChunkRef(
        "virtual",
        virtual_path=path,
        offset=offset,
        length=length,
        checksum=table.column("checksum")[i].as_py(),
    )

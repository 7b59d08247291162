"""A session's uncommitted changes: nodes created, updated and deleted; chunk refs per array.

Chunk changes of one array are *layers*, newest last: Arrow tables from bulk writes, and a
dict for single-chunk writes that is frozen into a table whenever a bulk table arrives, so the
order of writes is kept without a Python object per chunk on the bulk path.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError
from ..format.coords import coord_keys, keys_to_coords
from ..format.manifest import CONFORMED_REF_SCHEMA, conform_refs, with_array_id
from ..format.merge import merge_refs
from ..format.structure import Node
from .manifest_cache import ChunkRef, row_ref
from .staged import StagedRefs, union

# A pending single-chunk change: a ref, or None for a deletion (a tombstone).
Pending = ChunkRef | None


@dataclass
class ArrayChanges:
    """The chunk changes of one array, in write order."""

    node_id: int
    ndim: int
    tables: list[pa.Table] = field(default_factory=list)
    pending: dict[bytes, Pending] = field(default_factory=dict)
    _merged: tuple[pa.Table, np.ndarray] | None = None

    def set(self, key: bytes, ref: Pending) -> None:
        self.pending[key] = ref

    def add_table(self, table: pa.Table) -> None:
        self._freeze_pending()
        self.tables.append(conform_refs(table))
        self._merged = None

    def lookup(self, key: bytes) -> tuple[bool, Pending]:
        """(found, ref): found with ``None`` means the chunk was deleted in this session."""
        if key in self.pending:
            return True, self.pending[key]
        if not self.tables:
            return False, None
        table, keys = self._merged_tables()
        probe = (
            np.frombuffer(key.ljust(keys.itemsize, b"\0"), dtype=keys.dtype)[0] if key else keys[:0]
        )
        i = int(np.searchsorted(keys, probe)) if key else 0
        if i < len(keys) and keys[i : i + 1].tobytes() == key.ljust(keys.itemsize, b"\0"):
            return True, row_ref(table, i)
        return False, None

    def _merged_tables(self) -> tuple[pa.Table, np.ndarray]:
        if self._merged is None:
            merged = merge_refs(self.tables, self.ndim, drop_tombstones=False)
            self._merged = (merged, coord_keys(merged.column("coord"), self.ndim))
        return self._merged

    def layers(self, node_id: int, *, stamped: bool = True) -> list[pa.Table]:
        """Every change as ref tables (tombstones included), oldest first, for ``node_id``.

        ``stamped=False``: ``array_id`` left as written, for a writer that sets it on each
        manifest it cuts (an array_id column of 10 M refs is 80 MB)."""
        out = [with_array_id(t, node_id) for t in self.tables] if stamped else list(self.tables)
        if self.pending:  # made stamped: no second array_id column
            out.append(pending_table(self.pending, node_id if stamped else 0))
        return out

    def changed_coords(self) -> pa.Array:
        """Every coord this session wrote or deleted, once each, sorted.

        Sorting fixed-width keys costs far less memory than hashing a million binary values.
        """
        columns = [t.column("coord") for t in self.tables]
        if self.pending:
            columns.append(pa.chunked_array([pa.array(list(self.pending), pa.binary())]))
        if not columns or self.ndim == 0:
            return pa.array([b""] if any(len(c) for c in columns) else [], pa.binary())
        if len(columns) == 1 and columns[0].num_chunks == 1:
            keys = coord_keys(columns[0], self.ndim)
            if bool(np.all(keys[1:] > keys[:-1])):
                # One bulk table sorted without repeats (a whole array's refs at once): its
                # coord column as it is, not copied three times through a sort.
                return columns[0].chunk(0)
        keys = np.sort(np.concatenate([coord_keys(c, self.ndim) for c in columns]))
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        return keys_to_coords(keys[first])

    def drop_coords(self, coords: pa.Array) -> None:
        """Forget our changes to ``coords`` (used to let a concurrent writer's chunks win)."""
        self._freeze_pending()
        self.tables = [
            t.filter(pc.invert(pc.is_in(t.column("coord"), coords))) for t in self.tables
        ]
        self._merged = None

    def chunk_ids(self) -> frozenset[str]:
        """Every chunk file (``c/<id>``) these changes reference."""
        ids = [r.chunk_id for r in self.pending.values() if r is not None and r.chunk_id]
        for table in self.tables:
            ids.extend(i for i in pc.unique(table.column("chunk_id")).to_pylist() if i)
        return frozenset(ids)

    def rename_chunks(self, renamed: dict[str, str]) -> None:
        """Point every ref at chunk file ``old`` to ``renamed[old]`` instead."""
        self.pending = {
            k: replace(r, chunk_id=renamed[r.chunk_id])
            if r is not None and r.chunk_id in renamed
            else r
            for k, r in self.pending.items()
        }
        self.tables = [_rename_chunk_column(t, renamed) for t in self.tables]
        self._merged = None

    def _freeze_pending(self) -> None:
        if self.pending:
            self.tables.append(pending_table(self.pending))
            self.pending = {}
            self._merged = None

    def __len__(self) -> int:
        return sum(int(t.num_rows) for t in self.tables) + len(self.pending)

    def copy(self) -> ArrayChanges:
        """An independent copy (Arrow tables are immutable, so they are shared)."""
        return ArrayChanges(self.node_id, self.ndim, list(self.tables), dict(self.pending))


def _rename_chunk_column(table: pa.Table, renamed: dict[str, str]) -> pa.Table:
    column = table.column("chunk_id")
    if column.null_count == len(column):
        return table
    values = [renamed.get(v, v) if v is not None else None for v in column.to_pylist()]
    index = table.schema.get_field_index("chunk_id")
    return table.set_column(index, "chunk_id", pa.array(values, pa.string()))


def pending_table(pending: dict[bytes, Pending], array_id: int = 0) -> pa.Table:
    """Rows of pending refs, each of ``array_id``."""
    ids = np.full(len(pending), array_id, np.uint64)
    return refs_table(list(pending), list(pending.values()), ids)


def refs_table(coords: list[bytes], refs: list[Pending], array_ids: np.ndarray) -> pa.Table:
    """Ref rows of pending refs, ``None`` ones as tombstones, conformed (``conform_refs``
    gives them back as they are)."""
    return pa.table(
        {
            "array_id": pa.array(array_ids),
            "coord": pa.array(coords, pa.binary()),
            "inline_data": pa.array([r.inline_data if r else None for r in refs], pa.binary()),
            "chunk_id": pa.array([r.chunk_id if r else None for r in refs], pa.string()),
            "virtual_path": pa.array([r.virtual_path if r else None for r in refs], pa.string()),
            "offset": pa.array(
                [r.offset if r and r.kind != "inline" else None for r in refs], pa.uint64()
            ),
            # An inline ref's length is its byte count, as a manifest records it.
            "length": pa.array([_length(r) for r in refs], pa.uint64()),
            "checksum": pa.array([r.checksum if r else None for r in refs], pa.string()),
        },
        schema=CONFORMED_REF_SCHEMA,
    )


def _length(ref: Pending) -> int | None:
    if ref is None:
        return None
    if ref.kind == "inline":
        return None if ref.inline_data is None else len(ref.inline_data)
    return ref.length


@dataclass(frozen=True, slots=True)
class ChangeSummary:
    """What a session changed: paths of nodes, moves (old path -> new), and chunk counts per
    array path."""

    created: tuple[str, ...]
    updated: tuple[str, ...]
    deleted: tuple[str, ...]
    chunks: Mapping[str, int]
    moved: Mapping[str, str] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.created or self.updated or self.deleted or self.chunks or self.moved)


@dataclass
class ChangeSet:
    """Everything a writable session changed since its base snapshot."""

    created: dict[str, Node] = field(default_factory=dict)  # path -> new node (no manifests)
    updated: dict[str, Node] = field(default_factory=dict)  # path -> node with new zarr.json
    deleted: dict[str, Node] = field(default_factory=dict)  # path -> base node deleted
    # new path -> the base path it was moved from; the node itself is in ``updated`` (same id)
    moved: dict[str, str] = field(default_factory=dict)
    chunks: dict[int, ArrayChanges] = field(default_factory=dict)  # node id -> changes
    # node id -> refs staged in Parquet files outside the session (see ``staged``)
    staged: dict[int, list[StagedRefs]] = field(default_factory=dict)
    # node id -> coords to leave out of the staged refs (a concurrent writer's chunks won)
    staged_drops: dict[int, list[pa.Array]] = field(default_factory=dict)
    repack_all: bool = False  # rewrite every manifest under the current manifest config
    lock: threading.RLock = field(default_factory=threading.RLock)

    def is_empty(self) -> bool:
        return not (
            self.created
            or self.updated
            or self.deleted
            or self.moved
            or self.staged
            or self.repack_all
            or any(len(c) for c in self.chunks.values())
        )

    def array_changes(self, node: Node) -> ArrayChanges:
        if node.id in self.staged:
            raise InvalidInputError(
                f"array {node.path!r} has staged refs in this session; write its chunks in "
                "another session (staged refs are read only when the commit lays them out)"
            )
        changes = self.chunks.get(node.id)
        if changes is None:
            assert node.meta is not None
            changes = self.chunks[node.id] = ArrayChanges(node.id, node.meta.ndim)
        return changes

    def chunk_ids(self) -> frozenset[str]:
        """Every chunk file the uncommitted refs point to."""
        return frozenset(i for c in self.chunks.values() for i in c.chunk_ids())

    def rename_chunks(self, renamed: dict[str, str]) -> None:
        for changes in self.chunks.values():
            changes.rename_chunks(renamed)

    def modified_array_ids(self) -> Iterator[int]:
        yield from (i for i, c in self.chunks.items() if len(c))
        yield from self.staged

    def add_staged(self, node: Node, staged: StagedRefs) -> None:
        """Refs of array ``node`` staged in files; refused if the session wrote its chunks."""
        if len(self.chunks.get(node.id, ())):
            raise InvalidInputError(
                f"array {node.path!r} has chunk writes in this session; stage its refs in "
                "another session (one array takes either, so the order of writes is clear)"
            )
        self.staged.setdefault(node.id, []).append(staged)

    def staged_refs(self, node_id: int) -> StagedRefs | None:
        """Everything staged for the array, as one."""
        parts = self.staged.get(node_id)
        return union(parts) if parts else None

    def staged_drop(self, node_id: int) -> pa.Array | None:
        """Coords to leave out of the array's staged refs, or ``None``."""
        drops = self.staged_drops.get(node_id)
        return pa.concat_arrays(drops) if drops else None

    def record_node(self, node: Node, *, existed: bool) -> None:
        """A node created, or a new ``zarr.json`` for one that ``existed`` before."""
        if node.path in self.created or not existed:
            self.created[node.path] = node
        else:
            self.updated[node.path] = node

    def moved_away(self) -> set[str]:
        """Base paths whose node this session moved elsewhere."""
        return set(self.moved.values())

    def forget(self, node: Node, base: Node | None) -> None:
        """Delete ``node`` and its chunk changes; ``base``: its node in the base snapshot."""
        self.updated.pop(node.path, None)
        self.chunks.pop(node.id, None)
        self.staged.pop(node.id, None)
        self.staged_drops.pop(node.id, None)
        if self.moved.pop(node.path, None) is not None:
            assert base is not None
            self.deleted[base.path] = base  # moved, then deleted: deleted where it was
        elif self.created.pop(node.path, None) is None:
            assert base is not None
            self.deleted[node.path] = base

    def copy(self) -> ChangeSet:
        """An independent copy, for a fork to read the changes its session had made.

        Copies every field, so fields added later are carried too (containers one level deep:
        their values, nodes and refs, are immutable).
        """
        with self.lock:
            values = {
                f.name: copy.copy(getattr(self, f.name)) for f in fields(self) if f.name != "lock"
            }
            values["chunks"] = {i: c.copy() for i, c in self.chunks.items()}
        return ChangeSet(**values)

    def __getstate__(self) -> dict[str, object]:
        # Forks travel to other processes with their change sets; a lock does not pickle.
        with self.lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    def summary(self, paths: Mapping[int, str]) -> ChangeSummary:
        """The summary of these changes; ``paths`` maps node ids to current paths."""
        return ChangeSummary(
            moved={old: new for new, old in sorted(self.moved.items())},
            created=tuple(sorted(self.created)),
            updated=tuple(sorted(p for p in self.updated if p not in self.moved)),
            deleted=tuple(sorted(self.deleted)),
            chunks={
                **{
                    paths[i]: len(c.changed_coords())
                    for i, c in self.chunks.items()
                    if len(c) and i in paths
                },
                # Staged rows are counted, not read: a coord staged twice counts twice.
                **{
                    paths[i]: sum(s.count for s in st)
                    for i, st in self.staged.items()
                    if i in paths
                },
            },
        )

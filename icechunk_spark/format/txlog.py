"""Transaction logs: what one snapshot changed relative to its parent.

Conflict detection reads the logs of the snapshots committed between a session's parent and the
branch tip. Node changes are few and live as JSON in the Parquet schema metadata; chunk changes
can number millions and are rows ``(node_id, coord)``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import FormatError
from .locations import same_dictionary_types
from .parquet import parquet_to_table, row_groups_to_parquet

# pq.write_table's default: transaction logs keep the row groups they were written with.
TXLOG_ROW_GROUP_SIZE = 1024 * 1024
CHUNK_CHANGES_SCHEMA = pa.schema(
    [
        pa.field("node_id", pa.uint64(), nullable=False),
        pa.field("coord", pa.binary(), nullable=False),
    ]
)


class ChangeKind(StrEnum):
    """What a snapshot did to a node (the ``kind`` of a transaction log's node entry)."""

    NEW_GROUP = "new_group"
    NEW_ARRAY = "new_array"
    UPDATE_METADATA = "update_metadata"
    DELETE_NODE = "delete_node"
    REPLACE_CHUNKS = "replace_chunks"  # all chunk refs replaced by attached manifests
    # chunks written somewhere in the entry's ``extent``, coords not listed (staged refs)
    WRITE_CHUNK_RANGE = "write_chunk_range"
    # the node (same id, refs kept) now at ``path``, moved from ``from_path``
    MOVE_NODE = "move_node"

    @classmethod
    def created(cls, node_type: str) -> ChangeKind:
        """The kind that creates a node of ``node_type`` (``group`` or ``array``)."""
        return cls(f"new_{node_type}")


NODE_KINDS = frozenset(ChangeKind)


Extent = tuple[tuple[int, int], ...]  # per dimension [lo, hi) of chunk indices


@dataclass(frozen=True, slots=True)
class NodeChange:
    path: str
    node_id: int
    kind: ChangeKind
    extent: Extent | None = None  # only for WRITE_CHUNK_RANGE
    from_path: str | None = None  # only for MOVE_NODE


@dataclass(frozen=True, slots=True)
class TransactionLog:
    nodes: tuple[NodeChange, ...] = ()
    chunks: pa.Table = field(default_factory=CHUNK_CHANGES_SCHEMA.empty_table)

    def chunk_coords_by_node(self) -> Mapping[int, pa.Array]:
        """Changed coords grouped by node id."""
        out: dict[int, pa.Array] = {}
        if self.chunks.num_rows == 0:
            return out
        table = self.chunks.sort_by("node_id")
        ids = table.column("node_id").to_numpy()
        starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        bounds = [0, *starts.tolist(), len(ids)]
        coords = table.column("coord").combine_chunks()
        for lo, hi in itertools.pairwise(bounds):
            out[int(ids[lo])] = coords.slice(lo, hi - lo)
        return out


def chunk_changes(node_id: int, coords: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Rows recording that ``coords`` of node ``node_id`` changed.

    ``node_id`` is a one-entry dictionary over zeroed indices (pages the OS maps only when
    written): 10 M changed coords of one array would otherwise take an 80 MB column of one
    value. ``encode_txlog`` writes it as the plain column."""
    indices = pa.array(np.zeros(len(coords), np.int32))
    ids = pa.DictionaryArray.from_arrays(indices, pa.array([node_id], pa.uint64()))
    schema = CHUNK_CHANGES_SCHEMA.set(0, CHUNK_CHANGES_SCHEMA.field("node_id").with_type(ids.type))
    return pa.table({"node_id": ids, "coord": coords}, schema=schema)


def chunk_changes_of(node_ids: np.ndarray, coords: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Rows recording that coord ``coords[i]`` of node ``node_ids[i]`` changed."""
    ids = pa.array(node_ids.astype(np.uint64, copy=False))
    return pa.table({"node_id": ids, "coord": coords}, schema=CHUNK_CHANGES_SCHEMA)


def encode_txlog(nodes: Iterable[NodeChange], chunks: Iterable[pa.Table]) -> bytes:
    node_list = [_node_entry(n) for n in nodes]
    # chunk_changes' node_id is a dictionary; a few pending chunks' rows hold it plain.
    tables = same_dictionary_types([t for t in chunks if t.num_rows], ("node_id",))
    table = pa.concat_tables(tables) if tables else CHUNK_CHANGES_SCHEMA.empty_table()
    table = table.replace_schema_metadata({"icechunk.nodes": json.dumps(node_list)})
    # In Parquet's default row groups, a dictionary node_id decoded one group at a time:
    # the bytes small_table_to_parquet writes for the plain table.
    return row_groups_to_parquet(
        table, TXLOG_ROW_GROUP_SIZE, use_dictionary=False, write_statistics=False
    )


def _node_entry(change: NodeChange) -> dict[str, object]:
    entry: dict[str, object] = {
        "path": change.path,
        "node_id": change.node_id,
        "kind": str(change.kind),
    }
    if change.extent is not None:
        entry["extent"] = [list(dim) for dim in change.extent]
    if change.from_path is not None:
        entry["from"] = change.from_path
    return entry


def _node_change(entry: Mapping[str, Any]) -> NodeChange:
    raw_extent = entry.get("extent")
    extent = tuple((int(lo), int(hi)) for lo, hi in raw_extent) if raw_extent else None
    kind = ChangeKind(entry["kind"])
    moved_from = entry.get("from")
    return NodeChange(
        str(entry["path"]),
        int(entry["node_id"]),
        kind,
        extent,
        str(moved_from) if moved_from is not None else None,
    )


def decode_txlog(data: bytes, name: str) -> TransactionLog:
    table = parquet_to_table(data, name, CHUNK_CHANGES_SCHEMA)
    try:
        raw = (table.schema.metadata or {}).get(b"icechunk.nodes", b"[]")
        nodes = tuple(_node_change(d) for d in json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"transaction log {name!r} is corrupt: {exc}") from exc
    return TransactionLog(nodes, table.select(["node_id", "coord"]).replace_schema_metadata(None))

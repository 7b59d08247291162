"""The sources of a snapshot: every file its virtual refs point into, with how many refs and how
many bytes each, and which arrays (icechunk#1194: "which files does this dataset need?").

Answered from the manifests alone (one pass over each array's refs, grouped by Arrow); no
source file is opened, so it works for files that moved or were deleted too: that is when it
is most needed.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..core import RepoHandle, raise_if_collected
from ..errors import NotFoundError
from ..format.state import State

SOURCES_SCHEMA = pa.schema(
    [
        pa.field("location", pa.string(), nullable=False),
        pa.field("refs", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("arrays", pa.list_(pa.string()), nullable=False),
    ]
)


def snapshot_sources(handle: RepoHandle, snapshot_id: str, state: State | None = None) -> pa.Table:
    """One row per file the snapshot's virtual refs point into, sorted by location.

    ``refs``: how many chunk refs point into it; ``bytes``: the sum of their lengths (what a
    full read fetches from it); ``arrays``: the arrays with refs into it, sorted.

    Raises:
        NotFoundError: a manifest is gone, e.g. the snapshot expired and garbage collection
            deleted its files while they were read.
    """
    try:
        view = handle.snapshot_view(snapshot_id, state)
        per_array = [
            _array_sources(path, refs)
            for path, node in sorted(view.nodes.items())
            if node.type == "array"
            for refs in view.array_refs(node)
        ]
    except NotFoundError as missing:
        advice = "list those of a snapshot still in the history"
        during = "while its sources were listed"
        raise_if_collected(handle.storage, [snapshot_id], missing, during, advice)
        raise
    rows = pa.concat_tables([_empty_per_array(), *per_array])
    grouped = rows.group_by("location").aggregate(
        [("refs", "sum"), ("bytes", "sum"), ("array", "distinct")]
    )
    # One row per file: sorting each file's few array names in Python costs nothing.
    arrays = [sorted(names) for names in grouped["array_distinct"].to_pylist()]
    table = pa.table(
        {
            "location": grouped["location"],
            "refs": grouped["refs_sum"].cast(pa.int64()),
            "bytes": grouped["bytes_sum"].cast(pa.int64()),
            "arrays": pa.array(arrays, pa.list_(pa.string())),
        },
        schema=SOURCES_SCHEMA,
    )
    return table.sort_by("location")


def _array_sources(path: str, refs: pa.Table) -> pa.Table:
    """``(location, refs, bytes, array)`` per file one array's refs (one manifest piece)
    point into."""
    virtual = refs.select(["virtual_path", "length"]).filter(pc.is_valid(refs["virtual_path"]))
    grouped = virtual.group_by("virtual_path").aggregate([("length", "count"), ("length", "sum")])
    return pa.table(
        {
            "location": grouped["virtual_path"],
            "refs": grouped["length_count"].cast(pa.int64()),
            "bytes": grouped["length_sum"].cast(pa.int64()),
            "array": pa.array([path] * grouped.num_rows, pa.string()),
        }
    )


def _empty_per_array() -> pa.Table:
    return pa.table(
        {
            "location": pa.array([], pa.string()),
            "refs": pa.array([], pa.int64()),
            "bytes": pa.array([], pa.int64()),
            "array": pa.array([], pa.string()),
        }
    )

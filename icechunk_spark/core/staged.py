"""Refs staged outside the session: Parquet files of ref rows sorted by (array, coord).

The biggest writes (a Spark job of 100 M refs) cannot hold their refs in one process. Their
tasks stage the refs as Parquet files sorted by ``(array, coord)`` and note each row group's
first and last ``(array, coord)``; the session is given one :class:`StagedRefs` per array
(where its rows are, how many, and their coordinate bounds) instead of the rows. The commit
plans manifests from those counts like from any other change, then reads, manifest by
manifest, only the row groups that can hold that manifest's refs: no process ever holds all
of them. A staged file may hold rows of several arrays; a reader keeps only its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidInputError
from ..format.coords import encode_coord
from ..storage import Storage
from ..storage.ranged import open_parquet
from .coord_refs import CoordRefs

# The columns of a staged file: a manifest's ref columns, with the array's path for its id.
STAGED_SCHEMA = pa.schema(
    [
        ("array", pa.string()),
        ("coord", pa.binary()),
        ("inline_data", pa.binary()),
        ("chunk_id", pa.string()),
        ("virtual_path", pa.string()),
        ("offset", pa.uint64()),
        ("length", pa.uint64()),
        ("checksum", pa.string()),
    ]
)
# Sorts after every encoded coord of any array (4 bytes a dimension).
_AFTER_ALL_COORDS = b"\xff" * 129

SortKey = tuple[str, bytes]  # (array, encoded coord)
Extent = tuple[tuple[int, int], ...]  # per dimension [lo, hi)


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group of a staged file: its rows, and its first and last (array, coord)."""

    rows: int
    first: SortKey
    last: SortKey


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One staged Parquet file: its key, size (for ranged reads) and row groups, in order."""

    key: str
    size: int
    groups: tuple[RowGroup, ...]

    def groups_between(self, low: SortKey, high: SortKey) -> list[int]:
        """The row groups that may hold rows in ``[low, high)``."""
        return [i for i, g in enumerate(self.groups) if g.first < high and low <= g.last]


@dataclass(frozen=True, slots=True, eq=False)
class StagedRefs:
    """The staged refs of one array: where they are, how many, and their bounds.

    ``count`` counts staged rows, an upper bound of the refs they add (a coord the array
    already holds is replaced, not added). ``indices`` holds per dimension the sorted distinct
    indices written, or ``None`` where there were too many to track (then ``lo``/``hi``, the
    inclusive bounds, stand in for them).

    ``writes`` numbers, per file, the write that staged it (none: all files are one write).
    The files of one write have no order among themselves, so a coord may appear in only one
    row of them; a later write wins a coord an earlier one staged.
    """

    array: str  # the files' ``array`` value for this array's rows
    count: int
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    indices: tuple[np.ndarray | None, ...]
    files: tuple[StagedFile, ...]
    writes: tuple[int, ...] = ()

    @property
    def ndim(self) -> int:
        return len(self.lo)

    def extent(self) -> Extent:
        """Per dimension ``[lo, hi + 1)``: the box every staged coord lies in."""
        return tuple((lo, hi + 1) for lo, hi in zip(self.lo, self.hi, strict=True))

    def pieces(self, axis: int, per_piece: int) -> set[int]:
        """The pieces of ``per_piece`` indices along ``axis`` that staged rows fall in."""
        written = self.indices[axis]
        if written is not None:
            return {int(i) // per_piece for i in written}
        return set(range(self.lo[axis] // per_piece, self.hi[axis] // per_piece + 1))

    def key_range(
        self, axis: int | None = None, span: tuple[int, int] | None = None
    ) -> tuple[SortKey, SortKey]:
        """``[low, high)`` in (array, coord) order holding every row of ``span`` along ``axis``.

        Encoded coords sort like index tuples, so a span of the first axis is one contiguous
        range; a span of any other axis is spread over all of the array's rows.
        """
        whole = (self.array, b""), (self.array, _AFTER_ALL_COORDS)
        if axis != 0 or span is None or self.ndim == 0:
            return whole
        rest = [0] * (self.ndim - 1)
        try:
            return (self.array, encode_coord([span[0], *rest])), (
                self.array,
                encode_coord([span[1], *rest]),
            )
        except InvalidInputError:  # beyond the largest encodable index: read to the array's end
            return (self.array, encode_coord([span[0], *rest])), whole[1]


def narrowed(staged: StagedRefs, axis: int, span: tuple[int, int]) -> StagedRefs:
    """``staged`` naming only the files that can hold rows of ``span`` along ``axis``.

    What a task writing one piece needs to be told, and no more (tasks are pickled).
    """
    low, high = staged.key_range(axis, span)
    keep = [bool(f.groups_between(low, high)) for f in staged.files]
    files = tuple(f for f, k in zip(staged.files, keep, strict=True) if k)
    writes = (
        tuple(w for w, k in zip(staged.writes, keep, strict=True) if k) if staged.writes else ()
    )
    return replace(staged, files=files, writes=writes)


def write_of_each_file(staged: StagedRefs) -> tuple[int, ...]:
    """The write that staged each file, in file order."""
    return staged.writes or (0,) * len(staged.files)


def union(parts: Sequence[StagedRefs]) -> StagedRefs:
    """Several stagings of one array (e.g. two writes in one session) as one."""
    first = parts[0]
    if len(parts) == 1:
        return first
    indices: list[np.ndarray | None] = []
    for dim in range(first.ndim):
        per = [p.indices[dim] for p in parts]
        known = [i for i in per if i is not None]
        indices.append(np.unique(np.concatenate(known)) if len(known) == len(per) else None)
    return StagedRefs(
        first.array,
        sum(p.count for p in parts),
        tuple(min(p.lo[d] for p in parts) for d in range(first.ndim)),
        tuple(max(p.hi[d] for p in parts) for d in range(first.ndim)),
        tuple(indices),
        tuple(f for p in parts for f in p.files),
        _numbered_writes(parts),
    )


def _numbered_writes(parts: Sequence[StagedRefs]) -> tuple[int, ...]:
    """Each part's writes numbered after those of the parts before it."""
    out: list[int] = []
    for part in parts:
        start = max(out, default=-1) + 1
        out += [start + w for w in write_of_each_file(part)]
    return tuple(out)


def write_staged(storage: Storage, key: str, table: pa.Table, row_group_size: int) -> StagedFile:
    """Write rows (``STAGED_SCHEMA``) as a staged file, sorted; returns its row-group index.

    Sorted by (array, coord), the commit writing one manifest piece reads only the row groups
    that can hold it: the staged files are the shuffle. No row group holds two arrays: the
    bounds of one that did, say (``/a``, last coord of ``/a``) to (``/b``, first of ``/b``),
    take in every coord of ``/b`` up to its last one, so every piece of ``/b`` below that
    would read it, and with many staged files each piece would read a group of every file.
    """
    table = table.sort_by([("array", "ascending"), ("coord", "ascending")])
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        table.schema,
        compression="zstd",
        use_dictionary=["array", "chunk_id", "virtual_path"],
    ) as writer:
        for start, length in _array_runs(table.column("array")):
            # Row groups never span two write_table calls.
            writer.write_table(table.slice(start, length), row_group_size=row_group_size)
    data = sink.getvalue()
    storage.put(key, data.to_pybytes())
    written = pq.read_metadata(pa.BufferReader(data))
    sizes = [written.row_group(i).num_rows for i in range(written.num_row_groups)]
    return StagedFile(key, data.size, _row_groups(table, sizes))


def _array_runs(arrays: pa.ChunkedArray) -> list[tuple[int, int]]:
    """(start, length) of each array's rows in a column sorted by array."""
    n = len(arrays)
    if n == 0:
        return []  # a file of no row groups
    same = pc.equal(arrays.slice(1), arrays.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(~same) + 1).tolist(), n]
    return [(a, b - a) for a, b in pairwise(starts)]


def _row_groups(table: pa.Table, sizes: Sequence[int]) -> tuple[RowGroup, ...]:
    """The (array, coord) bounds of each row group, from the sorted table just written."""
    arrays, coords = table.column("array"), table.column("coord")
    out, start = [], 0
    for n in sizes:
        end = start + n - 1
        first = (arrays[start].as_py(), coords[start].as_py())
        out.append(RowGroup(n, first, (arrays[end].as_py(), coords[end].as_py())))
        start += n
    return tuple(out)


def read_staged(
    storage: Storage,
    staged: StagedRefs,
    axis: int | None = None,
    span: tuple[int, int] | None = None,
) -> list[pa.Table]:
    """The staged rows of the array (only those in ``span`` along ``axis``, if given).

    One table per write, in order: a later write wins a coord staged twice, while the rows of
    one write have no order (see ``StagedRefs``). Row groups are read one at a time with ranged
    reads, and only those that can hold the span, so memory holds the result plus one row
    group.
    """
    return [refs.table for refs in read_staged_refs(storage, staged, axis, span)]


def read_staged_refs(
    storage: Storage,
    staged: StagedRefs,
    axis: int | None = None,
    span: tuple[int, int] | None = None,
) -> list[CoordRefs]:
    """``read_staged``, each table with the coords decoded to cut the span (if one was)."""
    low, high = staged.key_range(axis, span)
    writes: dict[int, list[CoordRefs]] = {}
    for file, write in zip(staged.files, write_of_each_file(staged), strict=True):
        groups = file.groups_between(low, high)
        if not groups:
            continue
        parts = writes.setdefault(write, [])
        with open_parquet(storage, file.key, file.size) as parquet:
            for group in groups:
                table = parquet.read_row_group(group, use_threads=False)
                table = table.filter(pc.equal(table.column("array"), staged.array))
                refs = CoordRefs(table.drop_columns(["array"]), staged.ndim)
                parts.append(refs.within(axis, span))
    return [CoordRefs.concat(writes[w], staged.ndim) for w in sorted(writes)]


__all__ = [
    "STAGED_SCHEMA",
    "Extent",
    "RowGroup",
    "StagedFile",
    "StagedRefs",
    "narrowed",
    "read_staged",
    "read_staged_refs",
    "union",
    "write_of_each_file",
    "write_staged",
]

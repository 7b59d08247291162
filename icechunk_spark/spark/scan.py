"""Planning and reading the ``chunks`` table: input partitions follow manifests.

A manifest small enough is one partition; a large one is cut along its Parquet row groups,
and each partition fetches only the byte ranges of its row groups. Python data sources get
no column pruning from Spark, so a partition reads only the manifest columns its output
columns need (``tables.manifest_columns``; a narrower schema given with ``.schema(...)``
narrows them), never the inline bytes unless an old manifest's inline lengths need them,
and skips row groups whose statistics rule out the wanted arrays or the pushed ``stat_*``
filters. No Spark here, so the planner and the reader are testable in plain Python.
"""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError
from ..format.keys import manifest_key
from ..format.manifest import refs_of_array, with_inline_lengths
from ..format.manifest_file import ColumnBounds, ManifestFile
from ..format.structure import Node
from ..storage import Storage
from ..storage.ranged import object_size, open_parquet
from .tables import CHUNKS, ChunkArray, chunk_batch, manifest_columns

DEFAULT_ROWS_PER_PARTITION = 1_000_000
# Rows decoded per read: several 16 Ki-row groups at once, so Spark gets batches big enough
# that its per-batch cost is noise, yet a batch of every column stays a few MB.
ROWS_PER_READ = 65_536


@dataclass(frozen=True, slots=True)
class ScanArray:
    """An array to read from a manifest: its node id (the manifest's key), path and grid."""

    node_id: int
    path: str
    ndim: int
    shape: tuple[int, ...] = ()
    chunk_shape: tuple[int, ...] = ()

    @classmethod
    def of(cls, node: Node) -> ScanArray:
        assert node.meta is not None
        meta = node.meta
        return cls(node.id, node.path, meta.ndim, tuple(meta.shape), tuple(meta.chunk_shape))

    def chunk_array(self) -> ChunkArray:
        return ChunkArray(self.path, self.ndim, self.shape, self.chunk_shape)


@dataclass(frozen=True, slots=True)
class ManifestPart:
    """One input partition: some (or all, ``row_groups=None``) row groups of one manifest."""

    manifest_id: str
    arrays: tuple[ScanArray, ...]
    row_groups: tuple[int, ...] | None = None
    size: int | None = None  # object size, known when the part reads byte ranges


Comparison = Literal["<", "<=", ">", ">=", "="]
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class StatBound:
    """A filter ``column op value`` on a numeric manifest column, used to skip row groups.

    Only ever skips: Spark applies the filter to the rows all the same, so a bound that cannot
    decide (unknown statistics, values beyond float precision) keeps the group.
    """

    column: str
    op: Comparison
    value: float

    def may_match(self, bounds: ColumnBounds, rows: int) -> bool:
        if bounds.null_count is not None and bounds.null_count >= rows:
            return False  # only nulls here, and no comparison holds for a null
        lo, hi = bounds.min, bounds.max
        if lo is None or hi is None:
            return True
        if self.op == "=":
            return bool(lo <= self.value <= hi)
        # Some row in [lo, hi] satisfies "x op value" iff the extreme on that side does.
        extreme = hi if self.op in (">", ">=") else lo
        return _COMPARE[self.op](extreme, self.value)


def select_arrays(
    nodes: Iterable[Node], pattern: str | None, paths: frozenset[str] | None = None
) -> list[Node]:
    """Arrays whose path fully matches ``pattern`` and (when given) is one of ``paths``."""
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise InvalidInputError(f"option arrays={pattern!r} is not a valid regex: {exc}") from exc
    return [
        n
        for n in nodes
        if n.type == "array"
        and (regex is None or regex.fullmatch(n.path) is not None)
        and (paths is None or n.path in paths)
    ]


def plan_parts(
    storage: Storage, arrays: Sequence[Node], rows_per_partition: int
) -> list[ManifestPart]:
    """Partitions for the refs of ``arrays``: one per manifest, row-group pieces if large."""
    by_manifest: dict[str, list[ScanArray]] = {}
    rows: dict[str, int] = {}
    for node in arrays:
        for ref in node.manifests:
            by_manifest.setdefault(ref.manifest_id, []).append(ScanArray.of(node))
            rows[ref.manifest_id] = rows.get(ref.manifest_id, 0) + ref.ref_count
    parts: list[ManifestPart] = []
    for manifest_id in sorted(by_manifest):
        wanted = tuple(sorted(set(by_manifest[manifest_id]), key=lambda a: a.node_id))
        if rows[manifest_id] <= rows_per_partition:
            parts.append(ManifestPart(manifest_id, wanted))
        else:
            parts.extend(_row_group_parts(storage, manifest_id, wanted, rows_per_partition))
    return parts


def _row_group_parts(
    storage: Storage, manifest_id: str, arrays: tuple[ScanArray, ...], rows_per_partition: int
) -> list[ManifestPart]:
    key = manifest_key(manifest_id)
    size = object_size(storage, key)
    with open_parquet(storage, key, size) as parquet:
        file = ManifestFile(parquet, key)
        groups = _groups_of(file, arrays)
    parts: list[ManifestPart] = []
    current: list[int] = []
    current_rows = 0
    for index in groups:
        n = file.groups[index].rows
        if current and current_rows + n > rows_per_partition:
            parts.append(ManifestPart(manifest_id, arrays, tuple(current), size))
            current, current_rows = [], 0
        current.append(index)
        current_rows += n
    if current:
        parts.append(ManifestPart(manifest_id, arrays, tuple(current), size))
    return parts


def _groups_of(file: ManifestFile, arrays: Iterable[ScanArray]) -> list[int]:
    """Row groups that may hold refs of any of ``arrays`` (sorted by array id, so the others
    are skipped by their statistics)."""
    return sorted({g for a in arrays for g in file.groups_of_array(a.node_id)})


def read_part(
    storage: Storage,
    part: ManifestPart,
    columns: Sequence[str] = tuple(CHUNKS.names),
    bounds: Sequence[StatBound] = (),
) -> Iterator[pa.RecordBatch]:
    """The ``chunks`` rows of one partition, as record batches of ``columns``.

    Raises:
        FormatError: the manifest is not a readable manifest.
    """
    schema = pa.schema([CHUNKS.field(c) for c in columns])
    key = manifest_key(part.manifest_id)
    with _open(storage, key, part) as file:
        wanted = [c for c in manifest_columns(columns) if c in file.columns]
        groups = _groups_of(file, part.arrays)
        if part.row_groups is not None:
            groups = [g for g in groups if g in set(part.row_groups)]
        groups = [g for g in groups if _may_match(file, g, bounds)]
        for run in _runs(file, groups):
            table = _read(file, run, wanted)
            for array in part.arrays:
                refs = refs_of_array(table, array.node_id)
                if refs.num_rows:
                    yield chunk_batch(refs, array.chunk_array(), part.manifest_id, schema)


@contextlib.contextmanager
def _open(storage: Storage, key: str, part: ManifestPart) -> Iterator[ManifestFile]:
    if part.row_groups is None:  # a small manifest: one GET
        yield ManifestFile(storage.get(key), key)
        return
    with open_parquet(storage, key, part.size) as parquet:  # ranged GETs of its row groups
        yield ManifestFile(parquet, key)


def _may_match(file: ManifestFile, group: int, bounds: Sequence[StatBound]) -> bool:
    rows = file.groups[group].rows
    return all(b.may_match(file.bounds(b.column)[group], rows) for b in bounds)


def _runs(file: ManifestFile, groups: Sequence[int]) -> Iterator[list[int]]:
    """``groups`` cut into runs of about ``ROWS_PER_READ`` rows."""
    run: list[int] = []
    rows = 0
    for group in groups:
        if run and rows + file.groups[group].rows > ROWS_PER_READ:
            yield run
            run, rows = [], 0
        run.append(group)
        rows += file.groups[group].rows
    if run:
        yield run


def _read(file: ManifestFile, groups: list[int], columns: list[str]) -> pa.Table:
    """Rows of ``groups``; inline bytes read only for an old manifest's inline lengths."""
    table = file.read_groups(groups, columns)
    if "length" in columns and table.column("length").null_count:
        inline = pc.and_(
            pc.is_null(table.column("length")),
            pc.and_(pc.is_null(table.column("chunk_id")), pc.is_null(table.column("virtual_path"))),
        )
        if pc.any(inline).as_py():
            data = file.read_groups(groups, ["inline_data"]).column("inline_data")
            table = with_inline_lengths(table.append_column("inline_data", data))
    return table


__all__ = [
    "DEFAULT_ROWS_PER_PARTITION",
    "ManifestPart",
    "ScanArray",
    "StatBound",
    "plan_parts",
    "read_part",
    "select_arrays",
]

"""Planning and reading the ``chunks`` table: input partitions follow manifests.

A manifest small enough is one partition; a large one is cut along its Parquet row groups,
and each partition fetches only the byte ranges of its row groups. No Spark here, so the
planner and the reader are testable in plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..errors import FormatError, InvalidInputError
from ..format.keys import manifest_key
from ..format.manifest import REF_SCHEMA, refs_of_array
from ..format.parquet import read_parquet_bytes
from ..format.structure import Node
from ..storage import Storage
from ..storage.ranged import object_size, open_parquet
from .tables import chunk_batches

DEFAULT_ROWS_PER_PARTITION = 1_000_000


@dataclass(frozen=True, slots=True)
class ScanArray:
    """An array to read from a manifest: its node id (the manifest's key) and path."""

    node_id: int
    path: str
    ndim: int


@dataclass(frozen=True, slots=True)
class ManifestPart:
    """One input partition: some (or all, ``row_groups=None``) row groups of one manifest."""

    manifest_id: str
    arrays: tuple[ScanArray, ...]
    row_groups: tuple[int, ...] | None = None
    size: int | None = None  # object size, known when the part reads byte ranges


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
        assert node.meta is not None
        for ref in node.manifests:
            by_manifest.setdefault(ref.manifest_id, []).append(
                ScanArray(node.id, node.path, node.meta.ndim)
            )
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
        meta = parquet.metadata
        ids = {a.node_id for a in arrays}
        column = meta.schema.to_arrow_schema().get_field_index("array_id")
        groups: list[tuple[int, int]] = []  # (row group, rows) overlapping a wanted array
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            stats = group.column(column).statistics
            if (
                stats is not None
                and stats.has_min_max
                and not any(stats.min <= node_id <= stats.max for node_id in ids)
            ):
                continue  # sorted by array id: this group holds only other arrays
            groups.append((i, group.num_rows))
    parts: list[ManifestPart] = []
    current: list[int] = []
    current_rows = 0
    for index, n in groups:
        if current and current_rows + n > rows_per_partition:
            parts.append(ManifestPart(manifest_id, arrays, tuple(current), size))
            current, current_rows = [], 0
        current.append(index)
        current_rows += n
    if current:
        parts.append(ManifestPart(manifest_id, arrays, tuple(current), size))
    return parts


def read_part(storage: Storage, part: ManifestPart) -> Iterator[pa.RecordBatch]:
    """The ``chunks`` rows of one partition, as record batches."""
    key = manifest_key(part.manifest_id)
    if part.row_groups is None:
        table = read_parquet_bytes(storage.get(key))
    else:
        with open_parquet(storage, key, part.size) as parquet:
            table = parquet.read_row_groups(list(part.row_groups), use_threads=False)
    missing = [n for n in REF_SCHEMA.names if n not in table.column_names]
    if missing:
        raise FormatError(f"manifest {key!r} lacks the columns {missing}")
    for array in part.arrays:
        refs = refs_of_array(table, array.node_id)
        if refs.num_rows:
            yield from chunk_batches(refs, array.path, array.ndim, part.manifest_id)


__all__ = [
    "DEFAULT_ROWS_PER_PARTITION",
    "ManifestPart",
    "ScanArray",
    "object_size",
    "open_parquet",
    "plan_parts",
    "read_part",
    "select_arrays",
]

"""Chunk statistics: ``min``, ``max``, ``sum`` and ``count`` of the valid values of each written
chunk, and its NaN and fill counts.

A value is *valid* when it is neither NaN, nor the array's fill value, nor a value its CF
attributes mark missing (``_FillValue``, ``missing_value``: what xarray reads as NaN); the fill
count counts the last two kinds, so ``count + nan_count + fill_count`` is the chunk's size
(with a NaN fill value, NaNs count in both).

Recorded when a chunk is written to an array selected by the config's ``chunk_statistics``
regexes and stored as extra manifest columns; ``inventory.chunks_where`` uses them to skip
chunks. See ``inventory`` for what they cover (edge chunks read as unknown).
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInputError
from ..format.coords import decode_coords
from ..format.manifest import STAT_FIELDS
from ..format.structure import ArrayMeta, Node
from .codec import chunk_codec


@dataclass(frozen=True, slots=True)
class ChunkStats:
    """Statistics of one chunk; ``min``/``max``/``sum`` are ``None`` when no value is valid."""

    min: float | None
    max: float | None
    nan_count: int
    fill_count: int
    sum: float | None
    count: int


def compute_stats(
    values: np.ndarray, fill_value: Any, missing: Sequence[float] = ()
) -> ChunkStats | None:
    """Statistics of decoded values; ``None`` for dtypes without an order (strings, ...).

    ``missing``: values the array's CF attributes mark missing (``cf_missing``).
    """
    if values.dtype.kind not in "biuf":
        return None
    flat = values.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, dtype=bool)
    fill_is_nan = isinstance(fill_value, float | np.floating) and math.isnan(fill_value)
    if fill_value is None:
        fill = np.zeros(flat.shape, dtype=bool)
    elif fill_is_nan:
        fill = nan.copy()
    else:
        fill = flat == fill_value
    for value in missing:
        if not math.isnan(value):
            fill |= flat == value
    valid = flat[~(nan | fill)]
    return ChunkStats(
        min=float(valid.min()) if valid.size else None,
        max=float(valid.max()) if valid.size else None,
        nan_count=int(nan.sum()),
        fill_count=int(fill.sum()),
        sum=float(valid.sum(dtype=np.float64)) if valid.size else None,
        count=int(valid.size),
    )


def cf_missing(zarr_json: bytes) -> tuple[float, ...]:
    """The values an array's CF attributes mark missing (``_FillValue``, ``missing_value``).

    xarray writes a float ``_FillValue`` of a Zarr v3 array as the base64 of its 8 little-endian
    bytes, and other values as JSON numbers.
    """
    attributes = json.loads(zarr_json).get("attributes") or {}
    out: list[float] = []
    for key in ("_FillValue", "missing_value"):
        value = attributes.get(key)
        for item in value if isinstance(value, list) else [value]:
            number = _cf_number(item)
            if number is not None and not math.isnan(number):
                out.append(number)
    return tuple(out)


def _cf_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return None
        return float(struct.unpack("<d", raw)[0]) if len(raw) == 8 else None
    return None


def stats_enabled(patterns: Sequence[str], path: str) -> bool:
    """Whether the config's ``chunk_statistics`` regexes select the array at ``path``."""
    return any(re.fullmatch(p, path) for p in patterns)


def chunk_values_stats(node: Node, coord: Sequence[int], values: np.ndarray) -> ChunkStats | None:
    """Statistics of a full chunk of values, all of it (see the module: edge chunks)."""
    return compute_stats(values, chunk_codec(node.zarr_json).fill_value, cf_missing(node.zarr_json))


def encoded_chunk_stats(node: Node, coord: Sequence[int], data: bytes) -> ChunkStats | None:
    """Statistics of an encoded chunk (decoded with the array's codecs).

    Raises:
        InvalidInputError: the bytes do not decode with the array's codecs.
    """
    try:
        values = chunk_codec(node.zarr_json).decode(data)
    except Exception as exc:  # codecs raise anything from ValueError to RuntimeError
        raise InvalidInputError(
            f"chunk {tuple(coord)} of {node.path!r} does not decode with the array's codecs "
            f"({exc}); statistics are enabled for this array (config chunk_statistics), so "
            "its chunks must be valid encoded chunks"
        ) from exc
    return chunk_values_stats(node, coord, values)


class StatsLog:
    """Statistics of the chunks a session wrote, keyed by the write itself.

    A row holds the coord and the chunk's identity (chunk id or inline bytes), so the commit
    attaches statistics only to the chunk they were computed from (``attach_stats``).
    """

    def __init__(self) -> None:
        self._rows: dict[int, list[tuple[bytes, str | None, bytes | None, ChunkStats]]] = {}
        self._lock = threading.Lock()

    def record(
        self,
        node_id: int,
        coord: bytes,
        chunk_id: str | None,
        inline: bytes | None,
        stats: ChunkStats,
    ) -> None:
        with self._lock:
            self._rows.setdefault(node_id, []).append((coord, chunk_id, inline, stats))

    def extend(self, other: StatsLog) -> None:
        """Add every row of ``other`` (a fork's statistics, merged into its session's)."""
        with other._lock:
            rows = {node: list(r) for node, r in other._rows.items()}
        with self._lock:
            for node, node_rows in rows.items():
                self._rows.setdefault(node, []).extend(node_rows)

    def __getstate__(self) -> dict[int, list[tuple[bytes, str | None, bytes | None, ChunkStats]]]:
        # A fork's statistics travel with it to other processes; a lock does not pickle.
        with self._lock:
            return {node: list(rows) for node, rows in self._rows.items()}

    def __setstate__(
        self, rows: dict[int, list[tuple[bytes, str | None, bytes | None, ChunkStats]]]
    ) -> None:
        self._rows = rows
        self._lock = threading.Lock()

    def rename_chunks(self, renamed: dict[str, str]) -> None:
        """Follow chunk files copied to new ids (see ``ChangeSet.rename_chunks``)."""
        with self._lock:
            self._rows = {
                node: [(c, renamed.get(i, i) if i else i, b, s) for c, i, b, s in rows]
                for node, rows in self._rows.items()
            }

    def table(self, node_id: int) -> pa.Table | None:
        with self._lock:
            rows = list(self._rows.get(node_id, ()))
        if not rows:
            return None
        return pa.table(
            {
                "coord": pa.array([r[0] for r in rows], pa.binary()),
                "chunk_id": pa.array([r[1] for r in rows], pa.string()),
                "inline_data": pa.array([r[2] for r in rows], pa.binary()),
                "stat_min": pa.array([r[3].min for r in rows], pa.float64()),
                "stat_max": pa.array([r[3].max for r in rows], pa.float64()),
                "stat_nan_count": pa.array([r[3].nan_count for r in rows], pa.int64()),
                "stat_fill_count": pa.array([r[3].fill_count for r in rows], pa.int64()),
                "stat_sum": pa.array([r[3].sum for r in rows], pa.float64()),
                "stat_count": pa.array([r[3].count for r in rows], pa.int64()),
            }
        )

    def tables(self) -> dict[int, pa.Table]:
        with self._lock:
            ids = list(self._rows)
        return {i: t for i in ids if (t := self.table(i)) is not None}


def stats_table(refs: pa.Table, meta: ArrayMeta) -> pa.Table:
    """``coord`` (list of chunk indices) and the ``stat_*`` columns of an array's refs.

    Chunks without statistics, and edge chunks (see ``inventory``), have nulls.
    """
    coords = decode_coords(refs.column("coord"), meta.ndim)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "coord": pa.FixedSizeListArray.from_arrays(
            pa.array(coords.reshape(-1), pa.int64()), meta.ndim
        )
        if meta.ndim
        else pa.array([[] for _ in range(refs.num_rows)], pa.list_(pa.int64()))
    }
    inside = pa.array(_wholly_inside(coords, meta))
    for f in STAT_FIELDS:
        column = (
            refs.column(f.name).cast(f.type)
            if f.name in refs.column_names
            else pa.nulls(refs.num_rows, f.type)
        )
        columns[f.name] = pc.if_else(inside, column, pa.scalar(None, f.type))
    return pa.table(columns)


def _wholly_inside(coords: np.ndarray, meta: ArrayMeta) -> np.ndarray:
    """Per coord: whether the chunk lies wholly inside the array's shape (not an edge chunk)."""
    if coords.shape[0] == 0 or not meta.shape:
        return np.ones(coords.shape[0], dtype=bool)
    ends = (coords + 1) * np.asarray(meta.chunk_shape, dtype=np.int64)
    return np.asarray(np.all(ends <= np.asarray(meta.shape, dtype=np.int64), axis=1))

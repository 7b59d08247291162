"""Executor side of a write: validate rows, write chunk data, stage ref rows as Parquet.

Each task attempt stages its refs under ``staging/<write id>/`` with its own name
(``<partition>-<task attempt id>-<n>.parquet``) and returns a :class:`StageResult`: the keys it
staged plus per-array counts and coord bounds, a map-side aggregation the driver reduces.
A retried task's earlier attempt may have staged files too; only keys named in a result are
ever committed, so retries neither duplicate nor lose refs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chunks.codec import ChunkCodec
from ..core import STAGED_SCHEMA, StagedFile, resolve_url, write_staged
from ..errors import InvalidInputError
from ..format.coords import encode_coords
from ..format.keys import chunk_key
from ..format.paths import normalize_path
from ..storage import Storage
from .chunks import ChunkObjectWriter
from .plan import ArrayTarget, WritePlan
from .rows import check_grid, coords_of, first_coord, flat, row_error, split_by_array

log = logging.getLogger(__name__)

# Beyond this many distinct indices along one dimension a result keeps only the bounds.
MAX_TRACKED_INDICES = 10_000
STAGED_ROW_GROUP = 65_536
_ENCODE_BATCH = 256


@dataclass(slots=True)
class ArrayStaged:
    """What one attempt staged for one array: ref count, coord bounds, distinct indices."""

    count: int
    lo: np.ndarray
    hi: np.ndarray
    # Per dimension the sorted distinct indices, or None once there were too many to keep.
    indices: list[np.ndarray | None]

    @classmethod
    def of(cls, coords: np.ndarray) -> ArrayStaged:
        ndim = coords.shape[1]
        return cls(
            int(coords.shape[0]),
            coords.min(axis=0) if len(coords) else np.zeros(ndim, np.int64),
            coords.max(axis=0) if len(coords) else np.zeros(ndim, np.int64),
            [_capped(np.unique(coords[:, d])) for d in range(ndim)],
        )

    def merge(self, other: ArrayStaged) -> None:
        self.count += other.count
        self.lo = np.minimum(self.lo, other.lo)
        self.hi = np.maximum(self.hi, other.hi)
        self.indices = [
            None if a is None or b is None else _capped(np.union1d(a, b))
            for a, b in zip(self.indices, other.indices, strict=True)
        ]


def _capped(values: np.ndarray) -> np.ndarray | None:
    return values if len(values) <= MAX_TRACKED_INDICES else None


@dataclass(slots=True)
class StageResult:
    """One successful task attempt: the files it staged and what they hold."""

    attempt: str
    files: list[StagedFile] = field(default_factory=list)
    arrays: dict[str, ArrayStaged] = field(default_factory=dict)
    chunk_objects: int = 0

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.files]


def attempt_name(partition: int, task_attempt_id: int) -> str:
    return f"{partition:05d}-{task_attempt_id}"


class Stager:
    """Turns one task's record batches into staged ref files (and chunk objects)."""

    def __init__(self, plan: WritePlan, storage: Storage, attempt: str) -> None:
        self.plan = plan
        self.storage = storage
        self.result = StageResult(attempt)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._codecs: dict[str, ChunkCodec] = {}
        self._paths: dict[str, str] = {}
        # Made when the first chunk object is to be written: data rows always need one,
        # virtual rows only for inline bytes above the repository's inline threshold.
        self._writer: ChunkObjectWriter | None = None

    def run(self, batches: Iterable[pa.RecordBatch]) -> StageResult:
        """Stage every batch; on any failure delete what this attempt wrote, then re-raise."""
        try:
            for batch in batches:
                self.add(batch)
            self._flush()
        except BaseException:
            try:
                self.discard()
            except Exception as cleanup:  # keep the task's own error; the coordinator sweeps
                log.warning("attempt %s: cleanup failed: %s", self.result.attempt, cleanup)
            raise
        finally:
            if self._writer is not None:
                self._writer.close()
        if self._writer is not None:
            self.result.chunk_objects = len(set(self._writer.written))
        return self.result

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if table.num_rows == 0:
            return
        for raw_path, rows in split_by_array(table):
            path = self._normalize(raw_path, rows)
            target = self.plan.target(path)
            if target is None:
                first = first_coord(rows)
                raise InvalidInputError(
                    f"row for array {raw_path!r} at coord {first}: no such array in the "
                    f"repository at branch {self.plan.branch!r}; declare it with "
                    "option('arrays', '{path: zarr.json}')"
                )
            staged = self._stage_array(target, rows)
            self._pending.append(staged)
            self._pending_rows += staged.num_rows
        if self._pending_rows >= self.plan.stage_rows:
            self._flush()

    def _chunk_writer(self) -> ChunkObjectWriter:
        if self._writer is None:
            prefix = f"{self.plan.journal_prefix}{self.result.attempt}-"
            self._writer = ChunkObjectWriter(self.storage, prefix, self.plan.pack_chunks)
        return self._writer

    def _normalize(self, raw: str | None, rows: pa.Table) -> str:
        if raw is None:
            raise InvalidInputError(
                f"row at coord {first_coord(rows)} has no array path (null 'array')"
            )
        if raw not in self._paths:
            try:
                self._paths[raw] = normalize_path(raw)
            except InvalidInputError as exc:
                raise InvalidInputError(
                    f"row for array {raw!r} at coord {first_coord(rows)}: {exc}"
                ) from exc
        return self._paths[raw]

    def _stage_array(self, target: ArrayTarget, rows: pa.Table) -> pa.Table:
        coords = self._placed(target, coords_of(target, rows))
        check_grid(target, coords)
        n = rows.num_rows
        if self.plan.rows == "virtual":
            columns = self._virtual_columns(target, rows, coords)
        else:
            columns = self._data_columns(target, rows, coords)
        stats = ArrayStaged.of(coords)
        known = self.result.arrays.get(target.path)
        if known is None:
            self.result.arrays[target.path] = stats
        else:
            known.merge(stats)
        return pa.table(
            {
                "array": pa.array(np.full(n, target.path, dtype=object), pa.string()),
                "coord": encode_coords(coords),
                **columns,
            },
            schema=STAGED_SCHEMA,
        )

    def _placed(self, target: ArrayTarget, coords: np.ndarray) -> np.ndarray:
        """Coords where the rows land: with ``placement=after_end``, counted from the array's
        end along the append axis as the plan saw it (every task of a write sees the same)."""
        if self.plan.placement != "after_end" or target.grow_axis is None:
            return coords
        before = np.flatnonzero(coords[:, target.grow_axis] < 0)
        if len(before):  # it would land on data already there: refuse it as `absolute` does
            raise row_error(
                target,
                coords,
                int(before[0]),
                "with placement=after_end coords along the append axis count from the array's "
                "end (0 is the first new chunk); a negative one would overwrite data",
            )
        placed = coords.copy()
        placed[:, target.grow_axis] += target.end_chunk()
        return placed

    def _virtual_columns(
        self, target: ArrayTarget, rows: pa.Table, coords: np.ndarray
    ) -> dict[str, pa.Array]:
        """Virtual refs; a row may instead carry its chunk's stored bytes in ``inline_data``.

        Inline rows are what a virtual import cannot point at: chunks the scanner copied
        (tiny ones, HDF5 compact storage) and values it materialized. They are stored like
        ``Session.set_chunk`` stores encoded bytes: in the manifest up to the repository's
        inline threshold, else as a chunk object.
        """
        n = rows.num_rows
        location = flat(rows.column("location"))
        inline = (
            flat(rows.column("inline_data")).cast(pa.binary())
            if "inline_data" in rows.column_names
            else pa.nulls(n, pa.binary())
        )
        has_location = pc.is_valid(location).to_numpy(zero_copy_only=False)
        has_inline = pc.is_valid(inline).to_numpy(zero_copy_only=False)
        both = np.flatnonzero(has_location & has_inline)
        if len(both):
            raise row_error(target, coords, int(both[0]), "has both a location and inline_data")
        neither = np.flatnonzero(~has_location & ~has_inline)
        if len(neither):
            raise row_error(
                target, coords, int(neither[0]), "the virtual ref has no location (nor inline_data)"
            )
        out = self._locations(target, rows, coords, has_location)
        out |= self._inline_chunks(inline, has_inline, out)
        checksum = (
            rows.column("checksum").cast(pa.string())
            if "checksum" in rows.column_names
            else pa.nulls(n, pa.string())
        )
        out["checksum"] = pc.if_else(pa.array(has_location), flat(checksum), None)
        return out

    def _locations(
        self, target: ArrayTarget, rows: pa.Table, coords: np.ndarray, mask: np.ndarray
    ) -> dict[str, pa.Array]:
        """``virtual_path``, ``offset`` and ``length`` of the rows with a location (``mask``)."""
        location = flat(rows.column("location"))
        # Resolve each distinct location once (a file holds many chunks), then map rows to it.
        distinct = pc.unique(location.drop_null())
        resolved = []
        for url in distinct.to_pylist():
            try:
                resolved.append(resolve_url(url, self.plan.containers)[0])
            except InvalidInputError as exc:
                bad = int(pc.index(location, url).as_py())
                raise row_error(target, coords, bad, str(exc)) from exc
        out: dict[str, pa.Array] = {
            "virtual_path": pc.take(
                pa.array(resolved, pa.string()), pc.index_in(location, distinct)
            ),
        }
        for name in ("offset", "length"):
            column = rows.column(name)
            numbers = pc.fill_null(column, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            wrong = np.flatnonzero(mask & (numbers < 0))
            if len(wrong):
                raise row_error(target, coords, int(wrong[0]), f"'{name}' must be given and >= 0")
            out[name] = pa.array(numbers.astype(np.uint64), mask=~mask)
        return out

    def _inline_chunks(
        self, inline: pa.Array, mask: np.ndarray, virtual: dict[str, pa.Array]
    ) -> dict[str, pa.Array]:
        n = len(inline)
        rows = np.flatnonzero(mask)
        sizes = pc.binary_length(inline).to_numpy(zero_copy_only=False)
        big = rows[sizes[rows] > self.plan.inline_threshold] if len(rows) else rows
        kept = np.zeros(n, dtype=bool)
        kept[rows] = True
        kept[big] = False
        chunk_ids: list[str | None] = [None] * n
        offsets = virtual["offset"].to_pylist()
        lengths = virtual["length"].to_pylist()
        if len(big):
            ids, offs, lens = self._chunk_writer().write([inline[int(i)].as_py() for i in big])
            for i, object_id, off, length in zip(big, ids, offs, lens, strict=True):
                chunk_ids[i], offsets[i], lengths[i] = object_id, off, length
        return {
            "inline_data": pc.if_else(pa.array(kept), inline, None),
            "chunk_id": pa.array(chunk_ids, pa.string()),
            "offset": pa.array(offsets, pa.uint64()),
            "length": pa.array(lengths, pa.uint64()),
        }

    def _data_columns(
        self, target: ArrayTarget, rows: pa.Table, coords: np.ndarray
    ) -> dict[str, pa.Array]:
        codec = self._codecs.get(target.path)
        if codec is None:
            codec = self._codecs[target.path] = ChunkCodec(target.zarr_json)
        data = flat(rows.column("data"))
        lengths = pc.fill_null(pc.binary_length(data), -1).to_numpy(zero_copy_only=False)
        wrong = np.flatnonzero(lengths != codec.chunk_nbytes)
        if len(wrong):
            bad = int(wrong[0])
            got = "null" if lengths[bad] < 0 else f"{int(lengths[bad])} bytes"
            raise row_error(
                target,
                coords,
                bad,
                f"'data' has {got}; a chunk of shape {codec.chunk_shape} and dtype "
                f"{codec.numpy_dtype} takes {codec.chunk_nbytes} bytes (raw, C order)",
            )
        n = len(data)
        encoded: list[bytes] = []
        for start in range(0, n, _ENCODE_BATCH):
            encoded += codec.encode_raw(
                [data[i].as_buffer() for i in range(start, min(n, start + _ENCODE_BATCH))]
            )
        # Small chunks live inline in the manifest (as Session.set_chunk does); the rest go to
        # chunk objects, all of this batch in one call so packing can fill its objects.
        is_inline = np.fromiter((len(e) <= self.plan.inline_threshold for e in encoded), bool, n)
        to_write = np.flatnonzero(~is_inline)
        ids, offs, lens = self._chunk_writer().write([encoded[i] for i in to_write])
        inline: list[bytes | None] = [
            e if small else None for e, small in zip(encoded, is_inline, strict=True)
        ]
        chunk_ids: list[str | None] = [None] * n
        offsets: list[int | None] = [None] * n
        sizes: list[int | None] = [None] * n
        for i, object_id, off, length in zip(to_write, ids, offs, lens, strict=True):
            chunk_ids[i], offsets[i], sizes[i] = object_id, off, length
        return {
            "inline_data": pa.array(inline, pa.binary()),
            "chunk_id": pa.array(chunk_ids, pa.string()),
            "virtual_path": pa.nulls(n, pa.string()),
            "offset": pa.array(offsets, pa.uint64()),
            "length": pa.array(sizes, pa.uint64()),
            "checksum": pa.nulls(n, pa.string()),
        }

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        self._pending, self._pending_rows = [], 0
        name = f"{self.result.attempt}-{len(self.result.files):04d}.parquet"
        key = f"{self.plan.staging_prefix}{name}"
        self.result.files.append(write_staged(self.storage, key, table, STAGED_ROW_GROUP))

    def discard(self) -> None:
        """Delete everything this attempt wrote (best effort: the coordinator sweeps too)."""
        written = [chunk_key(i) for i in (self._writer.written if self._writer else [])]
        self.storage.delete([*self.result.keys, *written])
        self.result.files.clear()


def merge_results(results: Iterable[StageResult]) -> dict[str, ArrayStaged]:
    """Per array, the union of every attempt's stats."""
    by_array: dict[str, list[ArrayStaged]] = {}
    for result in results:
        for path, stats in result.arrays.items():
            by_array.setdefault(path, []).append(stats)
    return {path: merged_stats(parts) for path, parts in by_array.items()}


def merged_stats(parts: Sequence[ArrayStaged]) -> ArrayStaged:
    """One array's stats from several attempts, merged into a new value."""
    first = parts[0]
    merged = ArrayStaged(first.count, first.lo.copy(), first.hi.copy(), list(first.indices))
    for stats in parts[1:]:
        merged.merge(stats)
    return merged


__all__ = [
    "ArrayStaged",
    "StageResult",
    "Stager",
    "attempt_name",
    "merge_results",
    "merged_stats",
]

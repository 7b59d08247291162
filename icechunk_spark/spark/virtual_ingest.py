"""Virtual ingestion on executors: files become ref rows in a DataFrame, never driver lists.

``ingest_virtual(spark, url, pattern)`` (``jobs/ingest_virtual.py``):

1. list the files; the dataset's files are the distinct virtual ``location`` values of its
   ``chunks`` table (a Spark query: executors read the manifests, the driver gets one row
   per file) plus the files no ref points into, listed by the newest ingest commit (see
   ``virtual.ingest``). Files already held are skipped;
2. executors scan the new files (``virtual.file_rows.scan_file``) into ref rows with
   file-local chunk coords, and one summary per file; the rows are cached on executors,
   only the summaries go to the driver;
3. the driver checks the files agree with each other and the dataset and places them
   (``virtual.placement``) in the order of their coordinate (time: first and last values
   are in the summaries), each after the dataset's last value and the file before it
   (``virtual.ordering``): per (file, array) a shift along the concat dimension;
4. a broadcast join applies the shifts on executors (rows without a shift are dropped: the
   copied coordinate, constants of all but the first new file), the driver adds the few
   copied chunks, and :func:`commit_refs` commits everything as one snapshot through the
   coordinator, with the exact new shapes and the list of unreferenced files.

Every result the driver takes from Spark goes through one function (``_to_driver``) and is
recorded in ``IngestResult.received``, so tests can check that no ref row reached it.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..core import resolve_target
from ..virtual.file_rows import ROW_SCHEMA, FileSummary, scan_file, values_digest
from ..virtual.ingest import UNREFERENCED_SOURCES, open_for_pattern, recorded_files
from ..virtual.placement import Placement, place
from .distributed import commit_refs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

    from ..core import Session
    from ..repository import Repository

_SCANNED = (
    "kind string, file string, array string, coord array<bigint>, location string, "
    "offset bigint, length bigint, inline_data binary, checksum string, summary binary"
)
_REF_COLUMNS = ["array", "coord", "location", "offset", "length", "inline_data", "checksum"]


@dataclass(frozen=True, slots=True)
class Received:
    """One result the driver took from Spark: what it was, its columns, its rows."""

    what: str
    columns: tuple[str, ...]
    rows: int


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What a run did: the snapshot (the branch tip when nothing was new), files imported
    and skipped, and every result the driver received from Spark."""

    repo: Repository
    snapshot: str | None
    imported: tuple[str, ...]
    skipped: int
    received: tuple[Received, ...]


def ingest_virtual(
    spark: SparkSession,
    url: str,
    pattern: str,
    *,
    branch: str = "main",
    concat_dim: str = "time",
    group: str = "/",
    container: str | None = None,
    file_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    message: str | None = None,
    parser: str = "kerchunk",
) -> IngestResult:
    """Append the files ``pattern`` matches that the dataset does not hold yet; one commit.

    ``parser``: who reads each file on the executors (``import_netcdf``'s names: kerchunk's
    NetCDF4/HDF5 scanner, or a VirtualiZarr parser; ``"auto"`` reads each file with its own).

    >>> ingest_virtual(spark, "s3://bucket/tas", "s3://data/tas_*.nc")  # doctest: +SKIP

    Raises:
        CoordinateOrderError: a new file's times repeat or overlap another's, do not
            increase, or do not start after the dataset's last time (appends only).
        InvalidInputError: nothing matches, a file is not of a format ``parser`` reads, or
            the files disagree with each other or the dataset.
        VirtualRefRefusedError: a file lies outside the virtual chunk container.
    """
    received: list[Received] = []
    repo, found = open_for_pattern(url, pattern, container, file_options, storage_options, parser)
    containers = {p: dict(o) for p, o in repo.config.virtual_chunk_containers.items()}
    canonical = sorted({resolve_target(f, containers)[0] for f in found})
    recorded = recorded_files(repo, branch)
    held = _held_files(spark, url, branch, storage_options, received) | recorded
    new = [f for f in canonical if f not in held]
    skipped = len(canonical) - len(new)
    if not new:
        return IngestResult(repo, repo.lookup_branch(branch), (), skipped, tuple(received))

    options = dict(file_options or {})

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for file in batch.column("url").to_pylist():
                rows, summary = scan_file(
                    file, concat_dim, group, containers, storage_options=options, parser=parser
                )
                yield from _scanned_batches(rows, summary)

    from pyspark import StorageLevel

    files = spark.createDataFrame([(f,) for f in new], "url string")
    scanned = files.repartition(min(len(new), 64)).mapInArrow(scan, _SCANNED)
    # Scanned once: the summaries and then the rows come from the same cached partitions.
    scanned.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary_rows = _to_driver(
            scanned.filter("kind = 'summary'").select("summary"), "file summaries", received
        )
        # Sorted by name only to be deterministic: place() puts them in time order.
        summaries = sorted((pickle.loads(r["summary"]) for r in summary_rows), key=lambda s: s.url)
        session = repo.readonly_session(branch=branch)
        placement = _place(session, summaries, group, concat_dim)
        refs = _placed_rows(spark, scanned, placement)
        unreferenced = sorted(recorded | placement.unreferenced(summaries))
        snapshot = commit_refs(
            refs,
            url,
            branch=branch,
            message=message or f"ingest {len(new)} new files ({len(new) + len(held)} in all)",
            storage_options=storage_options,
            arrays=placement.declared,
            append_dim=concat_dim,
            shapes={p: list(s) for p, s in placement.shapes.items()},
            groups=placement.groups,
            metadata={"files": len(new) + len(held), UNREFERENCED_SOURCES: unreferenced},
        )
    finally:
        scanned.unpersist()
    return IngestResult(repo, snapshot, tuple(new), skipped, tuple(received))


def _to_driver(df: DataFrame, what: str, received: list[Received]) -> list[Row]:
    """The one place this module brings Spark results to the driver (recorded)."""
    rows = df.collect()
    received.append(Received(what, tuple(df.columns), len(rows)))
    return rows


def _held_files(
    spark: SparkSession,
    url: str,
    branch: str,
    storage_options: Mapping[str, Any] | None,
    received: list[Received],
) -> set[str]:
    """The files the branch's virtual refs point into: executors read the manifests."""
    from .source import IcechunkDataSource

    spark.dataSource.register(IcechunkDataSource)
    reader = spark.read.format("icechunk").option("branch", branch)
    for key, value in (storage_options or {}).items():
        reader = reader.option(f"storage.{key}", value if isinstance(value, str) else str(value))
    chunks = reader.schema("kind string, location string").load(url)
    files = chunks.filter("kind = 'virtual'").select("location").distinct()
    return {r["location"] for r in _to_driver(files, "held files", received)}


def _scanned_batches(rows: pa.Table, summary: FileSummary) -> Iterator[pa.RecordBatch]:
    n = rows.num_rows
    table = pa.table(
        {
            "kind": pa.array(["ref"] * n, pa.string()),
            **{name: rows.column(name) for name in ROW_SCHEMA.names},
            "summary": pa.nulls(n, pa.binary()),
        }
    )
    yield from table.to_batches()
    head = {field.name: pa.nulls(1, field.type) for field in ROW_SCHEMA}
    head["file"] = pa.array([summary.url], pa.string())
    yield pa.RecordBatch.from_pydict(
        {"kind": ["summary"], **head, "summary": [pickle.dumps(summary)]}
    )


def _place(session: Session, summaries: Sequence[FileSummary], group: str, dim: str) -> Placement:
    """Place the files after what the group holds, reading only the few values it needs."""
    import json

    from ..format.paths import normalize_path

    base = normalize_path(group)
    prefix = "/" if base == "/" else base + "/"
    held = {
        n.path: json.loads(n.zarr_json)
        for n in session.list_nodes()
        if n.type == "array" and n.path.startswith(prefix)
    }

    def values(path: str) -> np.ndarray:
        import zarr

        array = zarr.open_array(session.store, path=path.lstrip("/"), mode="r")
        return np.asarray(array[...])

    def read_held(path: str, start: int, stop: int) -> np.ndarray:
        import zarr

        array = zarr.open_array(session.store, path=path.lstrip("/"), mode="r")
        axis = list(held[path]["dimension_names"]).index(dim)
        box = tuple(slice(start, stop) if d == axis else slice(None) for d in range(array.ndim))
        return np.asarray(array[box])

    return place(summaries, held, dim, read_held, lambda path: values_digest(values(path)))


def _placed_rows(spark: SparkSession, scanned: DataFrame, placement: Placement) -> DataFrame:
    """The rows shifted into place on executors, plus the copied chunks."""
    from pyspark.sql import functions as F

    shifts = spark.createDataFrame(
        [(s.file, s.array, s.axis, s.chunks) for s in placement.shifts] or [("", "", -1, 0)],
        "file string, array string, axis int, shift bigint",
    )
    refs = scanned.filter("kind = 'ref'").join(F.broadcast(shifts), ["file", "array"])
    shifted = F.transform(
        "coord", lambda x, i: F.when(i == F.col("axis"), x + F.col("shift")).otherwise(x)
    )
    placed = refs.withColumn("coord", shifted).select(*_REF_COLUMNS)
    if not placement.copied:
        return placed
    copied = spark.createDataFrame(
        [(c.array, list(c.coord), None, None, None, c.data, None) for c in placement.copied],
        placed.schema,
    )
    return placed.unionByName(copied)


__all__ = ["IngestResult", "Received", "ingest_virtual"]

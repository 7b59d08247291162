"""The driver API for jobs too big for one process: executors stage refs and write manifests.

``commit_refs(df, url)`` (virtual refs) and ``write_chunks(df, url)`` (raw chunk data) run in
the user's driver process, so they can use real Spark jobs at every step:

1. stage (``mapInArrow``): executors validate rows, write chunk data, stage refs as Parquet,
   and return per-array counts and coord bounds;
2. plan (driver): declare / grow / recreate arrays in a writable session, and lay each
   array's refs out in manifest pieces (:mod:`.pieces`), the split the core would choose;
3. write manifests (one Spark task per piece): each task reads the old refs of its piece and,
   with ranged reads, just the row groups of the staged files (sorted by array and coord at
   staging) that can hold its new refs; it merges them (new refs win) and writes one
   manifest with ``flush.write_array_manifest``. The staged files are the shuffle;
   no ref row passes through the JVM;
4. attach (driver): ``Session.attach_manifests`` per array, then commit.

No process ever holds more than one piece's refs (the set's ``max-manifest-size``), so a
commit of 100,000,000 refs is a matter of executors and time, not driver memory.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..core.flush import write_array_manifest
from ..core.repository import Repository
from ..core.session import Session
from ..errors import InvalidInputError
from ..format.keys import manifest_key
from ..format.manifest import decode_manifest, merge_refs, refs_of_array
from ..format.structure import ManifestRef, Node
from ..storage import Storage
from .coordinator import abort_write, run_commit
from .pieces import ArrayLayout, plan_layout
from .plan import RowKind, WritePlan, make_plan, options_from_kwargs
from .scan import open_parquet
from .staging import StagedFile, Stager, StageResult, attempt_name, merge_results

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def commit_refs(
    df: DataFrame,
    url: str,
    *,
    branch: str = "main",
    message: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    mode: str = "append",
    arrays: Mapping[str, Mapping[str, Any]] | None = None,
    append_dim: str | int | None = None,
    on_conflict: str = "fail",
    metadata: Mapping[str, Any] | None = None,
) -> str | None:
    """Commit the virtual refs in ``df`` (``array``, ``coord``, ``location``, ``offset``,
    ``length``, optional ``checksum``) as one snapshot on ``branch``.

    ``arrays`` declares arrays to create (``{path: zarr.json dict}``), ``append_dim`` grows
    shapes to fit the coords, ``mode="overwrite"`` replaces every ref of the arrays in ``df``.
    Returns the new snapshot id, or ``None`` when ``df`` is empty and nothing was declared.

    >>> commit_refs(refs_df, "s3://bucket/repo", message="import")      # doctest: +SKIP

    Raises:
        ConflictError: another commit changed the same chunks first (``on_conflict='fail'``).
        InvalidInputError: bad options; or (wrapped in Spark's error) a row outside its
            array's grid, of an unknown array, or pointing outside every virtual container.
    """
    options: dict[str, Any] = {"branch": branch, "message": message, "metadata": metadata}
    options |= {"storage_options": storage_options, "arrays": arrays}
    options |= {"append_dim": append_dim, "on_conflict": on_conflict}
    return _run(df, url, "virtual", mode, options)


def write_chunks(
    df: DataFrame,
    url: str,
    *,
    branch: str = "main",
    message: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    mode: str = "append",
    arrays: Mapping[str, Mapping[str, Any]] | None = None,
    append_dim: str | int | None = None,
    on_conflict: str = "fail",
    metadata: Mapping[str, Any] | None = None,
    pack_chunks: bool = False,
) -> str | None:
    """Encode and write the chunks in ``df`` (``array``, ``coord``, ``data`` = the chunk's raw
    C-order bytes in the array's dtype) and commit them as one snapshot on ``branch``.

    Options as for :func:`commit_refs`; ``pack_chunks`` packs each task's chunks into few
    objects. Returns the new snapshot id.

    Raises:
        ConflictError: another commit changed the same chunks first (``on_conflict='fail'``).
        InvalidInputError: as :func:`commit_refs`, and ``data`` of the wrong length.
    """
    options: dict[str, Any] = {"branch": branch, "message": message, "metadata": metadata}
    options |= {"storage_options": storage_options, "arrays": arrays}
    options |= {"append_dim": append_dim, "on_conflict": on_conflict, "pack_chunks": pack_chunks}
    return _run(df, url, "data", mode, options)


def _run(df: DataFrame, url: str, kind: RowKind, mode: str, kwargs: dict[str, Any]) -> str | None:
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    plan = make_plan(options_from_kwargs(url, **kwargs), df.columns, mode == "overwrite")
    plan = replace(plan, sort_staged=True)
    if plan.on_conflict == "theirs":
        raise InvalidInputError(
            "on_conflict='theirs' needs chunk-level merging, which attached manifests cannot "
            "do; use 'fail' or 'ours' here, or write through df.write.format('icechunk')"
        )
    if plan.rows != kind:
        other = "write_chunks" if plan.rows == "data" else "commit_refs"
        raise InvalidInputError(f"these rows hold {plan.rows} refs: use {other}")
    try:
        results = stage(df, plan)
    except BaseException:
        abort_write(plan, [])
        raise
    spark = df.sparkSession

    def attach(repo: Repository, session: Session, nodes: dict[str, Node]) -> frozenset[str]:
        return attach_pieces(spark, plan, results, repo, session, nodes)

    return run_commit(plan, results, attach, replan=plan.on_conflict == "ours")


def stage(df: DataFrame, plan: WritePlan) -> list[StageResult]:
    """Job 1: every task stages its rows; the driver gets one small result per task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        attempt = attempt_name(context.partitionId(), context.taskAttemptId())
        result = Stager(plan, plan.repo.storage(), attempt).run(batches)
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(result)]})

    rows = df.mapInArrow(run, "result binary").collect()
    return [pickle.loads(r["result"]) for r in rows]


def attach_pieces(
    spark: SparkSession,
    plan: WritePlan,
    results: Sequence[StageResult],
    repo: Repository,
    session: Session,
    nodes: Mapping[str, Node],
) -> frozenset[str]:
    """Job 2: write every touched piece's manifest; attach each array's manifests."""
    staged = merge_results(results)
    layouts = {
        path: plan_layout(nodes[path], stats, repo.manifest_config)
        for path, stats in staged.items()
    }
    files = sorted((f for r in results for f in r.files), key=lambda f: f.key)
    written = write_pieces(spark, plan, piece_tasks(files, layouts), layouts)
    for path, layout in layouts.items():
        manifests = sorted([*layout.kept, *written.get(path, [])], key=lambda m: m.extent)
        session.attach_manifests(path, manifests)
    return frozenset(m.manifest_id for refs in written.values() for m in refs)


@dataclass(frozen=True, slots=True)
class PieceTask:
    """Everything one executor task reads to write the manifest of one piece of one array."""

    path: str
    piece: int
    staged: tuple[tuple[str, int, tuple[int, ...]], ...]  # (key, size, row groups), in order
    old: tuple[str, ...]  # old manifests of the array that may hold refs of the piece


def piece_tasks(files: Sequence[StagedFile], layouts: Mapping[str, ArrayLayout]) -> list[PieceTask]:
    """One task per piece to write, naming only the staged row groups that can hold it."""
    tasks = []
    for path, layout in sorted(layouts.items()):
        for piece in layout.write:
            low, high = layout.key_range(piece)
            staged = tuple(
                (f.key, f.size, tuple(groups))
                for f in files
                if (groups := f.groups_between(low, high))
            )
            old = tuple(m.manifest_id for m in layout.rewrite if layout.overlaps(m, piece))
            tasks.append(PieceTask(path, piece, staged, old))
    return tasks


def write_pieces(
    spark: SparkSession,
    plan: WritePlan,
    tasks: Sequence[PieceTask],
    layouts: Mapping[str, ArrayLayout],
) -> dict[str, list[ManifestRef]]:
    """Run one Spark task per piece; returns the new manifests by array path.

    The staged files, sorted by (array, coord) with row-group bounds known to the driver,
    are the shuffle: each task reads just its rows with ranged reads, so no row goes
    through Spark's shuffle or the JVM.
    """
    if not tasks:
        return {}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage = plan.repo.storage()
        for batch in batches:
            for blob in batch.column("task").to_pylist():
                task: PieceTask = pickle.loads(blob)
                ref = write_piece(storage, plan, layouts[task.path], task)
                if ref is not None:
                    yield pa.RecordBatch.from_pydict(
                        {"array": [task.path], "manifest": [pickle.dumps(ref)]}
                    )

    blobs = spark.createDataFrame([(pickle.dumps(t),) for t in tasks], "task binary")
    rows = blobs.repartition(len(tasks)).mapInArrow(run, "array string, manifest binary")
    out: dict[str, list[ManifestRef]] = {}
    for row in rows.collect():
        out.setdefault(row["array"], []).append(pickle.loads(row["manifest"]))
    return out


def write_piece(
    storage: Storage, plan: WritePlan, layout: ArrayLayout, task: PieceTask
) -> ManifestRef | None:
    """Old refs of the piece, then staged ones in order (later win): one sorted manifest."""
    layers = []
    for manifest_id in task.old:
        key = manifest_key(manifest_id)
        refs = refs_of_array(decode_manifest(storage.get(key), key), layout.node_id)
        layers.append(layout.within(refs, task.piece))
    for key, size, groups in task.staged:
        with open_parquet(storage, key, size) as parquet:
            table = parquet.read_row_groups(list(groups), use_threads=False)
        table = table.filter(pc.equal(table.column("array"), layout.path)).drop_columns(["array"])
        layers.append(layout.within(table, task.piece))
    refs = merge_refs(layers, layout.ndim)
    if refs.num_rows == 0:
        return None
    ref = write_array_manifest(storage, layout.node_id, layout.ndim, refs, layout.set_name)
    # Journaled after the fact (the id is made inside): a crash right between the two
    # leaves one unreferenced manifest for garbage collection.
    storage.put(f"{plan.manifest_journal_prefix}{ref.manifest_id}", b"")
    return ref


__all__ = [
    "PieceTask",
    "attach_pieces",
    "commit_refs",
    "piece_tasks",
    "stage",
    "write_chunks",
    "write_piece",
    "write_pieces",
]

"""``aggregate``: exact count/sum/mean/min/max over a box in label space, from chunk statistics
where chunks lie wholly inside, the cut chunks read by Spark tasks (``values/aggregate.py``).

>>> aggregate(spark, url, "tas", where={"time": ("2001-07-01", "2001-07-31")},
...           funcs=["mean"])                                        # doctest: +SKIP
{'mean': 287.4}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..values import FUNCS, AggregatePlan, Partial, plan_aggregate, read_partial
from ..values.aggregate import check_funcs
from .option_names import AGGREGATE, check_options
from .options import RepoOptions, read_target, repo_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PARTIAL_SCHEMA = "count long, sum double, min double, max double"
_PARTIAL_ARROW = pa.schema(
    [("count", pa.int64()), ("sum", pa.float64()), ("min", pa.float64()), ("max", pa.float64())]
)
# Chunk boxes per task: a task pays for opening the repository and the group once.
BOXES_PER_TASK = 16
# At most this many boxes to read are read in this process: a Spark job costs about a second
# to start, and reading a few chunks costs milliseconds.
READ_HERE = 16


def aggregate(
    spark: SparkSession,
    url: str,
    array: str,
    where: Mapping[str, tuple[Any, Any]] | None = None,
    funcs: Sequence[str] = FUNCS,
    *,
    decode: bool = True,
    read_here: int = READ_HERE,
    storage_options: Mapping[str, Any] | None = None,
    **options: str,
) -> dict[str, float | int | None]:
    """``funcs`` of the array's values where each dimension's label lies in
    ``where[dim] = (lo, hi)`` (both included), NaN, fill and CF-missing values left out;
    ``decode``: scaled as the ``values`` table's column (``scale_factor``, ``add_offset``),
    else the stored values. At most ``read_here`` chunks to read are read in this process
    (it must reach the storage), more by Spark tasks; ``0``: always by Spark tasks.

    ``options``: as for ``spark.read.format("icechunk")``: ``group`` (default ``/``),
    ``branch`` / ``tag`` / ``snapshot`` / ``as_of``, ``authorize_virtual``.

    Raises:
        InvalidInputError: an unknown option, function or dimension; an unknown array.
    """
    check_options(options, AGGREGATE, "aggregate")
    check_funcs(funcs)
    storage = {f"storage.{k}": v for k, v in (storage_options or {}).items()}
    opts = {**options, **storage, "path": url}
    repo_opts = repo_options(opts)
    with repo_opts.opened() as repo:
        session = read_target(opts).session(repo)
        plan = plan_aggregate(session, opts.get("group", "/"), array, where or {})
        snapshot = session.snapshot_id
        total = plan.known
        if plan.boxes and len(plan.boxes) <= read_here:
            total = total + read_partial(session, plan, plan.boxes)
    if len(plan.boxes) > read_here:
        total = total + _read_on_executors(spark, repo_opts, snapshot, plan)
    return plan.answer(total, funcs, decode)


def _read_on_executors(
    spark: SparkSession, repo: RepoOptions, snapshot: str, plan: AggregatePlan
) -> Partial:
    groups = [
        (list(map(list, plan.boxes[i : i + BOXES_PER_TASK])),)
        for i in range(0, len(plan.boxes), BOXES_PER_TASK)
    ]
    tasks = spark.createDataFrame(groups, "boxes array<array<bigint>>").repartition(len(groups))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with repo.opened() as opened:
            session = opened.readonly_session(snapshot_id=snapshot)
            for batch in batches:
                for boxes in batch.column("boxes").to_pylist():
                    part = read_partial(session, plan, [tuple(b) for b in boxes])
                    row = {"count": part.count, "sum": part.sum, "min": part.min, "max": part.max}
                    yield pa.RecordBatch.from_pylist([row], schema=_PARTIAL_ARROW)

    total = Partial()
    for row in tasks.mapInArrow(read, _PARTIAL_SCHEMA).collect():
        total = total + Partial(int(row["count"]), float(row["sum"]), row["min"], row["max"])
    return total

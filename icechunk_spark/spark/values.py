"""``option("table", "values")``: the arrays themselves, one row per element (``values/``).

>>> (spark.read.format("icechunk").option("table", "values")          # doctest: +SKIP
...    .option("arrays", "tas,pr")
...    .option("where", '{"time": ["2005-07-01", "2005-07-31"], "lat": [0, 30]}')
...    .load(url))

The driver pins the snapshot and lays the table out (labels decoded once, pickled with the
reader); partitions are groups of chunk boxes. The ``where`` option (label ranges per
dimension) chooses the boxes and the rows: it is part of the DataFrame, as ``arrays`` is.
Spark's own filters are not pushed down (spark/source.py says why): they filter the rows. A
schema narrower than the table's reads only the arrays it names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import InvalidInputError
from ..values import (
    LabelCondition,
    Selection,
    ValueCondition,
    ValuesLayout,
    box_rows,
    chunk_boxes,
    chunk_stats_schema,
    chunk_stats_table,
    open_dataset,
    partitions_of,
    read_boxes,
    ruled_out_by_stats,
    values_layout,
)
from .options import ReadTarget, RepoOptions, get, get_bool, get_int, read_target, repo_options

# Rows per partition unless ``rows_per_partition`` says otherwise: a few chunks of a few
# million values each, enough to keep a task busy, small enough to spread a year over cores.
DEFAULT_ROWS_PER_PARTITION = 4_000_000
_OPS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


@dataclass(frozen=True, eq=False)
class ValuesQuery:
    """What every partition of one read shares: where, which snapshot, the layout."""

    repo: RepoOptions
    snapshot_id: str
    layout: ValuesLayout


def values_schema(options: Any, table: str = "values") -> StructType:
    """The Spark schema of ``values`` (the dimensions, then the arrays the ``arrays`` option
    names) or of ``chunk_stats`` (a row per chunk of those arrays, in label space)."""
    repo, target = repo_options(options), read_target(options)
    with repo.opened() as opened:
        layout = _layout(opened, target, options)
    schema = layout.schema() if table == "values" else chunk_stats_schema(layout)
    return from_arrow_schema(schema, prefer_timestamp_ntz=False)


def _layout(repo: Any, target: ReadTarget, options: Any) -> ValuesLayout:
    names = [n.strip() for n in (get(options, "arrays") or "").split(",") if n.strip()]
    group = get(options, "group") or "/"
    return values_layout(target.session(repo), group, names, get_bool(options, "decode", True))


@dataclass(frozen=True)
class _ValuesPartition(InputPartition):
    boxes: tuple[tuple[int, ...], ...]


class ValuesReader(DataSourceReader):
    """Reads chunk boxes of the selected arrays into rows (see the module doc)."""

    def __init__(self, options: Any, schema: StructType) -> None:
        repo, target = repo_options(options), read_target(options)
        with repo.opened() as opened:
            session = target.session(opened)
            layout = _layout(opened, target, options)
            self._query = ValuesQuery(repo, session.snapshot_id, _narrowed(layout, schema))
        self._rows_per_partition = get_int(
            options, "rows_per_partition", DEFAULT_ROWS_PER_PARTITION
        )
        # Part of the DataFrame's definition, never of one query's (see spark/source.py).
        self._labels, self._values = where_option(get(options, "where"), self._query.layout)

    def partitions(self) -> Sequence[InputPartition]:
        query = self._query
        selection = Selection.of(query.layout, self._labels)
        with query.repo.opened() as repo:
            session = repo.readonly_session(snapshot_id=query.snapshot_id)
            ruled_out = ruled_out_by_stats(session, query.layout, self._values)
        boxes = chunk_boxes(query.layout, selection, ruled_out)
        whole = Selection.of(query.layout, ())  # a box's rows before any trimming
        rows = box_rows(query.layout, whole, boxes[0]) if boxes else 1
        per = max(1, self._rows_per_partition // max(1, rows))
        return [_ValuesPartition(tuple(p)) for p in partitions_of(boxes, per)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _ValuesPartition):
            return  # nothing selected: Spark plans one placeholder partition
        query = self._query
        selection = Selection.of(query.layout, self._labels)
        with query.repo.opened() as repo:
            session = repo.readonly_session(snapshot_id=query.snapshot_id)
            ds = open_dataset(session, query.layout.group, query.layout.decode)
            yield from read_boxes(ds, query.layout, selection, partition.boxes, self._values)


class ChunkStatsReader(DataSourceReader):
    """``table=chunk_stats``: one partition, built from the manifests where it is read."""

    def __init__(self, options: Any, schema: StructType) -> None:
        repo, target = repo_options(options), read_target(options)
        with repo.opened() as opened:
            layout = _layout(opened, target, options)
            snapshot = target.session(opened).snapshot_id
        self._query = ValuesQuery(repo, snapshot, layout)
        self._schema = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        query = self._query
        names = [a.name for a in query.layout.arrays]
        with query.repo.opened() as repo:
            session = repo.readonly_session(snapshot_id=query.snapshot_id)
            table = chunk_stats_table(session, query.layout.group, names)
        table = table.select(self._schema.names).cast(self._schema)
        yield from table.to_batches(max_chunksize=65_536)


def where_option(
    text: str | None, layout: ValuesLayout
) -> tuple[tuple[LabelCondition, ...], tuple[ValueCondition, ...]]:
    """``option("where", '{"time": ["2005-07-01", "2005-07-31"], "tas": [300, null]}')``:
    per dimension, labels from ``lo`` to ``hi``; per array, values from ``lo`` to ``hi``
    (chunks whose statistics rule the range out are not read); both ends included, ``null``
    open.

    Raises:
        InvalidInputError: not such a JSON object, or a column of neither kind.
    """
    if not text:
        return (), ()
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"option where={text!r} is not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise InvalidInputError(f"option where={text!r}: give {{dimension: [lo, hi]}}")
    labels: list[LabelCondition] = []
    values: list[ValueCondition] = []
    arrays = {a.name for a in layout.arrays}
    for column, bounds in parsed.items():
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise InvalidInputError(f"option where: {column!r} needs [lo, hi], not {bounds!r}")
        ends = [(op, v) for op, v in zip((">=", "<="), bounds, strict=True) if v is not None]
        if column in arrays:
            if any(isinstance(v, bool) or not isinstance(v, int | float) for _, v in ends):
                raise InvalidInputError(f"option where: {column!r} takes numbers, not {bounds}")
            values += [ValueCondition(column, op, float(v)) for op, v in ends]  # type: ignore[arg-type]
        else:
            labels += [LabelCondition(column, op, v) for op, v in ends]
    Selection.of(layout, labels)  # a column of neither kind: refused now, naming the dimensions
    return tuple(labels), tuple(values)


def _narrowed(layout: ValuesLayout, schema: StructType) -> ValuesLayout:
    """The layout for ``schema``: the table's own, or a narrower one naming fewer arrays.

    Raises:
        InvalidInputError: a column the table does not have, or of another type.
    """
    full = layout.schema()
    given = to_arrow_schema(schema, timezone="UTC")
    bad = [
        f"{f.name} {f.type}"
        for f in given
        if full.get_field_index(f.name) < 0 or not full.field(f.name).type.equals(f.type)
    ]
    missing = [d.name for d in layout.dims if d.name not in given.names]
    if bad or missing:
        offered = ", ".join(f"{f.name} {f.type}" for f in full)
        raise InvalidInputError(
            f"a schema for this values table keeps every dimension ({missing or 'ok'}) and "
            f"names only its columns ({bad or 'ok'}); the table has: {offered}"
        )
    return layout.narrowed(given.names)

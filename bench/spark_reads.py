"""The read comparison of bench_spark.py: Spark's readers against pyarrow alone.

Each Spark figure is set against pyarrow alone doing the same manifest work in its timer: open
the repository, find the manifests of the branch tip, then from every manifest, two at a time
(Spark local[2] runs two tasks), decode the columns that Spark reader decodes. The Python data
source decodes every column its schema holds whatever the query (Spark prunes nothing for
it); ``read_chunks`` (Spark's Parquet reader) decodes the columns its plan's ``ReadSchema``
names: none for ``count()`` and ``select(...).count()``, which it answers from the row groups'
row counts, so its pyarrow figure reads the footers alone. Spark also builds its table's
columns and moves them to the JVM; pyarrow stops at the Arrow table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

NARROW_SCHEMA = "array string, coord array<bigint>"


def spark_read(spark: Any, url: str, query: str) -> tuple[float, int]:
    reader = spark.read.format("icechunk")
    start = time.perf_counter()
    if query == "count":
        n = reader.load(url).count()
    elif query == "select":  # Spark prunes nothing for a Python source: every column is built
        n = reader.load(url).select("array", "coord").count()
    else:  # the user's narrower schema: only array_id and coord are read
        n = reader.schema(NARROW_SCHEMA).load(url).select("array", "coord").count()
    return time.perf_counter() - start, n


def native_query(spark: Any, url: str, query: str) -> Any:
    """The same queries on ``read_chunks`` (Spark's Parquet reader over the manifests), as a
    one-row frame; ``values`` makes Spark build every array and coord value (``count`` of a
    ``select`` needs none of them, and Spark knows it here)."""
    from pyspark.sql import functions as F

    from icechunk_spark.spark.native import read_chunks

    frame = read_chunks(spark, url)
    if query == "count":
        return frame.groupBy().agg(F.count(F.lit(1)).alias("n"))  # what frame.count() runs
    if query == "select":
        return frame.select("array", "coord").groupBy().agg(F.count(F.lit(1)).alias("n"))
    return frame.agg(
        F.count("array").alias("n"),
        F.max(F.length("array")).alias("a"),
        F.max(F.aggregate("coord", F.lit(0).cast("bigint"), lambda acc, x: acc + x)),
    )


def native_read(spark: Any, url: str, query: str) -> tuple[float, int]:
    start = time.perf_counter()
    row = native_query(spark, url, query).first()
    assert row is not None
    return time.perf_counter() - start, int(row["n"])


def native_columns(spark: Any, url: str, query: str) -> list[str]:
    """The manifest columns Spark's Parquet scan decodes for this ``read_chunks`` query, from
    its physical plan's ``ReadSchema``: what its pyarrow figure reads too. Spark's generated
    columns there (``_tmp_metadata_row_index``, from the row group positions) are not in the
    files, so not decoded."""
    import re

    from icechunk_spark.spark.native import manifest_schema

    in_files = manifest_schema(("long", "long", "long")).names
    plan = native_query(spark, url, query)._jdf.queryExecution().executedPlan().toString()
    columns: list[str] = []
    for schema in re.findall(r"ReadSchema: struct<(.*)>$", plan, re.MULTILINE):
        assert "..." not in schema, f"ReadSchema abbreviated in the plan: {schema}"
        columns += [c for c in _field_names(schema) if c in in_files and c not in columns]
    return columns


def _field_names(fields: str) -> list[str]:
    """``a:bigint,b:decimal(20,0)`` -> ``[a, b]`` (commas inside a type do not split)."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(fields + ","):
        depth += char in "(<"
        depth -= char in ")>"
        if char == "," and depth == 0:
            if fields[start:i]:
                names.append(fields[start:i].split(":", 1)[0])
            start = i + 1
    return names


def pyarrow_read(url: str, columns: list[str]) -> tuple[float, int]:
    """The same manifests read with pyarrow alone: ``columns`` of each, two files at a time;
    no columns: each footer's row count, nothing decoded."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from icechunk_spark import Repository

    start = time.perf_counter()
    repo = Repository.open(url)
    nodes = repo.readonly_session("main").list_nodes()
    ids = sorted({m.manifest_id for n in nodes for m in n.manifests})
    root = Path(url.removeprefix("file://"))

    def rows(manifest_id: str) -> int:
        parquet = pq.ParquetFile(root / "m" / manifest_id)
        if not columns:
            return int(parquet.metadata.num_rows)
        present = [c for c in columns if c in parquet.schema_arrow.names]  # stat_* are optional
        return int(parquet.read(columns=present, use_threads=False).num_rows)

    with ThreadPoolExecutor(2) as pool:
        n = sum(pool.map(rows, ids))
    return time.perf_counter() - start, n


def spark_floor(spark: Any, url: str, refs: int, columns: list[str]) -> float:
    """Spark's own cost of taking ``refs`` rows of these columns from a Python source: a source
    that yields one real batch of the ``chunks`` table over and over (no manifest work at all),
    counted. What no reader can go below on this machine."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    # Defined here, not at module level, so cloudpickle ships the classes to the workers.
    class FloorReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(8)]

        def read(self, partition: InputPartition) -> Any:
            from icechunk_spark import Repository
            from icechunk_spark.spark import scan

            repo = Repository.open(url)
            arrays = scan.select_arrays(repo.readonly_session().list_nodes(), None)
            part = scan.plan_parts(repo.storage, arrays, scan.DEFAULT_ROWS_PER_PARTITION)[0]
            batch = next(scan.read_part(repo.storage, part, columns))
            for _ in range(-(-refs // 8 // batch.num_rows)):
                yield batch

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "icechunk_floor"

        def schema(self) -> str:
            from icechunk_spark.spark.source import spark_schema

            full = spark_schema("chunks")
            return ", ".join(f"{c} {full[c].dataType.simpleString()}" for c in columns)

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    spark.dataSource.register(Floor)
    spark.read.format("icechunk_floor").load().count()  # warm
    start = time.perf_counter()
    spark.read.format("icechunk_floor").load().count()
    return time.perf_counter() - start


def read_rows(spark: Any, url: str, refs: int, repeat: int) -> list[list[Any]]:
    """Spark vs pyarrow reading the same columns, best of ``repeat`` each (the machine may be
    shared), with the ratio."""
    from icechunk_spark.spark.tables import CHUNKS, manifest_columns

    every = manifest_columns(CHUNKS.names)  # what the data source decodes: all but inline bytes
    narrow = manifest_columns(["array", "coord"])
    arrow: dict[tuple[str, ...], float] = {}

    def arrow_s(columns: list[str]) -> float:
        if tuple(columns) not in arrow:
            best = min(_checked(pyarrow_read(url, columns), refs) for _ in range(repeat))
            arrow[tuple(columns)] = best
        return arrow[tuple(columns)]

    def row(label: str, seconds: float, columns: list[str]) -> list[Any]:
        read = ", ".join(columns) if columns else "footers only"
        return [label, refs, seconds, refs / seconds, seconds / arrow_s(columns), read]

    native = {q: native_columns(spark, url, q) for q in ("count", "select", "values")}
    for query in native:  # warm code generation
        native_read(spark, url, query)
    spark_read(spark, url, "count")  # warm the Python workers
    rows: list[list[Any]] = []
    for label, query, columns in (
        ("count()", "count", every),
        ('select("array","coord").count()', "select", every),
        (f'.schema("{NARROW_SCHEMA}")...count()', "narrow", narrow),
    ):
        spark_s = min(_checked(spark_read(spark, url, query), refs) for _ in range(repeat))
        rows.append(row(f"read: spark {label}", spark_s, columns))
        if query != "narrow":
            native_s = min(_checked(native_read(spark, url, query), refs) for _ in range(repeat))
            rows.append(row(f"read: read_chunks {label}", native_s, native[query]))
    native_s = min(_checked(native_read(spark, url, "values"), refs) for _ in range(repeat))
    label = "read: read_chunks, every array and coord value built (agg over them)"
    rows.append(row(label, native_s, native["values"]))
    for read, seconds in arrow.items():
        decoded = ", ".join(read) if read else "footers only"
        rows.append(["read: pyarrow alone", refs, seconds, refs / seconds, 1.0, decoded])
    for label, names in (("every column", CHUNKS.names), ("array, coord", ["array", "coord"])):
        try:
            floor_s = spark_floor(spark, url, refs, names)
        except Exception as exc:  # a benchmark row, never the end of the run's other figures
            rows.append([f"floor, {label}: failed: {exc}"[:120], refs, "-", "-", "", ""])
            continue
        rows.append(
            [
                f"floor: Spark counting prebuilt batches, {label}",
                refs,
                floor_s,
                refs / floor_s,
                "",
                "",
            ]
        )
    return rows


def _checked(result: tuple[float, int], refs: int) -> float:
    seconds, n = result
    assert n == refs, (n, refs)
    return seconds

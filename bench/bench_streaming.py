"""Streaming appends: micro-batches per second and commit latency per micro-batch.

    .venv/bin/python bench/bench_streaming.py [--batches 20] [--chunks 1000] [--rows data]

A folder of Parquet files, one micro-batch each (``maxFilesPerTrigger=1``), each holding
``--chunks`` chunk rows for one array, is streamed into a repository on local disk with
``placement=after_end`` and ``Trigger.AvailableNow``. The files are written before any
timer starts. ``data`` rows carry 1 KiB raw chunks (executors encode and write them as chunk
objects); ``virtual`` rows carry refs into one local file.

Per micro-batch Spark's own progress reports split the time: ``addBatch`` is our sink (the
tasks staging refs, then the commit), ``triggerExecution`` the whole batch. Batches/s is
batches over the query's wall time, JVM start excluded (the session is warmed first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import local_spark, print_table
from icechunk_spark import Repository

CHUNK = 256  # float32 values: 1 KiB raw chunks


def write_inputs(folder: Path, batches: int, chunks: int, rows: str, blob: Path) -> str:
    """The micro-batch files; returns the Spark schema of their rows."""
    folder.mkdir(parents=True)
    if rows == "virtual":
        blob.write_bytes(os.urandom(chunks * CHUNK * 4))
    for b in range(batches):
        coords = [[c] for c in range(chunks)]
        if rows == "data":
            values = np.full((chunks, CHUNK), b, dtype="float32")
            columns: dict[str, Any] = {"data": [v.tobytes() for v in values]}
        else:
            columns = {
                "location": [blob.as_uri()] * chunks,
                "offset": [c * CHUNK * 4 for c in range(chunks)],
                "length": [CHUNK * 4] * chunks,
            }
        table = pa.table({"array": ["/series"] * chunks, "coord": coords, **columns})
        path = folder / f"{b:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
    if rows == "data":
        return "array string, coord array<bigint>, data binary"
    return "array string, coord array<bigint>, location string, offset bigint, length bigint"


def spark_session() -> Any:
    return local_spark("bench-streaming", shuffle_partitions=2)


def run(spark: Any, work: Path, batches: int, chunks: int, rows: str) -> list[Any]:
    url = (work / "repo").as_uri()
    repo = Repository.create(url)
    if rows == "virtual":
        repo.set_virtual_chunk_container(work.as_uri() + "/")
    session = repo.writable_session()
    session.create_group("/")
    session.commit("root")
    schema = write_inputs(work / "in", batches, chunks, rows, work / "blob.bin")
    arrays = {
        "/series": {
            "shape": [0],
            "chunk_shape": [CHUNK],
            "data_type": "float32",
            "dimension_names": ["t"],
        }
    }
    started = time.perf_counter()
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(work / "in"))
        .writeStream.format("icechunk")
        .option("checkpointLocation", str(work / "ck"))
        .option("arrays", json.dumps(arrays))
        .option("append_dim", "t")
        .option("placement", "after_end")
        .option("authorize_virtual", work.as_uri() + "/")
        .trigger(availableNow=True)
        .start(url)
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    commits = sum(1 for _ in Repository.open(url).ancestry(branch="main")) - 2  # empty, root
    assert commits == batches, f"{commits} commits for {batches} batches"
    add = [p["durationMs"]["addBatch"] / 1000 for p in progress]
    total = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return [
        rows,
        batches,
        chunks,
        round(batches / wall, 2),
        statistics.median(add),
        _p90(add),
        statistics.median(total),
        _p90(total),
    ]


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--rows", choices=["data", "virtual", "both"], default="both")
    args = parser.parse_args()
    kinds = ["data", "virtual"] if args.rows == "both" else [args.rows]
    spark = spark_session()
    table = []
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        run(spark, Path(tmp, "warmup"), 2, 10, "data")  # JVM, workers and imports warm
        for kind in kinds:
            table.append(run(spark, Path(tmp, kind), args.batches, args.chunks, kind))
    spark.stop()
    print_table(
        f"Streaming appends to local disk, {args.chunks} chunks per micro-batch "
        "(seconds; addBatch = staging tasks + commit)",
        [
            "rows",
            "batches",
            "chunks/batch",
            "batches/s",
            "addBatch median",
            "addBatch p90",
            "batch median",
            "batch p90",
        ],
        table,
    )


if __name__ == "__main__":
    main()

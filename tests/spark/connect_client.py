"""A Spark Connect client, run as its own process by ``test_connect.py``.

A Connect session sets process-wide state (``SPARK_CONNECT_MODE_ENABLED``) that turns the
classic ``spark`` fixture of the test process into a Connect one, so the client runs here.

Usage: python connect_client.py sc://HOST:PORT COMMAND REPO_URL [ARGS]; commands:
  ``write`` (``df.write.format("icechunk")``), ``driver`` (``write_chunks``), ``read`` (prints
  the chunks and nodes tables, and ``read_chunks``, as JSON), ``stream SOURCE_DIR CHECKPOINT``
  (``writeStream``), ``sql ARRAY`` (a values view, a GROUP BY over it and ``aggregate``, as
  JSON). Commands joined by ``+`` (``write+read``) run in turn in one session: a client
  process costs seconds of start-up.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

# A 4 x 6 float32 array in 2 x 3 chunks along dimensions (t, x).
ARRAY: dict[str, Any] = {
    "shape": [4, 6],
    "chunk_shape": [2, 3],
    "data_type": "float32",
    "dimension_names": ["t", "x"],
    "fill_value": 0.0,
}
ROWS = "array string, coord array<bigint>, data binary"


def values(offset: float) -> np.ndarray:
    """The array each command writes: test_connect.py checks for exactly these values."""
    return np.arange(24, dtype="float32").reshape(4, 6) + np.float32(offset)


def chunk_rows(path: str, offset: float) -> list[tuple[str, list[int], bytes]]:
    array = values(offset)
    return [
        (path, [t, x], array[2 * t : 2 * t + 2, 3 * x : 3 * x + 3].tobytes())
        for t in range(2)
        for x in range(2)
    ]


def write(spark: SparkSession, url: str) -> None:
    df = spark.createDataFrame(chunk_rows("/written", 1), ROWS).repartition(2)
    (
        df.write.format("icechunk")
        .mode("append")
        .option("arrays", json.dumps({"/written": ARRAY}))
        .option("message", "written through Spark Connect")
        .save(url)
    )


def driver(spark: SparkSession, url: str) -> None:
    from icechunk_spark.spark import write_chunks

    df = spark.createDataFrame(chunk_rows("/driven", 2), ROWS).repartition(2)
    snapshot = write_chunks(df, url, arrays={"/driven": ARRAY}, message="driver API on Connect")
    print(json.dumps({"snapshot": snapshot}))


def read(spark: SparkSession, url: str) -> None:
    from icechunk_spark.spark import read_chunks

    chunks = spark.read.format("icechunk").load(url)
    nodes = spark.read.format("icechunk").option("table", "nodes").load(url)
    print(
        json.dumps(
            {
                "chunks": [list(row) for row in chunks.collect()],
                "read_chunks": [list(row) for row in read_chunks(spark, url).collect()],
                "nodes": sorted([row["path"], row["type"]] for row in nodes.collect()),
            }
        )
    )


def sql(spark: SparkSession, url: str, array: str) -> None:
    from icechunk_spark.spark import aggregate

    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW v USING icechunk "
        f"OPTIONS (path '{url}', table 'values', arrays '{array}')"
    )
    rows = spark.sql(f"SELECT t, sum({array}) AS s FROM v GROUP BY t ORDER BY t").collect()
    print(
        json.dumps(
            {
                "sums": [[row["t"], row["s"]] for row in rows],
                # read_here=0: the cut chunks are read by tasks, through Connect
                "aggregate": aggregate(
                    spark, url, array, {"t": (1, 2)}, ["count", "sum"], read_here=0
                ),
            }
        )
    )


def stream(spark: SparkSession, url: str, source: str, checkpoint: str) -> None:
    sdf = spark.readStream.schema(ROWS).option("maxFilesPerTrigger", 1).parquet(source)
    (
        sdf.writeStream.format("icechunk")
        .option("checkpointLocation", checkpoint)
        .option("append_dim", "t")
        .option("arrays", json.dumps({"/streamed": ARRAY}))
        .trigger(availableNow=True)
        .start(url)
        .awaitTermination()
    )


def main(remote: str, command: str, url: str, *args: str) -> None:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    try:
        for step in command.split("+"):
            run(spark, step, url, *args)
    finally:
        spark.stop()


def run(spark: SparkSession, command: str, url: str, *args: str) -> None:
    if command == "write":
        write(spark, url)
    elif command == "driver":
        driver(spark, url)
    elif command == "read":
        read(spark, url)
    elif command == "sql":
        sql(spark, url, *args)
    elif command == "stream":
        stream(spark, url, *args)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""A job for ``spark-submit --master spark://…`` (test_cluster.py): write with ``df.write`` and
with the driver API to one repository, read it back, print what it saw.

Usage: spark-submit cluster_job.py REPO_URL STORAGE_OPTIONS_JSON. Executors are separate JVMs
under the standalone worker; they share nothing with this driver but the repository.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from pyspark.sql import SparkSession

from icechunk_spark.spark import write_chunks

ROWS = "array string, coord array<bigint>, data binary"
ARRAY = {"shape": [12], "chunk_shape": [4], "data_type": "float32", "fill_value": 0.0}


def chunk_rows(path: str, offset: int) -> list[tuple[str, list[int], bytes]]:
    """Three chunks of ``arange(12) + offset``: test_cluster.py checks for these values."""
    values = np.arange(12, dtype="float32") + np.float32(offset)
    return [(path, [i], values[4 * i : 4 * i + 4].tobytes()) for i in range(3)]


def main(url: str, storage_options: dict[str, str]) -> None:
    spark = SparkSession.builder.appName("icechunk-cluster-test").getOrCreate()
    print(f"APP={spark.sparkContext.applicationId}", flush=True)
    storage = {f"storage.{key}": value for key, value in storage_options.items()}
    df = spark.createDataFrame(chunk_rows("/written", 1), ROWS).repartition(3)
    (
        df.write.format("icechunk")
        .mode("append")
        .option("arrays", json.dumps({"/written": ARRAY}))
        .options(**storage)
        .save(url)
    )
    driven = spark.createDataFrame(chunk_rows("/driven", 2), ROWS).repartition(3)
    snapshot = write_chunks(driven, url, arrays={"/driven": ARRAY}, storage_options=storage_options)
    print(f"SNAPSHOT={snapshot}", flush=True)
    chunks = spark.read.format("icechunk").options(**storage).load(url)
    counts = {row["array"]: row["count"] for row in chunks.groupBy("array").count().collect()}
    print(f"CHUNKS={json.dumps(counts, sort_keys=True)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))

"""A tiny job for ``spark-submit``: write virtual refs, read them back, print what it saw.

Usage: spark-submit submit_job.py REPO_URL DATA_DIR. The ``icechunk`` format is found
without ``register()``, through the installed ``pyspark_icechunk`` package.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main(url: str, data_dir: str) -> None:
    spark = SparkSession.builder.appName("icechunk-submit-test").getOrCreate()
    rows = []
    for i in range(3):
        path = Path(data_dir) / f"{i}.bin"
        path.write_bytes(bytes([i]) * 8)
        rows.append(("/x", [i], path.as_uri(), 0, 8))
    df = spark.createDataFrame(
        rows, "array string, coord array<bigint>, location string, offset bigint, length bigint"
    )
    arrays = '{"/x": {"shape": [24], "chunk_shape": [8], "data_type": "uint8"}}'
    df.write.format("icechunk").mode("append").option("arrays", arrays).save(url)
    n = spark.read.format("icechunk").load(url).filter("kind = 'virtual'").count()
    print(f"VIRTUAL_REFS={n}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

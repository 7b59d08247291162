"""A tiny job for ``spark-submit``: write virtual refs, read them back, print what it saw.

Usage: spark-submit submit_job.py DATA_DIR REPO_URL [STORAGE_OPTIONS_JSON] [REPO_URL ...]: each
repository in turn, in one Spark application (one JVM start for all). The ``icechunk`` format
is found without ``register()``, through the installed ``pyspark_icechunk`` package; storage
options (an emulator's endpoint and credentials) go in as ``storage.<name>`` options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main(data_dir: str, targets: list[tuple[str, dict[str, str]]]) -> None:
    spark = SparkSession.builder.appName("icechunk-submit-test").getOrCreate()
    for url, storage_options in targets:
        write_and_count(spark, url, data_dir, storage_options)
    spark.stop()


def write_and_count(
    spark: SparkSession, url: str, data_dir: str, storage_options: dict[str, str]
) -> None:
    rows = []
    for i in range(3):
        path = Path(data_dir) / f"{i}.bin"
        path.write_bytes(bytes([i]) * 8)
        rows.append(("/x", [i], path.as_uri(), 0, 8))
    df = spark.createDataFrame(
        rows, "array string, coord array<bigint>, location string, offset bigint, length bigint"
    )
    arrays = '{"/x": {"shape": [24], "chunk_shape": [8], "data_type": "uint8"}}'
    storage = {f"storage.{key}": value for key, value in storage_options.items()}
    df.write.format("icechunk").mode("append").option("arrays", arrays).options(**storage).save(url)
    n = (
        spark.read.format("icechunk")
        .options(**storage)
        .load(url)
        .filter("kind = 'virtual'")
        .count()
    )
    print(f"VIRTUAL_REFS={n} {url}", flush=True)


if __name__ == "__main__":
    args = sys.argv[2:]
    if len(args) == 1:
        args.append("{}")
    main(
        sys.argv[1],
        [(url, json.loads(opts)) for url, opts in zip(args[::2], args[1::2], strict=True)],
    )

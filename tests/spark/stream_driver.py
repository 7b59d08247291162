"""A streaming driver the kill test starts, kills with SIGKILL, and starts again.

Usage: python stream_driver.py REPO_URL IN_DIR CHECKPOINT_DIR ARRAYS_JSON (forever|available_now)
    (absolute|after_end)

``forever`` streams one file per micro-batch until killed; ``available_now`` drains what is
left and exits. Both use one checkpoint, so a restart continues the same query.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from icechunk_spark.spark import register

ROW_SCHEMA = "array string, coord array<bigint>, data binary"


def main(url: str, folder: str, checkpoint: str, arrays: str, mode: str, placement: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("icechunk-stream-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (
        spark.readStream.schema(ROW_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(folder)
        .writeStream.format("icechunk")
        .option("checkpointLocation", checkpoint)
        .option("arrays", arrays)
        .option("append_dim", "t")
        .option("placement", placement)
    )
    if mode == "available_now":
        writer.trigger(availableNow=True).start(url).awaitTermination()
    else:
        writer.trigger(processingTime="0 seconds").start(url).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])

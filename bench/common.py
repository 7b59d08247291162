"""Shared helpers for benchmarks: timing, peak memory, printing a table, a local Spark."""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def local_spark(app: str, shuffle_partitions: int, driver_memory: str | None = None) -> Any:
    """A ``local[2]`` SparkSession (UI off, on 127.0.0.1) with the icechunk source registered.

    ``driver_memory``: the JVM heap, with the parallel collector (``None``: Spark's default).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from icechunk_spark.spark import register

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    )
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory).config(
            "spark.driver.extraJavaOptions", "-XX:+UseParallelGC"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(fn)[0] for _ in range(repeat))


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [list(map(str, header))] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


class TreeMemory:
    """Peak RSS of every process in this process's tree, by kind, sampled in a thread.

    Spark runs Python workers and planner/commit workers as children of the JVM, which is a
    child of this driver: counting only this process misses where the memory goes. A kind
    is this driver, the JVM, or the Python module a worker runs (``pyspark.daemon`` for
    executor workers, ``pyspark.sql.worker.<name>`` for data source planning and commit).
    """

    def __init__(self, interval: float = 0.1) -> None:
        import os
        import threading

        self._interval = interval
        self._pid = os.getpid()
        self._peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peaks_mb(self) -> dict[str, float]:
        """Kind -> the largest RSS one process of that kind reached, in MB."""
        return dict(sorted(self._peaks.items()))

    def _run(self) -> None:
        import psutil

        me = psutil.Process(self._pid)
        while not self._stop.wait(self._interval):
            for proc in [me, *me.children(recursive=True)]:
                try:
                    kind = self._kind(proc)
                    rss = proc.memory_info().rss / 2**20
                except psutil.Error:
                    continue  # exited between listing and reading
                self._peaks[kind] = max(self._peaks.get(kind, 0.0), rss)

    def _kind(self, proc: Any) -> str:
        if proc.pid == self._pid:
            return "driver (this Python)"
        cmdline = proc.cmdline()
        name = proc.name()
        if "java" in name:
            return "JVM (driver + executors)"
        if "-m" in cmdline:
            return f"Python {cmdline[cmdline.index('-m') + 1]}"
        return name

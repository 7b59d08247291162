"""Shared helpers for benchmarks: timing, peak memory, printing a table, a local Spark."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` set to ``value`` inside the block (a what-if side of a benchmark)."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


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


# Every memory figure of the benchmarks is in decimal megabytes (MB = 10^6 bytes), as the docs
# quote them (1 GB = 1,000 MB).
MB = 1_000_000


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux's ``ru_maxrss`` is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def busy(seconds: float) -> None:
    """Spin the calling thread's CPU for ``seconds``."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run_json(argv: Sequence[str]) -> dict[str, Any]:
    """Run a benchmark side in a fresh process and return the JSON object its last line holds.

    Raises:
        SystemExit: the side failed; its last lines of stderr say why.
    """
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


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


@dataclass(frozen=True, slots=True)
class TreePeaks:
    """What ``TreeMemory`` saw, in MB. Sums are taken over one sample's processes, so they are
    what was resident at one instant; their peak is the largest such sum."""

    largest: dict[str, float]  # kind -> the largest RSS one process of that kind reached
    kind_total: dict[str, float]  # kind -> the peak of the RSS summed over that kind
    tree_rss: float  # the peak of the RSS summed over the whole tree
    # The peak of the PSS summed over the tree: a page shared by n processes counts 1/n in
    # each (forked Python workers share their parent's pages), so this is what the tree holds;
    # the RSS sum counts such pages once per process.
    tree_pss: float


class TreeMemory:
    """The memory of every process in this process's tree, by kind, sampled in a thread.

    Spark runs Python workers and planner/commit workers as children of the JVM, which is a
    child of this driver: counting only this process misses where the memory goes. A kind
    is this driver, the JVM, or the Python module a worker runs (``pyspark.worker`` for
    executor tasks, ``pyspark.sql.worker.<name>`` for data source planning and commit).
    """

    def __init__(self, interval: float = 0.1) -> None:
        import threading

        self._interval = interval
        self._pid = os.getpid()
        self._largest: dict[str, float] = {}
        self._kind_total: dict[str, float] = {}
        self._tree_rss = 0.0
        self._tree_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peaks(self) -> TreePeaks:
        return TreePeaks(
            dict(sorted(self._largest.items())),
            dict(sorted(self._kind_total.items())),
            self._tree_rss,
            self._tree_pss,
        )

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()
        self._sample()  # once more at the end: a run shorter than the interval still counts

    def _sample(self) -> None:
        import psutil

        me = psutil.Process(self._pid)
        totals: dict[str, float] = {}
        tree_rss = tree_pss = 0.0
        for proc in [me, *me.children(recursive=True)]:
            try:
                kind = self._kind(proc)
                memory = proc.memory_full_info()  # rss, and pss from smaps_rollup
            except psutil.Error:
                continue  # exited between listing and reading
            rss = memory.rss / MB
            self._largest[kind] = max(self._largest.get(kind, 0.0), rss)
            totals[kind] = totals.get(kind, 0.0) + rss
            tree_rss += rss
            tree_pss += memory.pss / MB
        for kind, total in totals.items():
            self._kind_total[kind] = max(self._kind_total.get(kind, 0.0), total)
        self._tree_rss = max(self._tree_rss, tree_rss)
        self._tree_pss = max(self._tree_pss, tree_pss)

    def _kind(self, proc: Any) -> str:
        if proc.pid == self._pid:
            return "driver (this Python)"
        cmdline = proc.cmdline()
        name = proc.name()
        if "java" in name:
            return "JVM (driver + executors)"
        if "-m" in cmdline:
            # Spark 4 starts every Python worker as `-m pyspark.daemon <worker module>`
            # (pyspark.worker for tasks, pyspark.sql.worker.<name> for data source planning
            # and commit), and forked workers keep their daemon's command line.
            module = cmdline[cmdline.index("-m") + 1 :]
            if module[0] == "pyspark.daemon" and len(module) > 1:
                return f"Python {module[1]}"
            return f"Python {module[0]}"
        return str(name)


def memory_rows(memory: dict[str, TreePeaks]) -> list[list[str]]:
    """Rows for ``print_table``: one column per run, MB. Each kind's largest process and, where
    it ran more than one, all of them at once; then the whole tree's RSS and PSS sums."""
    runs = list(memory.values())
    kinds = sorted({k for peaks in runs for k in peaks.largest})
    rows: list[list[str]] = []
    for kind in kinds:
        rows.append([f"{kind}, largest process", *(_mb(p.largest.get(kind, 0)) for p in runs)])
        if any(p.kind_total.get(kind, 0) > p.largest.get(kind, 0) for p in runs):
            rows.append([f"{kind}, all at once", *(_mb(p.kind_total.get(kind, 0)) for p in runs)])
    rows.append(["whole tree, RSS summed", *(_mb(p.tree_rss) for p in runs)])
    rows.append(["whole tree, PSS summed", *(_mb(p.tree_pss) for p in runs)])
    return rows


def _mb(value: float) -> str:
    return f"{value:,.0f}"

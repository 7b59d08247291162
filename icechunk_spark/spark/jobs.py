"""What every spark-submit job in ``jobs/`` shares: arguments, the session, the summary line.

Jobs read ``conf/spark-defaults.conf`` and ``conf/log4j2.properties`` by default (``--conf-dir``
overrides), print one summary line at the end, and exit non-zero with a one-line message.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..repository import Repository
from ..storage import parse_storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


@dataclass(frozen=True, slots=True)
class JobSummary:
    """The one line every job ends with."""

    job: str
    snapshot: str | None
    arrays: int
    refs: int
    bytes: int
    seconds: float

    def line(self) -> str:
        return (
            f"{self.job}: snapshot={self.snapshot or '-'} arrays={self.arrays} refs={self.refs} "
            f"bytes={self.bytes} seconds={self.seconds:.1f}"
        )


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--repo",
        default=Path("demo-repo").absolute().as_uri(),
        help="repository URL (default ./demo-repo)",
    )
    parser.add_argument("--branch", default="main")
    parser.add_argument("--message", help="commit message")
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option for the repository (repeatable)",
    )
    parser.add_argument(
        "--conf-dir",
        default=str(DEFAULT_CONF_DIR),
        help="folder with spark-defaults.conf, log4j2.properties, manifests.yaml",
    )
    parser.add_argument("--master", help="Spark master (default: spark-defaults.conf's, local[2])")
    return parser


storage_options = parse_storage_options  # the jobs' --storage-option KEY=VALUE, like the CLI's


def spark_defaults(conf_dir: str) -> dict[str, str]:
    """``spark-defaults.conf`` as a dict (whitespace-separated key and value, # comments)."""
    path = Path(conf_dir) / "spark-defaults.conf"
    settings: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                settings[key] = value.strip()
    return settings


def spark_session(app: str, args: argparse.Namespace) -> SparkSession:
    """The job's SparkSession, from ``--conf-dir`` and ``--master``."""
    return local_spark_session(app, args.conf_dir, args.master)


def local_spark_session(
    app: str, conf_dir: str | Path = DEFAULT_CONF_DIR, master: str | None = None
) -> SparkSession:
    """A SparkSession with ``conf_dir``'s defaults, quiet logging, workers on this Python.

    The jobs use it, and so can notebooks: ``local_spark_session("explore")`` gives the same
    local, UI-less, quiet Spark as ``make demo``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    settings = spark_defaults(str(conf_dir))
    log4j = Path(conf_dir) / "log4j2.properties"
    if log4j.exists():
        java_options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = (
            f"{java_options} -Dlog4j2.configurationFile={log4j.resolve().as_uri()}".strip()
        )
    for key, value in settings.items():
        builder = builder.config(key, value)
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


def repo_totals(repo: Repository, snapshot: str | None) -> tuple[int, int, int]:
    """(arrays, refs, manifest bytes) of a snapshot, for the summary line."""
    if snapshot is None:
        return 0, 0, 0
    session = repo.readonly_session(snapshot_id=snapshot)
    arrays = [n for n in session.list_nodes() if n.type == "array"]
    manifests = repo.manifests(snapshot)
    return len(arrays), sum(n.ref_count for n in arrays), sum(m.bytes for m in manifests)


def run(job: str, body: Callable[[], tuple[Repository, str | None]], debug: bool = False) -> int:
    """Run a job body, print its summary line, and turn failures into one line and exit 1."""
    start = time.perf_counter()
    try:
        repo, snapshot = body()
        arrays, refs, size = repo_totals(repo, snapshot)
    except Exception as exc:  # a job's last word: one line, not a JVM-sized traceback
        if debug or os.environ.get("ICECHUNK_SPARK_DEBUG"):
            traceback.print_exc()
        message = " ".join(str(exc).split())[:2000] or type(exc).__name__
        print(f"{job}: error: {message}", file=sys.stderr)
        return 1
    finally:
        _stop_spark()
    print(JobSummary(job, snapshot, arrays, refs, size, time.perf_counter() - start).line())
    return 0


def _stop_spark() -> None:
    """Stop the job's SparkSession, if it made one, before the interpreter exits."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is not None:
        spark.stop()


def open_or_create(
    url: str, options: dict[str, Any], config: dict[str, Any] | None = None, **kwargs: Any
) -> Repository:
    return Repository.open_or_create(url, config=config, storage_options=options, **kwargs)

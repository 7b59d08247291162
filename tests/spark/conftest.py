"""One local SparkSession for the whole test run (starting one costs ~10 s), and, for the tests
that need them, one Spark Connect server and one standalone cluster (``spark_servers``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.spark_servers import (
    ConnectServer,
    StandaloneCluster,
    start_connect_server,
    start_standalone_cluster,
)

ROOT = Path(__file__).resolve().parents[2]
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.session.timeZone": "UTC",
}
# local[2,3]: two cores like local[2], and a task may fail up to 3 times, so retries are real.
MASTER = "local[2,3]"


def discoverable(site: Path) -> str:
    """A ``PYTHONPATH`` under which Spark's worker finds ``pyspark_icechunk`` by scanning.

    PySpark discovers data sources with ``pkgutil.iter_modules()``, which cannot see
    packages an *editable* install maps through an import hook (setuptools' default for this
    flat layout). A regular install puts ``pyspark_icechunk`` in site-packages; this mimics
    that with a folder holding only a link to the package.
    """
    site.mkdir(parents=True, exist_ok=True)
    link = site / "pyspark_icechunk"
    if not link.exists():
        link.symlink_to(ROOT / "pyspark_icechunk", target_is_directory=True)
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)


def only_once_per_run(tmp_path_factory: pytest.TempPathFactory, what: str) -> None:
    """Fail if another xdist worker of this run started ``what`` too: the tests using it must
    share a worker (``tests/conftest.py`` groups them), or each worker starts a JVM of its own
    and two compete for the two cores."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    run_root = tmp_path_factory.getbasetemp().parent  # shared by this run's workers
    others = sorted(p.name for p in run_root.glob(f"{what}-started-by-*"))
    (run_root / f"{what}-started-by-{worker}").touch()
    if others:
        pytest.fail(f"{what} started on {worker} too ({others}): the xdist grouping is broken")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    only_once_per_run(tmp_path_factory, "spark")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Inherited by the JVM and so by every Python worker it starts.
    os.environ["PYTHONPATH"] = discoverable(tmp_path_factory.mktemp("site"))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(MASTER).appName("icechunk-spark-tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_env(site: Path) -> dict[str, str]:
    """The environment of a Spark process we start: Python workers on this venv's Python, the
    data source discoverable, 127.0.0.1 only, and no Connect mode inherited."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
    }
    return env | {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": discoverable(site),
    }


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Spark Connect server (local[2], 768 MB, no UI) on 127.0.0.1 for the whole run."""
    only_once_per_run(tmp_path_factory, "connect")
    tmp = tmp_path_factory.mktemp("connect")
    server = start_connect_server(spark_env(tmp / "site"), tmp / "server.log", SPARK_CONF)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One standalone master and one worker (1 core, 1 GB for executors) on 127.0.0.1."""
    only_once_per_run(tmp_path_factory, "cluster")
    tmp = tmp_path_factory.mktemp("cluster")
    cluster = start_standalone_cluster(spark_env(tmp / "site"), tmp)
    yield cluster
    cluster.stop()


@pytest.fixture
def sql_conf(spark: Any) -> Iterator[Any]:
    """Set SQL confs for one test and restore them afterwards: ``sql_conf({key: value})``."""
    saved: dict[str, str | None] = {}

    def set_conf(values: dict[str, str]) -> None:
        for name, value in values.items():
            if name not in saved:
                saved[name] = spark.conf.get(name, None)
            spark.conf.set(name, value)

    yield set_conf
    for name, value in saved.items():
        if value is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, value)

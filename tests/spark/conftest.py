"""One local SparkSession for the whole test run (starting one costs ~10 s)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
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

"""``spark-submit`` runs a job file that uses the data source without registering it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from icechunk_spark import Repository

from .conftest import SPARK_CONF, discoverable
from .helpers import new_repo

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("submit_job.py")


def test_spark_submit(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    container = data.as_uri() + "/"
    url = (tmp_path / "repo").as_uri()
    new_repo(url, config={"virtual_chunk_containers": {container: {}}})
    submit = Path(sys.executable).with_name("spark-submit")
    command = [str(submit), "--master", "local[2]"]
    for key, value in SPARK_CONF.items():
        command += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": discoverable(tmp_path / "site"),
    }
    # Run from an unrelated folder: the source must come from the installed package.
    done = subprocess.run(
        [*command, str(JOB), url, str(data)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VIRTUAL_REFS=3" in done.stdout
    repo = Repository.open(url, authorize_virtual=[container])
    values = zarr.open_array(repo.readonly_session().store, path="x", mode="r")[:]
    np.testing.assert_array_equal(values, np.repeat(np.arange(3, dtype="uint8"), 8))

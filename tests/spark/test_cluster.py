"""A standalone cluster (one master, one worker, started once for the run from the installed
pyspark) runs a spark-submit job against the S3 server: executors are separate JVMs and Python
workers that share nothing with the driver but the repository."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

from icechunk_spark.repository import Repository
from tests.conftest import S3_BUCKET, s3_options
from tests.support.spark_servers import StandaloneCluster

from .conftest import SPARK_CONF, spark_env
from .helpers import new_repo

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("cluster_job.py")
# Small executors: the cluster's worker offers 1 core and 1 GB.
CLUSTER_CONF = {
    **SPARK_CONF,
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "1",
    "spark.executor.extraJavaOptions": SPARK_CONF["spark.driver.extraJavaOptions"],
}


def test_a_job_on_a_standalone_cluster_writes_and_reads_s3(
    spark_cluster: StandaloneCluster, s3_endpoint: str, tmp_path: Path
) -> None:
    url = f"s3://{S3_BUCKET}/{uuid.uuid4().hex}"
    options = s3_options(s3_endpoint)
    new_repo(url, storage_options=options)
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", spark_cluster.url]
    command += ["--driver-memory", "512m"]
    for key, value in CLUSTER_CONF.items():
        command += ["--conf", f"{key}={value}"]
    done = subprocess.run(
        [*command, str(JOB), url, json.dumps(options)],
        cwd=tmp_path,  # an unrelated folder: the job imports the installed packages
        env=spark_env(tmp_path / "site"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert json.loads(lines["CHUNKS"]) == {"/driven": 3, "/written": 3}

    repo = Repository.open(url, storage_options=options)
    assert next(repo.ancestry(branch="main")).id == lines["SNAPSHOT"]
    store = repo.readonly_session().store
    for path, offset in (("written", 1), ("driven", 2)):
        values = zarr.open_array(store, path=path, mode="r")[:]
        np.testing.assert_array_equal(values, np.arange(12, dtype="float32") + offset)
    # The tasks ran in the worker's executors: each left its logs in the application's folder.
    executors = list((spark_cluster.work_dir / lines["APP"]).glob("*/stderr"))
    assert executors, f"no executor of {lines['APP']} under {spark_cluster.work_dir}"

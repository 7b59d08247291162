"""``spark-submit`` runs a job file that uses the data source without registering it: on local
files, and on the GCS and Azure emulators with ``storage.<option>`` options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from icechunk_spark import Repository
from tests.conftest import AZURE_CONTAINER, GCS_BUCKET, azure_options, gcs_options
from tests.support.emulators import azurite_missing_reason

from .conftest import SPARK_CONF, discoverable
from .helpers import new_repo

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("submit_job.py")


def test_spark_submit_to_local_files_and_the_gcs_and_azure_emulators(
    spark: Any, gcs_endpoint: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One application writes to all three (a JVM start costs ~20 s of CI on 2 cores)."""
    targets = [
        ((tmp_path / "repo").as_uri(), {}),
        (f"gs://{GCS_BUCKET}/{uuid.uuid4().hex}", gcs_options(gcs_endpoint)),
    ]
    azure_missing = azurite_missing_reason()
    if azure_missing is None:
        endpoint = request.getfixturevalue("azure_endpoint")
        targets.append((f"az://{AZURE_CONTAINER}/{uuid.uuid4().hex}", azure_options(endpoint)))
    _submit_and_check(tmp_path, targets)
    if azure_missing is not None:
        pytest.skip(f"spark-submit checked on local files and GCS only; Azure: {azure_missing}")


def _submit_and_check(tmp_path: Path, targets: list[tuple[str, dict[str, Any]]]) -> None:
    """spark-submit the job writing virtual refs to each repository; read them back here."""
    data = tmp_path / "data"
    data.mkdir()
    container = data.as_uri() + "/"
    for url, options in targets:
        new_repo(url, config={"virtual_chunk_containers": {container: {}}}, storage_options=options)
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
    arguments = [part for url, options in targets for part in (url, json.dumps(options))]
    # Run from an unrelated folder: the source must come from the installed package.
    done = subprocess.run(
        [*command, str(JOB), str(data), *arguments],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for url, options in targets:
        assert f"VIRTUAL_REFS=3 {url}" in done.stdout
        repo = Repository.open(url, authorize_virtual=[container], storage_options=options)
        values = zarr.open_array(repo.readonly_session().store, path="x", mode="r")[:]
        np.testing.assert_array_equal(values, np.repeat(np.arange(3, dtype="uint8"), 8))

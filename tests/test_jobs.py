"""The spark-submit jobs, run as a user runs them, checked through the Python API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from icechunk_spark import Repository
from tests.conftest import S3_BUCKET
from tests.support.helpers import loaded_files

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "jobs"
SMALL_CUBE = [
    "--ntime",
    "8",
    "--nlat",
    "19",
    "--nlon",
    "36",
    "--chunk-time",
    "4",
    "--chunk-lat",
    "10",
    "--chunk-lon",
    "18",
    "--partitions",
    "2",
]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    # HDF5 chunks use numcodecs (zlib, shuffle), which zarr flags as outside the v3 spec.
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr:UserWarning"),
]


def submit(job: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [
        str(spark_submit),
        "--properties-file",
        str(ROOT / "conf" / "spark-defaults.conf"),
        str(JOBS / job),
        *args,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if ok:
        errors = [ln for ln in proc.stderr.splitlines() if " INFO " not in ln]
        assert proc.returncode == 0, (proc.returncode, "\n".join(errors[-30:]))
    return proc


def run_plain(job: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A job as plain Python, without spark-submit: what it does before it starts Spark."""
    return subprocess.run(
        [sys.executable, str(JOBS / job), *args], capture_output=True, text=True, cwd=JOBS
    )


def summary(proc: subprocess.CompletedProcess[str], job: str) -> dict[str, str]:
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{job}: snapshot=")]
    return dict(part.split("=", 1) for part in line.split(": ", 1)[1].split())


@pytest.mark.parametrize(
    "job",
    [
        "ingest_datacube.py",
        "ingest_virtual.py",
        "append.py",
        "maintain.py",
        "write_table.py",
        "clone.py",
    ],
)
def test_every_job_has_help(job):
    proc = run_plain(job, "--help")
    assert proc.returncode == 0 and "--repo" in proc.stdout


def test_datacube_then_append_then_maintain(tmp_path):
    url = (tmp_path / "cube").as_uri()
    first = summary(submit("ingest_datacube.py", "--repo", url, *SMALL_CUBE), "ingest_datacube")
    repo = Repository.open(url)
    assert first["snapshot"] == repo.lookup_branch("main") and int(first["arrays"]) == 4
    ds = xr.open_zarr(repo.readonly_session().store, consolidated=False)
    assert ds.air_temperature.shape == (8, 19, 36) and not ds.air_temperature.isnull().any()
    assert ds.air_temperature.attrs["units"] == "K" and ds.attrs["Conventions"] == "CF-1.8"
    before = ds.air_temperature.load()

    appended = summary(submit("append.py", "--repo", url, "--steps", "4"), "append")
    after = xr.open_zarr(Repository.open(url).readonly_session().store, consolidated=False)
    assert after.air_temperature.shape == (12, 19, 36) and after.time.size == 12
    xr.testing.assert_identical(after.air_temperature.isel(time=slice(0, 8)).load(), before)
    assert appended["snapshot"] == Repository.open(url).lookup_branch("main")

    # Refused before Spark starts, so plain Python shows it (a spark-submit costs ~20 s of CI).
    bad = run_plain("append.py", "--repo", url, "--steps", "3")
    assert bad.returncode == 1 and "multiple of the time chunk" in bad.stdout + bad.stderr
    assert Repository.open(url).lookup_branch("main") == appended["snapshot"]  # nothing landed

    # maintain.py starts no SparkSession (metadata work on the driver): under spark-submit it
    # would cost a JVM start and show nothing more (the launch itself is the two jobs above).
    maintained = run_plain("maintain.py", "--repo", url, "--keep-last", "1")
    assert maintained.returncode == 0, maintained.stderr
    kept = summary(maintained, "maintain")
    repo = Repository.open(url)
    assert [s.id for s in repo.ancestry()] == [kept["snapshot"]]
    final = xr.open_zarr(repo.readonly_session().store, consolidated=False)
    xr.testing.assert_identical(final.air_temperature.load(), after.air_temperature.load())


def test_write_table_appends_a_parquet_table_along_time(tmp_path):
    import pandas as pd
    import pyarrow as pa

    from icechunk_spark.values import TidySpec, write_table

    def rows(start: str, hours: int) -> pd.DataFrame:
        index = pd.MultiIndex.from_product(
            [pd.date_range(start, periods=hours, freq="h"), [10.0, 20.0], [1.0, 2.0, 3.0]],
            names=["time", "lat", "lon"],
        )
        return pd.DataFrame({"t2m": np.arange(len(index), dtype="f4")}, index=index)

    # The first hours through the Python API (one spark-submit is enough for the test's time).
    first, later = rows("2001-01-01", 5), rows("2001-01-01T05:00", 3)
    url = (tmp_path / "obs").as_uri()
    repo = Repository.create(url)
    session = repo.writable_session("main")
    table = pa.Table.from_pandas(first.reset_index(), preserve_index=False)
    write_table(session, table, TidySpec(("time", "lat", "lon"), {"time": 4}, group="/obs"))
    session.commit("first hours")
    later.reset_index().to_parquet(tmp_path / "later.parquet", coerce_timestamps="us")
    args = ["--repo", url, "--dims", "time,lat,lon", "--group", "/obs", "--append-dim", "time"]
    done = summary(
        submit("write_table.py", *args, "--input", str(tmp_path / "later.parquet")),
        "write-table",
    )
    repo = Repository.open(url)
    assert done["snapshot"] == repo.lookup_branch("main")
    got = xr.open_zarr(repo.readonly_session().store, group="obs", consolidated=False)
    xr.testing.assert_equal(got.load(), xr.Dataset.from_dataframe(pd.concat([first, later])))


def _sample(folder: Path, days: int, first: int = 0) -> None:
    args = ["--make-sample", str(folder), "--days", str(days), "--first-day", str(first)]
    made = run_plain("ingest_virtual.py", *args)
    assert made.returncode == 0, made.stderr[-3000:]


def test_virtual_ingest_into_s3_reads_as_xarray_reads_the_files(tmp_path, s3_endpoint):
    """The daily update as a job, into a repository on S3 (the storage options reach the
    executors); the result reads as xarray reads the files. One spark-submit: a re-run that
    appends only new files, or commits nothing when none is new, is
    tests/spark/test_virtual_ingest.py's, through the shared session (each spark-submit costs
    ~40 s of CI on 2 cores)."""
    data, url = tmp_path / "data", f"s3://{S3_BUCKET}/jobs-virtual"
    options = [
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        f"endpoint_url={s3_endpoint}",
    ]
    _sample(data, 4)
    files = ["--repo", url, "--files", f"{data}/*.nc", *options]
    summary(submit("ingest_virtual.py", *files), "ingest_virtual")
    repo = Repository.open(
        url,
        storage_options={"key": "testing", "secret": "testing", "endpoint_url": s3_endpoint},
        authorize_virtual=[data.as_uri() + "/"],
    )
    assert next(repo.ancestry()).message == "ingest 4 new files (4 in all)"
    ds = xr.open_zarr(repo.readonly_session().store, consolidated=False)
    direct = xr.combine_by_coords(loaded_files(sorted(data.glob("*.nc"))))
    xr.testing.assert_allclose(ds.tas.load(), direct.tas.load())
    assert np.array_equal(ds.time.values, direct.time.values)
    # "no files match" is tests/virtual/test_ingest.py's and files that disagree are
    # tests/spark/test_virtual_ingest.py's (no spark-submit needed); a job's failure as one
    # line and exit 1 is test_a_job_against_an_unreachable_endpoint's.


def test_a_job_against_an_unreachable_endpoint_ends_with_one_clear_line(closed_endpoint):
    secret = "s3cr3t-Never-Printed-0123456789"
    url = f"s3://{S3_BUCKET}/nowhere"
    options = ["--storage-option", f"endpoint_url={closed_endpoint}", "--storage-option"]
    proc = submit(
        "maintain.py",
        "--repo",
        url,
        *options,
        "key=testing",
        "--storage-option",
        f"secret={secret}",
        ok=False,
    )
    assert proc.returncode == 1
    # spark-submit may merge the driver's stderr into its stdout: look at both.
    output = proc.stdout + proc.stderr
    errors = [ln for ln in output.splitlines() if ln.startswith("maintain: error: ")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0] == (
        f"maintain: error: cannot connect to {closed_endpoint} for {url}: check the "
        "endpoint_url storage option (scheme, host and port) and that the server is running"
    )
    assert "Traceback" not in output and secret not in output

"""The data source through Spark Connect, Spark 4's default client: a Connect server started
from the installed pyspark (one for the run), and a client process per test that reads, writes
with ``df.write``, the driver API and ``writeStream``. The repository is checked here with the
core API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from icechunk_spark.repository import Repository
from icechunk_spark.spark.streaming import STREAM_BATCH_KEY
from tests.support.spark_servers import ConnectServer

from .connect_client import ARRAY, chunk_rows, values
from .helpers import expected_chunk_rows, new_repo

pytestmark = pytest.mark.spark

CLIENT = Path(__file__).with_name("connect_client.py")


def run_client(server: ConnectServer, cwd: Path, *args: str) -> str:
    """Run one client command against ``server``; its stdout."""
    done = subprocess.run(
        [sys.executable, str(CLIENT), server.url, *args],
        cwd=cwd,  # an unrelated folder: the client imports the installed packages
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def read_array(url: str, path: str) -> np.ndarray:
    repo = Repository.open(url)
    return np.asarray(zarr.open_array(repo.readonly_session().store, path=path, mode="r")[:])


def test_write_then_read_through_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    # One client writes, then reads back through Connect (a client process costs seconds).
    out = run_client(connect_server, tmp_path, "write+read", url)
    np.testing.assert_array_equal(read_array(url, "written"), values(1))
    repo = Repository.open(url)
    assert next(repo.ancestry(branch="main")).message == "written through Spark Connect"

    seen = json.loads(out.splitlines()[-1])
    expected = [list(row) for row in expected_chunk_rows(repo)]
    assert sorted(seen["chunks"]) == sorted(expected)
    assert sorted(seen["read_chunks"]) == sorted(expected)
    assert seen["nodes"] == [["/", "group"], ["/written", "array"]]


def test_sql_on_array_values_through_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    # Written with zarr, not by a client: a write through Connect is the test above's, and a
    # client process costs ~10 s of CI.
    session = new_repo(url).writable_session("main")
    session.create_array(
        "/written",
        shape=ARRAY["shape"],
        chunk_shape=ARRAY["chunk_shape"],
        dtype=ARRAY["data_type"],
        dimension_names=ARRAY["dimension_names"],
        fill_value=ARRAY["fill_value"],
    )
    zarr.open_array(session.store, path="written", mode="r+")[:] = values(1)
    session.commit("written with zarr")
    seen = json.loads(run_client(connect_server, tmp_path, "sql", url, "written"))
    expected = values(1)  # (t, x): t has no coordinate array, so its labels are its indexes
    assert seen["sums"] == [[t, float(expected[t].sum())] for t in range(4)]
    assert seen["aggregate"] == {"count": 12, "sum": float(expected[1:3].sum())}


def test_driver_api_through_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    out = run_client(connect_server, tmp_path, "driver", url)
    snapshot = json.loads(out.splitlines()[-1])["snapshot"]
    assert next(Repository.open(url).ancestry(branch="main")).id == snapshot
    np.testing.assert_array_equal(read_array(url, "driven"), values(2))


def test_streaming_write_through_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    new_repo(url)
    source = tmp_path / "source"
    source.mkdir()
    rows = chunk_rows("/streamed", 3)
    for t in range(2):  # one file per row of chunks: two micro-batches (maxFilesPerTrigger=1)
        mine = [row for row in rows if row[1][0] == t]
        table = pa.table(
            {
                "array": [r[0] for r in mine],
                "coord": pa.array([r[1] for r in mine], pa.list_(pa.int64())),
                "data": pa.array([r[2] for r in mine], pa.binary()),
            }
        )
        pq.write_table(table, source / f"part-{t}.parquet")
    run_client(connect_server, tmp_path, "stream", url, str(source), str(tmp_path / "ck"))
    np.testing.assert_array_equal(read_array(url, "streamed"), values(3))
    commits = list(Repository.open(url).ancestry(branch="main"))
    batches = [c.metadata.get(STREAM_BATCH_KEY) for c in reversed(commits)]
    assert batches == [None, None, 0, 1]  # empty, root group, then one commit per micro-batch

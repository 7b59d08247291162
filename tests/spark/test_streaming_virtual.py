"""The daily virtual update as a stream: ``Trigger.AvailableNow`` over a folder of NetCDF files.

Each new file is one micro-batch: executors scan it into virtual ref rows
(``virtual.file_rows.scan_file``), the sink places them after the dataset's end along time and
commits once. The result must read like xarray reading the files themselves.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
from pyspark.sql.pandas.types import from_arrow_schema

from icechunk_spark import Repository
from icechunk_spark.virtual.file_rows import ROW_SCHEMA, scan_file

from .helpers import new_repo

pytestmark = [
    pytest.mark.spark,
    # The files' zlib/shuffle are numcodecs codecs, which zarr 3 warns about when reading.
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr:UserWarning"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs"))
from ingest_virtual import make_sample  # noqa: E402  (the jobs' sample files)

BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length bigint, content binary"
# The rows the sink takes: the scanner's rows without its bookkeeping columns.
REF_SCHEMA = pa.schema([f for f in ROW_SCHEMA if f.name not in ("file", "checksum")])


def file_refs(container: str) -> Any:
    """A ``mapInArrow`` function: file paths in, the file's ref rows out (file-local coords).

    ``tas`` stays virtual. The files keep ``time`` in chunks of 512 holding one value, which
    cannot be appended chunk by chunk; the dataset keeps it in chunks of one, so its value
    travels inline (the files share their time units).
    """

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for path in batch.column("path").to_pylist():
                # As Spark names it: file:/path (Hadoop's form), resolved to file:///path.
                assert path.startswith("file:/") and not path.startswith("file://")
                rows, summary = scan_file(path, "time", "/", {container: {}})
                refs = rows.filter(pa.compute.not_equal(rows.column("array"), "/time"))
                refs = refs.select(REF_SCHEMA.names).cast(REF_SCHEMA)
                time = summary.arrays["/time"].values
                assert time is not None
                inline = pa.table(
                    {
                        "array": ["/time"],
                        "coord": [[0]],
                        "location": pa.nulls(1, pa.string()),
                        "offset": pa.nulls(1, pa.int64()),
                        "length": pa.nulls(1, pa.int64()),
                        "inline_data": [np.asarray(time, "<f8").tobytes()],
                    },
                    schema=REF_SCHEMA,
                )
                yield from pa.concat_tables([refs, inline]).to_batches()

    return scan


def arrived_in_order(paths: list[str]) -> list[str]:
    """The files as a daily feed delivers them: each modified after the one before.

    Spark's file source hands files over in modification-time order; files written in one
    burst can share a timestamp (the file system's clock is coarse), and then a day could be
    appended before the day before it (seen once under load: 2000-01-02 before 2000-01-01).
    """
    base = max(os.stat(p).st_mtime for p in paths)
    for i, path in enumerate(paths):
        os.utime(path, (base + i + 1, base + i + 1))
    return paths


def declarations(first_file: str, container: str) -> dict[str, Any]:
    """The dataset's arrays, from one file: empty along time, time in chunks of one."""
    _, summary = scan_file(first_file, "time", "/", {container: {}})
    arrays = {}
    for path, array in summary.arrays.items():
        doc = json.loads(array.zarr_json)
        doc["attributes"] = dict(array.attrs)
        if array.axis is not None:
            doc["shape"][array.axis] = 0
        if path == "/time":
            doc["chunk_grid"]["configuration"]["chunk_shape"] = [1]
            doc["codecs"] = [{"name": "bytes", "configuration": {"endian": "little"}}]
        arrays[path] = doc
    return arrays


def test_available_now_over_new_netcdf_files_appends_each_file_once(
    spark: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "files"
    files = arrived_in_order(make_sample(str(folder), 3))
    container = folder.as_uri() + "/"
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    repo.set_virtual_chunk_container(container)
    arrays = declarations(files[0], container)

    def run() -> None:
        (
            spark.readStream.format("binaryFile")
            .schema(BINARY_FILE_SCHEMA)
            .option("pathGlobFilter", "*.nc")
            .option("maxFilesPerTrigger", 1)
            .load(str(folder))
            .select("path")  # the content column is never read
            .mapInArrow(file_refs(container), from_arrow_schema(REF_SCHEMA))
            .writeStream.format("icechunk")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .option("arrays", json.dumps(arrays))
            .option("append_dim", "time")
            .option("placement", "after_end")
            .option("authorize_virtual", container)
            .trigger(availableNow=True)
            .start(url)
            .awaitTermination()
        )

    def check(paths: list[str]) -> None:
        reader = Repository.open(url, authorize_virtual=[container]).readonly_session()
        stored = xr.open_zarr(reader.store, consolidated=False).load()
        expected = xr.open_mfdataset(paths, combine="by_coords").load()
        xr.testing.assert_equal(stored[["tas"]], expected[["tas"]])

    run()
    check(files)
    commits = len(list(repo.ancestry(branch="main")))

    # The next days arrive: only they are scanned and appended, one commit each.
    files += arrived_in_order(make_sample(str(folder), 2, first_day=3))
    run()
    check(files)
    assert len(list(repo.ancestry(branch="main"))) == commits + 2

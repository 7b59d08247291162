"""Virtual ref rows that carry stored bytes (``inline_data``), exact ``shapes``, ``groups``.

Plain Python (no SparkSession): the stager and the coordinator are driven directly, as the
driver API drives them, and the commit is read back through the core.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from icechunk_spark import InvalidInputError, Repository
from icechunk_spark.spark.coordinator import StagedWrite, run_commit
from icechunk_spark.spark.plan import make_plan, options_from_kwargs
from icechunk_spark.spark.staging import Stager

from .helpers import new_repo

CONTAINER = "file:///data/"
COLUMNS = ["array", "coord", "location", "offset", "length", "inline_data"]


def _repo(tmp_path: Path) -> tuple[str, Repository]:
    url = (tmp_path / "repo").as_uri()
    config = {"virtual_chunk_containers": {CONTAINER: {}}, "inline_chunk_threshold_bytes": 8}
    return url, new_repo(url, config=config)


def _commit(url: str, repo: Repository, rows: pa.Table, **options: object) -> str | None:
    plan = make_plan(options_from_kwargs(url, **options), rows.column_names, overwrite=False)
    result = Stager(plan, repo.storage, "00000-1").run(iter(rows.to_batches()))
    return run_commit(plan, StagedWrite.of([result]))


def _rows(**columns: list[object]) -> pa.Table:
    types = {
        "array": pa.string(),
        "coord": pa.list_(pa.int64()),
        "location": pa.string(),
        "offset": pa.int64(),
        "length": pa.int64(),
        "inline_data": pa.binary(),
    }
    return pa.table({name: pa.array(columns[name], types[name]) for name in COLUMNS})


def test_virtual_rows_may_carry_stored_bytes_inline_or_as_chunk_objects(tmp_path: Path) -> None:
    url, repo = _repo(tmp_path)
    declared = {"/v": {"shape": [3], "chunk_shape": [1], "data_type": "uint8"}}
    rows = _rows(
        array=["/v"] * 3,
        coord=[[0], [1], [2]],
        location=["file:///data/a.nc", None, None],
        offset=[10, None, None],
        length=[1, None, None],
        inline_data=[None, b"tiny", b"bigger than eight"],
    )
    snapshot = _commit(url, repo, rows, arrays=declared)
    refs = repo.readonly_session(snapshot_id=snapshot).chunk_refs("/v").to_pylist()
    assert [r["virtual_path"] for r in refs] == ["file:///data/a.nc", None, None]
    assert [r["offset"] for r in refs][:1] == [10] and refs[0]["inline_data"] is None
    assert refs[1]["inline_data"] == b"tiny" and refs[1]["chunk_id"] is None  # <= threshold
    assert refs[2]["inline_data"] is None and refs[2]["chunk_id"] is not None  # a chunk object
    session = repo.readonly_session(snapshot_id=snapshot)
    assert session.get_chunk("/v", (2,)) == b"bigger than eight"


@pytest.mark.parametrize(
    ("location", "inline", "problem"),
    [
        ("file:///data/a.nc", b"x", "both a location and inline_data"),
        (None, None, "no location"),
    ],
)
def test_a_row_needs_exactly_one_of_location_and_inline_data(
    tmp_path: Path, location: str | None, inline: bytes | None, problem: str
) -> None:
    url, repo = _repo(tmp_path)
    declared = {"/v": {"shape": [3], "chunk_shape": [1], "data_type": "uint8"}}
    rows = _rows(
        array=["/v"], coord=[[1]], location=[location], offset=[0], length=[1], inline_data=[inline]
    )
    with pytest.raises(InvalidInputError, match=rf"'/v' at coord \(1,\): .*{problem}"):
        _commit(url, repo, rows, arrays=declared)


def test_shapes_size_an_append_exactly_and_groups_get_their_attributes(tmp_path: Path) -> None:
    url, repo = _repo(tmp_path)
    declared = {
        "/ds/t": {
            "shape": [0],
            "chunk_shape": [4],
            "data_type": "uint8",
            "dimension_names": ["time"],
        }
    }
    rows = _rows(
        array=["/ds/t"] * 2,
        coord=[[0], [1]],
        location=["file:///data/a.nc"] * 2,
        offset=[0, 4],
        length=[4, 4],
        inline_data=[None, None],
    )
    groups = {"/ds": {"title": "two files"}}
    first = _commit(url, repo, rows, arrays=declared, shapes={"/ds/t": [6]}, groups=groups)
    session = repo.readonly_session(snapshot_id=first)
    assert json.loads(session.get_node("/ds/t").zarr_json)["shape"] == [6]  # not 8
    assert json.loads(session.get_node("/ds").zarr_json)["attributes"] == {"title": "two files"}

    more = _rows(
        array=["/ds/t"],
        coord=[[2]],
        location=["file:///data/b.nc"],
        offset=[0],
        length=[4],
        inline_data=[None],
    )
    second = _commit(url, repo, more, shapes={"/ds/t": [9]}, groups={"/ds": {"title": "new"}})
    session = repo.readonly_session(snapshot_id=second)
    assert json.loads(session.get_node("/ds/t").zarr_json)["shape"] == [9]
    assert json.loads(session.get_node("/ds").zarr_json)["attributes"] == {"title": "two files"}
    with pytest.raises(InvalidInputError, match="outside the chunk grid"):
        _commit(
            url,
            repo,
            more.set_column(1, "coord", pa.array([[3]], pa.list_(pa.int64()))),
            shapes={"/ds/t": [10]},
        )
    with pytest.raises(InvalidInputError, match="would shrink"):
        _commit(url, repo, more, shapes={"/ds/t": [5]})

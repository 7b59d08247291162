"""``read_chunks``: the chunks table on Spark's own Parquet reader gives what the data source
and the Python API give, row for row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from chispa import assert_df_equality

from icechunk_spark import Repository
from icechunk_spark.errors import InvalidInputError
from icechunk_spark.spark.native import plan_manifests, read_chunks
from icechunk_spark.spark.source import spark_schema

from .helpers import expected_chunk_rows, new_repo

pytestmark = pytest.mark.spark

CONTAINER = "file:///data/"


@pytest.fixture(scope="module")
def repo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every kind of ref, a 0-d array, statistics with an edge chunk, two commits, a tag."""
    url = (tmp_path_factory.mktemp("native") / "repo").as_uri()
    repo = new_repo(
        url,
        config={"chunk_statistics": ["/t"], "virtual_chunk_containers": {CONTAINER: {}}},
    )
    session = repo.writable_session("main")
    session.create_array("/grid", (6, 4), (2, 2), "int32", fill_value=0)
    session.create_array("/t", (10,), (4,), "float64", fill_value=0.0)
    session.create_array("/scalar", (), (), "float64")
    session.create_array("/v", (3, 1000), (1, 1), "float32")
    session.set_chunk("/grid", (0, 0), np.full(4, 7, "<i4").tobytes())  # inline
    session.set_chunk("/grid", (2, 1), b"\x01" * 2000)  # a native chunk file
    session.set_chunk_values("/t", (0,), np.array([1.0, np.nan, 0.0, 5.0]))
    session.set_chunk_values("/t", (2,), np.array([100.0, 200.0, 0.0, 0.0]))  # the edge chunk
    session.set_chunk("/scalar", (), np.float64(3.5).tobytes())
    for i in range(3):
        for j in range(0, 1000, 7):
            session.set_virtual_ref("/v", (i, j), f"{CONTAINER}f{i}.nc", 64 * j, 64)
    session.commit("every kind of ref")
    repo.create_tag("first", repo.lookup_branch("main"))
    session = repo.writable_session("main")
    session.set_chunk("/grid", (1, 1), np.full(4, 9, "<i4").tobytes())
    session.commit("one more chunk")
    return url


def same_columns(a: Any, b: Any) -> bool:
    """Same names, order and types (our non-null columns may say so where the source's do not)."""
    return [(f.name, f.dataType) for f in a.fields] == [(f.name, f.dataType) for f in b.fields]


def source(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("icechunk")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def test_every_row_and_column_matches_the_data_source_and_the_python_api(
    spark: Any, repo_url: str
) -> None:
    native = read_chunks(spark, repo_url)
    assert same_columns(native.schema, spark_schema("chunks"))
    expected = spark.createDataFrame(
        expected_chunk_rows(Repository.open(repo_url)), spark_schema("chunks")
    )
    assert_df_equality(native, expected, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(native, source(spark, repo_url), ignore_row_order=True, ignore_nullable=True)
    kinds = {r.kind for r in native.select("kind").distinct().collect()}
    assert kinds == {"inline", "native", "virtual"}


def test_counts_and_narrow_selects(spark: Any, repo_url: str) -> None:
    native = read_chunks(spark, repo_url)
    assert native.count() == source(spark, repo_url).count() == 3 + 2 + 1 + 3 * 143
    pairs = {(r.array, tuple(r.coord)) for r in native.select("array", "coord").collect()}
    assert ("/scalar", ()) in pairs and ("/v", (2, 994)) in pairs and ("/grid", (2, 1)) in pairs


def test_statistics_of_edge_chunks_read_null(spark: Any, repo_url: str) -> None:
    rows = {tuple(r.coord): r for r in read_chunks(spark, repo_url, arrays="/t").collect()}
    first = rows[(0,)]
    assert (first.stat_min, first.stat_max, first.stat_nan_count, first.stat_fill_count) == (
        1.0,
        5.0,
        1,
        1,
    )
    assert rows[(2,)].stat_max is None  # reaches past the shape


def test_time_travel_by_tag_and_snapshot(spark: Any, repo_url: str) -> None:
    repo = Repository.open(repo_url)
    tagged = repo.lookup_tag("first")
    by_tag = read_chunks(spark, repo_url, tag="first", arrays="/grid")
    by_snapshot = read_chunks(spark, repo_url, snapshot=tagged, arrays="/grid")
    assert sorted(tuple(r.coord) for r in by_tag.collect()) == [(0, 0), (2, 1)]
    assert_df_equality(by_tag, by_snapshot, ignore_row_order=True, ignore_nullable=True)
    assert read_chunks(spark, repo_url, arrays="/grid").count() == 3


def test_one_array_of_a_shared_manifest_reads_only_its_rows(spark: Any, repo_url: str) -> None:
    repo = Repository.open(repo_url)
    nodes = [n for n in repo.readonly_session().list_nodes() if n.path in ("/grid", "/t")]
    shared = {m.manifest_id for m in nodes[0].manifests} & {
        m.manifest_id for m in nodes[1].manifests
    }
    assert shared, "the small arrays should share a manifest set"
    planned = plan_manifests(repo.storage, [n for n in nodes if n.path == "/grid"])
    assert not all(m.only_wanted_rows for m in planned)  # so the row filter is exercised
    native = read_chunks(spark, repo_url, arrays="/grid")
    assert_df_equality(
        native, source(spark, repo_url, arrays="/grid"), ignore_row_order=True, ignore_nullable=True
    )
    assert {r.array for r in native.collect()} == {"/grid"}


def test_no_arrays_selected_is_an_empty_table(spark: Any, repo_url: str) -> None:
    empty = read_chunks(spark, repo_url, arrays="/nothing.*")
    assert same_columns(empty.schema, spark_schema("chunks")) and empty.count() == 0


def test_storage_spark_cannot_read_is_refused(spark: Any) -> None:
    Repository.create("memory://native-refused")
    with pytest.raises(InvalidInputError, match="memory://"):
        read_chunks(spark, "memory://native-refused")

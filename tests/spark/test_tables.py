"""The metadata tables, time travel, array selection, filter pushdown and SQL."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from chispa import assert_df_equality

from icechunk_spark import Repository
from icechunk_spark.spark.source import spark_schema

from .helpers import expected_chunk_rows, new_repo

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A repository with groups, two arrays, three commits on main, a tag and a branch."""
    url = (tmp_path_factory.mktemp("tables") / "repo").as_uri()
    repo = new_repo(url)
    session = repo.writable_session("main")
    session.create_group("/g", attributes={"title": "group"})
    session.create_array(
        "/g/a", (4, 4), (2, 2), "int32", dimension_names=["y", "x"], attributes={"units": "m"}
    )
    # 10,000 chunks in its grid: /b goes to the default manifest set, /g/a to "coordinates",
    # so the two arrays live in different manifests (and different input partitions).
    session.create_array("/b", (20_000,), (2,), "float64")
    first = session.commit("arrays", metadata={"by": "test"})
    session = repo.writable_session("main")
    for coord in [(0, 0), (1, 1)]:
        session.set_chunk("/g/a", coord, np.full(4, 7, "<i4").tobytes())
    second = session.commit("a chunks")
    session = repo.writable_session("main")
    session.set_chunk("/b", (2,), np.arange(2, dtype="<f8").tobytes())
    session.set_chunk("/g/a", (0, 1), b"\x01" * 2000)  # a native chunk (above inline size)
    third = session.commit("b chunk")
    repo.create_tag("v1", second)
    repo.create_branch("dev", first)
    return url, [first, second, third]


def load(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("icechunk")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def test_snapshots_table(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    repo = Repository.open(url)
    expected = [
        (s.id, s.parent_id, s.written_at, s.message, json.dumps(dict(s.metadata), sort_keys=True))
        for s in repo.ancestry(branch="main")
    ]
    assert len(expected) == 5
    assert_df_equality(
        load(spark, url, table="snapshots"),
        spark.createDataFrame(expected, spark_schema("snapshots")),
        ignore_row_order=True,
    )


def test_refs_table(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    repo = Repository.open(url)
    expected = [(n, "branch", s) for n, s in repo.list_branches().items()]
    expected += [(n, "tag", s) for n, s in repo.list_tags().items()]
    assert_df_equality(
        load(spark, url, table="refs"),
        spark.createDataFrame(expected, spark_schema("refs")),
        ignore_row_order=True,
    )


def test_nodes_table(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    session = Repository.open(url).readonly_session("main")
    expected = []
    for node in session.list_nodes():
        doc = json.loads(node.zarr_json)
        meta = node.meta
        expected.append(
            (
                node.path,
                node.type,
                list(meta.shape) if meta else None,
                list(meta.chunk_shape) if meta else None,
                doc.get("data_type"),
                list(meta.dimension_names) if meta and meta.dimension_names else None,
                json.dumps(doc.get("attributes", {}), sort_keys=True),
                len(session.chunk_coords(node.path)) if meta else None,
            )
        )
    actual = load(spark, url, table="nodes")
    assert_df_equality(
        actual, spark.createDataFrame(expected, spark_schema("nodes")), ignore_row_order=True
    )
    row = actual.filter("path = '/g/a'").first()
    assert (row.dtype, row.initialized_chunks, json.loads(row.attributes)) == (
        "int32",
        3,
        {"units": "m"},
    )


def test_manifests_table(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    repo = Repository.open(url)
    by_id: dict[str, list[Any]] = {}
    for node in repo.readonly_session("main").list_nodes():
        for m in node.manifests:
            entry = by_id.setdefault(m.manifest_id, [m.manifest_id, m.set_name, [], 0, None])
            entry[2] = sorted([*entry[2], node.path])
            entry[3] += m.ref_count
    for manifest_id, entry in by_id.items():
        entry[4] = len(repo.storage.get(f"m/{manifest_id}"))
    assert by_id
    assert_df_equality(
        load(spark, url, table="manifests"),
        spark.createDataFrame([tuple(e) for e in by_id.values()], spark_schema("manifests")),
        ignore_row_order=True,
    )


def test_sources_table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The files virtual refs point into, as the API lists them (tested against HDF5's own
    chunk listing in tests/virtual/test_sources.py), at a snapshot chosen by tag."""
    folder = tmp_path_factory.mktemp("sources")
    files = []
    for name in ("a.bin", "b.bin"):
        (folder / name).write_bytes(bytes(64))
        files.append((folder / name).as_uri())
    url = (folder / "repo").as_uri()
    repo = new_repo(url, config={"virtual_chunk_containers": {folder.as_uri() + "/": {}}})
    session = repo.writable_session("main")
    session.create_array("/v", (8,), (2,), "int32")
    for i, file in enumerate([files[0], files[0], files[1]]):
        session.set_virtual_ref("/v", (i,), file, offset=8 * i, length=8)
    repo.create_tag("v1", session.commit("three refs into two files"))
    session = repo.writable_session("main")
    session.set_virtual_ref("/v", (3,), files[1], offset=0, length=8)
    session.commit("a fourth")
    expected = [("a.bin", 2, 16, ["/v"]), ("b.bin", 1, 8, ["/v"])]
    rows = [
        (r["location"].rsplit("/", 1)[1], r["refs"], r["bytes"], r["arrays"])
        for r in load(spark, url, table="sources", tag="v1").orderBy("location").collect()
    ]
    assert rows == expected
    assert load(spark, url, table="sources").collect()[1]["refs"] == 2
    assert_df_equality(
        load(spark, url, table="sources"),
        spark.createDataFrame(repo.sources().to_pylist(), spark_schema("sources")),
        ignore_row_order=True,
    )


def test_chunks_table_and_time_travel(spark: Any, history: tuple[str, list[str]]) -> None:
    url, (first, second, _) = history
    repo = Repository.open(url)
    schema = spark_schema("chunks")
    assert_df_equality(
        load(spark, url),
        spark.createDataFrame(expected_chunk_rows(repo), schema),
        ignore_row_order=True,
    )
    assert load(spark, url, snapshot=second).count() == 2
    assert load(spark, url, tag="v1").count() == 2
    assert load(spark, url, branch="dev").count() == 0
    assert load(spark, url, snapshot=first).count() == 0
    as_of = repo.lookup_snapshot(second).written_at.isoformat()
    assert load(spark, url, as_of=as_of).count() in (2, 4)  # same millisecond as third: 4
    kinds = {r.kind for r in load(spark, url).collect()}
    assert kinds == {"inline", "native"}


def test_arrays_option_selects_by_regex(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    rows = load(spark, url, arrays="/g/.*").collect()
    assert {r.array for r in rows} == {"/g/a"}
    assert load(spark, url, arrays="/b").count() == 1


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_filter_on_array(
    spark: Any, sql_conf: Any, history: tuple[str, list[str]], pushdown: str
) -> None:
    url, _ = history
    sql_conf({"spark.sql.python.filterPushdown.enabled": pushdown})
    filtered = load(spark, url).filter("array = '/b'")
    assert [tuple(r.coord) for r in filtered.collect()] == [(2,)]
    chosen = load(spark, url).filter("array in ('/b', '/nope')")
    assert chosen.count() == 1
    # Spark's filters are not pushed down (spark/source.py says why): the same partitions are
    # planned either way, and the arrays option is how a read of fewer manifests is asked for.
    assert filtered.rdd.getNumPartitions() == load(spark, url).rdd.getNumPartitions()
    assert load(spark, url, arrays="/b").count() == 1


def test_sql_view(spark: Any, history: tuple[str, list[str]]) -> None:
    url, _ = history
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW c USING icechunk OPTIONS (path '{url}')")
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW n USING icechunk OPTIONS (path '{url}', table 'nodes')"
    )
    counts = spark.sql("SELECT array, count(*) AS n FROM c GROUP BY array ORDER BY array").collect()
    assert [(r.array, r.n) for r in counts] == [("/b", 1), ("/g/a", 3)]
    joined = spark.sql(
        "SELECT n.path, n.initialized_chunks FROM n JOIN (SELECT DISTINCT array FROM c) x "
        "ON n.path = x.array ORDER BY n.path"
    ).collect()
    assert [(r.path, r.initialized_chunks) for r in joined] == [("/b", 1), ("/g/a", 3)]


def test_register_explicitly(spark: Any, history: tuple[str, list[str]]) -> None:
    from icechunk_spark.spark import register

    register(spark)
    assert load(spark, history[0], table="refs").count() == 3


@pytest.fixture(scope="module")
def with_stats(tmp_path_factory: pytest.TempPathFactory) -> str:
    """/t (stats recorded; its last chunk reaches past the shape) and /u (no stats)."""
    url = (tmp_path_factory.mktemp("stats") / "repo").as_uri()
    repo = Repository.create(url, config={"chunk_statistics": ["/t"]})
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/t", (10,), (4,), "float64", fill_value=0.0)
    session.create_array("/u", (4,), (2,), "float64")
    session.set_chunk_values("/t", (0,), np.array([1.0, np.nan, 0.0, 5.0]))
    session.set_chunk_values("/t", (1,), np.array([50.0, 60.0, 70.0, 80.0]))
    session.set_chunk_values("/t", (2,), np.array([100.0, 200.0, 0.0, 0.0]))  # the edge chunk
    session.set_chunk_values("/u", (0,), np.array([7.0, 8.0]))
    session.commit("chunks with statistics")
    return url


def test_chunks_table_has_the_recorded_statistics(spark: Any, with_stats: str) -> None:
    repo = Repository.open(with_stats)
    actual = load(spark, with_stats)
    assert_df_equality(
        actual,
        spark.createDataFrame(expected_chunk_rows(repo), spark_schema("chunks")),
        ignore_row_order=True,
    )
    rows = {(r.array, tuple(r.coord)): r for r in actual.collect()}
    first = rows[("/t", (0,))]
    assert (first.stat_min, first.stat_max, first.stat_nan_count, first.stat_fill_count) == (
        1.0,
        5.0,
        1,
        1,
    )
    assert (first.stat_sum, first.stat_count) == (6.0, 2)
    edge = rows[("/t", (2,))]  # reaches past the shape: its statistics read as unknown
    assert (edge.stat_min, edge.stat_max, edge.stat_nan_count) == (None, None, None)
    assert rows[("/u", (0,))].stat_max is None  # not recorded for /u


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_filters_on_statistics(spark: Any, sql_conf: Any, with_stats: str, pushdown: str) -> None:
    sql_conf({"spark.sql.python.filterPushdown.enabled": pushdown})
    hot = load(spark, with_stats).filter("stat_max > 40").select("array", "coord").collect()
    assert [(r.array, tuple(r.coord)) for r in hot] == [("/t", (1,))]
    assert load(spark, with_stats).filter("stat_nan_count >= 1").count() == 1
    assert load(spark, with_stats).filter("stat_min = 50").count() == 1


def test_a_narrower_schema_reads_only_its_columns(
    spark: Any, history: tuple[str, list[str]]
) -> None:
    url, _ = history
    full = load(spark, url).select("array", "coord")
    narrow = spark.read.format("icechunk").schema("array string, coord array<bigint>").load(url)
    assert narrow.columns == ["array", "coord"]
    assert_df_equality(narrow, full, ignore_row_order=True)
    reordered = spark.read.format("icechunk").schema("length bigint, array string").load(url)
    assert sorted((r.array, r.length) for r in reordered.collect()) == sorted(
        (r.array, r.length) for r in load(spark, url).collect()
    )
    assert spark.read.format("icechunk").schema("kind string").load(url).count() == 4
    nodes = spark.read.format("icechunk").option("table", "nodes").schema("path string")
    assert sorted(r.path for r in nodes.load(url).collect()) == ["/", "/b", "/g", "/g/a"]


def test_a_schema_naming_unknown_columns_is_refused(
    spark: Any, history: tuple[str, list[str]]
) -> None:
    url, _ = history
    for schema in ("array string, nope int", "coord array<int>"):
        with pytest.raises(Exception, match="has no columns") as info:
            spark.read.format("icechunk").schema(schema).load(url).collect()
        assert "a schema may name any of: array string" in str(info.value)

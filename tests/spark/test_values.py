"""``table=values`` in Spark: the arrays' elements as rows, equal to xarray's; filters on
labels and values read only the chunks they need; SQL over a view."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import xarray as xr

from icechunk_spark import Repository
from tests.values.conftest import assert_same_rows, daily_dataset, xarray_rows

pytestmark = pytest.mark.spark

DIMS = ["time", "lat", "lon"]


@pytest.fixture(scope="module")
def daily(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``tas`` and packed ``pk`` on (time=40, lat=6, lon=12), in chunks of (10, 3, 5), on disk
    (executors open it by URL), written by xarray; statistics of ``tas`` recorded."""
    url = (tmp_path_factory.mktemp("values") / "repo").as_uri()
    repo = Repository.create(url, config={"chunk_statistics": ["/tas"]})
    session = repo.writable_session("main")
    ds = daily_dataset()
    encoding = {n: {**ds[n].encoding, "chunks": (10, 3, 5)} for n in ds.data_vars}
    ds.to_zarr(session.store, encoding=encoding, zarr_format=3, consolidated=False)
    first = session.commit("40 days")
    repo.create_tag("v1", first)
    return url


def values(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("icechunk").option("table", "values")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def test_rows_equal_xarrays(spark: Any, daily: str) -> None:
    df = values(spark, daily, arrays="tas,pk", tag="v1")
    assert df.columns == ["time", "lat", "lon", "tas", "pk"]
    assert dict(df.dtypes) == {
        "time": "timestamp",
        "lat": "float",
        "lon": "float",
        "tas": "float",
        "pk": "double",
    }
    rows = pa_table(df)
    assert_same_rows(rows, xarray_rows(Repository.open(daily), ["tas", "pk"]), DIMS)


def pa_table(df: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_pandas(df.toPandas(), preserve_index=False)


def test_the_where_option_reads_only_the_chunks_it_selects(spark: Any, daily: str) -> None:
    where = '{"time": ["2001-01-05", "2001-01-14"], "lat": [0.1, null], "lon": [30, 100]}'
    one_box = "rows_per_partition"  # 1: a partition per chunk box, so partitions count boxes
    chosen = values(spark, daily, arrays="tas", where=where, **{one_box: "1"})
    ds = xr.open_zarr(Repository.open(daily).readonly_session().store, consolidated=False)
    expected = ds[["tas"]].sel(time=slice("2001-01-05", "2001-01-14"))
    expected = expected.sel(lat=expected.lat > 0, lon=(expected.lon >= 30) & (expected.lon <= 100))
    assert_same_rows(pa_table(chosen), expected.to_dataframe().reset_index(), DIMS)
    # time 4..13 -> chunks 0, 1; lat > 0 -> chunk 1; lon 30..100 -> indexes 1..3, chunk 0
    assert chosen.rdd.getNumPartitions() == 2 * 1 * 1
    assert values(spark, daily, arrays="tas", **{one_box: "1"}).rdd.getNumPartitions() == 24
    with fails("'depth' is not a dimension"):
        values(spark, daily, arrays="tas", where='{"depth": [0, 1]}').count()


def test_value_ranges_in_where_skip_chunks_by_their_statistics(spark: Any, daily: str) -> None:
    frame = xarray_rows(Repository.open(daily), ["tas"])
    hot = values(spark, daily, arrays="tas", where='{"tas": [299.9, null]}', rows_per_partition="1")
    assert hot.count() == int((frame.tas >= 299.9).sum())
    assert 4 * 2 < hot.rdd.getNumPartitions() < 4 * 2 * 3  # some chunks hold nothing that hot
    none = values(spark, daily, arrays="tas", where='{"tas": [1000, null]}', rows_per_partition="1")
    assert none.count() == 0
    # Only the edge chunks (lon 10-11 of 12) are read: their statistics are unknown.
    assert none.rdd.getNumPartitions() == 4 * 2 * 1


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_spark_filters_give_the_same_rows_as_xarray(
    spark: Any, sql_conf: Any, daily: str, pushdown: str
) -> None:
    sql_conf({"spark.sql.python.filterPushdown.enabled": pushdown})
    df = values(spark, daily, arrays="tas")
    where = "time >= '2001-01-05' AND time < '2001-01-15' AND lat > 0 AND lon BETWEEN 30 AND 100"
    ds = xr.open_zarr(Repository.open(daily).readonly_session().store, consolidated=False)
    expected = ds[["tas"]].sel(time=slice("2001-01-05", "2001-01-14"))
    expected = expected.sel(lat=expected.lat > 0, lon=(expected.lon >= 30) & (expected.lon <= 100))
    assert_same_rows(pa_table(df.where(where)), expected.to_dataframe().reset_index(), DIMS)
    frame = xarray_rows(Repository.open(daily), ["tas"])
    assert df.where("tas > 299.9").count() == int((frame.tas > 299.9).sum())


def test_sql_over_a_view(spark: Any, daily: str) -> None:
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW tas USING icechunk "
        f"OPTIONS (path '{daily}', table 'values', arrays 'tas')"
    )
    got = spark.sql(
        "SELECT day(time) AS d, avg(tas) AS mean FROM tas WHERE lat < 0 "
        "GROUP BY day(time) ORDER BY d"
    ).toPandas()
    frame = xarray_rows(Repository.open(daily), ["tas"])
    frame = frame[frame.lat < 0]
    want = frame.groupby(frame.time.dt.day).tas.mean()
    np.testing.assert_allclose(got["mean"].to_numpy(), want.to_numpy(), rtol=1e-6)
    assert got["d"].tolist() == want.index.tolist()


def test_a_narrower_schema_reads_only_its_arrays(spark: Any, daily: str) -> None:
    schema = "time timestamp, lat float, lon float, pk double"
    df = (
        spark.read.format("icechunk")
        .schema(schema)
        .option("table", "values")
        .option("arrays", "tas,pk")
        .load(daily)
    )
    assert df.columns == ["time", "lat", "lon", "pk"]
    assert df.count() == 40 * 6 * 12


def fails(match: str) -> Any:
    """Spark wraps errors raised in its Python workers: match the text, not the type."""
    return pytest.raises(Exception, match=match)


def test_bad_input_is_named(spark: Any, daily: str) -> None:
    with fails("no array 'tass'"):
        values(spark, daily, arrays="tass").schema  # noqa: B018
    with fails("share their dimensions"):
        values(spark, daily, arrays="tas,lat").schema  # noqa: B018
    with fails("unknown option 'array'.*did you mean 'arrays'"):
        values(spark, daily, array="tas").schema  # noqa: B018
    with fails("keeps every dimension"):
        spark.read.format("icechunk").schema("time timestamp, tas float").option(
            "table", "values"
        ).option("arrays", "tas").load(daily).count()
    with fails("UNRESOLVED_COLUMN|cannot be resolved"):
        values(spark, daily, arrays="tas").where("depth > 3").count()


@pytest.mark.parametrize("read_here", [0, 16])  # cut chunks read by Spark tasks, or here
def test_aggregate_equals_numpy(spark: Any, daily: str, read_here: int) -> None:
    from icechunk_spark.spark import aggregate

    where = {"time": ("2001-01-05", "2001-01-25"), "lat": (-60.0, 0.0)}
    funcs = ["count", "sum", "mean", "min", "max"]
    got = aggregate(spark, daily, "tas", where, funcs, read_here=read_here)
    ds = xr.open_zarr(Repository.open(daily).readonly_session().store, consolidated=False)
    raw = ds.tas.sel(time=slice("2001-01-05", "2001-01-25"), lat=slice(-60, 0)).values
    valid = raw[~np.isnan(raw)].astype("f8")
    assert got["count"] == valid.size
    assert got["sum"] == pytest.approx(valid.sum(), rel=1e-9)
    assert got["mean"] == pytest.approx(valid.mean(), rel=1e-9)
    assert (got["min"], got["max"]) == (valid.min(), valid.max())
    with fails("unknown option 'brnch'"):
        aggregate(spark, daily, "tas", brnch="main")


def test_chunk_stats_table_in_label_space(spark: Any, daily: str) -> None:
    df = (
        values(spark, daily, arrays="tas")
        .sparkSession.read.format("icechunk")
        .option("table", "chunk_stats")
        .option("arrays", "tas")
        .load(daily)
    )
    assert df.columns[:8] == [
        "array",
        "coord",
        "time_start",
        "time_end",
        "lat_start",
        "lat_end",
        "lon_start",
        "lon_end",
    ]
    assert df.count() == 4 * 2 * 3
    # Which chunks hold 10-14 January in the southern half: a count in label space.
    hits = df.where(
        "time_start <= '2001-01-14' AND time_end >= '2001-01-10' AND lat_start < 0"
    ).count()
    assert hits == 2 * 1 * 3  # time chunks 0 and 1; lat chunk 0; every lon chunk


@pytest.mark.parametrize("table", ["values", "chunks"])
def test_a_filter_of_one_query_never_narrows_the_next(
    spark: Any, sql_conf: Any, daily: str, table: str
) -> None:
    sql_conf({"spark.sql.python.filterPushdown.enabled": "true"})
    reader = spark.read.format("icechunk").option("table", table)
    df = (reader.option("arrays", "tas") if table == "values" else reader).load(daily)
    everything = df.count()
    assert df.where("lat < -1000" if table == "values" else "array = '/nope'").count() == 0
    assert df.count() == everything  # the same DataFrame, planned again without the filter

"""Bad input is refused by name, the way users hit it: misspelled options, the Python API's
keyword given as an option, a column of the wrong type, a row of two shapes, a negative coord
placed after the end, a misspelled ``append_dim``. Each used to be silently wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from icechunk_spark import InvalidInputError, Repository
from icechunk_spark.spark import commit_refs, read_chunks, write_chunks

from .helpers import new_repo

pytestmark = pytest.mark.spark

DATA = "array string, coord array<bigint>, data binary"
SERIES = {
    "/v": {"shape": [0], "chunk_shape": [2], "data_type": "float64", "dimension_names": ["t"]}
}


def values(*numbers: float) -> bytes:
    return np.array(numbers, dtype="<f8").tobytes()


@pytest.fixture
def series_repo(spark: Any, tmp_path: Path) -> tuple[str, Repository]:
    """``/v`` with two chunks written (values 1..4), on two snapshots."""
    url = (tmp_path / "repo").as_uri()
    repo = new_repo(url)
    rows = [("/v", [0], values(1, 2)), ("/v", [1], values(3, 4))]
    save(spark.createDataFrame(rows, DATA), url, arrays=json.dumps(SERIES), append_dim="t")
    return url, repo


def save(df: Any, url: str, **options: str) -> None:
    writer = df.write.format("icechunk").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(url)


def stored(repo: Repository) -> np.ndarray:
    import zarr

    return zarr.open_array(repo.readonly_session("main").store, path="v", mode="r")[:]


def fails(match: str):
    """Spark wraps errors raised in its Python workers: match the text, not the type."""
    return pytest.raises(Exception, match=match)


# -- options ---------------------------------------------------------------------------------


def test_misspelled_write_option_is_refused_and_nothing_written(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    before = next(repo.ancestry()).id
    df = spark.createDataFrame([("/v", [0], values(9, 9))], DATA)
    with fails(r"unknown option 'plaecment' for df.write \(did you mean 'placement'\?\)"):
        save(df, url, plaecment="after_end", append_dim="t")
    assert next(repo.ancestry()).id == before
    np.testing.assert_array_equal(stored(repo), [1, 2, 3, 4])


def test_python_keywords_and_typos_are_refused_on_reads(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    first = list(repo.ancestry())[-1].id

    def reader() -> Any:  # a DataFrameReader keeps every option set on it: one per read
        return spark.read.format("icechunk")

    with fails(r"unknown option 'snapshot_id' .*did you mean 'snapshot'"):
        reader().option("snapshot_id", first).load(url).count()
    with fails(r"unknown option 'tabel' .*did you mean 'table'"):
        reader().option("tabel", "snapshots").load(url).count()
    with fails(r"unknown option 'snapshot_id' for read_chunks .*did you mean 'snapshot'"):
        read_chunks(spark, url, snapshot_id=first)
    with fails(r"unknown option 'strating' for reading the 'changes' table .*'starting'"):
        spark.readStream.format("icechunk").option("table", "changes").option(
            "strating", "earliest"
        ).load(url)
    # The right names still work, and storage.<name> stays open-ended.
    assert reader().option("snapshot", first).load(url).count() == 0
    assert reader().option("storage.auto_mkdir", "true").load(url).count() == 2


def test_misspelled_stream_option_fails_when_the_query_starts(
    spark: Any, tmp_path: Path, series_repo: tuple[str, Repository]
) -> None:
    url, _ = series_repo
    folder = tmp_path / "in"
    folder.mkdir()
    # Spark makes the sink's writer when the first batch is planned: give it one.
    spark.createDataFrame([("/v", [2], values(5, 6))], DATA).write.parquet(str(folder / "f"))
    source = spark.readStream.schema(DATA).parquet(str(folder / "f"))
    with fails(r"unknown option 'append_dimm' for df.writeStream .*did you mean 'append_dim'"):
        (
            source.writeStream.format("icechunk")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .option("append_dimm", "t")
            .trigger(availableNow=True)
            .start(url)
            .awaitTermination()
        )


# -- row shapes and column types --------------------------------------------------------------


def test_a_data_column_of_strings_is_refused_at_plan_time(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    df = spark.createDataFrame(
        [("/v", [0], "1.0,2.0")], "array string, coord array<bigint>, data string"
    )
    with fails(r"column 'data' is string; data rows need binary"):
        save(df, url)
    np.testing.assert_array_equal(stored(repo), [1, 2, 3, 4])


def test_rows_with_both_data_and_a_virtual_ref_are_refused(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    schema = f"{DATA}, location string, offset bigint, length bigint"
    df = spark.createDataFrame([("/v", [0], values(7, 7), "file:///x.bin", 0, 16)], schema)
    with fails(r"both a 'data' column and virtual ref columns"):
        save(df, url)
    with pytest.raises(InvalidInputError, match="both a 'data' column"):
        write_chunks(df, url)
    np.testing.assert_array_equal(stored(repo), [1, 2, 3, 4])


def test_virtual_ref_columns_of_the_wrong_type_are_refused(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, _ = series_repo
    df = spark.createDataFrame(
        [("/v", [0], "file:///x.bin", "0", 16)],
        "array string, coord array<bigint>, location string, offset string, length bigint",
    )
    with pytest.raises(
        InvalidInputError, match=r"column 'offset' is string; virtual rows need an integer"
    ):
        commit_refs(df, url)


# -- placement and append_dim ----------------------------------------------------------------


def test_after_end_refuses_a_negative_coord_along_the_append_dim(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    df = spark.createDataFrame([("/v", [-1], values(9, 9))], DATA)
    with fails(r"row for array '/v' at coord \(-1,\): .*placement=after_end"):
        save(df, url, placement="after_end", append_dim="t")
    np.testing.assert_array_equal(stored(repo), [1, 2, 3, 4])  # the last chunk is intact


def test_a_misspelled_append_dim_names_the_option_and_the_dimensions(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    df = spark.createDataFrame([("/v", [2], values(5, 6))], DATA)
    with fails(r"option append_dim='tiem' is no dimension of any array .*'/v': \('t',\)"):
        save(df, url, append_dim="tiem")
    np.testing.assert_array_equal(stored(repo), [1, 2, 3, 4])


@pytest.mark.parametrize(
    ("write", "option"),
    [(commit_refs, "pack_chunks"), (write_chunks, "shapes"), (commit_refs, "branhc")],
)
def test_the_driver_api_refuses_an_option_it_does_not_take(write: Any, option: str) -> None:
    """Its options are one ``WriteOptions`` type: a name outside a function's is refused
    before anything runs, as a keyword the function does not have."""
    with pytest.raises(TypeError, match=f"{write.__name__}.*unexpected keyword.*'{option}'"):
        write(None, "memory://never-opened", **{option: True})


# -- repository status -----------------------------------------------------------------------
def test_a_write_to_a_read_only_repository_is_refused_with_the_reason_before_any_task(
    spark: Any, series_repo: tuple[str, Repository]
) -> None:
    url, repo = series_repo
    repo.set_status("read-only", "archived; ask the data team")
    before = repo.state().generation
    rows = [("/v", [2], values(5, 6))]
    with fails("read-only since .*archived; ask the data team"):
        save(spark.createDataFrame(rows, DATA), url, append_dim="t")
    assert repo.state().generation == before
    assert not list(repo.storage.list("staging/")), "no task staged rows"
    repo.set_status("online")
    save(spark.createDataFrame(rows, DATA), url, append_dim="t")
    assert stored(repo).tolist() == [1, 2, 3, 4, 5, 6]

"""The round trip against an S3 server (moto on 127.0.0.1)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
import pytest
import zarr
from chispa import assert_df_equality

from icechunk_spark import Repository
from icechunk_spark.spark.source import spark_schema
from tests.conftest import S3_BUCKET, s3_options

from .helpers import chunk_grid_rows, expected_chunk_rows, keys, new_repo
from .test_roundtrip import CUBE, cube_values, data_frame

pytestmark = pytest.mark.spark


def test_round_trip_on_s3(spark: Any, s3_endpoint: str) -> None:
    url = f"s3://{S3_BUCKET}/{uuid.uuid4().hex}"
    options = s3_options(s3_endpoint)
    new_repo(url, storage_options=options)
    values = cube_values()
    writer = (
        data_frame(spark, list(chunk_grid_rows(values, (3, 4, 5), "/cube")))
        .write.format("icechunk")
        .mode("append")
        .option("arrays", json.dumps({"/cube": CUBE}))
        .option("pack_chunks", "true")
    )
    for key, value in options.items():
        writer = writer.option(f"storage.{key}", value)
    writer.save(url)

    repo = Repository.open(url, storage_options=options)
    array = zarr.open_array(repo.readonly_session("main").store, path="cube", mode="r")
    np.testing.assert_array_equal(array[:], values)
    assert keys(repo, "staging/") == set()

    reader = spark.read.format("icechunk")
    for key, value in options.items():
        reader = reader.option(f"storage.{key}", value)
    # One row per partition at most: partitions read their row groups with ranged GETs.
    chunks = reader.option("rows_per_partition", "1").load(url)
    expected = spark.createDataFrame(expected_chunk_rows(repo), spark_schema("chunks"))
    assert_df_equality(chunks, expected, ignore_row_order=True)


def test_a_wrong_endpoint_fails_the_read_with_our_sentence(
    spark: Any, closed_endpoint: str
) -> None:
    secret = "s3cr3t-Never-Printed-0123456789"
    url = f"s3://{S3_BUCKET}/nowhere"
    reader = (
        spark.read.format("icechunk")
        .option("storage.endpoint_url", closed_endpoint)
        .option("storage.key", "testing")
        .option("storage.secret", secret)
    )
    with pytest.raises(Exception) as info:
        reader.load(url).collect()
    text = str(info.value)
    assert (
        f"cannot connect to {closed_endpoint} for {url}: check the endpoint_url storage option"
        in text
    )
    assert "StorageUnreachableError" in text and secret not in text

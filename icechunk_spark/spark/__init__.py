"""Spark integration: the ``icechunk`` data source and the driver-side commit API.

>>> from icechunk_spark.spark import register, commit_refs      # doctest: +SKIP
>>> register(spark)                                             # doctest: +SKIP
>>> spark.read.format("icechunk").load("file:///data/repo")     # doctest: +SKIP
>>> commit_refs(refs_df, "s3://bucket/repo", message="import")  # doctest: +SKIP
>>> read_chunks(spark, "file:///data/repo").count()             # doctest: +SKIP
>>> aggregate(spark, url, "tas", {"time": ("2001-07-01", "2001-07-31")})  # doctest: +SKIP
>>> write_values(tidy_df, url, dims="time,lat,lon", chunks={"time": 30})  # doctest: +SKIP

Spark also finds the source without ``register`` through the top-level ``pyspark_icechunk``
package, when this package is installed where Spark's Python workers run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .aggregate import aggregate
from .distributed import commit_refs, write_chunks
from .native import read_chunks
from .source import NAME, IcechunkDataSource
from .values_write import values_batches, write_values

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``icechunk`` data source with ``spark`` explicitly."""
    spark.dataSource.register(IcechunkDataSource)


__all__ = [
    "NAME",
    "IcechunkDataSource",
    "aggregate",
    "commit_refs",
    "read_chunks",
    "register",
    "values_batches",
    "write_chunks",
    "write_values",
]

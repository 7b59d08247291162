"""Lets Spark find the ``icechunk`` data source without ``spark.dataSource.register``.

PySpark imports every top-level module named ``pyspark_*`` on its Python path and registers
the ``DefaultSource`` it exposes under ``DefaultSource.name()``, here ``"icechunk"``.
"""

from icechunk_spark.spark.source import IcechunkDataSource as DefaultSource

__all__ = ["DefaultSource"]

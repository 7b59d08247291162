"""Our storage backends run ``icechunk_spark.testing.StorageTests``, as a third-party one would."""

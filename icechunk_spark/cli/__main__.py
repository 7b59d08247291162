"""``python -m icechunk_spark.cli``: the ``icechunk-spark`` command."""

from . import run

run()

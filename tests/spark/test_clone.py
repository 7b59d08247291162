"""A clone copied by Spark tasks (jobs/clone.py's copier) equals the source object by object,
and a clone whose Spark job died part-way resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icechunk_spark import Repository
from icechunk_spark.ops.clone import clone
from icechunk_spark.spark.clone import spark_copier
from icechunk_spark.storage import open_storage
from tests.test_clone_export import same_repository, with_history

pytestmark = pytest.mark.spark


def test_a_clone_copied_on_executors_equals_the_source(spark: Any, tmp_path: Path) -> None:
    src, dst = (tmp_path / "src").as_uri(), (tmp_path / "dst").as_uri()
    source, destination = open_storage(src), open_storage(dst)
    with_history(source, chunks=100)
    copier = spark_copier(spark, (src, {}), (dst, {}))

    def dies_half_way(batches):  # the job fails after its first half of tasks
        half = len(batches) // 2
        yield from copier(batches[:half])
        raise RuntimeError("executor lost (injected)")

    with pytest.raises(RuntimeError, match="injected"):
        clone(source, destination, copier=dies_half_way)
    assert not Repository.exists(destination)
    summary = clone(source, destination, copier=copier)
    assert summary.objects_already_there > 0 and summary.objects_copied > 0
    same_repository(source, destination)

"""A clone's copying on Spark executors (``jobs/clone.py``): the driver lists and verifies
(``ops/clone.py``), each task copies a batch of objects between the two storages it opens."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..ops.clone import Copier, copy_objects
from ..storage import ObjectInfo, open_storage


def spark_copier(
    spark: Any,
    source: tuple[str, Mapping[str, Any]],
    destination: tuple[str, Mapping[str, Any]],
    batches_per_task: int = 8,
) -> Copier:
    """Copies the batches in one Spark job; ``source`` and ``destination`` are (url, storage
    options), opened in each task (a storage client does not travel)."""

    def copier(batches: Sequence[Sequence[ObjectInfo]]) -> Iterator[int]:
        if not batches:
            return
        tasks = [
            [list(b) for b in batches[i : i + batches_per_task]]
            for i in range(0, len(batches), batches_per_task)
        ]
        rdd = spark.sparkContext.parallelize(tasks, numSlices=len(tasks))
        yield from rdd.map(lambda task: _copy_task(source, destination, task)).collect()

    return copier


def _copy_task(
    source: tuple[str, Mapping[str, Any]],
    destination: tuple[str, Mapping[str, Any]],
    batches: list[list[ObjectInfo]],
) -> int:
    src = open_storage(source[0], **dict(source[1]))
    dst = open_storage(destination[0], **dict(destination[1]))
    for batch in batches:
        copy_objects(src, dst, batch)
    return sum(len(b) for b in batches)

"""A clone's copying on Spark executors (``jobs/clone.py``): the driver lists and verifies
(``ops/clone.py``), each task copies a batch of objects between the two storages it opens."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import NotFoundError
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
        done = rdd.map(lambda task: _copy_task(source, destination, task)).collect()
        yield from (count for count, _ in done)
        gone = [reason for _, reasons in done for reason in reasons]
        if gone:
            # As the threaded copier raises it: the clone then checks whether a garbage
            # collection on the source explains it, and copies the newer state if so.
            raise NotFoundError(
                f"{len(gone)} batches met an object deleted after it was listed, e.g.: {gone[0]}"
            )

    return copier


def _copy_task(
    source: tuple[str, Mapping[str, Any]],
    destination: tuple[str, Mapping[str, Any]],
    batches: list[list[ObjectInfo]],
) -> tuple[int, list[str]]:
    """How many objects the batches hold (for progress), and why batches stopped at a
    deleted object: told to the driver as text, not as a failed task (which Spark would
    retry, then report as its own error). The driver's verification finds what they left."""
    src = open_storage(source[0], **dict(source[1]))
    dst = open_storage(destination[0], **dict(destination[1]))
    gone = []
    for batch in batches:
        try:
            copy_objects(src, dst, batch)
        except NotFoundError as missing:
            gone.append(str(missing))
    return sum(len(b) for b in batches), gone

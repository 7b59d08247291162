"""Clone: copy a whole repository (every snapshot, branch and tag) to other storage, of any kind.

The order makes it safe to kill and to run again (icechunk#1034):

1. Read the source's latest state: the clone is a copy of exactly that state. Every object it
   names was written before it, so listing *after* reading it finds them all.
2. List the source's objects (chunks, manifests, structures, attribute files, transaction logs;
   never staging files or temporaries) and the destination's: an object there with the same key
   and size is already copied (objects are immutable, their ids random), so a rerun copies only
   the rest. Copies run in parallel.
3. Verify: list the destination again; every object must be there with the source's size.
4. Read the source's state again. If garbage collection fenced the source after the state
   copied (``AssertNoGCSince``), it may have deleted objects that state names (snapshots an
   expiry had removed since) before step 2 listed them, and the copy would name objects it
   never had: copy the newer state instead, from step 2 (what is copied stays). The same when
   an object listed is gone by the time it is copied. A collection fenced at or before the
   state copied deletes nothing it names: what commits wrote after its fence is younger than
   the fence.
5. Only then write the state file (its generation as in the source) and the hint. Until this
   last step the destination is not a repository (``Repository.open`` says so), so a killed
   clone is never mistaken for a finished one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ..core import AssertNoGCSince, read_latest_state
from ..errors import AlreadyExistsError, FormatError, NotFoundError, RetriesExhaustedError
from ..format.keys import (
    ATTRIBUTES_PREFIX,
    CHUNKS_PREFIX,
    HINT_KEY,
    MANIFESTS_PREFIX,
    STATE_PREFIX,
    STRUCTURES_PREFIX,
    TXLOGS_PREFIX,
    state_key,
)
from ..format.state import encode_state
from ..progress import Progress, track
from ..storage import ObjectInfo, Storage

# Everything a snapshot can reference; staging files and temporaries are never copied.
COPIED_PREFIXES = (
    STRUCTURES_PREFIX,
    ATTRIBUTES_PREFIX,
    TXLOGS_PREFIX,
    MANIFESTS_PREFIX,
    CHUNKS_PREFIX,
)
DEFAULT_WORKERS = 16
BATCH = 32  # objects a copier's task copies one after another
# Copies of a newer state after a garbage collection on the source, before giving up.
MAX_ROUNDS = 5
# Copies batches of objects, yielding each batch's size as it is done (for progress).
Copier = Callable[[Sequence[Sequence[ObjectInfo]]], Iterable[int]]


@dataclass(frozen=True, slots=True)
class CloneSummary:
    """What a clone did: objects (and bytes) copied now, found copied by an earlier run, and
    the state it copied (generation, snapshot count)."""

    objects_copied: int
    bytes_copied: int
    objects_already_there: int
    generation: int
    snapshots: int


def clone(
    source: Storage,
    destination: Storage,
    *,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
    copier: Copier | None = None,
) -> CloneSummary:
    """Copy the repository at ``source`` to ``destination`` (see the module docstring).

    ``copier``: copies the batches elsewhere (a Spark job runs them on executors); by default
    this process copies them with ``workers`` threads.

    Raises:
        NotFoundError: no repository at ``source``, or an object listed there was deleted
            before its copy by other than a garbage collection.
        AlreadyExistsError: ``destination`` holds a repository already.
        FormatError: an object did not arrive whole (its size differs from the source's).
        RetriesExhaustedError: garbage collection ran on the source ``MAX_ROUNDS`` times.
    """
    state = read_latest_state(source)
    if list(destination.list(STATE_PREFIX)):
        raise AlreadyExistsError(
            f"a repository exists at {destination.url} already: clone into an empty location "
            "(a killed clone leaves no state file there, so running it again resumes)"
        )
    copy = copier or _threads(source, destination, workers)
    before = _sizes(destination)  # what it held: a killed run's copies
    for attempt in range(MAX_ROUNDS):
        there = before if attempt == 0 else _sizes(destination)
        gone: NotFoundError | None = None
        try:
            wanted = copy_listed(source, destination, copy, progress, there)
        except NotFoundError as missing:  # listed, then deleted before its copy
            gone = missing
        latest = read_latest_state(source)
        if AssertNoGCSince(state.generation).holds(latest):
            if gone is not None:
                raise gone  # not by a collection since the state copied: say so
            break
        state = latest  # collected since: copy the newer state (step 4 of the docstring)
    else:
        raise RetriesExhaustedError(
            f"garbage collection ran on {source.url} {MAX_ROUNDS} times while it was cloned; "
            "nothing was published at the destination: run the clone again when collections "
            "are rarer (what is copied stays)"
        )
    data = encode_state(replace(state, store_root=destination.url))
    destination.put(state_key(state.generation), data)  # the last step: now it is a repository
    destination.put(HINT_KEY, data)
    copied = [info for key, info in wanted.items() if before.get(key) != info.size]
    return CloneSummary(
        objects_copied=len(copied),
        bytes_copied=sum(info.size for info in copied),
        objects_already_there=len(wanted) - len(copied),
        generation=state.generation,
        snapshots=len(state.snapshots),
    )


def copy_listed(
    source: Storage,
    destination: Storage,
    copy: Copier,
    progress: Progress | None,
    there: dict[str, int],
) -> dict[str, ObjectInfo]:
    """Copy every object listed at ``source`` that ``destination`` lacks (``there``: its
    objects' sizes by key), and verify all of them there; returns them by key.

    Raises:
        NotFoundError: an object listed was deleted before its copy.
        FormatError: an object did not arrive whole.
    """
    wanted = {info.key: info for prefix in COPIED_PREFIXES for info in source.list(prefix)}
    todo = [info for key, info in sorted(wanted.items()) if there.get(key) != info.size]
    batches = [todo[i : i + BATCH] for i in range(0, len(todo), BATCH)]
    for _ in track(progress, "copying objects", copy(batches), len(todo), steps=lambda n: n):
        pass
    verify(wanted.values(), destination)
    return wanted


def copy_objects(source: Storage, destination: Storage, batch: Sequence[ObjectInfo]) -> None:
    """Copy each object of ``batch``, checking it is read whole."""
    for info in batch:
        data = source.get(info.key)
        if len(data) != info.size:
            raise FormatError(
                f"{info.key!r} in {source.url} holds {len(data)} bytes, listed as {info.size}"
            )
        destination.put(info.key, data)


def verify(expected: Iterable[ObjectInfo], destination: Storage) -> None:
    """Every expected object is at ``destination`` with its size.

    Raises:
        FormatError: naming the first few missing or short objects.
    """
    there = _sizes(destination)
    wrong = [i.key for i in expected if there.get(i.key) != i.size]
    if wrong:
        raise FormatError(
            f"{len(wrong)} objects did not arrive whole in {destination.url} (e.g. {wrong[:3]}); "
            "nothing was published there: run the clone again to copy them"
        )


def _sizes(storage: Storage) -> dict[str, int]:
    return {info.key: info.size for prefix in COPIED_PREFIXES for info in storage.list(prefix)}


def _threads(source: Storage, destination: Storage, workers: int) -> Copier:
    def copier(batches: Sequence[Sequence[ObjectInfo]]) -> Iterator[int]:
        def one(batch: Sequence[ObjectInfo]) -> int:
            copy_objects(source, destination, batch)
            return len(batch)

        with ThreadPoolExecutor(max(workers, 1), thread_name_prefix="clone") as pool:
            yield from pool.map(one, batches)

    return copier


__all__ = ["COPIED_PREFIXES", "CloneSummary", "Copier", "clone", "copy_objects", "verify"]

"""Clone: copy a whole repository (every snapshot, branch and tag) to other storage, of any kind.

The order makes it safe to kill and to run again (icechunk#1034):

1. Read the source's latest state: the clone is a copy of exactly that state. Every object it
   names was written before it, so listing *after* reading it finds them all.
2. List the source's objects (chunks, manifests, structures, attribute files, transaction logs;
   never staging files or temporaries) and the destination's: an object there with the same key
   and size is already copied (objects are immutable, their ids random), so a rerun copies only
   the rest. Copies run in parallel.
3. Verify: list the destination again; every object must be there with the source's size.
4. Only then write the state file (its generation as in the source) and the hint. Until this
   last step the destination is not a repository (``Repository.open`` says so), so a killed
   clone is never mistaken for a finished one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ..core import read_latest_state
from ..errors import AlreadyExistsError, FormatError
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
        NotFoundError: no repository at ``source``.
        AlreadyExistsError: ``destination`` holds a repository already.
        FormatError: an object did not arrive whole (its size differs from the source's).
    """
    state = read_latest_state(source)
    if list(destination.list(STATE_PREFIX)):
        raise AlreadyExistsError(
            f"a repository exists at {destination.url} already: clone into an empty location "
            "(a killed clone leaves no state file there, so running it again resumes)"
        )
    wanted = {info.key: info for prefix in COPIED_PREFIXES for info in source.list(prefix)}
    there = _sizes(destination)
    todo = [info for key, info in sorted(wanted.items()) if there.get(key) != info.size]
    batches = [todo[i : i + BATCH] for i in range(0, len(todo), BATCH)]
    done = (copier or _threads(source, destination, workers))(batches)
    for _ in track(progress, "copying objects", done, len(todo), steps=lambda n: n):
        pass
    verify(wanted.values(), destination)
    data = encode_state(replace(state, store_root=destination.url))
    destination.put(state_key(state.generation), data)  # the last step: now it is a repository
    destination.put(HINT_KEY, data)
    return CloneSummary(
        objects_copied=len(todo),
        bytes_copied=sum(i.size for i in todo),
        objects_already_there=len(wanted) - len(todo),
        generation=state.generation,
        snapshots=len(state.snapshots),
    )


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

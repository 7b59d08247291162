"""Reading and swapping the state file: the one place compare-and-swap happens.

Readers read ``icechunk.json`` (a hint), then probe ``t/<g+1>``, ``t/<g+2>``… until one is
absent, so a stale or missing hint is harmless. Writers create ``t/<g+1>`` with put-if-absent:
exactly one writer wins each generation. Only then is ``icechunk.json`` replaced.

What makes this truthful under faults:

* **A lost answer is settled by reading back.** Storage may apply a write and lose the answer
  (a dropped connection, a 500 after the write), or the client's own retry of an applied write
  may come back "exists already". Every state file carries a random ``change-id``, so the writer
  reads ``t/<g+1>`` back: its own bytes mean it won. Only when storage cannot answer at all is
  the outcome reported as unknown (``CommitStateUnknownError``), never guessed.
* **A stale hint, or GC passing a reader, is detected.** A writer stalled between creating
  ``t/<g>`` and writing the hint can later put back an old hint, after GC deleted the state
  files above ``t/<g>``; and GC may delete state files while a reader probes forward. GC
  deletes state files one at a time, oldest first, so after the probe misses ``t/<g+1>`` the
  reader checks that ``t/<g>`` is still there: if so, ``t/<g+1>`` never was (the newest state
  file is never deleted); if not, the reader lists ``t/`` and probes from its newest.
* **A re-created generation is taken back.** A writer stalled between reading state ``g`` and
  creating ``t/<g+1>`` can find it absent again when others landed ``t/<g+1>``… and GC
  deleted them (all but the newest): after creating, it checks that ``t/<g>`` still exists
  (``_still_ours``), and otherwise, unless the state after its own names it as its parent
  (GC passed it after the create, fencing on top of it), deletes its fork and reads again.
* **A damaged hint is ignored.** A hint that cannot be decoded (truncated, garbled) is treated
  as a missing one: readers list ``t/``, whose newest state file decides (and must decode).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import (
    CommitStateUnknownError,
    FormatError,
    NotFoundError,
    RepositoryReadOnlyError,
    RetriesExhaustedError,
    SnapshotCollectedError,
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
)
from ..format.ids import new_object_id
from ..format.keys import HINT_KEY, STATE_PREFIX, state_key, structure_key
from ..format.state import Ref, SnapshotInfo, State, decode_state, encode_state
from ..format.structure_encode import encode_structure
from ..retry import CAS_BACKOFF
from ..storage import Storage
from .branches import DEFAULT_BRANCH
from .hints import HintWriter

MAX_CAS_ATTEMPTS = 100
# Attempts at creating one state file when storage fails or answers ambiguously.
PUBLISH_ATTEMPTS = 5


def read_latest_state(storage: Storage, known: State | None = None) -> State:
    """The newest committed state. Raises ``NotFoundError`` when there is no repository.

    ``known``: a state this process read or published (what its ``t/<g>`` holds), probed
    from first: while it is still the newest (a writer committing again)
    the hint need not be read, one request fewer. When a newer one exists, the hint is read
    as without it, and the newer of the two is probed from.
    """
    if known is not None:
        key = state_key(known.generation + 1)
        try:
            newer = decode_state(storage.get(key), key)
        except NotFoundError:
            return _probed_from(storage, known, probed=True)
        hinted = read_hint(storage)
        start = hinted if hinted is not None and hinted.generation > newer.generation else newer
        return _probed_from(storage, start)
    hinted = read_hint(storage)
    return _probed_from(storage, _read_newest_listed(storage) if hinted is None else hinted)


def raise_if_collected(
    storage: Storage, snapshot_ids: Sequence[str], missing: NotFoundError, during: str, advice: str
) -> None:
    """Raise ``SnapshotCollectedError`` when ``missing`` (an object not found ``during`` some
    reading of the snapshots ``snapshot_ids``) is explained by one of them leaving the history
    (it expired, or an amend or squash replaced it) and GC deleting its files: the first of
    them the newest state no longer lists (one state read). Returns while it lists them all
    (the object is gone for another reason): the caller re-raises ``missing``.

    ``missing`` explained already for one of them (a session's read inside an export) is
    explained again with this ``during`` and ``advice``, the caller's, with no state read."""
    if isinstance(missing, SnapshotCollectedError) and missing.snapshot_id in snapshot_ids:
        explained = SnapshotCollectedError(missing.snapshot_id, missing.missing, during, advice)
        raise explained from missing.__cause__
    listed = read_latest_state(storage).snapshots
    gone = next((i for i in snapshot_ids if i not in listed), None)
    if gone is not None:
        raise SnapshotCollectedError(gone, str(missing), during, advice) from missing


def _probed_from(storage: Storage, start: State, probed: bool = False) -> State:
    """The newest state from ``start`` on: ``read_latest_state``'s probe and check.
    ``probed``: ``t/<start+1>`` was found absent already."""
    while True:
        latest = start if probed else _probe_forward(storage, start)
        probed = False
        # The miss that ended the probe says "no newer state" only if GC did not delete that
        # state meanwhile. GC deletes state files one at a time, oldest first, so while t/<g>
        # still exists (checked after the miss) t/<g+1> was not deleted before it: the miss
        # was true. A gone t/<g> means GC passed us (or the hint was stale): list t/ instead.
        if storage.exists(state_key(latest.generation)):
            return latest
        start = _read_newest_listed(storage)


def _probe_forward(storage: Storage, state: State) -> State:
    """``state``, or the newest of ``t/<g+1>``, ``t/<g+2>``… that exist after it."""
    while True:
        key = state_key(state.generation + 1)
        try:
            data = storage.get(key)
        except NotFoundError:
            return state
        state = decode_state(data, key)


def read_hint(storage: Storage) -> State | None:
    """The state the hint holds; ``None`` when it is missing or cannot be decoded."""
    try:
        return decode_state(storage.get(HINT_KEY), HINT_KEY)
    except NotFoundError:
        return None
    except FormatError:
        # A truncated or garbled hint (an interrupted overwrite, a damaged copy) is no worse
        # than a missing one: every t/<g> it copies is intact, so readers list them instead.
        return None


def _read_newest_listed(storage: Storage) -> State:
    # The hint is missing only when a creator died between t/0 and icechunk.json, and
    # unreadable only when damaged: t/ holds every state it could copy.
    keys = sorted(info.key for info in storage.list(STATE_PREFIX))
    keys = [k for k in keys if k[len(STATE_PREFIX) :].isdigit()]
    if not keys:
        raise NotFoundError(
            f"no repository at {storage.url}: no {HINT_KEY} and no state files; "
            "create one with Repository.create(url)"
        )
    return decode_state(storage.get(keys[-1]), keys[-1])


def state_file_bytes(state: State) -> bytes:
    """The state file of ``state``, with its ``change-id`` (how a writer knows its own file):
    ``State.next`` gives every state a fresh one; a state without one gets one here."""
    return encode_state(state if state.change_id else replace(state, change_id=new_object_id()))


def publish_state(
    storage: Storage,
    state: State,
    hints: HintWriter | None = None,
    data: bytes | None = None,
    landed: Callable[[State], bool] | None = None,
) -> bool:
    """Try to commit ``state`` as its generation. ``False`` when another writer won it.
    ``hints``: write the hint behind the commit, on the I/O threads (default: here, now).
    ``data``: ``state_file_bytes(state)``, made (and maybe prepared) before. ``landed``:
    whether a newer state holds this one (a commit: its snapshot is listed), asked only when
    GC deleted ``t/<g>`` around the create (``_still_ours``); without it the create is then
    taken back.

    Raises:
        CommitStateUnknownError: storage failed on every attempt and on every read-back, so
            whether the state file was written cannot be told.
    """
    data = state_file_bytes(state) if data is None else data
    key = state_key(state.generation)
    if not _create_exactly(storage, key, data):
        return False
    if not _still_ours(storage, state, landed):
        # Ours is a fork no reader follows: take it back, and lose the round. The caller
        # reads the latest state (GC's fence among it) and tries again, or refuses.
        with contextlib.suppress(StorageError):
            storage.delete([key])
        return False
    # The commit happened above; the hint is best effort (a newer one may already be there, and
    # readers probe forward from any generation), so its failure must not undo the commit,
    # nor need it survive a crash (read_hint takes an empty or torn one as missing).
    if hints is not None:
        hints.write(state.generation, data)
        return True
    with contextlib.suppress(StorageError):
        storage.put_best_effort(HINT_KEY, data)
    return True


def lists_snapshot(snapshot_id: str) -> Callable[[State], bool]:
    """``publish_state``'s ``landed`` for a commit: its snapshot id is unique, so a newer
    state that lists it was built on the commit's state file."""
    return lambda state: snapshot_id in state.snapshots


def _still_ours(storage: Storage, state: State, landed: Callable[[State], bool] | None) -> bool:
    """Whether the state file just created for ``state`` is in the history, not a
    re-creation of one GC deleted.

    A writer reads state ``g`` and creates ``t/<g+1>``; if it stalls between the two while
    other writers land ``t/<g+1>``, ``t/<g+2>``… and GC (with a cut-off later than those)
    deletes every state file below its fence, ``t/<g+1>`` is absent again and the create
    succeeds: a second ``t/<g+1>`` beside newer states, a commit no one sees. GC deletes
    state files oldest first, so ``t/<g+1>`` can have been deleted only if ``t/<g>`` was
    before it: while ``t/<g>`` exists after our create, the generation was ours alone.
    (Readers make the same check after their probe, ``read_latest_state``.) When ``t/<g>``
    is gone, GC deleted it before our create (a fork) or after it, fencing on top of ours.
    Its fence's state, ``t/<g+2>``, then names ours as the one it replaced
    (``parent-change-id``): any change, a branch's or a tag's too, is told apart so. Failing
    that (a state file written before parents were recorded, or GC run twice meanwhile),
    ``landed`` asks the newest state (a commit: is its snapshot listed?); without it the
    state file is taken for a fork.

    Raises:
        CommitStateUnknownError: storage could not say whether ``t/<g>`` exists, or which
            state is the newest.
    """
    generation = state.generation
    if generation == 0:
        return True
    try:
        if storage.exists(state_key(generation - 1)):
            return True
        if _next_built_on(storage, state):
            return True
        return landed is not None and landed(read_latest_state(storage))
    except StorageError as exc:
        raise CommitStateUnknownError(
            None, f"could not check that state file {generation - 1} survived ({exc})"
        ) from exc


def _next_built_on(storage: Storage, state: State) -> bool:
    """Whether ``t/<g+1>`` exists and names ``state`` (by change id) as the one it replaced."""
    key = state_key(state.generation + 1)
    try:
        after = decode_state(storage.get(key), key)
    except NotFoundError:
        return False
    return bool(state.change_id) and after.parent_change_id == state.change_id


def _create_exactly(storage: Storage, key: str, data: bytes) -> bool:
    """Create ``key`` with ``data``: ``True`` when it holds our bytes, ``False`` another's."""
    reason = "no attempt"
    for attempt in range(PUBLISH_ATTEMPTS):
        try:
            if storage.put_if_absent(key, data):
                return True
        except (StorageCredentialsError, StorageNotFoundError):
            raise  # refused before anything was written: nothing to settle
        except StorageError as exc:
            reason = str(exc)  # maybe applied, maybe not: the read-back decides
        try:
            return storage.get(key) == data
        except NotFoundError:
            # Not written (yet). Sending it again is safe: should the earlier request still
            # land, it holds the same bytes, and put-if-absent lets only one of them in.
            pass
        except StorageError as exc:
            reason = str(exc)
        CAS_BACKOFF.sleep(attempt)
    raise CommitStateUnknownError(
        None, f"creating {key!r} in {storage.url} failed {PUBLISH_ATTEMPTS} times ({reason})"
    )


def ensure_writable(state: State, url: str) -> None:
    """Raises ``RepositoryReadOnlyError`` when ``state``'s status is read-only.

    Every writer checks the state its compare-and-swap replaces, so a status published first
    is always seen: the writer's own publish of that generation fails and it reads again.
    """
    status = state.status
    if not status.writable:
        since = status.set_at.isoformat() if status.set_at else "an unknown time"
        raise RepositoryReadOnlyError(url, status.reason, since)


def update_state(
    storage: Storage, change: Callable[[State], State | None], *, sets_status: bool = False
) -> State:
    """Apply ``change`` to the latest state with compare-and-swap, retrying lost races.

    ``change`` sees the latest state and returns the next one (``None``: nothing to do). It may
    raise to abort; it is called again after every lost race, so it must be pure. A read-only
    repository refuses every change but one that ``sets_status``.
    """
    for attempt in range(MAX_CAS_ATTEMPTS):
        current = read_latest_state(storage)
        if not sets_status:
            ensure_writable(current, storage.url)
        proposed = change(current)
        if proposed is None:
            return current
        if publish_state(storage, proposed):
            return proposed
        CAS_BACKOFF.sleep(attempt)
    raise RetriesExhaustedError(
        f"gave up after {MAX_CAS_ATTEMPTS} lost compare-and-swap races on {storage.url}; "
        "too many concurrent writers, retry later"
    )


def initial_state(storage: Storage, config: Mapping[str, Any]) -> State:
    """State 0 of a new repository: branch ``main`` at an empty snapshot, whose (empty)
    structure file this writes; publishing the state is the caller's."""
    empty_structure, _, _ = encode_structure([], new_object_id())
    structure_id = new_object_id()
    storage.put(structure_key(structure_id), empty_structure)
    snapshot = SnapshotInfo(
        id=new_object_id(),
        parent_id=None,
        timestamp_ms=int(time.time() * 1000),
        structure_file=structure_id,
        message="Repository initialized",
    )
    return State(
        id=new_object_id(),
        change_id=new_object_id(),
        generation=0,
        store_root=storage.url,
        snapshots={snapshot.id: snapshot},
        refs={DEFAULT_BRANCH: Ref(DEFAULT_BRANCH, snapshot.id, "branch")},
        config=dict(config),
    )

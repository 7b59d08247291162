"""Reading and swapping the state file: the one place compare-and-swap happens.

Readers read ``icechunk.json`` (a hint), then probe ``t/<g+1>``, ``t/<g+2>``… until one is
absent, so a stale or missing hint is harmless. Writers create ``t/<g+1>`` with put-if-absent:
exactly one writer wins each generation. Only then is ``icechunk.json`` replaced.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable

from .errors import IcechunkSparkError, NotFoundError, StorageError
from .format.state import State, decode_state, encode_state
from .storage import Storage

HINT_KEY = "icechunk.json"
STATE_PREFIX = "t/"
MAX_CAS_ATTEMPTS = 100


def state_key(generation: int) -> str:
    # Zero-padded so listing order is generation order.
    return f"{STATE_PREFIX}{generation:020d}"


def read_latest_state(storage: Storage) -> State:
    """The newest committed state. Raises ``NotFoundError`` when there is no repository."""
    state = _read_hint(storage)
    if state is None:
        state = _read_newest_listed(storage)
    while True:
        try:
            data = storage.get(state_key(state.generation + 1))
        except NotFoundError:
            return state
        state = decode_state(data, state_key(state.generation + 1))


def _read_hint(storage: Storage) -> State | None:
    try:
        data = storage.get(HINT_KEY)
    except NotFoundError:
        return None
    return decode_state(data, HINT_KEY)


def _read_newest_listed(storage: Storage) -> State:
    # The hint is missing only when a creator died between t/0 and icechunk.json.
    keys = sorted(info.key for info in storage.list(STATE_PREFIX))
    keys = [k for k in keys if k[len(STATE_PREFIX) :].isdigit()]
    if not keys:
        raise NotFoundError(
            f"no repository at {storage.url}: no {HINT_KEY} and no state files; "
            "create one with Repository.create(url)"
        )
    return decode_state(storage.get(keys[-1]), keys[-1])


def publish_state(storage: Storage, state: State) -> bool:
    """Try to commit ``state`` as its generation. ``False`` when another writer won it."""
    data = encode_state(state)
    if not storage.put_if_absent(state_key(state.generation), data):
        return False
    # The commit happened above; the hint is best effort (a newer one may already be there, and
    # readers probe forward from any generation), so its failure must not undo the commit.
    with contextlib.suppress(StorageError):
        storage.put(HINT_KEY, data)
    return True


def update_state(storage: Storage, change: Callable[[State], State | None]) -> State:
    """Apply ``change`` to the latest state with compare-and-swap, retrying lost races.

    ``change`` sees the latest state and returns the next one (``None``: nothing to do). It may
    raise to abort; it is called again after every lost race, so it must be pure.
    """
    for attempt in range(MAX_CAS_ATTEMPTS):
        current = read_latest_state(storage)
        proposed = change(current)
        if proposed is None:
            return current
        if publish_state(storage, proposed):
            return proposed
        _backoff(attempt)
    raise IcechunkSparkError(
        f"gave up after {MAX_CAS_ATTEMPTS} lost compare-and-swap races on {storage.url}; "
        "too many concurrent writers, retry later"
    )


def _backoff(attempt: int) -> None:
    time.sleep(min(0.5, 0.005 * (2 ** min(attempt, 7))) * random.random())

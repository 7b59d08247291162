"""Writers that lost a round on a busy branch take turns, oldest first: an advisory queue.

Through the compare-and-swap alone, many writers on one branch are served unfairly: after a
landing, whoever rebuilds first wins, and a writer that just landed builds its next commit at
once while those that lost sleep in backoff. Writers then finish one after another and the
last one waits for all of them (bench/bench_writers.py, 32 writers x 4 commits: p99 10.7 s).

So a writer that loses a round (the branch moved under it, or another took the generation)
puts a marker ``staging/waiters/<branch>/<since>-<id>`` and from then on attempts only when
no live marker is older than its own; a writer about to make its first attempt that finds
live markers puts its own behind them. The oldest writer is alone in rebuilding on the new
tip, so each landing costs one build instead of a build by every waiter.

Nothing depends on the markers for correctness: the compare-and-swap alone decides what
lands, and a marker only delays attempts. A marker is live while its writer refreshes it
(every ``REFRESH_S``); one left by a killed writer goes stale ``LEASE_S`` after its last
refresh, and no writer waits on markers for longer than ``MAX_WAIT_S`` in all, so a stuck or
dead writer slows a branch for a bounded time and never stops it. Markers live under
``staging/``: nothing reachable, never cloned, and garbage collection deletes stale ones.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from urllib.parse import quote

from ..errors import StorageError
from ..format.ids import new_object_id
from ..format.keys import STAGING_PREFIX
from ..storage import ObjectInfo, Storage

WAITERS_PREFIX = f"{STAGING_PREFIX}waiters/"
# A marker not refreshed for this long belongs to a writer that died or hung.
LEASE_S = 10.0
REFRESH_S = 2.0
# The longest a writer defers to older markers, summed over its whole commit.
MAX_WAIT_S = 60.0
# How often a waiter looks. The next in line looks every NEXT_POLL_S, or every four listings'
# time where listings are slow (object storage); one further back sleeps half its expected
# wait (its places ahead times the interval it has seen between turns), at most POLL_CAP_S:
# a waiter looks a few times, not every few ms, so dozens of waiters take little of the CPU
# and the storage the head needs (moto serves one request at a time).
NEXT_POLL_S = 0.005
POLL_CAP_S = 2.0
# The first guess of the interval between turns, before any turn was seen.
FIRST_INTERVAL_S = 0.02


# A marker's name: when its writer queued (ms since the epoch), then a random id.
_MARKER = re.compile(r"(\d{13})-[0-9A-Z]+")


def _since(key: str) -> int:
    match = _MARKER.search(key.rsplit("/", 1)[-1])
    assert match is not None, key  # only markers are kept
    return int(match.group(1))


def waiters_prefix(branch: str) -> str:
    return f"{WAITERS_PREFIX}{quote(branch, safe='')}/"


class TurnTaking:
    """One commit's place among the writers waiting on ``branch``.

    ``take_turn`` returns once this commit may attempt: at once while no live marker is older
    than its own (or none exists and it has none). ``leave`` removes its marker; call it when
    the commit ends, however it ends.
    """

    def __init__(
        self,
        storage: Storage,
        branch: str,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._storage = storage
        self._prefix = waiters_prefix(branch)
        self._clock = clock
        self._sleep = sleep
        self._key: str | None = None
        self._refreshed = 0.0
        self._waited = 0.0
        self._first_look: Future[list[ObjectInfo]] | None = None
        self._seen: list[str] = []  # the live markers of the last look
        self._interval = FIRST_INTERVAL_S  # between turns, as seen (moving average)
        self._last_place: tuple[int, float] | None = None  # places ahead, since when

    @property
    def marker(self) -> str | None:
        """The key of our marker, while we have one."""
        return self._key

    @property
    def queued(self) -> bool:
        return self._key is not None

    def look_ahead(self, pool: Executor) -> None:
        """List the markers on ``pool`` now, for the first ``take_turn``: a commit lists them
        beside its first read of the state, so an uncontended commit waits for no extra
        round trip. Not on local storage, whose listing costs less than the handover to
        another thread (``Storage.remote``): ``take_turn`` lists them then."""
        if self._storage.remote:
            self._first_look = pool.submit(self._list)

    def take_turn(self, lost: bool, when_next: Callable[[], None] | None = None) -> bool:
        """Wait until no live marker is older than ours. ``lost``: this commit just lost a
        round, so it queues (puts its marker) if it has not yet; otherwise it queues only
        behind markers it finds. ``when_next`` runs at each look while we are next in line:
        work that keeps the head's turn short (catching up with the branch while the head
        lands). ``False`` when it stopped deferring after ``MAX_WAIT_S`` (the caller backs
        off as it would without markers)."""
        if lost and self._key is None:
            self._enqueue()
        while self._waited < MAX_WAIT_S:
            started = time.monotonic()
            first = self._take_first_look()
            ahead = self._ahead(self._list() if first is None else first)
            listing = time.monotonic() - started
            if ahead == 0:
                return True
            if self._key is None:
                self._enqueue()  # a first attempt behind older waiters: take a place
                continue
            self._refresh()
            self._observe(ahead)
            work = 0.0
            if ahead == 1 and when_next is not None:
                work = time.monotonic()
                when_next()
                work = time.monotonic() - work
            pause = self._pause(ahead, listing)
            self._sleep(pause)
            self._waited += pause + listing + work
        return False

    def _observe(self, ahead: int) -> None:
        """Learn the interval between turns from how fast our place moves up."""
        now = time.monotonic()
        if self._last_place is not None and ahead < self._last_place[0]:
            seen = (now - self._last_place[1]) / (self._last_place[0] - ahead)
            self._interval = 0.7 * self._interval + 0.3 * seen
        if self._last_place is None or ahead != self._last_place[0]:
            self._last_place = (ahead, now)

    def _pause(self, ahead: int, listing: float) -> float:
        least = max(NEXT_POLL_S, 4 * listing)
        if ahead == 1:
            return least
        return min(POLL_CAP_S, max(least, (ahead - 1) * self._interval / 2))

    def leave(self) -> None:
        """Remove our marker, if we put one (best effort: a stale one is ignored anyway)."""
        if self._key is not None:
            with contextlib.suppress(StorageError):
                self._storage.delete([self._key])
            self._key = None

    def _take_first_look(self) -> list[ObjectInfo] | None:
        look, self._first_look = self._first_look, None
        if look is None or look.cancel():
            # Not started (the pool is busy, maybe with work waiting for this very commit):
            # list here rather than wait for a thread that may never come.
            return None
        return look.result()

    def _enqueue(self) -> None:
        # Behind every marker seen, even one stamped by a clock ahead of ours or in this very
        # millisecond: names sort by that time first.
        since_ms = max([int(self._clock() * 1000), *(_since(k) + 1 for k in self._seen)])
        self._key = f"{self._prefix}{since_ms:013d}-{new_object_id()}"
        self._put()

    def _refresh(self) -> None:
        if self._clock() - self._refreshed >= REFRESH_S:
            self._put()

    def _put(self) -> None:
        assert self._key is not None
        with contextlib.suppress(StorageError):  # advisory: a failed put only loses our place
            self._storage.put(self._key, b"")
            self._refreshed = self._clock()

    def _list(self) -> list[ObjectInfo]:
        try:
            return list(self._storage.list(self._prefix))
        except StorageError:
            return []  # advisory: without a listing, attempt as if alone

    def _ahead(self, listed: list[ObjectInfo]) -> int:
        """How many live markers are older than ours (all live ones when we have none)."""
        now_ms = self._clock() * 1000
        live = sorted(
            info.key
            for info in listed
            if _MARKER.fullmatch(info.key[len(self._prefix) :])
            and (
                info.key == self._key
                or info.modified_ms <= 0  # age unknown: live, within MAX_WAIT_S
                or now_ms - info.modified_ms < LEASE_S * 1000
            )
        )
        self._seen = live
        if self._key is None:
            return len(live)
        if self._key not in live:  # deleted under us (garbage collection): put it back
            self._put()
            live = sorted([*live, self._key])
        return live.index(self._key)

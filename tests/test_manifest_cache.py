"""The cache of loaded manifests (core/manifest_cache.py ``_Loads``): bounded by a budget, least
recently used dropped first, a load in flight never dropped, a failed load not counted."""

from __future__ import annotations

import threading

import pytest

from icechunk_spark.core.manifest_cache import _Loads


def _cache(budget: int) -> _Loads[str, int]:
    return _Loads(budget, lambda value: value)


def test_the_least_recently_used_entries_go_first_when_the_budget_is_passed() -> None:
    cache = _cache(10)
    for key, weight in (("a", 4), ("b", 3), ("c", 3)):
        cache.get(key, lambda w=weight: w)  # type: ignore[misc]
    cache.get("a", lambda: 99)  # used again: now the most recent
    cache.get("d", lambda: 4)  # 4 + 3 + 3 + 4 = 14: "b" goes, then 11: "c" goes
    assert [k for k in "abcd" if k in cache] == ["a", "d"]
    assert cache.get("a", lambda: 99) == 4  # kept, not loaded again


def test_an_entry_larger_than_the_budget_is_not_kept() -> None:
    cache = _cache(10)
    cache.get("a", lambda: 2)
    assert cache.get("big", lambda: 11) == 11
    assert "big" not in cache and "a" not in cache


def test_a_failed_load_is_forgotten_and_counts_nothing() -> None:
    cache = _cache(10)

    def fail() -> int:
        raise OSError("gone")

    with pytest.raises(OSError):
        cache.get("x", fail)
    assert "x" not in cache
    for key in "abcde":
        cache.get(key, lambda: 2)  # 10 in all: fits only if the failure counted nothing
    assert all(k in cache for k in "abcde")


def test_a_load_in_flight_is_never_dropped() -> None:
    cache = _cache(5)
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(5)
        return 1

    worker = threading.Thread(target=cache.get, args=("slow", slow))
    worker.start()
    started.wait(5)
    cache.get("a", lambda: 3)
    cache.get("b", lambda: 3)  # over budget: "a" goes; the pending "slow" (oldest) stays
    assert "slow" in cache and "a" not in cache and "b" in cache
    release.set()
    worker.join(5)
    assert cache.get("slow", lambda: 99) == 1

"""Snapshots decoded and encoded once, not at every read and write of the state.

A state lists every snapshot of the repository's life, and every commit attempt reads it (at
least once) and writes it. Building each ``SnapshotInfo`` from its JSON again, and each JSON
text from its ``SnapshotInfo``, made both grow with history, so a writer that rebased many
times on a long-lived branch paid it again each time (``bench/bench_state.py``). Between two
states only a few entries differ (a commit adds one, expiry relinks a few), so the memos below
keep the last state's entries: an entry whose JSON is equal to the one remembered reuses its
``SnapshotInfo``; a ``SnapshotInfo`` that is the very object encoded last time reuses its
text. Both are pure caches: a miss decodes or encodes exactly as before. (The JSON text
itself: ``state_text`` parses only what follows the last state's entries.)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any, Generic, TypeVar

# A decoded snapshot (``state.SnapshotInfo``; generic so this module needs no import of it).
Info = TypeVar("Info")


class SnapshotMemo(Generic[Info]):
    """The snapshots of the last state decoded and of the last state encoded.

    Each call replaces its memo whole (one assignment), so threads decoding or encoding at the
    same time see one memo or the other, never a torn one; the loser's entries are only
    decoded again next time.
    """

    def __init__(self) -> None:
        # snapshot id -> (its JSON entry, decoded)
        self._decoded: dict[Any, tuple[Mapping[str, Any], Info]] = {}
        # The last call's objects, their texts, the array it made of them, and where in the
        # array each text ends.
        self._encoded: tuple[list[Info], list[str], str, list[int]] = ([], [], "[]", [])

    def decode_all(
        self,
        entries: Iterable[Mapping[str, Any]],
        decode: Callable[[Mapping[str, Any]], Info],
    ) -> dict[str, Info]:
        """``{entry's snapshot-id: decode(entry)}``, reusing the last call's equal entries."""
        known, fresh = self._decoded, {}
        for entry in entries:
            key = entry["snapshot-id"]
            hit = known.get(key)
            info = hit[1] if hit is not None and hit[0] == entry else decode(entry)
            fresh[key] = (entry, info)
        self._decoded = fresh
        return {key: info for key, (_, info) in fresh.items()}

    def encode_all(self, infos: Iterable[Info], encode: Callable[[Info], str]) -> str:
        """The JSON array of ``encode(info)`` texts, reusing the last call's for the same
        objects.

        A commit's state is the last one with its snapshot added, and often with the one
        before that decoded afresh from the state file (a new object): the run of objects
        that opens both this call and the last (found by identity tests in C) keeps the last
        array's text as it is, and only the entries after it are looked up or encoded; not
        a lookup per entry in Python (10,000 snapshots: ~10 ms a commit). Identity, not
        equality: equal metadata dicts in another key order encode to another text.
        """
        infos = list(infos)
        last, texts, array, ends = self._encoded
        same = _same_prefix(infos, last)
        if same == len(infos) == len(last):
            return array
        known = {id(info): text for info, text in zip(last[same:], texts[same:], strict=True)}
        # ``last`` holds the objects whose id()s are keys, so no id is reused meanwhile.
        added = [known.get(id(info)) or encode(info) for info in infos[same:]]
        if same:
            head = array[: ends[same - 1]]
            array = head + "".join(map(",".__add__, added)) + "]"
            ends = ends[:same] + _ends(added, ends[same - 1])
        else:
            array = "[" + ",".join(added) + "]"
            ends = _ends(added, 0)
        self._encoded = (infos, texts[:same] + added, array, ends)
        return array


def _same_prefix(infos: list[Any], last: list[Any]) -> int:
    """How many leading objects of ``infos`` are the very objects leading ``last``."""
    n = min(len(infos), len(last))
    if all(map(operator.is_, infos[:n], last[:n])):
        return n
    lo, hi = 0, n  # infos[:lo] match; infos[hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if all(map(operator.is_, infos[lo:mid], last[lo:mid])):
            lo = mid
        else:
            hi = mid
    return lo


def _ends(texts: list[str], start: int) -> list[int]:
    """Where each of ``texts`` ends in an array text, the first after a separator (or the
    array's "[") at ``start``: each text adds its length and one separator."""
    return list(
        map(operator.add, accumulate(map(len, texts)), range(start + 1, start + 1 + len(texts)))
    )

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
        # The last call's objects, their texts, and the array it made of them.
        self._encoded: tuple[list[Info], list[str], str] = ([], [], "[]")

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

        A commit's state is the last one plus its snapshot: when the last call's objects are
        the first ones here, in order, their array is reused whole and the new texts spliced
        in (a test of identity per entry, in C, instead of a dict lookup per entry in Python:
        ~10 ms a commit at 10,000 snapshots, ``bench/bench_state.py``). Identity, not
        equality: equal metadata dicts in another key order encode to another text.
        """
        infos = list(infos)
        last, texts, array = self._encoded
        n = len(last)
        if n and len(infos) >= n and all(map(operator.is_, infos, last)):
            added = [encode(info) for info in infos[n:]]
            if added:
                array = f"{array[:-1]},{','.join(added)}]"
            self._encoded = (infos, texts + added, array)
            return array
        known = {id(info): text for info, text in zip(last, texts, strict=True)}
        # ``last`` holds the objects whose id()s are keys, so no id is reused meanwhile.
        fresh = [known.get(id(info)) or encode(info) for info in infos]
        array = "[" + ",".join(fresh) + "]"
        self._encoded = (infos, fresh, array)
        return array

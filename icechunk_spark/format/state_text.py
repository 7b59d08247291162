"""Parsing a state file's text without parsing again the snapshots the last one listed.

A state lists every snapshot, so its JSON grows with history (10,000 snapshots: 2.9 MB, and
``json.loads`` of it 90-150 ms here, a third of it garbage collection over the objects it
makes). The next state a reader sees is mostly the last one plus a commit: the same snapshot
entries, byte for byte, and one more. ``split_state`` finds the snapshot array of a state
written in our layout (``encode_state``: the fields before it are scalars), parses the fields
around it, and parses of the array only what follows the last text's entries when it starts
with them. Any other layout gives ``None``, and the caller parses the whole document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_MARK = b',"snapshots":['
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class StateText:
    """A state's text in parts: every top-level field but ``snapshots`` (``fields``), the
    snapshot array's text but its closing bracket (``prefix``: the next state's array starts
    with it when it keeps every entry), how many entries the array holds, and the parsed
    entries: every one, or those after the ``reused`` first ones, which are the last text's."""

    fields: dict[str, Any]
    prefix: bytes
    count: int
    entries: list[Any]
    reused: int


def split_state(data: bytes, last: StateText | None) -> StateText | None:
    """``data`` in parts, reusing ``last``'s entries when its array starts with them; ``None``
    when the text is not in our layout (or not JSON: the caller's parse says why)."""
    try:
        return _split(data, last)
    except (ValueError, UnicodeDecodeError):
        return None


def _split(data: bytes, last: StateText | None) -> StateText | None:
    mark = data.find(_MARK)
    if mark < 0:
        return None
    # Closed here, the text before the mark is an object only if the mark is at the top level
    # (inside a nested value the brackets would stay open).
    head = json.loads(data[:mark] + b"}")
    start = mark + len(_MARK) - 1  # the array's "["
    reused, text = 0, ""
    if last is not None and last.count and data.startswith(last.prefix, start):
        after = start + len(last.prefix)
        # The last array's entries, then "]" (no entry more) or "," and the new ones.
        follows = data[after : after + 1]
        if follows == b"]":
            reused, text = last.count, "[]" + data[after + 1 :].decode()
        elif follows == b",":
            reused, text = last.count, "[" + data[after + 1 :].decode()
    if not reused:
        text = data[start:].decode()
    entries, stop = _DECODER.raw_decode(text)
    rest = text[stop:]
    if not isinstance(head, dict) or not isinstance(entries, list):
        return None
    fields = {**head, **_fields_after(rest)}
    if "snapshots" in fields:  # given twice: a whole parse keeps the last, not this one
        return None
    end = len(data) - len(rest.encode())  # just past the array's "]"
    return StateText(fields, data[start : end - 1], reused + len(entries), entries, reused)


def _fields_after(rest: str) -> dict[str, Any]:
    """The fields in the text after the array: ``,"key":value...}`` or ``}``."""
    if rest.startswith(","):
        fields = json.loads("{" + rest[1:])
    elif rest.strip() == "}":
        fields = {}
    else:
        raise ValueError("not a field list after the snapshot array")
    if not isinstance(fields, dict):
        raise ValueError("not an object")
    return fields

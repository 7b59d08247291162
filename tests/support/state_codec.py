"""The state file as a process that never read or wrote one would decode and encode it: the
references the state caches (format/state_text.py, format/snapshot_memo.py) are tested
against."""

from __future__ import annotations

import icechunk_spark.format.state as state_format
from icechunk_spark.format import State, encode_state
from icechunk_spark.format.snapshot_memo import SnapshotMemo


def fresh_decode(data: bytes) -> State:
    kept = state_format._LAST_TEXT, state_format._MEMO
    state_format._LAST_TEXT, state_format._MEMO = None, SnapshotMemo()
    try:
        return state_format._decode_state(data, "t/x")
    finally:
        state_format._LAST_TEXT, state_format._MEMO = kept


def fresh_encode(state: State) -> bytes:
    kept = state_format._MEMO
    state_format._MEMO = SnapshotMemo()
    try:
        return encode_state(state)
    finally:
        state_format._MEMO = kept

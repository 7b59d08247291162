"""A state that lists the last one's snapshots and more is parsed only past them
(format/state_text.py), and decodes to exactly what a parse of the whole document gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

import icechunk_spark.format.state as state_format
from icechunk_spark.errors import FormatError
from icechunk_spark.format import SnapshotInfo, State, encode_state
from icechunk_spark.format.state_text import split_state


def _history(n: int, start: int = 0) -> dict[str, SnapshotInfo]:
    out: dict[str, SnapshotInfo] = {}
    for i in range(start, start + n):
        out[f"S{i:04d}"] = SnapshotInfo(
            f"S{i:04d}",
            f"S{i - 1:04d}" if i else None,
            1_700_000_000_000 + i,
            f"F{i}",
            message=f"day {i} \u00e9\u6771",  # non-ASCII: byte and character offsets differ
            metadata={"run": i, "note": '"quoted" ,"snapshots":['} if i % 2 else {},
        )
    return out


def _state(snapshots: dict[str, SnapshotInfo], generation: int) -> State:
    return State("R", generation, 'file:///r\u00e9po/,"snapshots":[', snapshots, {})


@pytest.fixture(autouse=True)
def _forget_the_last_text() -> Iterator[None]:
    state_format._LAST_TEXT = None
    yield
    state_format._LAST_TEXT = None


def _decoded(state: State) -> State:
    """Decoded from its bytes (not the bytes cache: every call parses)."""
    return state_format._decode_state(encode_state(state), "t/x")


def test_each_next_state_is_parsed_past_the_last_ones_entries_and_decodes_exactly() -> None:
    snapshots = _history(20)
    states = [_state(snapshots, 1)]
    for added in [1, 3, 0, 1]:
        snapshots = {**snapshots, **_history(added, start=len(snapshots))}
        states.append(states[-1].next(snapshots=snapshots))
    config = {"snapshots": [1, 2], "inline_chunk_threshold_bytes": 9}
    states.append(states[-1].next(config=config))  # a field after the array
    for state in states:
        assert _decoded(state) == state
    texts = [encode_state(s) for s in states]
    first = split_state(texts[0], None)
    assert first is not None and first.reused == 0 and first.count == 20
    second = split_state(texts[1], first)
    assert second is not None and (second.reused, second.count) == (20, 21)
    assert [e["snapshot-id"] for e in second.entries] == ["S0020"]
    third = split_state(texts[2], second)
    assert third is not None and (third.reused, len(third.entries)) == (21, 3)
    same = split_state(texts[3], third)
    assert same is not None and (same.reused, same.entries) == (24, [])
    assert split_state(texts[5], split_state(texts[4], same)).fields["config"] == config  # type: ignore[union-attr]


def test_a_state_that_changed_or_dropped_an_old_entry_is_parsed_whole() -> None:
    snapshots = _history(12)
    before = _state(snapshots, 1)
    assert _decoded(before) == before
    # Expiry relinks S0005 past S0004: an entry in the middle changes, the rest stays.
    relinked = replace(snapshots["S0005"], parent_id="S0003", parent_relinked=True)
    changed = {k: v for k, v in snapshots.items() if k != "S0004"} | {"S0005": relinked}
    after = before.next(snapshots=changed)
    assert _decoded(after) == after
    text = split_state(encode_state(after), split_state(encode_state(before), None))
    assert text is not None and text.reused == 0
    shorter = after.next(snapshots={k: v for k, v in changed.items() if k != "S0000"})
    assert _decoded(shorter) == shorter


def test_another_layout_or_a_repeated_field_is_parsed_as_a_whole_document() -> None:
    state = _state(_history(5), 1)
    assert _decoded(state) == state
    doc = json.loads(encode_state(state))
    indented = json.dumps(doc, indent=1).encode()
    assert split_state(indented, None) is None
    assert state_format._decode_state(indented, "t/x") == state
    # "snapshots" given again after the array: a whole parse keeps the last value.
    repeated = encode_state(state)[:-1] + b',"snapshots":[]}'
    assert split_state(repeated, None) is None
    assert state_format._decode_state(repeated, "t/x").snapshots == {}


def test_a_repeated_snapshot_id_is_never_carried_into_the_next_decoding() -> None:
    snapshots = _history(4)
    text = encode_state(_state(snapshots, 1))
    twice = text.replace(b'"snapshot-id":"S0001"', b'"snapshot-id":"S0000"', 1)
    first = state_format._decode_state(twice, "t/1")
    assert list(first.snapshots) == ["S0000", "S0002", "S0003"]
    assert state_format._LAST_TEXT is None  # 4 entries, 3 snapshots: not reusable
    nxt = _state({**snapshots, **_history(1, start=4)}, 2)
    assert _decoded(nxt) == nxt


def test_a_corrupt_new_entry_is_a_format_error() -> None:
    snapshots = _history(6)
    state = _state(snapshots, 1)
    assert _decoded(state) == state
    nxt = encode_state(state.next(snapshots={**snapshots, **_history(1, start=6)}))
    broken = nxt.replace(b'"snapshot-id":"S0006"', b'"snapshot":"S0006"')
    with pytest.raises(FormatError, match="t/2"):
        state_format._decode_state(broken, "t/2")
    with pytest.raises(FormatError, match="t/3"):
        state_format._decode_state(nxt[:-40], "t/3")


def test_an_old_entry_changed_to_a_text_of_the_same_length_is_seen() -> None:
    snapshots = _history(8)
    before = _state(snapshots, 1)
    assert _decoded(before) == before
    # The last text's length to the byte, a new entry after it: only the bytes tell them apart.
    shouted = replace(snapshots["S0003"], message=snapshots["S0003"].message.upper())
    after = before.next(snapshots={**snapshots, "S0003": shouted, **_history(1, start=8)})
    assert len(encode_state(after)) > len(encode_state(before))
    decoded = _decoded(after)
    assert decoded == after and decoded.snapshots["S0003"].message.startswith("DAY 3")

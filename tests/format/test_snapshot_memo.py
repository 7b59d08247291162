"""The snapshot memos make state encoding and decoding cheap, and must never change a result."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from icechunk_spark.format import SnapshotInfo, State, decode_state, encode_state
from icechunk_spark.format.state import GCFence
from tests.support.state_codec import fresh_encode


def _history(n: int) -> dict[str, SnapshotInfo]:
    snapshots: dict[str, SnapshotInfo] = {}
    parent = None
    for i in range(n):
        sid = f"S{i:04d}"
        snapshots[sid] = SnapshotInfo(
            sid,
            parent,
            1_700_000_000_000 + i,
            f"F{i}",
            message=f"commit {i} \u00e9",
            metadata={"job": i, "tags": ["a", "b"]} if i % 3 else {},
            once_marks=({"stream": "q", "batch": i},) if i % 5 == 0 else (),
        )
        parent = sid
    return snapshots


def _state(snapshots: dict[str, SnapshotInfo], generation: int = 7) -> State:
    return State(
        "R",
        generation,
        "file:///repo",
        snapshots,
        {},
        config={"inline_chunk_threshold_bytes": 512},
        gc_fence=GCFence(3, 1_700_000_000_000),
        change_id="c",
    )


def _one_dump(state: State) -> bytes:
    """What encode_state wrote before the memo: one json.dumps of the whole document."""
    doc = json.loads(encode_state(state))
    return json.dumps(doc, separators=(",", ":")).encode()


def test_encoding_twice_gives_the_bytes_of_one_dump():
    state = _state(_history(40))
    first = encode_state(state)
    assert first == _one_dump(state)
    later = state.next(snapshots={**state.snapshots, "X": SnapshotInfo("X", "S0039", 1, "FX")})
    assert encode_state(later) == _one_dump(later)
    assert json.loads(encode_state(later))["snapshots"][-1]["snapshot-id"] == "X"


def test_an_entry_changed_between_two_states_is_decoded_again():
    snapshots = _history(12)
    before = decode_state(encode_state(_state(snapshots)), "t/7")
    # Expiry relinks S0010 past S0009 and carries S0009's marks: the same snapshot id, a
    # different entry. The memo must not hand back the decoding of the old one.
    relinked = replace(
        snapshots["S0010"],
        parent_id="S0008",
        parent_relinked=True,
        once_marks=({"stream": "q", "batch": 9},),
    )
    changed = {k: v for k, v in snapshots.items() if k != "S0009"} | {"S0010": relinked}
    after = decode_state(encode_state(_state(changed, generation=8)), "t/8")
    assert after.snapshots["S0010"] == relinked
    assert before.snapshots["S0010"] == snapshots["S0010"]
    assert after.snapshots == changed and "S0009" not in after.snapshots
    # Unchanged entries come back equal (and may be shared: SnapshotInfo is frozen).
    assert after.snapshots["S0003"] == before.snapshots["S0003"] == snapshots["S0003"]


def test_a_snapshot_encoded_from_a_changed_object_gets_new_text():
    snapshots = _history(5)
    encode_state(_state(snapshots))
    renamed = {**snapshots, "S0004": replace(snapshots["S0004"], message="amended")}
    decoded = json.loads(encode_state(_state(renamed)))
    assert decoded["snapshots"][4]["properties"]["message"] == "amended"


def test_a_state_one_commit_longer_reuses_the_last_text_and_stays_byte_exact() -> None:
    # Commit after commit, the state is the last one plus a snapshot: its text is the last
    # text with one entry spliced in, not every entry joined again.
    snapshots = _history(30)
    states = [_state(snapshots)]
    for i in range(3):
        parent = list(snapshots)[-1]
        snapshots = {**snapshots, f"N{i}": SnapshotInfo(f"N{i}", parent, 2 + i, f"G{i}")}
        states.append(states[-1].next(snapshots=snapshots))
    for state in states:
        assert encode_state(state) == fresh_encode(state)
    # Whatever came before (a longer state, a shorter one, the same one twice), each result
    # is the whole document.
    for state in [states[3], states[1], states[1], states[2], states[0], states[3]]:
        assert encode_state(state) == fresh_encode(state)


def test_a_state_whose_old_entries_are_other_objects_is_encoded_from_them() -> None:
    snapshots = _history(10)
    encode_state(_state(snapshots))
    # An equal entry in another key order, one snapshot added: a prefix equal by value to
    # the last state's entries is not the same text.
    reordered = replace(snapshots["S0001"], metadata={"tags": ["a", "b"], "job": 1})
    assert reordered == snapshots["S0001"]
    later = {**snapshots, "S0001": reordered, "N": SnapshotInfo("N", "S0009", 1, "FN")}
    text = encode_state(_state(later))
    assert text == fresh_encode(_state(later))
    assert list(json.loads(text)["snapshots"][1]["properties"]["metadata"]) == ["tags", "job"]
    # A changed entry in the middle, then an entry dropped from the front (expiry).
    changed = {**later, "S0005": replace(snapshots["S0005"], message="rewritten")}
    text = encode_state(_state(changed))
    assert text == fresh_encode(_state(changed))
    assert json.loads(text)["snapshots"][5]["properties"]["message"] == "rewritten"
    shorter = {k: v for k, v in changed.items() if k != "S0000"}
    assert encode_state(_state(shorter)) == fresh_encode(_state(shorter))


def test_any_sequence_of_states_encodes_to_the_bytes_of_a_fresh_encoding() -> None:
    # What commits, reads and expiry do to the list, in random order: append one (a commit),
    # replace the last by a copy (its entry decoded afresh from the state file), the same
    # with its metadata in another key order, drop from the front (expiry), relink one in
    # the middle. Every state must encode as if nothing were remembered.
    rng = random.Random(7)
    snapshots = _history(6)
    serial = 6
    for _ in range(300):
        ids = list(snapshots)
        move = rng.randrange(5)
        if move == 0 or len(ids) < 3:
            snapshots[f"N{serial}"] = SnapshotInfo(f"N{serial}", ids[-1], serial, f"F{serial}")
            serial += 1
        elif move == 1:
            snapshots[ids[-1]] = replace(snapshots[ids[-1]])
        elif move == 2:
            old = snapshots[ids[-2]]
            snapshots[ids[-2]] = replace(old, metadata=dict(reversed(list(old.metadata.items()))))
        elif move == 3:
            del snapshots[ids[0]]
        else:
            k = ids[rng.randrange(1, len(ids))]
            snapshots[k] = replace(snapshots[k], parent_relinked=True)
        state = _state(dict(snapshots))
        assert encode_state(state) == fresh_encode(state)

"""Each state names the one it replaced (``parent-change-id``), so ``t/<g+1>`` says which
``t/<g>`` it was built on (docs/format.md, "State file")."""

from __future__ import annotations

import json
from dataclasses import replace

import icechunk_spark.format.state as state_format
from icechunk_spark.format import State, encode_state


def _decoded(data: bytes) -> State:
    return state_format._decode_state(data, "t/x")


def test_the_next_state_has_a_change_id_of_its_own_and_names_its_parents() -> None:
    first = State("R", 0, "file:///r", {}, {}, change_id="C0")
    second = first.next()
    third = second.next(config={"inline_chunk_threshold_bytes": 8})
    assert second.parent_change_id == "C0"
    assert third.parent_change_id == second.change_id
    assert len({"C0", second.change_id, third.change_id}) == 3
    assert "" not in (second.change_id, third.change_id)
    for state in (second, third):
        assert _decoded(encode_state(state)) == state


def test_a_state_file_without_the_field_decodes_with_no_parent() -> None:
    """Files written before the parent was recorded, and generation 0, carry none: a writer
    then cannot tell whether the state after its own follows it (core/refs.py)."""
    state = State("R", 3, "file:///r", {}, {}, change_id="C3")
    doc = json.loads(encode_state(state))
    assert "parent-change-id" not in doc
    assert _decoded(encode_state(state)).parent_change_id == ""
    named = replace(state, parent_change_id="C2")
    assert json.loads(encode_state(named))["parent-change-id"] == "C2"

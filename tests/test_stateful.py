"""Hypothesis state machine: random repository operations checked against a dict model.

Every draw depends only on the model, never on values the repository makes up (snapshot ids are
random): Hypothesis replays a failing run choice by choice, and a choice that means something
else on replay ("the 2nd snapshot in sorted order" is a different snapshot each time) makes it
raise ``FlakyStrategyDefinition``. So snapshots are drawn by their position in commit order.
"""

from __future__ import annotations

import copy
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from icechunk_spark import InvalidInputError, Repository

Model = dict[str, dict[tuple[int, int], bytes]]
NAMES = st.sampled_from(["a", "b", "c"])
COORDS = st.tuples(st.integers(0, 1), st.integers(0, 1))
# Short values are stored inline, long ones as chunk files: both paths get exercised.
VALUES = st.one_of(st.binary(min_size=1, max_size=4), st.binary(min_size=40, max_size=60))


class RepositoryMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.repo = Repository.create(
            f"memory://{uuid.uuid4().hex}", config={"inline_chunk_threshold_bytes": 16}
        )
        tip = self.repo.lookup_branch("main")
        # Snapshot id -> what it reads; insertion (commit) order is the model's order.
        self.snapshots: dict[str, Model] = {tip: {}}
        self.branches = {"main": tip}
        self.current = "main"
        self._open("main")

    def _open(self, branch: str) -> None:
        self.current = branch
        self.session = self.repo.writable_session(branch)
        self.pending: Model = copy.deepcopy(self.snapshots[self.branches[branch]])

    @rule(name=NAMES)
    def create_array(self, name: str) -> None:
        if name in self.pending:
            return
        self.session.create_array(f"/{name}", shape=(4, 4), chunk_shape=(2, 2), dtype="uint8")
        self.pending[name] = {}

    @rule(name=NAMES, coord=COORDS, value=VALUES)
    def write_chunk(self, name: str, coord: tuple[int, int], value: bytes) -> None:
        if name in self.pending:
            self.session.set_chunk(f"/{name}", coord, value)
            self.pending[name][coord] = value

    @rule(name=NAMES, coord=COORDS)
    def delete_chunk(self, name: str, coord: tuple[int, int]) -> None:
        if name in self.pending:
            self.session.delete_chunk(f"/{name}", coord)
            self.pending[name].pop(coord, None)

    @rule(name=NAMES)
    def delete_array(self, name: str) -> None:
        if name in self.pending:
            self.session.delete_node(f"/{name}")
            del self.pending[name]

    @rule()
    def commit(self) -> None:
        # No precondition on the session: which rules may run must not depend on the system.
        if not self.session.has_uncommitted_changes():
            with pytest.raises(InvalidInputError):
                self.session.commit("nothing")
            return
        snapshot = self.session.commit("step")
        self.snapshots[snapshot] = copy.deepcopy(self.pending)
        self.branches[self.current] = snapshot
        self._open(self.current)

    @rule(name=st.sampled_from(["dev", "feature"]))
    def create_branch(self, name: str) -> None:
        if name not in self.branches:
            self.repo.create_branch(name, self.branches[self.current])
            self.branches[name] = self.branches[self.current]

    @rule(data=st.data())
    def checkout(self, data: st.DataObject) -> None:
        self._open(data.draw(st.sampled_from(sorted(self.branches))))

    @rule(data=st.data())
    def reset_branch(self, data: st.DataObject) -> None:
        branch = data.draw(st.sampled_from(sorted(self.branches)))
        position = data.draw(st.integers(0, len(self.snapshots) - 1), label="snapshot number")
        target = list(self.snapshots)[position]
        self.repo.reset_branch(branch, target)
        self.branches[branch] = target
        if branch == self.current:
            self._open(branch)

    @invariant()
    def session_matches_model(self) -> None:
        _assert_view(self.session, self.pending)

    @invariant()
    def every_snapshot_reads_as_committed(self) -> None:
        for snapshot in list(self.snapshots)[-3:]:
            _assert_view(self.repo.readonly_session(snapshot_id=snapshot), self.snapshots[snapshot])


def _assert_view(session, model: Model) -> None:
    arrays = {n.path.lstrip("/") for n in session.list_nodes() if n.type == "array"}
    assert arrays == set(model)
    for name, chunks in model.items():
        coords = {tuple(c) for c in session.chunk_coords(f"/{name}").tolist()}
        assert coords == set(chunks)
        for coord, value in chunks.items():
            assert session.get_chunk(f"/{name}", coord) == value


TestRepositoryMachine = RepositoryMachine.TestCase
TestRepositoryMachine.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

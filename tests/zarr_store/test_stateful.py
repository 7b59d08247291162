"""zarr's Hypothesis state machine for hierarchies, against our store (memory backend).

``ZarrHierarchyStateMachine`` creates, overwrites, resizes and deletes groups and arrays through
zarr and compares every listing and array with zarr's MemoryStore. zarr's other machine,
``ZarrStoreStateMachine``, sets random bytes under random keys (``set("a/b", b"...")``), which a
store of Zarr metadata and chunks rejects by design, so it does not apply.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, settings
from zarr.testing.stateful import ZarrHierarchyStateMachine

from icechunk_spark import Repository

# zarr warns that some dtypes its strategies draw (fixed-length bytes) lack a v3 spec.
pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


class IcechunkHierarchyMachine(ZarrHierarchyStateMachine):
    def __init__(self) -> None:
        repo = Repository.create(f"memory://{uuid.uuid4().hex}")
        super().__init__(repo.writable_session("main").store)


TestZarrHierarchy = IcechunkHierarchyMachine.TestCase
TestZarrHierarchy.settings = settings(
    max_examples=100,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

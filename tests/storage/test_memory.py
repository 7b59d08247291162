"""The storage conformance suite on in-process memory storage."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import SimulatedTransport, StorageTests


class TestMemoryStorage(SimulatedTransport, StorageTests):
    # No transport of its own: the retry checks go through a simulated one (FlakyTransport).
    # A dict in this process: another process that opens memory://name gets its own, empty one.
    shared_across_processes = False

    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        store = open_storage(f"memory://{uuid.uuid4().hex}")
        yield store
        store.close()

"""Conformance suites that code outside this package can inherit (they need pytest).

``StorageTests`` is the behaviour every storage backend must show; our memory, local and S3
backends run it, and so should a third-party one (see its docstring and ``docs/operations.md``)::

    from icechunk_spark.testing import StorageTests

    class TestMyStorage(StorageTests):
        @pytest.fixture
        def storage(self, tmp_path):
            ...
"""

from __future__ import annotations

from .storage import StorageTests
from .transport import FlakyTransport, SimulatedTransport, TransientFaults, TransportFaults

__all__ = [
    "FlakyTransport",
    "SimulatedTransport",
    "StorageTests",
    "TransientFaults",
    "TransportFaults",
]

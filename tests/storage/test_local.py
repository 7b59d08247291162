"""The storage conformance suite on local files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import SimulatedTransport, StorageTests


class TestLocalStorage(SimulatedTransport, StorageTests):
    # No transport of its own: the retry checks go through a simulated one (FlakyTransport).
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[Storage]:
        # Neighbours outside the root, which no listing may show: a file next to it, and a
        # folder whose name extends the root's.
        (tmp_path / "neighbour").write_bytes(b"outside")
        (tmp_path / "repo-2" / "c").mkdir(parents=True)
        (tmp_path / "repo-2" / "c" / "AAA").write_bytes(b"outside")
        store = open_storage((tmp_path / "repo").as_uri())
        yield store
        store.close()

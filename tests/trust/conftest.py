"""Fixtures for the trust tests: a repository behind a fault-injecting storage wrapper."""

from __future__ import annotations

import pytest

from icechunk_spark import Repository
from icechunk_spark.storage import open_storage
from tests.support.faults import FaultyStorage


@pytest.fixture
def faulty(backend) -> FaultyStorage:
    """The ``backend``'s real storage, wrapped so a test can inject faults into chosen calls."""
    return FaultyStorage(open_storage(backend.url, **backend.options))


def create(storage: FaultyStorage, **kwargs: object) -> Repository:
    return Repository.create(storage, **kwargs)  # type: ignore[arg-type]

"""The storage conformance suite on Azure Blob Storage: Azurite on 127.0.0.1.

Transport faults are not injected here: azure-storage-blob retries a throttled request after
15 s and more (its ``ExponentialRetry`` defaults), which would make that one check take
minutes; the retry rules themselves are the same code for every backend (``with_retries``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import StorageTests
from tests.conftest import AZURE_CONTAINER, azure_options


@pytest.fixture(scope="module")
def container(azure_endpoint: str) -> Iterator[Storage]:
    """The whole test container, for writing next to the location under test."""
    store = open_storage(f"az://{AZURE_CONTAINER}", **azure_options(azure_endpoint))
    yield store
    store.close()


class TestAzureStorage(StorageTests):
    @pytest.fixture
    def storage(self, azure_endpoint: str, container: Storage) -> Iterator[Storage]:
        prefix = uuid.uuid4().hex
        # A neighbour whose prefix extends ours, which no listing may show.
        container.put(f"{prefix}-2/c/AAA", b"outside")
        store = open_storage(f"az://{AZURE_CONTAINER}/{prefix}", **azure_options(azure_endpoint))
        yield store
        store.close()

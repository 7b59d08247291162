"""The storage conformance suite on Azure Blob Storage: Azurite on 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import StorageTests, TransientFaults
from tests.conftest import AZURE_CONTAINER, azure_options
from tests.support.faulty_proxy import FaultRule, FaultyProxy


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

    @pytest.fixture
    def transient_faults(self, storage: Storage, azure_endpoint: str) -> Iterator[TransientFaults]:
        # The first request of each HTTP method is answered 503 without being forwarded: a
        # throttled request, which took no effect. The Azure SDK retries it after about 2 s.
        rules = [
            FaultRule(method, r".", 1.0, kinds=("slowdown",), max_faults=1)
            for method in ("PUT", "GET", "HEAD", "DELETE", "POST")
        ]
        with FaultyProxy(azure_endpoint, seed=0, rules=rules) as proxy:
            flaky = open_storage(storage.url, **azure_options(proxy.url))
            yield TransientFaults(flaky, lambda: len(proxy.injected))
            flaky.close()

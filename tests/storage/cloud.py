"""What the conformance suites on S3, GCS and Azure share: a fresh location on the emulator,
with a neighbour no listing may show, and the same location behind a throttling proxy."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import StorageTests, TransientFaults
from tests.support.faulty_proxy import FaultRule, FaultyProxy


@dataclass(frozen=True)
class Cloud:
    """How a suite reaches one cloud's emulator."""

    scheme: str  # "s3", "gs", "az"
    root: str  # the test bucket or container
    endpoint_fixture: str  # the session fixture that starts the emulator: "s3_endpoint"
    options: Callable[[str], dict[str, Any]]  # the storage options for an endpoint
    # The HTTP methods whose first request the proxy answers 503 without forwarding it: a
    # throttled request, which took no effect and must be retried.
    throttled: tuple[str, ...]

    def open(self, path: str, endpoint: str) -> Storage:
        return open_storage(f"{self.scheme}://{self.root}{path}", **self.options(endpoint))


class CloudStorageTests(StorageTests):
    """``StorageTests`` on the emulator that ``cloud`` names."""

    cloud: ClassVar[Cloud]

    @pytest.fixture
    def cloud_endpoint(self, request: pytest.FixtureRequest) -> str:
        return str(request.getfixturevalue(self.cloud.endpoint_fixture))

    @pytest.fixture(scope="class")
    @classmethod
    def whole_root(cls, request: pytest.FixtureRequest) -> Iterator[Storage]:
        """The whole test bucket or container, for writing next to the location under test."""
        store = cls.cloud.open("", request.getfixturevalue(cls.cloud.endpoint_fixture))
        yield store
        store.close()

    @pytest.fixture
    def storage(self, cloud_endpoint: str, whole_root: Storage) -> Iterator[Storage]:
        prefix = uuid.uuid4().hex
        # A neighbour whose prefix extends ours, which no listing may show.
        whole_root.put(f"{prefix}-2/c/AAA", b"outside")
        store = self.cloud.open(f"/{prefix}", cloud_endpoint)
        yield store
        store.close()

    @pytest.fixture
    def transient_faults(self, storage: Storage, cloud_endpoint: str) -> Iterator[TransientFaults]:
        rules = [
            FaultRule(method, r".", 1.0, kinds=("slowdown",), max_faults=1)
            for method in self.cloud.throttled
        ]
        with FaultyProxy(cloud_endpoint, seed=0, rules=rules) as proxy:
            flaky = open_storage(storage.url, **self.cloud.options(proxy.url))
            yield TransientFaults(flaky, lambda: len(proxy.injected))
            flaky.close()

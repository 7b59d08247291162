"""The storage conformance suite on S3: moto's server on 127.0.0.1 (``s3_endpoint``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import StorageTests, TransientFaults
from tests.conftest import S3_BUCKET, s3_options
from tests.support.faulty_proxy import FaultRule, FaultyProxy


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> Iterator[Storage]:
    """The whole test bucket, for writing next to the location under test."""
    store = open_storage(f"s3://{S3_BUCKET}", **s3_options(s3_endpoint))
    yield store
    store.close()


class TestS3Storage(StorageTests):
    @pytest.fixture
    def storage(self, s3_endpoint: str, bucket: Storage) -> Iterator[Storage]:
        prefix = uuid.uuid4().hex
        # A neighbour whose prefix extends ours, which no listing may show.
        bucket.put(f"{prefix}-2/c/AAA", b"outside")
        store = open_storage(f"s3://{S3_BUCKET}/{prefix}", **s3_options(s3_endpoint))
        yield store
        store.close()

    @pytest.fixture
    def transient_faults(self, storage: Storage, s3_endpoint: str) -> Iterator[TransientFaults]:
        # The first request of each HTTP method is answered 503 SlowDown without being
        # forwarded: a throttled request, which took no effect and must be retried.
        rules = [
            FaultRule(method, r".", 1.0, kinds=("slowdown",), max_faults=1)
            for method in ("PUT", "GET", "HEAD", "POST")
        ]
        with FaultyProxy(s3_endpoint, seed=0, rules=rules) as proxy:
            flaky = open_storage(storage.url, **s3_options(proxy.url))
            yield TransientFaults(flaky, lambda: len(proxy.injected))
            flaky.close()

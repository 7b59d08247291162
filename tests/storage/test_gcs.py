"""The storage conformance suite on GCS: fake-gcs-server on 127.0.0.1 (``gcs_endpoint``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.testing import StorageTests, TransientFaults
from tests.conftest import GCS_BUCKET, gcs_options
from tests.support.faulty_proxy import FaultRule, FaultyProxy


@pytest.fixture(scope="module")
def bucket(gcs_endpoint: str) -> Iterator[Storage]:
    """The whole test bucket, for writing next to the location under test."""
    store = open_storage(f"gs://{GCS_BUCKET}", **gcs_options(gcs_endpoint))
    yield store
    store.close()


class TestGCSStorage(StorageTests):
    @pytest.fixture
    def storage(self, gcs_endpoint: str, bucket: Storage) -> Iterator[Storage]:
        prefix = uuid.uuid4().hex
        # A neighbour whose prefix extends ours, which no listing may show.
        bucket.put(f"{prefix}-2/c/AAA", b"outside")
        store = open_storage(f"gs://{GCS_BUCKET}/{prefix}", **gcs_options(gcs_endpoint))
        yield store
        store.close()

    @pytest.fixture
    def transient_faults(self, storage: Storage, gcs_endpoint: str) -> Iterator[TransientFaults]:
        # The first request of each HTTP method is answered 503 without being forwarded: a
        # throttled request, which took no effect. gcsfs retries 503 itself, after about 1 s.
        rules = [
            FaultRule(method, r".", 1.0, kinds=("slowdown",), max_faults=1)
            for method in ("POST", "GET", "DELETE")
        ]
        with FaultyProxy(gcs_endpoint, seed=0, rules=rules) as proxy:
            flaky = open_storage(storage.url, **gcs_options(proxy.url))
            yield TransientFaults(flaky, lambda: len(proxy.injected))
            flaky.close()

"""The storage conformance suite on GCS: fake-gcs-server on 127.0.0.1 (``gcs_endpoint``)."""

from __future__ import annotations

from tests.conftest import GCS_BUCKET, gcs_options
from tests.storage.cloud import Cloud, CloudStorageTests


class TestGCSStorage(CloudStorageTests):
    # gcsfs retries a throttled (503) request itself, after about 1 s.
    cloud = Cloud("gs", GCS_BUCKET, "gcs_endpoint", gcs_options, ("POST", "GET", "DELETE"))

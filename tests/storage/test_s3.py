"""The storage conformance suite on S3: moto's server on 127.0.0.1 (``s3_endpoint``)."""

from __future__ import annotations

from tests.conftest import S3_BUCKET, s3_options
from tests.storage.cloud import Cloud, CloudStorageTests


class TestS3Storage(CloudStorageTests):
    # Throttling is 503 SlowDown, retried by botocore.
    cloud = Cloud("s3", S3_BUCKET, "s3_endpoint", s3_options, ("PUT", "GET", "HEAD", "POST"))

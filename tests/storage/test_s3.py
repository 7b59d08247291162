"""The storage conformance suite on S3: moto's server on 127.0.0.1 (``s3_endpoint``)."""

from __future__ import annotations

import uuid

import pytest

from icechunk_spark.errors import NotFoundError
from icechunk_spark.storage import open_storage
from tests.conftest import S3_BUCKET, s3_options
from tests.storage.cloud import Cloud, CloudStorageTests


class TestS3Storage(CloudStorageTests):
    # Throttling is 503 SlowDown, retried by botocore.
    cloud = Cloud("s3", S3_BUCKET, "s3_endpoint", s3_options, ("PUT", "GET", "HEAD", "POST"))


def test_a_read_and_a_probe_are_one_request_each(s3_endpoint: str) -> None:
    """On object storage a request's latency is the cost: s3fs would send a HEAD before every
    whole-object GET (to size parallel ranged reads) and follow a 404 HEAD with a listing (to
    tell a "folder" from nothing), doubling the round trips of every small commit."""
    storage = open_storage(f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", **s3_options(s3_endpoint))
    storage.put("present", b"bytes")
    sent: list[str] = []
    storage.fs.connect()  # the client exists once connected: record what it sends from now on
    storage.fs.s3.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    assert storage.get("present") == b"bytes"
    assert storage.exists("present")
    assert not storage.exists("absent")
    with pytest.raises(NotFoundError):
        storage.get("absent")
    assert sent == ["GET", "HEAD", "HEAD", "GET"]

"""The storage conformance suite on S3: moto's server on 127.0.0.1 (``s3_endpoint``)."""

from __future__ import annotations

import multiprocessing
import sys
import uuid
from typing import Any

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

    def record(request: Any, **_: Any) -> None:
        sent.append(request.method)

    # The client is shared by every storage with these options: the recorder leaves with us.
    events = storage.fs.s3.meta.events
    events.register("before-send.s3", record)
    try:
        assert storage.get("present") == b"bytes"
        assert storage.exists("present")
        assert not storage.exists("absent")
        with pytest.raises(NotFoundError):
            storage.get("absent")
    finally:
        events.unregister("before-send.s3", record)
    assert sent == ["GET", "HEAD", "HEAD", "GET"]


def test_storages_opened_with_the_same_options_share_one_client(s3_endpoint: str) -> None:
    """Making a botocore client costs 200-400 ms on the first request: paid once per process
    and options, not once per repository opened (a Spark task opens one per task)."""
    options = s3_options(s3_endpoint)
    first, second = (
        open_storage(f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", **options) for _ in range(2)
    )
    slower = open_storage(
        f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", **options, config_kwargs={"read_timeout": 7}
    )
    assert first.fs is second.fs
    assert slower.fs is not first.fs  # other options, another client
    first.put("k", b"first")
    second.put("k", b"second")  # the same client, each storage under its own prefix
    assert (first.get("k"), second.get("k")) == (b"first", b"second")


def _open_in_a_forked_child(url: str, options: dict[str, Any], parent_fs: Any) -> None:
    storage = open_storage(url, **options)
    # A client's connections and event loop belong to the process that made it.
    sys.exit(0 if storage.fs is not parent_fs and storage.get("k") == b"parent" else 1)


def test_a_forked_child_makes_a_client_of_its_own(s3_endpoint: str) -> None:
    """Spark's Python daemon forks its workers: none may use the parent's client."""
    url, options = f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", s3_options(s3_endpoint)
    parent = open_storage(url, **options)
    parent.put("k", b"parent")
    child = multiprocessing.get_context("fork").Process(
        target=_open_in_a_forked_child, args=(url, options, parent.fs)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0

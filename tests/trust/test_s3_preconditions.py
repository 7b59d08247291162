"""S3 put-if-absent: a lost race is recognised by the S3 error code, never by message text."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from icechunk_spark.storage import S3Storage
from icechunk_spark.storage.s3 import _is_precondition_failure
from tests.conftest import S3_BUCKET, s3_options


def _client_error(code: str, status: int) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status"), [("PreconditionFailed", 412), ("ConditionalRequestConflict", 409)]
)
def test_precondition_codes_are_recognised_through_the_cause_chain(code, status):
    wrapped = OSError("write failed")
    wrapped.__cause__ = _client_error(code, status)
    assert _is_precondition_failure(wrapped)


@pytest.mark.parametrize(
    "error",
    [
        OSError("upstream said 412 bytes were sent"),
        OSError("PreconditionFailed in a log line"),
        _client_error("InternalError", 500),
    ],
)
def test_other_errors_are_not_preconditions(error):
    assert not _is_precondition_failure(error)


def test_second_create_of_a_key_loses_on_the_server(s3_endpoint):
    storage = S3Storage(f"{S3_BUCKET}/preconditions", **s3_options(s3_endpoint))
    assert storage.put_if_absent("t/1", b"first")
    assert not storage.put_if_absent("t/1", b"second")
    assert storage.get("t/1") == b"first"

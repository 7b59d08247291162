"""Turning botocore's failures into one sentence a user can act on.

s3fs translates some ``ClientError`` s into ``OSError`` s (keeping the original as the cause)
and lets the rest of botocore's exceptions through. We look along the cause chain for the
botocore exception and recognise it by class and by S3 error code, never by message text,
and never repeat the server's text or anything from the request, so no credential can leak.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from botocore import exceptions as boto
from botocore.parsers import ResponseParserError

from ..errors import (
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from .causes import BucketWhere, first_known

_CREDENTIALS_HELP = (
    "pass the storage options key and secret, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
    "(or AWS_PROFILE), or use anon=true for a public bucket"
)
_DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem"})
_TOKEN_CODES = frozenset({"ExpiredToken", "InvalidToken", "TokenRefreshRequired"})
_REGION_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed"})


class Where(BucketWhere):
    """What we were doing when it failed: ``Where(url, endpoint_url or None, describe)``."""

    __slots__ = ()
    own_server = "AWS S3"


def classify(exc: BaseException, where: Where) -> StorageError | None:
    """Our error for a storage mistake behind ``exc``, or ``None`` when it is none we know."""
    return first_known(exc, where, _classify_one)


def _classify_one(exc: BaseException, where: Where) -> StorageError | None:
    url, server = where.url, where.server
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return StorageCredentialsError(f"no S3 credentials found for {url}: {_CREDENTIALS_HELP}")
    if isinstance(exc, boto.ProfileNotFound | boto.CredentialRetrievalError):
        return StorageCredentialsError(
            f"the S3 credentials for {url} could not be loaded: check AWS_PROFILE and the AWS "
            f"config files, or {_CREDENTIALS_HELP}"
        )
    if isinstance(exc, boto.ClientError):
        return _from_response(exc.response, where)
    if isinstance(exc, boto.ConnectTimeoutError):
        return StorageUnreachableError(
            f"connecting to {_endpoint_of(exc, where)} for {url} timed out: check the "
            "endpoint_url storage option and the network (firewall, proxy)"
        )
    if isinstance(exc, boto.SSLError):
        return StorageUnreachableError(
            f"the TLS connection to {_endpoint_of(exc, where)} for {url} failed: check http:// "
            "versus https:// in the endpoint_url storage option, and AWS_CA_BUNDLE"
        )
    if isinstance(exc, boto.ConnectionError):  # refused, unknown host, proxy failure
        return StorageUnreachableError(
            f"cannot connect to {_endpoint_of(exc, where)} for {url}: check the endpoint_url "
            "storage option (scheme, host and port) and that the server is running"
        )
    if isinstance(exc, boto.ReadTimeoutError):
        return StorageUnreachableError(
            f"{_endpoint_of(exc, where)} did not answer in time while {where.describe} in {url}: "
            "check that the endpoint_url storage option names a working S3 server, or raise the "
            "read_timeout in the config_kwargs storage option"
        )
    if isinstance(exc, boto.ConnectionClosedError):
        return StorageUnreachableError(
            f"{_endpoint_of(exc, where)} closed the connection while {where.describe} in {url}: "
            "check that the endpoint_url storage option names an S3 server"
        )
    if isinstance(exc, ResponseParserError):
        return StorageUnreachableError(
            f"{server} answered with something other than S3's XML while {where.describe} in "
            f"{url}, so it is not an S3 server: check the endpoint_url storage option"
        )
    return None


def _from_response(response: Mapping[str, Any], where: Where) -> StorageError | None:
    error = response.get("Error", {})
    meta = response.get("ResponseMetadata", {})
    code = str(error.get("Code", ""))
    status = meta.get("HTTPStatusCode")
    content_type = str(meta.get("HTTPHeaders", {}).get("content-type", ""))
    url, server = where.url, where.server
    # S3 answers errors in XML (or, for HEAD, with no body): a web page means a web server.
    if content_type and "xml" not in content_type.lower():
        kind = content_type.split(";")[0].strip()
        return StorageUnreachableError(
            f"{server} answered with HTTP {status} and {kind} while {where.describe} in {url}, "
            "so it is not an S3 server: check the endpoint_url storage option"
        )
    if code == "InvalidAccessKeyId":
        return StorageCredentialsError(
            f"{server} does not know the access key used for {url}: check the storage option key "
            "(or AWS_ACCESS_KEY_ID, AWS_PROFILE) and that it belongs to this endpoint"
        )
    if code == "SignatureDoesNotMatch":
        return StorageCredentialsError(
            f"{server} rejected the request signature for {url}: check the storage option secret "
            "(or AWS_SECRET_ACCESS_KEY), which must belong to the access key"
        )
    if code in _TOKEN_CODES:
        return StorageCredentialsError(
            f"the session token for {url} is expired or invalid: refresh the credentials "
            "(storage option token or AWS_SESSION_TOKEN)"
        )
    if code in _DENIED_CODES:
        return StorageCredentialsError(
            f"access denied while {where.describe} in {url}: check that the credentials may "
            "read and write that bucket and prefix"
        )
    if status == 403:  # an answer without a body (HEAD) cannot say which of the three it is
        return StorageCredentialsError(
            f"access denied (HTTP 403) while {where.describe} in {url}: check the storage "
            "options key and secret (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and that "
            "they may read and write that bucket and prefix"
        )
    if code == "NoSuchBucket":
        return StorageNotFoundError(
            f"bucket {where.bucket!r} does not exist at {server} ({url}): check the bucket "
            "name, the endpoint_url and region storage options, or create the bucket"
        )
    if code in _REGION_CODES or status == 301:
        return StorageUnreachableError(
            f"bucket {where.bucket!r} of {url} is in another region than the one asked: set "
            "the region storage option to the bucket's region"
        )
    return None


def _endpoint_of(exc: BaseException, where: Where) -> str:
    """The server we tried: the endpoint_url option, or the host botocore chose on AWS."""
    if where.endpoint:
        return where.server
    tried = getattr(exc, "kwargs", {}).get("endpoint_url")
    if tried:
        parts = urlsplit(str(tried))
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return where.server

"""Turning gcsfs's failures into one sentence a user can act on.

gcsfs checks every answer in ``gcsfs.retry.validate_response``: 404 becomes
``FileNotFoundError``, 412 ``FileExistsError``, 403 a bare ``OSError`` whose text starts with
``"Forbidden: "`` (the one status it keeps in no attribute), any other status an ``HttpError``
with ``code``. Connection failures are aiohttp's exceptions, credential failures google-auth's.
We look along the cause chain and recognise each by class and status, and never repeat the
server's text or anything from the request, so no credential can leak.
"""

from __future__ import annotations

import json

from ..errors import (
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from .causes import BucketWhere, first_known

_CREDENTIALS_HELP = (
    "pass the storage option token (a service-account JSON file), set "
    "GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or use "
    'token="anon" for a public bucket'
)
# gcsfs's text for a 403 (validate_response: f"Forbidden: {path}\n{msg}"); it keeps no status.
_FORBIDDEN_PREFIX = "Forbidden: "


class Where(BucketWhere):
    """What we were doing when it failed: ``Where(url, endpoint_url or None, describe)``."""

    __slots__ = ()
    own_server = "Google Cloud Storage"

    def bucket_missing(self) -> StorageNotFoundError:
        # Only reads can miss an object; a write or a listing answered 404 names a bucket
        # that is not there.
        return StorageNotFoundError(
            f"bucket {self.bucket!r} does not exist at {self.server} ({self.url}): check the "
            "bucket name and the endpoint_url storage option, or create the bucket"
        )


def classify(exc: BaseException, where: Where) -> StorageError | None:
    """Our error for a storage mistake behind ``exc``, or ``None`` when it is none we know."""
    return first_known(exc, where, _classify_one)


def _classify_one(exc: BaseException, where: Where) -> StorageError | None:
    import aiohttp
    from gcsfs.retry import HttpError
    from google.auth import exceptions as auth

    url, server = where.url, where.server
    if isinstance(exc, auth.DefaultCredentialsError):
        return StorageCredentialsError(f"no GCS credentials found for {url}: {_CREDENTIALS_HELP}")
    if isinstance(exc, auth.RefreshError):
        return StorageCredentialsError(
            f"the GCS credentials for {url} were refused or have expired: refresh them, or "
            f"{_CREDENTIALS_HELP}"
        )
    if isinstance(exc, HttpError):
        if exc.code == 401:
            return StorageCredentialsError(
                f"{server} did not accept the credentials used for {url} (HTTP 401): "
                f"{_CREDENTIALS_HELP}"
            )
        return None
    if type(exc) is OSError and str(exc).startswith(_FORBIDDEN_PREFIX):
        return StorageCredentialsError(
            f"access denied (HTTP 403) while {where.describe} in {url}: check that the "
            "credentials may read and write that bucket and prefix"
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return StorageUnreachableError(
            f"the TLS connection to {server} for {url} failed: check http:// versus https:// "
            "in the endpoint_url storage option"
        )
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unknown host
        return StorageUnreachableError(
            f"cannot connect to {server} for {url}: check the endpoint_url storage option "
            "(scheme, host and port) and that the server is running"
        )
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return StorageUnreachableError(
            f"{server} did not answer in time while {where.describe} in {url}: check that the "
            "endpoint_url storage option names a working GCS server, or raise requests_timeout"
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return StorageUnreachableError(
            f"{server} closed the connection while {where.describe} in {url}: check that the "
            "endpoint_url storage option names a GCS server"
        )
    if isinstance(exc, json.JSONDecodeError | aiohttp.ContentTypeError):
        return StorageUnreachableError(
            f"{server} answered with something other than the GCS JSON API while "
            f"{where.describe} in {url}, so it is not a GCS server: check the endpoint_url "
            "storage option"
        )
    return None

"""Turning Azure's failures into one sentence a user can act on.

adlfs translates some azure-core exceptions (a missing blob becomes ``FileNotFoundError``, an
existing one ``FileExistsError``) and keeps the original in the exception chain; the rest pass
through. We look along the chain for azure-core's exception and recognise it by class, HTTP
status and Azure error code, never by message text, and never repeat the server's text or
anything from the request, so no key or SAS token can leak.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import (
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from .causes import causes, first_known

_CREDENTIALS_HELP = (
    "pass the storage options account_name and account_key (or sas_token, or connection_string), "
    "or set AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and "
    "AZURE_STORAGE_ACCOUNT_KEY)"
)

# 403 answers that mean the key, signature or token itself was not accepted (as opposed to
# AuthorizationFailure / AuthorizationPermissionMismatch: valid credentials, no permission).
_REFUSED_CODES = frozenset(
    {"AuthenticationFailed", "InvalidAuthenticationInfo", "NoAuthenticationInformation"}
)


@dataclass(frozen=True, slots=True)
class Where:
    """What we were doing when it failed: the repository URL, container, account, operation."""

    url: str  # az://container/prefix
    container: str
    account: str | None  # None when given only through a connection string
    describe: str  # "reading 'icechunk.json'"

    @property
    def server(self) -> str:
        return f"Azure storage account {self.account!r}" if self.account else "the Azure endpoint"


def is_already_exists(exc: BaseException) -> bool:
    """Whether the chain holds the server's "blob already exists" answer to a conditional put.

    ``If-None-Match: *`` on an existing blob is answered 409 ``BlobAlreadyExists``, or 412
    ``ConditionNotMet`` (azure-storage-blob reports both as ``ResourceExistsError``).
    """
    from azure.core.exceptions import HttpResponseError

    for cause in causes(exc):
        if isinstance(cause, HttpResponseError):
            status = cause.status_code
            return status == 412 or (status == 409 and _error_code(cause) == "BlobAlreadyExists")
    return False


def _error_code(exc: BaseException) -> str:
    # The SDK gives a plain string or its StorageErrorCode enum, whose str() is the enum's
    # name ("StorageErrorCode.BLOB_ALREADY_EXISTS"), not the code: compare the value.
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def classify(exc: BaseException, where: Where) -> StorageError | None:
    """Our error for a storage mistake behind ``exc``, or ``None`` when it is none we know."""
    return first_known(exc, where, _classify_one)


def _classify_one(exc: BaseException, where: Where) -> StorageError | None:
    from azure.core import exceptions as azure

    url, server = where.url, where.server
    if isinstance(exc, azure.ClientAuthenticationError) and exc.status_code is None:
        # azure-identity found no credential to try (DefaultAzureCredential's chain is empty).
        return StorageCredentialsError(f"no Azure credentials found for {url}: {_CREDENTIALS_HELP}")
    if isinstance(exc, azure.HttpResponseError):
        code = _error_code(exc)
        status = exc.status_code
        if status == 401 or code in _REFUSED_CODES:
            return StorageCredentialsError(
                f"{server} refused the credentials used for {url} (HTTP {status}): check that "
                f"the key or token belongs to this account; {_CREDENTIALS_HELP}"
            )
        if status == 403 or isinstance(exc, azure.ClientAuthenticationError):
            return StorageCredentialsError(
                f"access denied (HTTP {status}) while {where.describe} in {url}: check that the "
                f"credentials may read and write container {where.container!r}"
            )
        if code == "ContainerNotFound":
            return StorageNotFoundError(
                f"container {where.container!r} does not exist in {server} ({url}): check the "
                "container name and the account, or create the container"
            )
        if isinstance(exc, azure.DecodeError):
            return StorageUnreachableError(
                f"{server} answered with something other than Azure Blob Storage while "
                f"{where.describe} in {url}: check the account_host or connection_string"
            )
        return None
    if isinstance(exc, azure.ServiceRequestError):  # refused, unknown host, TLS
        return StorageUnreachableError(
            f"cannot connect to {server} for {url}: check the account name, account_host or "
            "the endpoint in connection_string, and that the server is running"
        )
    if isinstance(exc, azure.ServiceResponseError):  # timed out or closed while answering
        return StorageUnreachableError(
            f"{server} did not answer while {where.describe} in {url}: check the account_host "
            "or the endpoint in connection_string, or raise the read_timeout storage option"
        )
    return None

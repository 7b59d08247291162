"""Azure Blob Storage (and ADLS Gen2 accounts) through adlfs.

Put-if-absent is a Put Blob with ``If-None-Match: *`` (azure-storage-blob sends it for
``upload_blob(overwrite=False)``): the server decides the winner, so two writers racing for one
generation can never both succeed. A lost race is HTTP 409 ``BlobAlreadyExists`` (or 412 when
the condition fails on a write already in flight); we recognise it by that status in the
exception chain under adlfs's ``FileExistsError``.

URLs: ``az://container/prefix``, ``abfs://container/prefix``, ``abfss://…``, or
``abfs[s]://container@account.dfs.core.windows.net/prefix`` (the account taken from the host).
Credentials are adlfs's: the storage options ``account_name`` with ``account_key``,
``sas_token``, a service principal (``tenant_id``, ``client_id``, ``client_secret``) or
``anon``; or ``connection_string``; or the ``AZURE_STORAGE_*`` environment variables; else
``DefaultAzureCredential``. Nothing is stored in the repository.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import InvalidInputError, StorageError
from .azure_errors import Where, classify, is_already_exists
from .objectstore import ObjectStorage

AZURE_SCHEMES = ("az", "abfs", "abfss")


def _failing_fast(client: Any) -> Any:
    """The same blob service client (account URL with any SAS, credential), retrying briefly.

    azure-storage-blob's default ``ExponentialRetry`` waits about 15 s, 18 s and 24 s, so a
    wrong account or endpoint took 85 s to report; adlfs offers no option for it. Like our S3
    client: 3 attempts in all, the retries after about 2 s and 4 s (throttling included).
    """
    from azure.storage.blob.aio import BlobServiceClient, ExponentialRetry

    # The n-th retry waits initial_backoff + increment_base**n seconds, give or take the jitter.
    retry = ExponentialRetry(
        initial_backoff=0, increment_base=2, retry_total=2, random_jitter_range=1
    )
    return BlobServiceClient(client.url, credential=client.credential, retry_policy=retry)


class AzureStorage(ObjectStorage):
    # Blob listings report Last-Modified in whole seconds.
    mtime_resolution_ms = 1000
    mtime_key = "last_modified"
    # overwrite=False: azure-storage-blob sends If-None-Match: *.
    create_exclusive: ClassVar[Mapping[str, Any]] = {"overwrite": False}
    delete_batch = 256  # a blob batch holds at most 256 requests
    gone_on_delete = (FileNotFoundError,)

    def __init__(self, container_and_prefix: str, scheme: str = "az", **options: Any) -> None:
        from adlfs import AzureBlobFileSystem

        self._locate(container_and_prefix, scheme, options)
        if not self.prefix or self.prefix.startswith("/"):
            raise InvalidInputError(
                f"Azure URL {scheme}://{container_and_prefix} names no container; use "
                f"{scheme}://container/prefix"
            )
        self.scheme = scheme
        try:
            # No instance or listing caches: a repository must always see the newest objects.
            self.fs = AzureBlobFileSystem(
                skip_instance_cache=True, use_listings_cache=False, **options
            )
        except ValueError as exc:  # adlfs: neither an account nor a connection string
            raise InvalidInputError(
                f"no Azure storage account given for {self.url}: pass the storage options "
                "account_name (with account_key, sas_token or a service principal) or "
                "connection_string, or set AZURE_STORAGE_CONNECTION_STRING or "
                "AZURE_STORAGE_ACCOUNT_NAME"
            ) from exc
        self.fs.service_client = _failing_fast(self.fs.service_client)

    @property
    def container(self) -> str:
        return self.prefix.split("/", 1)[0]

    def _opened_with(self) -> tuple[str, ...]:
        return (self.prefix, self.scheme)

    def _find(self, base: str, stem: str) -> dict[str, dict[str, Any]]:
        found = self.fs.find(base, detail=True, prefix=stem)
        if isinstance(found, dict):
            return found
        # adlfs answers a prefix that is one blob's whole name with just that name.
        return {path: self.fs.info(path) for path in found}

    def _lost_race(self, key: str, exc: Exception) -> bool:
        if not isinstance(exc, FileExistsError):
            return False
        if is_already_exists(exc):
            return True
        # adlfs said "exists" without the server's status: the read-back decides.
        raise StorageError(f"creating {key!r} in {self.url}: unclear answer") from exc

    def _range_unsatisfiable(self, exc: Exception) -> bool:
        from azure.core.exceptions import HttpResponseError

        # 416 on a blob that exists: the range starts at or past its end.
        return isinstance(exc, HttpResponseError) and exc.status_code == 416

    def _classify(self, exc: Exception, describe: str) -> StorageError | None:
        return classify(exc, Where(self.url, self.container, self.fs.account_name, describe))

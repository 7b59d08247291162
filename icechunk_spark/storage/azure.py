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

import builtins
import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from ..errors import InvalidInputError, NotFoundError, StorageError
from .azure_errors import Where, classify, is_already_exists
from .base import ObjectInfo, Storage, with_retries

T = TypeVar("T")

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


class AzureStorage(Storage):
    # Blob listings report Last-Modified in whole seconds.
    mtime_resolution_ms = 1000

    def __init__(self, container_and_prefix: str, scheme: str = "az", **options: Any) -> None:
        from adlfs import AzureBlobFileSystem

        self.prefix = container_and_prefix.strip("/")
        if not self.prefix or self.prefix.startswith("/"):
            raise InvalidInputError(
                f"Azure URL {scheme}://{container_and_prefix} names no container; use "
                f"{scheme}://container/prefix"
            )
        self.scheme = scheme
        self.url = f"{scheme}://{self.prefix}"
        self.options = dict(options)
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

    def __getstate__(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "scheme": self.scheme, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["prefix"], state["scheme"], **state["options"])  # type: ignore[misc]

    def _path(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    def get(self, key: str) -> bytes:
        return self._read(key, None, None)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:  # HTTP cannot ask for no bytes; the object must exist all the same
            if not self.exists(key):
                raise NotFoundError(f"object {key!r} not found in {self.url}")
            return b""
        return self._read(key, start, end)

    def _read(self, key: str, start: int | None, end: int | None) -> bytes:
        from azure.core.exceptions import HttpResponseError

        def read() -> bytes:
            try:
                return bytes(self.fs.cat_file(self._path(key), start=start, end=end))
            except HttpResponseError as exc:
                # 416: the range starts at or past the end of a blob that exists. Clipped to
                # the blob, that range holds no bytes (as on every backend).
                if start is not None and exc.status_code == 416:
                    return b""
                raise

        missing = f"object {key!r} not found in {self.url}"
        return self._call(read, f"reading {key!r}", missing=missing)

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.fs.pipe_file(self._path(key), data), f"writing {key!r}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                # overwrite=False: azure-storage-blob sends If-None-Match: *.
                self.fs.pipe_file(self._path(key), data, overwrite=False)
                return True
            except FileExistsError as exc:
                if is_already_exists(exc):
                    return False
                # adlfs said "exists" without the server's status: the read-back decides.
                raise StorageError(f"creating {key!r} in {self.url}: unclear answer") from exc

        return self._call(create, f"creating {key!r}")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Blob listings are by string prefix; adlfs takes a folder plus the start of a name.
        folder, _, stem = prefix.rpartition("/")
        base = self._path(folder) if folder else self.prefix
        try:
            found = self._call(lambda: self._find(base, stem), f"listing {prefix!r}", missing="")
        except NotFoundError:
            return
        skip = len(self.prefix) + 1
        for path, info in found.items():
            if info.get("type") == "directory" or not path[skip:].startswith(prefix):
                continue
            modified = info.get("last_modified")
            ms = int(modified.timestamp() * 1000) if isinstance(modified, datetime) else 0
            yield ObjectInfo(path[skip:], int(info.get("size") or 0), ms)

    def _find(self, base: str, stem: str) -> dict[str, dict[str, Any]]:
        found = self.fs.find(base, detail=True, prefix=stem)
        if isinstance(found, dict):
            return found
        # adlfs answers a prefix that is one blob's whole name with just that name.
        return {path: self.fs.info(path) for path in found}

    def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for start in range(0, len(paths), 256):  # a blob batch holds at most 256 requests
            batch = paths[start : start + 256]
            self._call(lambda b=batch: self._remove(b), "deleting objects")  # type: ignore[misc]

    def _remove(self, paths: builtins.list[str]) -> None:
        with contextlib.suppress(FileNotFoundError):  # gone already: deleting is idempotent
            self.fs.rm(paths)

    def exists(self, key: str) -> bool:
        def probe() -> bool:
            # A blob, not a "folder": adlfs's exists() is true for a prefix with blobs.
            try:
                return bool(self.fs.info(self._path(key)).get("type") == "file")
            except FileNotFoundError:
                return False

        return self._call(probe, f"checking {key!r}")

    def _call(self, operation: Callable[[], T], describe: str, missing: str | None = None) -> T:
        """Run ``operation`` with retries; failures become our errors.

        A storage mistake (credentials, container, endpoint) becomes its one-sentence error;
        with ``missing``, an absent blob becomes ``NotFoundError(missing)``.
        """
        try:
            return with_retries(operation, f"{describe} in {self.url}")
        except (NotFoundError, StorageError):
            raise
        except Exception as exc:
            known = classify(exc, Where(self.url, self.container, self.fs.account_name, describe))
            if known is not None:
                raise known from exc
            if isinstance(exc, FileNotFoundError) and missing is not None:
                raise NotFoundError(missing) from None
            if isinstance(exc, OSError):
                raise StorageError(f"{describe} in {self.url} failed: {exc}") from exc
            raise

"""S3 (or any S3-compatible endpoint) storage through s3fs.

Put-if-absent is a ``PutObject`` with ``If-None-Match: *``: the server, not the client, decides
the winner, so two writers racing for one generation can never both succeed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from ..errors import InvalidInputError, NotFoundError, StorageCredentialsError, StorageError
from .base import ObjectInfo, Storage, with_retries
from .causes import causes
from .endpoints import check_endpoint
from .s3_errors import Where, classify

T = TypeVar("T")

# botocore's side of failing fast: a refused or timed-out connection is retried twice (with
# at most 1 s, then 2 s of backoff) and a connection attempt waits 3 s, not minutes in all.
CLIENT_CONFIG: dict[str, Any] = {
    "connect_timeout": 3,
    "retries": {"mode": "standard", "total_max_attempts": 3},
}
S3FS_RETRIES = 2


def _client_config(given: Any) -> dict[str, Any]:
    """Our botocore defaults under the caller's ``config_kwargs`` (theirs win)."""
    if given is None:
        return dict(CLIENT_CONFIG)
    if not isinstance(given, dict):
        raise InvalidInputError(
            f"storage option config_kwargs must be a mapping of botocore Config settings, "
            f"not {type(given).__name__}"
        )
    return CLIENT_CONFIG | given


class S3Storage(Storage):
    mtime_resolution_ms = 1000  # S3 listings report LastModified in whole seconds

    def __init__(self, bucket_and_prefix: str, **options: Any) -> None:
        import s3fs

        self.prefix = bucket_and_prefix.strip("/")
        self.url = f"s3://{self.prefix}"
        self.options = dict(options)
        client_kwargs = dict(options.pop("client_kwargs", {}) or {})
        if "endpoint_url" in options:
            client_kwargs["endpoint_url"] = options.pop("endpoint_url")
        if "region" in options:
            client_kwargs["region_name"] = options.pop("region")
        self.endpoint: str | None = client_kwargs.get("endpoint_url") or None
        check_endpoint(self.endpoint, "endpoint_url", "http://127.0.0.1:9000")
        config_kwargs = _client_config(options.pop("config_kwargs", None))
        # No instance or listing caches: a repository must always see the newest objects.
        self.fs = s3fs.S3FileSystem(
            client_kwargs=client_kwargs,
            config_kwargs=config_kwargs,
            skip_instance_cache=True,
            use_listings_cache=False,
            **options,
        )
        # s3fs retries botocore's (already retried) read timeouts and throttling again, five
        # times over: bounded here, so a wrong endpoint is reported in seconds.
        self.fs.retries = S3FS_RETRIES

    def __getstate__(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["prefix"], **state["options"])  # type: ignore[misc]

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
        def read() -> bytes:
            try:
                return bytes(self.fs.cat_file(self._path(key), start=start, end=end))
            except OSError as exc:
                # 416: the range starts at or past the end of an object that exists. Clipped
                # to the object, that range holds no bytes (as on every backend).
                if start is not None and _is_unsatisfiable_range(exc):
                    return b""
                raise

        missing = f"object {key!r} not found in {self.url}"
        return self._call(read, f"reading {key!r}", missing=missing)

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.fs.pipe_file(self._path(key), data), f"writing {key!r}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                self.fs.pipe_file(self._path(key), data, mode="create")
                return True
            except FileExistsError:
                return False
            except OSError as exc:
                if _is_precondition_failure(exc):
                    return False
                raise

        return self._call(create, f"creating {key!r}")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # S3 lists by string prefix; s3fs takes it as a folder plus the start of a name in it.
        folder, _, stem = prefix.rpartition("/")
        base = self._path(folder) if folder else self.prefix
        try:
            found = self._call(
                lambda: self.fs.find(base, detail=True, prefix=stem),
                f"listing {prefix!r}",
                missing="",
            )
        except NotFoundError:
            return
        skip = len(self.prefix) + 1
        for path, info in found.items():
            if info.get("type") == "directory" or not path[skip:].startswith(prefix):
                continue
            modified = info.get("LastModified")
            ms = int(modified.timestamp() * 1000) if isinstance(modified, datetime) else 0
            yield ObjectInfo(path[skip:], int(info.get("size", 0)), ms)

    def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for start in range(0, len(paths), 1000):  # S3 DeleteObjects takes at most 1,000 keys
            batch = paths[start : start + 1000]
            self._call(lambda b=batch: self.fs.rm(b), "deleting objects")  # type: ignore[misc]

    def exists(self, key: str) -> bool:
        def probe() -> bool:
            # An object, not a "folder": s3fs's exists() is true for a prefix with objects.
            try:
                return bool(self.fs.info(self._path(key)).get("type") == "file")
            except FileNotFoundError:
                return False

        return self._call(probe, f"checking {key!r}")

    def _call(self, operation: Callable[[], T], describe: str, missing: str | None = None) -> T:
        """Run ``operation`` with retries; failures become our errors.

        A storage mistake (credentials, bucket, endpoint) becomes its one-sentence error; with
        ``missing``, an absent object becomes ``NotFoundError(missing)``.
        """
        try:
            return with_retries(operation, f"{describe} in {self.url}")
        except (NotFoundError, StorageError):
            raise
        except Exception as exc:
            known = classify(exc, Where(self.url, self.endpoint, describe))
            if known is not None:
                raise known from exc
            if isinstance(exc, FileNotFoundError) and missing is not None:
                raise NotFoundError(missing) from None
            if isinstance(exc, PermissionError):
                raise StorageCredentialsError(
                    f"access denied while {describe} in {self.url}: check the credentials"
                ) from exc
            if isinstance(exc, OSError):
                raise StorageError(f"{describe} in {self.url} failed: {exc}") from exc
            raise


# S3 answers a failed ``If-None-Match: *`` with 412 PreconditionFailed, or with 409
# ConditionalRequestConflict while a racing conditional write to the key is in flight.
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
# A ranged GET that starts at or past the end of the object: 416 InvalidRange.
_UNSATISFIABLE_CODES = frozenset({"InvalidRange"})


def _is_precondition_failure(exc: BaseException) -> bool:
    return _has_answer(exc, _PRECONDITION_CODES, 412)


def _is_unsatisfiable_range(exc: BaseException) -> bool:
    return _has_answer(exc, _UNSATISFIABLE_CODES, 416)


def _has_answer(exc: BaseException, codes: frozenset[str], status: int) -> bool:
    """Whether botocore's error (anywhere in the cause chain) has one of these S3 error
    codes or this HTTP status. Decided by code or status, never by the message text.
    """
    for cause in causes(exc):
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            answered = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in codes or answered == status:
                return True
    return False

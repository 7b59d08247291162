"""S3 (or any S3-compatible endpoint) storage through s3fs.

Put-if-absent is a ``PutObject`` with ``If-None-Match: *``: the server, not the client, decides
the winner, so two writers racing for one generation can never both succeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import InvalidInputError, StorageCredentialsError, StorageError
from .causes import causes
from .endpoints import check_endpoint
from .objectstore import ObjectStorage

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


class S3Storage(ObjectStorage):
    mtime_resolution_ms = 1000  # S3 listings report LastModified in whole seconds
    mtime_key = "LastModified"
    create_exclusive: ClassVar[Mapping[str, Any]] = {"mode": "create"}  # If-None-Match: *
    delete_batch = 1000  # S3 DeleteObjects takes at most 1,000 keys
    # One GET per read. With more, s3fs sends a HEAD first to size the object for parallel
    # ranged GETs: a second round trip on every read of a small object (state, manifest),
    # where the latency is the cost.
    read_options: ClassVar[Mapping[str, Any]] = {"max_concurrency": 1}

    def __init__(self, bucket_and_prefix: str, **options: Any) -> None:
        import s3fs

        self._locate(bucket_and_prefix, "s3", options)
        client_kwargs = dict(options.pop("client_kwargs", {}) or {})
        if "endpoint_url" in options:
            client_kwargs["endpoint_url"] = options.pop("endpoint_url")
        if "region" in options:
            client_kwargs["region_name"] = options.pop("region")
        self.endpoint: str | None = client_kwargs.get("endpoint_url") or None
        check_endpoint(self.endpoint, "endpoint_url", "http://127.0.0.1:9000")
        config_kwargs = _client_config(options.pop("config_kwargs", None))
        # No listing cache: a repository must always see the newest objects. The instance
        # (its botocore client) is shared by every storage opened with the same options in
        # this process (fsspec's instance cache, cleared in a forked child): making a client
        # cost 200-400 ms on the first request, for each repository opened.
        self.fs = s3fs.S3FileSystem(
            client_kwargs=client_kwargs,
            config_kwargs=config_kwargs,
            use_listings_cache=False,
            **options,
        )
        # s3fs retries botocore's (already retried) read timeouts and throttling again, five
        # times over: bounded here, so a wrong endpoint is reported in seconds.
        self.fs.retries = S3FS_RETRIES

    def exists(self, key: str) -> bool:
        # One HEAD. fs.info follows a 404 with a listing, to tell a "folder" from nothing: a
        # second round trip on every probe for a state file that is not there yet.
        bucket, path, _ = self.fs.split_path(self._path(key))

        def probe() -> bool:
            try:
                self.fs.call_s3("head_object", Bucket=bucket, Key=path)
                return True
            except FileNotFoundError:
                return False

        return self._call(probe, f"checking {key!r}")

    def _lost_race(self, key: str, exc: Exception) -> bool:
        # s3fs makes a 412 that names the If-None-Match condition a FileExistsError; the other
        # answers of a lost race stay OSErrors with botocore's error as the cause.
        if isinstance(exc, FileExistsError):
            return True
        return isinstance(exc, OSError) and _is_precondition_failure(exc)

    def _range_unsatisfiable(self, exc: Exception) -> bool:
        return isinstance(exc, OSError) and _is_unsatisfiable_range(exc)

    def _classify(self, exc: Exception, describe: str) -> StorageError | None:
        # Here, not at the top: botocore's exception tables cost ~0.1 s to import, in every
        # process that imports the package (each CLI run, each Spark Python worker), S3 or not.
        from .s3_errors import Where, classify

        known = classify(exc, Where(self.url, self.endpoint, describe))
        if known is None and isinstance(exc, PermissionError):
            return StorageCredentialsError(
                f"access denied while {describe} in {self.url}: check the credentials"
            )
        return known


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

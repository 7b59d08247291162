"""Google Cloud Storage through gcsfs.

Put-if-absent is an upload with ``ifGenerationMatch=0`` ("only if no live object has this
name"): the server decides the winner, so two writers racing for one generation can never both
succeed. A lost race is HTTP 412, which gcsfs turns into ``FileExistsError`` (in
``gcsfs.retry.validate_response``, by status code and only for 412), so the outcome is
recognised by the status, never by message text.

Credentials are gcsfs's own: the ``token`` storage option (a service-account JSON file, a
credentials object, ``"google_default"``, ``"cloud"`` or ``"anon"``), else
``GOOGLE_APPLICATION_CREDENTIALS`` and the gcloud defaults. Nothing is stored in the repository.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from ..errors import NotFoundError, StorageError
from .base import ObjectInfo, Storage, with_retries
from .endpoints import check_endpoint
from .gcs_errors import Where, classify

T = TypeVar("T")


class GCSStorage(Storage):
    # Listings report ``updated`` in RFC 3339 with milliseconds.
    mtime_resolution_ms = 1

    def __init__(self, bucket_and_prefix: str, **options: Any) -> None:
        # The plain JSON-API client, not the ``gcsfs.GCSFileSystem`` that gcsfs exports by
        # default: that one first asks the Storage Control gRPC service whether a bucket is
        # zonal, which an emulator or a private endpoint never answers (a minute's timeout per
        # bucket). Zonal buckets are not a target of this backend.
        from gcsfs.core import GCSFileSystem

        self.prefix = bucket_and_prefix.strip("/")
        self.url = f"gs://{self.prefix}"
        self.options = dict(options)
        self.endpoint: str | None = options.get("endpoint_url") or None
        check_endpoint(self.endpoint, "endpoint_url", "http://127.0.0.1:4443")
        # No instance or listing caches: a repository must always see the newest objects.
        self.fs = GCSFileSystem(skip_instance_cache=True, use_listings_cache=False, **options)

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
        from gcsfs.retry import HttpError

        def read() -> bytes:
            try:
                return bytes(self.fs.cat_file(self._path(key), start=start, end=end))
            except HttpError as exc:
                # 416: the range starts at or past the end of an object that exists. Clipped
                # to the object, that range holds no bytes (as on every backend).
                if start is not None and exc.code == 416:
                    return b""
                raise

        missing = f"object {key!r} not found in {self.url}"
        return self._call(read, f"reading {key!r}", missing=missing)

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.fs.pipe_file(self._path(key), data), f"writing {key!r}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                self.fs.pipe_file(self._path(key), data, mode="create")  # ifGenerationMatch=0
                return True
            except FileExistsError:  # HTTP 412: a live object has this name
                return False

        return self._call(create, f"creating {key!r}")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # GCS lists by string prefix; gcsfs takes it as a folder plus the start of a name in it.
        folder, _, stem = prefix.rpartition("/")
        base = self._path(folder) if folder else self.prefix
        # Listing an existing bucket answers 200, with no items when nothing has the prefix:
        # a 404 here says the bucket is missing (reads answer 404 for both).
        found = self._call(
            lambda: self.fs.find(base, detail=True, prefix=stem), f"listing {prefix!r}"
        )
        skip = len(self.prefix) + 1
        for path, info in found.items():
            if info.get("type") == "directory" or not path[skip:].startswith(prefix):
                continue
            modified = info.get("mtime")
            ms = int(modified.timestamp() * 1000) if isinstance(modified, datetime) else 0
            yield ObjectInfo(path[skip:], int(info.get("size", 0)), ms)

    def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for start in range(0, len(paths), 100):  # a GCS batch request holds at most 100 calls
            batch = paths[start : start + 100]
            self._call(lambda b=batch: self._remove(b), "deleting objects")  # type: ignore[misc]

    def _remove(self, paths: builtins.list[str]) -> None:
        with contextlib.suppress(FileNotFoundError):  # gone already: deleting is idempotent
            self.fs.rm(paths)

    def exists(self, key: str) -> bool:
        def probe() -> bool:
            # An object, not a "folder": gcsfs's exists() is true for a prefix with objects.
            try:
                return bool(self.fs.info(self._path(key)).get("type") == "file")
            except FileNotFoundError:
                return False

        return self._call(probe, f"checking {key!r}")

    def _call(self, operation: Callable[[], T], describe: str, missing: str | None = None) -> T:
        """Run ``operation`` with retries; failures become our errors.

        With ``missing``, a 404 becomes ``NotFoundError(missing)``; a 404 elsewhere (a write,
        a listing) can only mean the bucket is missing.
        """
        where = Where(self.url, self.endpoint, describe)
        try:
            return with_retries(operation, f"{describe} in {self.url}")
        except (NotFoundError, StorageError):
            raise
        except FileNotFoundError:
            if missing is not None:
                raise NotFoundError(missing) from None
            raise where.bucket_missing() from None
        except Exception as exc:
            known = classify(exc, where)
            if known is not None:
                raise known from exc
            if isinstance(exc, OSError):
                raise StorageError(f"{describe} in {self.url} failed: {exc}") from exc
            raise

"""One object-store backend over fsspec: S3, GCS and Azure differ only in small hooks.

pyiceberg's ``SCHEME_TO_FS`` is the model: what a cloud brings is how to open its fsspec file
system and a few answers only its client library knows. Everything else (keys under a
prefix, reads and ranged reads, put-if-absent, listings, deletes in batches, retries, turning
failures into our errors) is written once, here.

A cloud (``s3.py``, ``gcs.py``, ``azure.py``) gives, besides opening ``fs`` in ``__init__``:

- ``create_exclusive``: the ``pipe_file`` arguments of a write that the server, not the client,
  lets win (``If-None-Match: *`` on S3 and Azure, ``ifGenerationMatch=0`` on GCS);
- ``_lost_race``: whether a failed create is the server's "already exists" answer;
- ``_range_unsatisfiable``: whether a failed ranged read is HTTP 416 (a range past the end);
- ``_classify``: its error table (``s3_errors``, ``gcs_errors``, ``azure_errors``);
- a listing's modification-time field, the largest delete batch, and what a 404 means.
"""

from __future__ import annotations

import builtins
import contextlib
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from ..errors import NotFoundError, StorageError
from .base import ObjectInfo, Storage, with_retries

T = TypeVar("T")


class ObjectStorage(Storage):
    """Objects under ``bucket/prefix`` of a cloud object store, through its fsspec file system.

    Pickles to the arguments it was opened with, so unpickling opens the same location again.
    """

    # The pipe_file arguments of a create that only the server may let win.
    create_exclusive: ClassVar[Mapping[str, Any]]
    # The field of a listing's entry that holds the object's last modification (a datetime).
    mtime_key: ClassVar[str]
    # How many keys one delete request may carry.
    delete_batch: ClassVar[int]
    # What fs.rm raises for keys that are gone already: ignored, since deleting is idempotent.
    gone_on_delete: ClassVar[tuple[type[BaseException], ...]] = ()
    # Whether a listing answered 404 lists nothing (else the cloud says what is missing).
    empty_listing_404: ClassVar[bool] = True
    # Extra cat_file arguments of a read.
    read_options: ClassVar[Mapping[str, Any]] = {}

    prefix: str
    options: dict[str, Any]
    fs: Any

    def _locate(self, location: str, scheme: str, options: Mapping[str, Any]) -> None:
        self.prefix = location.strip("/")
        self.url = f"{scheme}://{self.prefix}"
        self.options = dict(options)

    def _opened_with(self) -> tuple[str, ...]:
        """The positional arguments that, with ``options``, open this location again."""
        return (self.prefix,)

    def __getstate__(self) -> dict[str, Any]:
        return {"opened_with": self._opened_with(), "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(*state["opened_with"], **state["options"])  # type: ignore[misc]

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
                path = self._path(key)
                return bytes(self.fs.cat_file(path, start=start, end=end, **self.read_options))
            except Exception as exc:
                # 416: the range starts at or past the end of an object that exists. Clipped
                # to the object, that range holds no bytes (as on every backend).
                if start is not None and self._range_unsatisfiable(exc):
                    return b""
                raise

        missing = f"object {key!r} not found in {self.url}"
        return self._call(read, f"reading {key!r}", missing=missing)

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.fs.pipe_file(self._path(key), data), f"writing {key!r}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                self.fs.pipe_file(self._path(key), data, **self.create_exclusive)
                return True
            except Exception as exc:
                if self._lost_race(key, exc):
                    return False
                raise

        return self._call(create, f"creating {key!r}")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Object stores list by string prefix; fsspec takes it as a folder plus the start of a
        # name in it.
        folder, _, stem = prefix.rpartition("/")
        if folder and not stem:
            # A folder ("c/") is listed from its parent with its name as the stem: fsspec
            # answers an empty folder listed as a path with two more requests (a HEAD of the
            # path, a listing of its parent), where a prefix listing is one request.
            folder, _, name = folder.rpartition("/")
            stem = f"{name}/"
        base = self._path(folder) if folder else self.prefix
        missing = "" if self.empty_listing_404 else None
        try:
            found = self._call(
                lambda: self._find(base, stem), f"listing {prefix!r}", missing=missing
            )
        except NotFoundError:
            return
        skip = len(self.prefix) + 1
        for path, info in found.items():
            if info.get("type") == "directory" or not path[skip:].startswith(prefix):
                continue
            modified = info.get(self.mtime_key)
            ms = int(modified.timestamp() * 1000) if isinstance(modified, datetime) else 0
            yield ObjectInfo(path[skip:], int(info.get("size") or 0), ms)

    def _find(self, base: str, stem: str) -> dict[str, dict[str, Any]]:
        return self.fs.find(base, detail=True, prefix=stem)  # type: ignore[no-any-return]

    def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for start in range(0, len(paths), self.delete_batch):
            batch = paths[start : start + self.delete_batch]
            self._call(lambda b=batch: self._remove(b), "deleting objects")  # type: ignore[misc]

    def _remove(self, paths: builtins.list[str]) -> None:
        with contextlib.suppress(*self.gone_on_delete):
            self.fs.rm(paths)

    def exists(self, key: str) -> bool:
        def probe() -> bool:
            # An object, not a "folder": fsspec's exists() is true for a prefix with objects.
            try:
                return bool(self.fs.info(self._path(key)).get("type") == "file")
            except FileNotFoundError:
                return False

        return self._call(probe, f"checking {key!r}")

    def _call(self, operation: Callable[[], T], describe: str, missing: str | None = None) -> T:
        """Run ``operation`` with retries; failures become our errors.

        A storage mistake (credentials, bucket, endpoint) becomes the one-sentence error of the
        cloud's table; with ``missing``, an absent object becomes ``NotFoundError(missing)``.
        """
        try:
            return with_retries(operation, f"{describe} in {self.url}")
        except (NotFoundError, StorageError):
            raise
        except Exception as exc:
            known = self._classify(exc, describe)
            if known is not None:
                raise known from exc
            if isinstance(exc, FileNotFoundError):
                if missing is not None:
                    raise NotFoundError(missing) from None
                absent = self._missing_location(describe)
                if absent is not None:
                    raise absent from None
            if isinstance(exc, OSError):
                raise StorageError(f"{describe} in {self.url} failed: {exc}") from exc
            raise

    @abstractmethod
    def _lost_race(self, key: str, exc: Exception) -> bool:
        """Whether ``exc``, from a create, is the server's answer that ``key`` exists already.

        May raise a ``StorageError`` when the answer cannot be told apart: callers settle it
        by reading the object back.
        """

    @abstractmethod
    def _range_unsatisfiable(self, exc: Exception) -> bool:
        """Whether ``exc``, from a ranged read, is HTTP 416 (the range starts past the end)."""

    @abstractmethod
    def _classify(self, exc: Exception, describe: str) -> StorageError | None:
        """Our error for a storage mistake behind ``exc``, from the cloud's table, or ``None``."""

    def _missing_location(self, describe: str) -> StorageError | None:
        """Our error for a 404 where no object was asked for, or ``None`` (a plain failure)."""
        return None

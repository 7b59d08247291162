"""A repository served over plain HTTP(S), read-only, through fsspec's HTTP file system.

Public datasets are often published as a folder on a web server. Reading needs only GETs:
``icechunk.json``, then probes of ``t/<g+1>``… (a 404 ends the probe), structure files,
manifests and chunks, with ``Range`` requests for parts of objects. A server that ignores
``Range`` and answers with the whole object still works (we cut the part out), only slower.

Listing exists only where the server serves folder indexes (HTML pages of links, as most
file servers do): reads need it only when ``icechunk.json`` is missing, and to report object
sizes. Every write raises ``ReadOnlyStorageError``: HTTP has no put-if-absent we could trust,
and a web server is not where a repository is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from email.utils import parsedate_to_datetime
from typing import Any, NoReturn, TypeVar

from ..errors import (
    NotFoundError,
    ReadOnlyStorageError,
    StorageCredentialsError,
    StorageError,
    StorageUnreachableError,
)
from .base import ObjectInfo, Storage, with_retries
from .endpoints import without_userinfo

T = TypeVar("T")


class HTTPStorage(Storage):
    mtime_resolution_ms = 1000  # Last-Modified is in whole seconds

    def __init__(self, url: str, **options: Any) -> None:
        from fsspec.implementations.http import HTTPFileSystem

        self.url = url.rstrip("/")
        self.options = dict(options)
        # No instance or listing caches: a reader must see a repository that moves on.
        self.fs = HTTPFileSystem(skip_instance_cache=True, use_listings_cache=False, **options)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], **state["options"])  # type: ignore[misc]

    def _path(self, key: str) -> str:
        return f"{self.url}/{key}"

    def get(self, key: str) -> bytes:
        missing = f"object {key!r} not found in {self.shown}"
        return self._call(lambda: bytes(self.fs.cat_file(self._path(key))), key, missing)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""

        def read() -> bytes:
            data = bytes(self.fs.cat_file(self._path(key), start=start, end=end))
            # A 206 answer is never longer than asked; a longer one is the whole object from a
            # server that ignores Range.
            return data[start:end] if len(data) > end - start else data

        return self._call(read, key, f"object {key!r} not found in {self.shown}")

    def put(self, key: str, data: bytes) -> None:
        self._refuse(f"write {key!r}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._refuse(f"create {key!r}")

    def delete(self, keys: Iterable[str]) -> None:
        self._refuse("delete objects")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder = prefix.rpartition("/")[0]
        base = self._path(folder) + "/" if folder else self.url + "/"
        try:
            found = self._call(lambda: self.fs.find(base), f"{folder or '/'} (listing)", "")
        except NotFoundError:
            return
        for url in found:
            key = url[len(self.url) + 1 :]
            if key.startswith(prefix) and not url.endswith("/"):
                yield self._describe(key)

    def _describe(self, key: str) -> ObjectInfo:
        info = self._call(lambda: self.fs.info(self._path(key)), key, f"object {key!r} is gone")
        modified = info.get("Last-Modified")
        ms = int(parsedate_to_datetime(modified).timestamp() * 1000) if modified else 0
        return ObjectInfo(key, int(info.get("size") or 0), ms)

    def exists(self, key: str) -> bool:
        try:
            self._call(lambda: self.fs.info(self._path(key)), key, "")
        except NotFoundError:
            return False
        return True

    @property
    def shown(self) -> str:
        return without_userinfo(self.url)

    def _refuse(self, what: str) -> NoReturn:
        raise ReadOnlyStorageError(
            f"cannot {what}: {self.shown} is read-only storage (plain HTTP). Open the "
            "repository through the storage it is published from (s3://, gs://, az:// or a "
            "local path) to write to it"
        )

    def _call(self, operation: Callable[[], T], key: str, missing: str) -> T:
        import aiohttp

        try:
            return with_retries(operation, f"reading {key!r} from {self.shown}")
        except StorageError:
            raise
        except FileNotFoundError:
            raise NotFoundError(missing) from None
        except aiohttp.ClientResponseError as exc:
            if exc.status in (401, 403):
                raise StorageCredentialsError(
                    f"{self.shown} refused reading {key!r} (HTTP {exc.status}): pass what the "
                    "server expects in the storage option headers (e.g. Authorization)"
                ) from exc
            raise StorageError(
                f"reading {key!r} from {self.shown} failed with HTTP {exc.status}"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise StorageUnreachableError(
                f"cannot connect to {self.shown}: check the URL (scheme, host and port) and that "
                "the server is running"
            ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise StorageUnreachableError(
                f"{self.shown} did not answer properly while reading {key!r}: check the URL and "
                "the network"
            ) from exc

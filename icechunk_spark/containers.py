"""Virtual chunk containers: the allow-list of places virtual refs may point into.

A manifest could name any URL, and the process reading it holds credentials (seed 002's
confused deputy). So a repository's config lists the URL prefixes its virtual refs may use,
writing a ref outside them is refused, and reading needs the user to authorize the container.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from .errors import InvalidInputError, NotFoundError, StorageError

Authorization = Mapping[str, Mapping[str, Any]]


def normalize_prefix(prefix: str) -> str:
    parsed = urlparse(prefix)
    if not parsed.scheme:
        raise InvalidInputError(
            f"virtual chunk container {prefix!r} must be a URL with a scheme (file:///data/)"
        )
    return prefix if prefix.endswith("/") else prefix + "/"


def resolve_url(url: str, containers: Iterable[str]) -> tuple[str, str]:
    """``(absolute url, container prefix)`` for a virtual ref, or ``InvalidInputError``.

    Relative refs (no scheme) resolve against the single container they fit in; ``..`` segments
    and absolute URLs outside every container are refused.
    """
    prefixes = [normalize_prefix(c) for c in containers]
    if not prefixes:
        raise InvalidInputError(
            f"virtual ref {url!r} refused: the repository lists no virtual chunk containers; "
            "add one with config virtual_chunk_containers={'file:///data/': {}}"
        )
    parsed = urlparse(url)
    if ".." in parsed.path.split("/"):
        raise InvalidInputError(f"virtual ref {url!r} refused: '..' segments are not allowed")
    if not parsed.scheme:
        if len(prefixes) != 1:
            raise InvalidInputError(
                f"relative virtual ref {url!r} is ambiguous: "
                f"the repository has {len(prefixes)} containers"
            )
        url = prefixes[0] + url.lstrip("/")
    scheme, rest = url.split("://", 1) if "://" in url else (parsed.scheme, url)
    normalized = f"{scheme}://{posixpath.normpath(rest)}" if rest else url
    for prefix in prefixes:
        if normalized.startswith(prefix):
            return normalized, prefix
    raise InvalidInputError(
        f"virtual ref {url!r} is outside every virtual chunk container ({prefixes}); "
        "add its prefix to the repository config's virtual_chunk_containers"
    )


class VirtualReader:
    """Reads byte ranges of virtual refs, only from containers the user authorized."""

    def __init__(
        self, containers: Mapping[str, Mapping[str, Any]], authorized: Authorization | None
    ) -> None:
        self._containers = {normalize_prefix(k): dict(v) for k, v in containers.items()}
        self._authorized = {normalize_prefix(k): dict(v) for k, v in (authorized or {}).items()}
        self._filesystems: dict[str, Any] = {}
        self._lock = threading.Lock()

    def read(self, url: str, offset: int, length: int, checksum: str | None) -> bytes:
        absolute, prefix = resolve_url(url, self._containers)
        if prefix not in self._authorized:
            raise InvalidInputError(
                f"virtual chunk container {prefix!r} is not authorized for reading; open the "
                f"repository with authorize_virtual=[{prefix!r}] to read {absolute!r}"
            )
        fs = self._filesystem(prefix)
        try:
            if checksum is not None:
                self._check(fs, absolute, checksum)
            return bytes(fs.cat_file(absolute, start=offset, end=offset + length))
        except FileNotFoundError:
            raise NotFoundError(f"virtual ref target {absolute!r} does not exist") from None
        except OSError as exc:
            raise StorageError(f"reading virtual ref {absolute!r} failed: {exc}") from exc

    def _filesystem(self, prefix: str) -> Any:
        import fsspec

        with self._lock:
            fs = self._filesystems.get(prefix)
            if fs is None:
                options = {**self._containers.get(prefix, {}), **self._authorized[prefix]}
                fs = fsspec.filesystem(urlparse(prefix).scheme or "file", **options)
                self._filesystems[prefix] = fs
            return fs

    @staticmethod
    def _check(fs: Any, url: str, checksum: str) -> None:
        info = fs.info(url)
        current = file_checksum(info)
        if current != checksum:
            raise InvalidInputError(
                f"virtual ref target {url!r} changed since the ref was written (checksum "
                f"{checksum!r}, now {current!r}); re-import it, or read with "
                "verify_virtual_checksums=False"
            )


def file_checksum(info: Mapping[str, Any]) -> str:
    """An ETag when the store has one, else the modification time (and size)."""
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return f"etag:{str(etag).strip(chr(34))}"
    mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
    return f"mtime:{mtime}:{info.get('size')}"

"""Storage backends: memory, local files, S3. ``open_storage(url, **options)`` picks one."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import InvalidInputError
from .base import ObjectInfo, Storage
from .local import LocalStorage
from .memory import MemoryStorage
from .s3 import S3Storage


def open_storage(url: str | Storage, **options: Any) -> Storage:
    """Open ``file:///path``, a plain path, ``s3://bucket/prefix`` or ``memory://name``.

    S3 options are s3fs's (``key``, ``secret``, ``endpoint_url``, ``anon``, ``client_kwargs``...).
    """
    if isinstance(url, Storage):
        return url
    parsed = urlparse(url)
    scheme = parsed.scheme
    if scheme in ("", "file"):
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            # file://data/repo would silently mean /repo: a host is never part of a local path.
            raise InvalidInputError(
                f"storage URL {url!r} names a host ({parsed.netloc!r}); local paths are "
                "file:///absolute/path (three slashes) or a plain path"
            )
        # file:// URLs are percent-encoded (LocalStorage.url writes a space as %20); a plain
        # path is taken as it is.
        path = unquote(parsed.path) if scheme == "file" else url
        if not path:
            raise InvalidInputError(f"storage URL {url!r} has no path")
        return LocalStorage(path)
    if scheme == "memory":
        return MemoryStorage.named((parsed.netloc + parsed.path).strip("/"))
    if scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise InvalidInputError(f"S3 URL {url!r} names no bucket; use s3://bucket/prefix")
        return S3Storage(parsed.netloc + parsed.path, **options)
    raise InvalidInputError(
        f"unsupported storage URL {url!r}: use file:///path, s3://bucket/prefix or memory://name"
    )


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` from a command line into storage options.

    A value written as a JSON object (``config_kwargs={"read_timeout": 60}``) becomes a dict,
    since some options (``config_kwargs``, ``client_kwargs``) take one; others stay strings.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidInputError(f"storage option {pair!r} must look like key=value")
        options[key] = _json_object(key, value) if value.lstrip().startswith("{") else value
    return options


def _json_object(key: str, value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:  # its message quotes no part of the value
        raise InvalidInputError(
            f"storage option {key} looks like a JSON object but is not one ({exc.msg}); "
            'write it as {"name": value, ...}'
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidInputError(f"storage option {key} must be a JSON object")
    return parsed


__all__ = [
    "LocalStorage",
    "MemoryStorage",
    "ObjectInfo",
    "S3Storage",
    "Storage",
    "open_storage",
    "parse_storage_options",
]

"""Storage backends: memory, local files, S3, GCS, Azure, read-only HTTP.

``open_storage(url, **options)`` picks one by the URL's scheme. The GCS and Azure backends
import their client libraries (extras ``icechunk-spark[gcs]`` and ``[azure]``) only when used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ..errors import InvalidInputError
from .base import ObjectInfo, Storage
from .http import HTTPStorage
from .local import LocalStorage
from .memory import MemoryStorage
from .s3 import S3Storage
from .spares import TEMP_PREFIX

if TYPE_CHECKING:
    from .azure import AzureStorage
    from .gcs import GCSStorage

SUPPORTED = (
    "file:///path, s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, "
    "https://host/path (read-only) or memory://name"
)


def open_storage(url: str | Storage, **options: Any) -> Storage:
    """Open ``file:///path`` (or a plain path), ``s3://bucket/prefix``, ``gs://bucket/prefix``,
    ``az://container/prefix`` (also ``abfs://``, ``abfss://``), ``http(s)://…`` (read-only) or
    ``memory://name``.

    Options are the client library's: s3fs's for S3 (``key``, ``secret``, ``endpoint_url``,
    ``anon``, ``client_kwargs``…), gcsfs's for GCS (``token``, ``project``, ``endpoint_url``…),
    adlfs's for Azure (``account_name``, ``account_key``, ``sas_token``, ``connection_string``…),
    fsspec's HTTP file system's for HTTP (``headers``, ``client_kwargs``).

    Raises:
        InvalidInputError: an unknown scheme, a URL without bucket or container, or a missing
            client library (install the ``gcs`` or ``azure`` extra).
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
    if scheme in ("gs", "gcs"):
        if not parsed.netloc:
            raise InvalidInputError(f"GCS URL {url!r} names no bucket; use gs://bucket/prefix")
        gcs = _backend("gcs", "GCSStorage", "gcsfs")
        return gcs(parsed.netloc + parsed.path, **options)
    if scheme in ("az", "abfs", "abfss"):
        container, _, host = parsed.netloc.partition("@")
        if not container:
            raise InvalidInputError(
                f"Azure URL {url!r} names no container; use az://container/prefix"
            )
        if host and "account_name" not in options and "connection_string" not in options:
            # abfs://container@account.dfs.core.windows.net/prefix names the account.
            options = {"account_name": host.split(".", 1)[0], **options}
        azure = _backend("azure", "AzureStorage", "adlfs")
        return azure(container + parsed.path, scheme, **options)
    if scheme in ("http", "https"):
        if not parsed.netloc:
            raise InvalidInputError(f"HTTP URL {url!r} names no host")
        return HTTPStorage(url, **options)
    raise InvalidInputError(f"unsupported storage URL {url!r}: use {SUPPORTED}")


def _backend(module: str, name: str, library: str) -> Callable[..., Storage]:
    """The backend class of an optional client library, or an error saying what to install."""
    import importlib

    try:
        importlib.import_module(library)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != library:
            raise  # the library is there but broken: its own error says more
        kind = "GCS" if module == "gcs" else module.title()
        raise InvalidInputError(
            f"{kind} storage needs {library}, which is not installed: "
            f"pip install 'icechunk-spark[{module}]'"
        ) from exc
    return getattr(importlib.import_module(f".{module}", __name__), name)  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    # GCSStorage and AzureStorage live in modules of their own, loaded when asked for (their
    # client libraries are loaded only when one is opened).
    import importlib

    if name in ("GCSStorage", "AzureStorage"):
        module = "gcs" if name == "GCSStorage" else "azure"
        return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "TEMP_PREFIX",
    "AzureStorage",
    "GCSStorage",
    "HTTPStorage",
    "LocalStorage",
    "MemoryStorage",
    "ObjectInfo",
    "S3Storage",
    "Storage",
    "open_storage",
    "parse_storage_options",
]

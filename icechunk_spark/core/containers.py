"""Virtual chunk containers: the allow-list of places virtual refs may point into.

A manifest could name any URL, and the process reading it holds credentials (seed 002's
confused deputy: a repository written by someone else makes *our* process read
``file:///etc/passwd`` or a private bucket with *our* keys). So:

**Writing a ref** (``Session.set_virtual_ref``, the bulk ``set_chunk_refs`` path, importers)
needs the URL to lie inside one of the repository's ``virtual_chunk_containers``; otherwise
``VirtualRefRefusedError`` is raised and nothing is recorded. URLs are checked as text, before
any I/O:

- a URL must have a scheme, or be relative (then it resolves against the *only* container;
  with several containers a relative URL is ambiguous and refused);
- ``..`` segments are refused, also percent-encoded (``%2e%2e``, ``%252e%252e``, ``..%2f``),
  as are backslashes, control characters, ``?`` queries and ``#`` fragments (servers and
  filesystems may interpret them and leave the container);
- a container prefix always ends with ``/``, so ``file:///data-evil/x`` is *not* inside the
  container ``file:///data/``; the scheme is compared case-insensitively, everything else
  exactly (``file://localhost/data/x`` is not ``file:///data/x``: refused, not guessed);
- the most specific (longest) matching container wins.

**Reading a ref** additionally needs the *user* to authorize it: ``Repository.open(url,
authorize_virtual=["file:///data/"])`` (or ``{prefix: fsspec options}`` to supply
credentials). A ref is read only if it lies inside a container of the repository config *and*
inside a prefix the user authorized; otherwise ``VirtualRefRefusedError`` names the prefix to
authorize. Authorization is by prefix of the URL, so authorizing ``file:///data/`` does not
open ``file:///etc/`` even when the repository's config lists ``file:///`` as a container.
For ``file://`` containers the target's real path (symlinks resolved) must also stay inside
the container's real path, so a symlink planted in a container cannot reach out of it.

Reading, with checksums and coalescing, is ``virtual_reads``.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from ..errors import (
    InvalidInputError,
    VirtualRefRefusedError,
)

Authorization = Mapping[str, Mapping[str, Any]]

# Characters whose meaning differs between filesystems, HTTP servers and object stores.
_FORBIDDEN = ("\\", "?", "#")
# A scheme and no "//": Hadoop (so Spark's input_file_name and _metadata) writes file:/path.
_NO_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(?!//)(.*)", re.DOTALL)


def normalize_prefix(prefix: str) -> str:
    """A container prefix in canonical form: lower-case scheme, ending in ``/``.

    Raises:
        InvalidInputError: no scheme, or the prefix itself contains ``..`` or forbidden parts.
    """
    scheme, sep, rest = prefix.partition("://")
    if not sep or not scheme:
        raise InvalidInputError(
            f"virtual chunk container {prefix!r} must be a URL with a scheme (file:///data/)"
        )
    _check_text(prefix, rest)
    if scheme.lower() == "file":
        rest = _file_path(prefix, rest)
    return f"{scheme.lower()}://{rest if rest.endswith('/') else rest + '/'}"


def _check_text(url: str, path: str) -> None:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise VirtualRefRefusedError(f"virtual ref {url!r} refused: it contains control characters")
    for ch in _FORBIDDEN:
        if ch in url:
            raise VirtualRefRefusedError(
                f"virtual ref {url!r} refused: {ch!r} is not allowed in virtual ref URLs"
            )
    # Decode repeatedly so double encoding (%252e) cannot smuggle a '..' past us.
    decoded, previous = path, None
    while decoded != previous:
        previous, decoded = decoded, unquote(decoded)
    if ".." in decoded.split("/") or "\\" in decoded:
        raise VirtualRefRefusedError(
            f"virtual ref {url!r} refused: '..' segments (also percent-encoded) are not allowed"
        )


def resolve_url(url: str, containers: Iterable[str]) -> tuple[str, str]:
    """``(absolute url, container prefix)`` for a virtual ref.

    Relative refs (no scheme) resolve against the single container; the most specific
    container containing the URL wins.

    >>> resolve_url("file:///data/a.nc", ["file:///data/"])
    ('file:///data/a.nc', 'file:///data/')

    Raises:
        VirtualRefRefusedError: the URL is outside every container, ambiguous, or malformed.
    """
    prefixes = sorted({normalize_prefix(c) for c in containers}, key=len, reverse=True)
    if not prefixes:
        raise VirtualRefRefusedError(
            f"virtual ref {url!r} refused: the repository lists no virtual chunk containers; "
            "add one with config virtual_chunk_containers={'file:///data/': {}}"
        )
    scheme, sep, rest = url.partition("://")
    if not sep and url.startswith("/"):  # an absolute local path, as kerchunk writes them
        scheme, sep, rest = "file", "://", url
    elif not sep and (bare := _NO_AUTHORITY.fullmatch(url)) is not None:
        scheme, sep, rest = "file", "://", _hadoop_file_path(url, *bare.groups())
    if not sep:
        _check_text(url, url)
        if len(prefixes) != 1:
            raise VirtualRefRefusedError(
                f"relative virtual ref {url!r} is ambiguous: "
                f"the repository has {len(prefixes)} containers; use an absolute URL"
            )
        scheme, _, rest = (prefixes[0] + url.lstrip("/")).partition("://")
    else:
        _check_text(url, rest)
    if scheme.lower() == "file":
        rest = _file_path(url, rest)
    if not rest:
        raise VirtualRefRefusedError(f"virtual ref {url!r} refused: it names no file")
    normalized = f"{scheme.lower()}://{_normpath(rest)}"
    for prefix in prefixes:
        if normalized.startswith(prefix) and len(normalized) > len(prefix):
            return normalized, prefix
    raise VirtualRefRefusedError(
        f"virtual ref {url!r} is outside every virtual chunk container ({prefixes}); "
        "add its prefix to the repository config's virtual_chunk_containers"
    )


def _hadoop_file_path(url: str, scheme: str, path: str) -> str:
    """The path of ``file:/path``, Hadoop's spelling of ``file:///path``.

    Any other scheme without ``//`` is refused: read as a relative ref, ``file:/data/a.nc``
    used to become ``<container>file:/data/a.nc``, a ref to no file.
    """
    if scheme.lower() != "file" or not path.startswith("/"):
        raise VirtualRefRefusedError(
            f"virtual ref {url!r} refused: a {scheme!r} URL needs '//' "
            "(only file:/path, as Hadoop and Spark write local files, may leave it out)"
        )
    return path


def _file_path(url: str, rest: str) -> str:
    """The path of a ``file://`` URL, percent-decoded: one spelling per file.

    ``file:///data/a%20b.nc`` (``Path.as_uri()``) and ``file:///data/a b.nc`` name the same
    file, and fsspec opens the path as written, so refs and containers keep the decoded
    form. A decoded character that the URL rules refuse (``%3F`` for ``?``...) is refused.
    """
    host, slash, path = rest.partition("/")
    if host not in ("",) or not slash:
        raise VirtualRefRefusedError(
            f"virtual ref {url!r} refused: file URLs name no host (file:///path); "
            f"{host!r} would be dropped by the filesystem, not honoured"
        )
    decoded = unquote("/" + path)
    _check_text(decoded, decoded)
    return decoded


def resolve_target(url: str, containers: Iterable[str]) -> tuple[str, str]:
    """``resolve_url`` plus the read-time check of the target itself, for writers.

    Importers call this before opening, stat'ing or copying any byte of a file, so what an
    import may touch is exactly what a reader may: for ``file://`` containers the real path
    (symlinks resolved) must stay inside the container's real path.

    Raises:
        VirtualRefRefusedError: as ``resolve_url``, or the file resolves outside its container.
    """
    absolute, container = resolve_url(url, containers)
    if container.startswith("file://"):
        check_real_path(absolute, container)
    return absolute, container


def _normpath(rest: str) -> str:
    # posixpath.normpath keeps a leading '//' and drops a trailing '/'; neither matters here
    # because '..' is refused before and containers compare with a trailing '/'.
    leading = "/" if rest.startswith("/") else ""
    return leading + posixpath.normpath(rest).lstrip("/")


def check_real_path(url: str, container: str) -> None:
    """A local target must stay inside its container after resolving symlinks."""
    # Not urlsplit: these are decoded paths, where '%3F' was checked and '#' is refused.
    path = url.partition("://")[2]
    root = os.path.realpath(container.partition("://")[2])
    real = os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise VirtualRefRefusedError(
            f"virtual ref {url!r} refused: it resolves (through a symlink) to {real!r}, outside "
            f"the container {container!r}"
        )


__all__ = ["Authorization", "check_real_path", "normalize_prefix", "resolve_target", "resolve_url"]

"""Endpoint URLs given as storage options: checked before use, printed without userinfo."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..errors import InvalidInputError


def check_endpoint(endpoint: Any, option: str, example: str) -> None:
    """Refuse an endpoint option that is not an http(s) URL, naming the option."""
    if endpoint is not None and not str(endpoint).startswith(("http://", "https://")):
        shown = "" if "@" in str(endpoint) else f" {endpoint!r}"  # user:password@ stays unsaid
        raise InvalidInputError(
            f"storage option {option}{shown} must start with http:// or https:// (e.g. {example})"
        )


def without_userinfo(endpoint: str) -> str:
    """``endpoint`` with any ``user:password@`` removed: messages must not carry it."""
    parts = urlsplit(endpoint)
    if parts.username is None and parts.password is None:
        return endpoint
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()

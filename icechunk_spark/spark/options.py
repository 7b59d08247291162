"""Data source options: where the repository is, how to reach it, which snapshot to read.

Spark hands every option over as a string in a case-insensitive dict; this module turns them
into small frozen values that pickle cheaply to executors (clients are made where used).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core import Session
from ..errors import InvalidInputError
from ..repository import Repository
from ..storage import Storage, open_storage

STORAGE_PREFIX = "storage."


@dataclass(frozen=True, slots=True)
class RepoOptions:
    """How to open the repository: URL, storage options, virtual containers to authorize."""

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    authorize_virtual: tuple[str, ...] = ()

    def open(self) -> Repository:
        return Repository.open(
            self.url,
            storage_options=dict(self.storage_options),
            authorize_virtual=list(self.authorize_virtual) or None,
        )

    @contextmanager
    def opened(self, repo: Repository | None = None) -> Iterator[Repository]:
        """``repo``, when the caller opened it already (and closes it), else the repository
        opened here and closed after: one open serves every step of a commit."""
        if repo is not None:
            yield repo
            return
        repo = self.open()
        try:
            yield repo
        finally:
            repo.close()

    def storage(self) -> Storage:
        """Just the storage (executors reading manifests need no repository state)."""
        return open_storage(self.url, **dict(self.storage_options))


@dataclass(frozen=True, slots=True)
class ReadTarget:
    """Which snapshot to read: a branch (default ``main``), a tag or a snapshot id, maybe as of."""

    branch: str | None = None
    tag: str | None = None
    snapshot_id: str | None = None
    as_of: datetime | None = None

    def session(self, repo: Repository) -> Session:
        return repo.readonly_session(
            self.branch, tag=self.tag, snapshot_id=self.snapshot_id, as_of=self.as_of
        )


def repo_options(options: Mapping[str, str]) -> RepoOptions:
    """``path`` plus ``storage.<name>`` options (values parsed as JSON when they are JSON)."""
    url = get(options, "path") or get(options, "url")
    if not url:
        raise InvalidInputError(
            "no repository given: use .load('s3://bucket/repo') / .save(url) or option('path', url)"
        )
    storage: dict[str, Any] = {}
    for key, value in options.items():
        if key.lower().startswith(STORAGE_PREFIX):
            storage[key[len(STORAGE_PREFIX) :]] = parse_value(value)
    authorize = get(options, "authorize_virtual")
    prefixes: tuple[str, ...] = ()
    if authorize:
        parsed = parse_value(authorize)
        items = parsed if isinstance(parsed, list) else str(authorize).split(",")
        prefixes = tuple(str(p).strip() for p in items if str(p).strip())
    return RepoOptions(url, storage, prefixes)


def read_target(options: Mapping[str, str]) -> ReadTarget:
    """The ``branch`` / ``tag`` / ``snapshot`` / ``as_of`` options."""
    branch, tag, snapshot = get(options, "branch"), get(options, "tag"), get(options, "snapshot")
    if sum(x is not None for x in (branch, tag, snapshot)) > 1:
        raise InvalidInputError("give at most one of the options branch, tag and snapshot")
    as_of_text = get(options, "as_of")
    as_of = None
    if as_of_text:
        try:
            as_of = datetime.fromisoformat(as_of_text)
        except ValueError as exc:
            raise InvalidInputError(
                f"option as_of={as_of_text!r} is not an ISO datetime (2024-05-01T12:00:00Z)"
            ) from exc
    return ReadTarget(branch, tag, snapshot, as_of)


def parse_value(value: Any) -> Any:
    """``'true'`` -> True, ``'{"a": 1}'`` -> dict, ``'["x"]'`` -> list; else the string.

    Numbers stay strings on purpose: a numeric access key or secret must not become an int.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("true", "false", "null") or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return value
    return value


def get_bool(options: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = get(options, key)
    if value is None:
        return default
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidInputError(f"option {key}={value!r} must be true or false")


def get_int(options: Mapping[str, str], key: str, default: int) -> int:
    value = get(options, key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidInputError(f"option {key}={value!r} must be an integer") from exc
    if number < 1:
        raise InvalidInputError(f"option {key}={value!r} must be >= 1")
    return number


def get(options: Mapping[str, str], key: str) -> str | None:
    # Spark's CaseInsensitiveDict answers any case; a plain dict (driver API) may not.
    if key in options:
        return options[key]
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(key.lower())


__all__ = [
    "ReadTarget",
    "RepoOptions",
    "get",
    "get_bool",
    "get_int",
    "parse_value",
    "read_target",
    "repo_options",
]

"""What the cloud backends' error tables share: the walk along a failure's causes, and where.

s3fs, gcsfs and adlfs translate some of their SDK's exceptions into ``OSError`` s and keep the
original as the cause (or the context); the rest pass through. Each cloud's table
(``s3_errors``, ``gcs_errors``, ``azure_errors``) recognises one exception by class, status and
error code; the walk along the chain is the same for all three, so it lives here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from ..errors import StorageError
from .endpoints import without_userinfo

W = TypeVar("W")


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (its cause, else its context), and so on."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def first_known(
    exc: BaseException,
    where: W,
    classify_one: Callable[[BaseException, W], StorageError | None],
) -> StorageError | None:
    """Our error for the first exception along ``exc``'s causes that ``classify_one`` knows."""
    for cause in causes(exc):
        found = classify_one(cause, where)
        if found is not None:
            return found
    return None


@dataclass(frozen=True, slots=True)
class BucketWhere:
    """What we were doing when it failed: the repository URL, the endpoint, the operation."""

    url: str  # s3://bucket/prefix, gs://bucket/prefix
    endpoint: str | None  # the endpoint_url option; None means the cloud's own
    describe: str  # "reading 'icechunk.json'"

    own_server: ClassVar[str] = "the cloud's endpoint"  # how the cloud's own endpoint is named

    @property
    def bucket(self) -> str:
        return self.url.partition("://")[2].split("/", 1)[0]

    @property
    def server(self) -> str:
        return without_userinfo(self.endpoint) if self.endpoint else self.own_server

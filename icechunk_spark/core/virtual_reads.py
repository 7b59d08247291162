"""Reading virtual refs: authorized containers only, checksums checked, ranges coalesced.

The rules of *where* a ref may point are in ``containers``.

**Checksums**: a ref may carry the target's checksum when it was made (``file_checksum``:
``etag:<ETag>`` where the store has ETags, else ``mtime:<mtime>:<size>``). On read the current
checksum is compared (one ``info`` call per file per batch of reads); a mismatch raises
``SourceChangedError``. Opt out with the repository config ``verify_virtual_checksums=False``:
then the current bytes are returned.

**Coalescing**: ``VirtualReader.read_many`` groups requests by file, merges ranges whose gap
is at most ``CoalesceSettings.max_gap_bytes`` into one ranged request (up to
``max_request_bytes``), and fetches the merged ranges with bounded concurrency. Single
``read`` calls that arrive together are served as one batch (``read_batches``, within
``batch_window_seconds``, 2 ms), so zarr's concurrent per-chunk reads coalesce too; a read
with no other read in flight (a sequential reader) does not wait.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import (
    IcechunkSparkError,
    InvalidInputError,
    NotFoundError,
    SourceChangedError,
    StorageError,
    VirtualRangeError,
    VirtualRefRefusedError,
)
from .containers import Authorization, check_real_path, normalize_prefix, resolve_url
from .read_batches import ReadBatches, unwrap


@dataclass(frozen=True, slots=True)
class VirtualRequest:
    """``length`` bytes at ``offset`` of ``url``; ``checksum`` as recorded with the ref."""

    url: str
    offset: int
    length: int
    checksum: str | None = None


@dataclass(frozen=True, slots=True)
class CoalesceSettings:
    """How reads of one file are merged, and how long single reads wait for company.

    ``max_gap_bytes``: ranges at most this far apart are fetched as one request (the gap is
    read and thrown away: cheaper than a round trip on object stores). ``max_request_bytes``:
    a merged request never grows beyond this. ``batch_window_seconds``: single reads arriving
    within this window from several threads are served together (0 disables batching).
    ``max_concurrency``: merged requests in flight at once.
    """

    max_gap_bytes: int = 64 * 1024
    max_request_bytes: int = 64 * 1024 * 1024
    batch_window_seconds: float = 0.002
    max_concurrency: int = 8

    def __post_init__(self) -> None:
        if self.max_gap_bytes < 0 or self.max_request_bytes < 1 or self.max_concurrency < 1:
            raise InvalidInputError(
                "CoalesceSettings: max_gap_bytes >= 0, max_request_bytes >= 1 and "
                "max_concurrency >= 1 are required"
            )
        if self.batch_window_seconds < 0:
            raise InvalidInputError("CoalesceSettings.batch_window_seconds must be >= 0")


class VirtualReader:
    """Reads byte ranges of virtual refs, only from containers the user authorized.

    ``verify_checksums=False`` skips the checksum comparison (returns current bytes).
    """

    def __init__(
        self,
        containers: Mapping[str, Mapping[str, Any]],
        authorized: Authorization | None,
        *,
        verify_checksums: bool = True,
        settings: CoalesceSettings | None = None,
    ) -> None:
        self._containers = {normalize_prefix(k): dict(v) for k, v in containers.items()}
        self._authorized = {normalize_prefix(k): dict(v) for k, v in (authorized or {}).items()}
        self.verify_checksums = verify_checksums
        self.settings = settings or CoalesceSettings()
        self._filesystems: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._batches = ReadBatches(self._execute, self.settings.batch_window_seconds)
        self._pool: ThreadPoolExecutor | None = None

    # -- public API -----------------------------------------------------------------------
    def read(self, url: str, offset: int, length: int, checksum: str | None) -> bytes:
        """The bytes of one ref; concurrent calls within the batch window share requests.

        Raises:
            VirtualRefRefusedError: outside the containers, or not authorized for reading.
            SourceChangedError: the target's checksum differs from the ref's.
            NotFoundError: the target does not exist.
            StorageError: the read failed.
        """
        return self._batches.read(VirtualRequest(url, int(offset), int(length), checksum))

    async def read_async(self, url: str, offset: int, length: int, checksum: str | None) -> bytes:
        """``read`` for coroutines: waits for its batch without holding a thread.

        Meant for async callers (a zarr store's ``get``): the gets that arrive together join
        one batch (``read_batches``), however many there are, whereas threaded callers can
        only batch as many reads as they have threads.
        """
        request = VirtualRequest(url, int(offset), int(length), checksum)
        return await self._batches.read_async(request)

    def read_many(self, requests: Sequence[VirtualRequest]) -> list[bytes]:
        """The bytes of many refs, in order, with nearby ranges of a file fetched together.

        Raises the first failing request's error (see ``read``).
        """
        return [unwrap(o) for o in self._execute(list(requests))]

    def authorized_prefix(self, url: str) -> tuple[str, str, str]:
        """``(absolute url, container, authorized prefix)``, or ``VirtualRefRefusedError``."""
        absolute, container = resolve_url(url, self._containers)
        chosen = [p for p in self._authorized if absolute.startswith(p)]
        if not chosen:
            raise VirtualRefRefusedError(
                f"virtual chunk container {container!r} is not authorized for reading; open the "
                f"repository with authorize_virtual=[{container!r}] to read {absolute!r}"
            )
        return absolute, container, max(chosen, key=len)

    def close(self) -> None:
        self._batches.close()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- execution ------------------------------------------------------------------------
    def _execute(self, requests: list[VirtualRequest]) -> list[bytes | BaseException]:
        """Every request's bytes or error: grouped by file, checked, merged, fetched."""
        outcomes: list[bytes | BaseException | None] = [None] * len(requests)
        fetches: list[_Fetch] = []
        for (absolute, container, auth), members in self._group(requests, outcomes).items():
            fs = self._filesystem(container, auth)
            try:
                self._check_target(fs, absolute, container, [requests[i] for i in members])
            except IcechunkSparkError as exc:
                for i in members:
                    outcomes[i] = exc
                continue
            fetches.extend(plan_fetches(fs, absolute, members, requests, self.settings))
        for fetch, result in zip(fetches, self._run(fetches), strict=True):
            for i in fetch.members:
                if isinstance(result, BaseException):
                    outcomes[i] = result
                else:
                    start = requests[i].offset - fetch.start
                    piece = result[start : start + requests[i].length]
                    short = len(piece) < requests[i].length
                    outcomes[i] = _past_the_end(fetch, requests[i]) if short else piece
        return [o if o is not None else b"" for o in outcomes]

    def _group(
        self, requests: list[VirtualRequest], outcomes: list[bytes | BaseException | None]
    ) -> dict[tuple[str, str, str], list[int]]:
        """Request indexes by (file, container, authorized prefix); refusals go to outcomes."""
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, request in enumerate(requests):
            try:
                if request.offset < 0 or request.length < 0:
                    raise InvalidInputError(f"virtual read of {request.url!r}: negative range")
                place = self.authorized_prefix(request.url)
            except IcechunkSparkError as exc:
                outcomes[i] = exc
                continue
            groups.setdefault(place, []).append(i)
        return groups

    def _run(self, fetches: list[_Fetch]) -> list[bytes | BaseException]:
        if len(fetches) <= 1:
            return [f.run() for f in fetches]
        pool = self._executor()
        return list(pool.map(lambda f: f.run(), fetches))

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.settings.max_concurrency,
                    thread_name_prefix="icechunk-virtual",
                )
            return self._pool

    def _check_target(
        self, fs: Any, url: str, container: str, requests: list[VirtualRequest]
    ) -> None:
        if container.startswith("file://"):
            check_real_path(url, container)
        wanted = {r.checksum for r in requests if r.checksum is not None}
        if not wanted or not self.verify_checksums:
            return
        try:
            current = file_checksum(fs.info(url))
        except FileNotFoundError:
            raise NotFoundError(f"virtual ref target {url!r} does not exist") from None
        except OSError as exc:
            raise StorageError(f"reading the checksum of {url!r} failed: {exc}") from exc
        stale = sorted(c for c in wanted if c != current)
        if stale:
            raise SourceChangedError(
                f"virtual ref target {url!r} changed since the ref was written (checksum "
                f"{stale[0]!r}, now {current!r}); re-import it, or open the repository with "
                "config={'verify_virtual_checksums': False} to read the current bytes"
            )

    def _filesystem(self, container: str, auth: str) -> Any:
        import fsspec

        with self._lock:
            fs = self._filesystems.get((container, auth))
            if fs is None:
                options = {**self._containers.get(container, {}), **self._authorized[auth]}
                fs = fsspec.filesystem(container.partition("://")[0], **options)
                self._filesystems[(container, auth)] = fs
            return fs


@dataclass(frozen=True, slots=True)
class _Fetch:
    """One ranged request serving the requests ``members`` (indexes into the batch)."""

    fs: Any
    url: str
    start: int
    end: int
    members: tuple[int, ...]

    def run(self) -> bytes | BaseException:
        try:
            data = bytes(self.fs.cat_file(self.url, start=self.start, end=self.end))
        except FileNotFoundError:
            return NotFoundError(f"virtual ref target {self.url!r} does not exist")
        except OSError as exc:
            return StorageError(f"reading virtual ref {self.url!r} failed: {exc}")
        # A web server that ignores Range answers 200 with the whole file, and fsspec's HTTP
        # file system passes that on; a ranged answer is never longer than asked.
        return data[self.start : self.end] if len(data) > self.end - self.start else data


def plan_fetches(
    fs: Any,
    url: str,
    members: Sequence[int],
    requests: Sequence[VirtualRequest],
    settings: CoalesceSettings,
) -> list[_Fetch]:
    """Merge the requests of one file into as few ranged requests as the settings allow."""
    order = sorted(members, key=lambda i: (requests[i].offset, requests[i].length))
    fetches: list[_Fetch] = []
    group: list[int] = []
    start = end = 0
    for i in order:
        r_start, r_end = requests[i].offset, requests[i].offset + requests[i].length
        joins = (
            group
            and r_start - end <= settings.max_gap_bytes
            and max(end, r_end) - start <= settings.max_request_bytes
        )
        if joins:
            group.append(i)
            end = max(end, r_end)
            continue
        if group:
            fetches.append(_Fetch(fs, url, start, end, tuple(group)))
        group, start, end = [i], r_start, r_end
    if group:
        fetches.append(_Fetch(fs, url, start, end, tuple(group)))
    return fetches


def _past_the_end(fetch: _Fetch, request: VirtualRequest) -> VirtualRangeError:
    """The error for a ref whose range the file does not hold (zarr would fail later with
    a reshape error naming nothing)."""
    try:
        size: object = fetch.fs.size(fetch.url)
    except OSError:
        size = "unknown"
    return VirtualRangeError(
        f"virtual ref {request.url!r} (offset {request.offset}, length {request.length}) "
        f"reaches past the end of the file, which has {size} bytes: the file was truncated "
        "or replaced, or the ref is wrong; re-import it"
    )


def file_checksum(target: str | Mapping[str, Any], **storage_options: Any) -> str:
    """The checksum a virtual ref records for its target file.

    ``target`` is a URL (its fsspec ``info`` is fetched with ``storage_options``) or an
    ``info`` mapping. An ETag when the store has one, else the modification time and size.

    >>> file_checksum({"size": 10, "mtime": 1700000000.5})
    'mtime:1700000000.5:10'
    """
    info = _info(target, storage_options) if isinstance(target, str) else target
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return f"etag:{str(etag).strip(chr(34))}"
    mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
    return f"mtime:{mtime}:{info.get('size')}"


def _info(url: str, storage_options: Mapping[str, Any]) -> Mapping[str, Any]:
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    try:
        info: Mapping[str, Any] = fs.info(path)
    except FileNotFoundError:
        raise NotFoundError(f"{url!r} does not exist") from None
    return info


__all__ = [
    "CoalesceSettings",
    "VirtualReader",
    "VirtualRequest",
    "file_checksum",
    "plan_fetches",
]

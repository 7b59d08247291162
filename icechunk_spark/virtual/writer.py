"""Writing a parsed reference set into a session: groups, arrays, and their chunk refs.

Every URL is checked against the repository's virtual chunk containers *before* any I/O
(so an import never even stats a file outside them). Then each distinct file is asked once
for its fsspec ``info``: its checksum goes into every ref to it (so reads notice a changed
file) and its size completes whole-file ``[url]`` refs. Virtual refs go in through the bulk
``Session.set_chunk_refs`` path; inline data through ``Session.set_chunk`` (stored inline or
as a chunk file by the repository's inline threshold, with statistics when configured).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import file_checksum, resolve_target
from ..errors import InvalidInputError, NotFoundError
from ..format.coords import encode_coords
from ..format.locations import remap, with_values
from ..format.paths import normalize_path
from .references import ArrayRefs, ReferenceSet

if TYPE_CHECKING:
    from ..core import Session


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What an import wrote into the session (nothing is committed yet)."""

    arrays: tuple[str, ...]
    groups: tuple[str, ...]
    virtual_refs: int
    inline_refs: int
    files: int


@dataclass(frozen=True, slots=True)
class _FileInfo:
    checksum: str
    size: int


def absolute_url(url: str, remote_protocol: str | None = None) -> str:
    """A kerchunk URL with a scheme: ``/x.nc`` -> ``file:///x.nc``; ``bucket/k`` with
    ``remote_protocol="s3"`` -> ``s3://bucket/k``; container-relative URLs stay relative."""
    if "://" in url:
        return url
    if remote_protocol and remote_protocol != "file":
        return f"{remote_protocol}://{url.lstrip('/')}"
    if url.startswith("/"):
        return f"file://{url}"
    return url


def write_reference_set(
    session: Session,
    refset: ReferenceSet,
    group: str = "/",
    *,
    storage_options: Mapping[str, Any] | None = None,
    checksums: bool = True,
    overwrite: bool = False,
    remote_protocol: str | None = None,
    max_workers: int = 8,
) -> ImportSummary:
    """Write ``refset`` under ``group`` of a writable session (the caller commits).

    Raises:
        VirtualRefRefusedError: a URL lies outside the repository's virtual chunk containers.
        AlreadyExistsError: an array exists at a target path (pass ``overwrite=True``).
        NotFoundError: a referenced file does not exist (when its info is needed).
    """
    base = normalize_path(group)
    targets = ref_targets(
        session,
        refset,
        storage_options=storage_options,
        checksums=checksums,
        remote_protocol=remote_protocol,
        max_workers=max_workers,
    )
    groups = write_groups(session, refset, base)
    virtual = inline = 0
    arrays = []
    for rel, array in sorted(refset.arrays.items()):
        path = _join(base, rel)
        create_array(session, path, array, overwrite)
        v, i = write_array_refs(session, path, array, targets, checksums)
        virtual, inline = virtual + v, inline + i
        arrays.append(path)
    return ImportSummary(tuple(arrays), tuple(groups), virtual, inline, targets.files)


@dataclass(frozen=True, slots=True)
class RefTargets:
    """Where a reference set's URLs point: each URL as written -> its absolute URL inside a
    container, and each absolute URL's file info (when checksums or sizes are needed)."""

    resolved: Mapping[str, str]
    infos: Mapping[str, _FileInfo]

    @property
    def files(self) -> int:
        return len(set(self.resolved.values()))


def ref_targets(
    session: Session,
    refset: ReferenceSet,
    *,
    storage_options: Mapping[str, Any] | None = None,
    checksums: bool = True,
    remote_protocol: str | None = None,
    max_workers: int = 8,
) -> RefTargets:
    """Check every URL of ``refset`` against the containers (no I/O before that), then stat
    each distinct file once (checksums, whole-file sizes). Nothing is written.

    Raises:
        VirtualRefRefusedError: a URL lies outside the repository's virtual chunk containers.
        NotFoundError: a referenced file does not exist (when its info is needed).
    """
    containers = session.handle.config.virtual_chunk_containers
    resolved = resolve_all(refset, containers, remote_protocol)
    need_info = checksums or _has_whole_file_refs(refset)
    infos = (
        _file_infos(sorted(set(resolved.values())), containers, storage_options, max_workers)
        if need_info
        else {}
    )
    return RefTargets(resolved, infos)


def _join(base: str, rel: str) -> str:
    return normalize_path(f"{base}/{rel}") if rel else base


def resolve_all(
    refset: ReferenceSet, containers: Mapping[str, Any], remote_protocol: str | None
) -> dict[str, str]:
    """Every distinct URL of the set -> its absolute URL inside a container (or refusal)."""
    out: dict[str, str] = {}
    for array in refset.arrays.values():
        urls = array.refs.column("virtual_path")
        if urls.null_count == len(urls):
            continue
        for url in pc.unique(urls).to_pylist():  # a dictionary's values, not one per ref
            if url is not None and url not in out:
                out[url] = resolve_target(absolute_url(url, remote_protocol), containers)[0]
    return out


def _has_whole_file_refs(refset: ReferenceSet) -> bool:
    for array in refset.arrays.values():
        refs = array.refs
        whole = pc.and_(pc.is_valid(refs.column("virtual_path")), pc.is_null(refs.column("length")))
        if pc.any(whole).as_py():
            return True
    return False


def _file_infos(
    urls: list[str],
    containers: Mapping[str, Mapping[str, Any]],
    storage_options: Mapping[str, Any] | None,
    max_workers: int,
) -> dict[str, _FileInfo]:
    def one(url: str) -> _FileInfo:
        import fsspec.core

        options = {**container_options(url, containers), **dict(storage_options or {})}
        fs, path = fsspec.core.url_to_fs(url, **options)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise NotFoundError(f"referenced file {url!r} does not exist") from None
        return _FileInfo(file_checksum(info), int(info.get("size") or 0))

    if len(urls) <= 1:
        return {u: one(u) for u in urls}
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(urls)))) as pool:
        return dict(zip(urls, pool.map(one, urls), strict=True))


def container_options(url: str, containers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    from ..core import normalize_prefix

    matches = [(normalize_prefix(p), dict(o)) for p, o in containers.items()]
    matches = [m for m in matches if url.startswith(m[0])]
    return max(matches, key=lambda m: len(m[0]))[1] if matches else {}


def write_groups(session: Session, refset: ReferenceSet, base: str) -> list[str]:
    written = []
    _ensure_parents(session, base)
    for rel, doc in sorted(refset.groups.items()):
        path = _join(base, rel)
        try:
            existing = session.get_node(path)
        except NotFoundError:
            session.set_node_metadata(path, json.dumps(doc).encode(), create_only=True)
            written.append(path)
            continue
        if existing.type != "group":
            raise InvalidInputError(f"cannot import a group at {path!r}: an array is there")
        attributes = dict(doc.get("attributes") or {})
        if attributes:  # keep the existing group, add the imported attributes to it
            current = json.loads(existing.zarr_json)
            current["attributes"] = {**(current.get("attributes") or {}), **attributes}
            session.set_node_metadata(path, json.dumps(current).encode())
        written.append(path)
    return written


def _ensure_parents(session: Session, path: str) -> None:
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts)):
        parent = "/" + "/".join(parts[:depth])
        try:
            session.get_node(parent)
        except NotFoundError:
            session.create_group(parent)


def create_array(session: Session, path: str, array: ArrayRefs, overwrite: bool) -> None:
    doc = json.dumps(array.doc).encode()
    existing = session.find_node(path) if overwrite else None
    if existing is not None and existing.meta is not None and existing.meta.ndim == array.ndim:
        # Keep the array's identity: re-importing a grown dataset (the daily update) is an
        # update, so diffs, history and concurrent writers see chunks change, not the whole
        # array deleted and re-created. Chunks the new import lacks are deleted.
        stale = _stale_coords(session, path, array)
        session.set_node_metadata(path, doc)
        for coord in stale:
            session.delete_chunk(path, coord)
        return
    if existing is not None:
        session.delete_node(path)
    session.set_node_metadata(path, doc, create_only=True)


def _stale_coords(session: Session, path: str, array: ArrayRefs) -> list[tuple[int, ...]]:
    """Coords the array holds now that ``array`` (inside its new grid) does not."""
    held = session.chunk_coords(path)
    if held.shape[0] == 0:
        return []
    kept = pc.is_in(encode_coords(held), value_set=encode_coords(array.coords))
    grid = np.ceil(np.asarray(array.shape) / np.asarray(array.chunk_shape)).astype(np.int64)
    inside = np.all(held < grid, axis=1)  # the ones outside go with the resize anyway
    stale = ~np.asarray(kept.to_numpy(zero_copy_only=False), dtype=bool) & inside
    return _all_coords(held[stale])


def _all_coords(coords: np.ndarray) -> list[tuple[int, ...]]:
    return [tuple(int(c) for c in row) for row in coords]


def write_array_refs(
    session: Session, path: str, array: ArrayRefs, targets: RefTargets, checksums: bool
) -> tuple[int, int]:
    """Set the chunk refs of ``array`` (its coords as given) on the array at ``path``:
    virtual ones in one bulk call, inline ones chunk by chunk. Returns (virtual, inline)."""
    refs = array.refs
    is_virtual = pc.is_valid(refs.column("virtual_path")).to_numpy(zero_copy_only=False)
    virtual = int(is_virtual.sum())
    if virtual:
        table = _virtual_table(
            array, np.asarray(is_virtual), targets.resolved, targets.infos, checksums
        )
        session.set_chunk_refs(path, table)
    inline_rows = np.flatnonzero(~np.asarray(is_virtual, dtype=bool))
    data = refs.column("inline_data")
    for row in inline_rows:
        session.set_chunk(path, tuple(int(c) for c in array.coords[row]), data[int(row)].as_py())
    return virtual, len(inline_rows)


def _virtual_table(
    array: ArrayRefs,
    mask: np.ndarray,
    resolved: Mapping[str, str],
    infos: Mapping[str, _FileInfo],
    checksums: bool,
) -> dict[str, Any]:
    """The bulk table of the virtual rows (``mask``) of ``array``: URLs resolved and their
    checksums per file, dictionary-encoded (one entry per file, the indices shared), offsets
    and lengths viewed as uint64 where they can be."""
    everything = bool(mask.all())  # the usual case: no filter copying every row
    refs = array.refs if everything else array.refs.filter(pa.array(mask))
    urls = remap(refs.column("virtual_path"), resolved)
    files = urls.dictionary.to_pylist()
    lengths = refs.column("length")
    if lengths.null_count:  # whole-file refs: the file's size
        sizes = pa.array([infos[u].size for u in files], pa.int64()).take(urls.indices)
        lengths = pc.coalesce(lengths, sizes)
    offsets = refs.column("offset")
    table: dict[str, Any] = {
        # (n, 0) for scalars: no reshape
        "coord": encode_coords(array.coords if everything else array.coords[mask]),
        "virtual_path": urls,
        "offset": as_uint64(pc.fill_null(offsets, 0) if offsets.null_count else offsets),
        "length": as_uint64(lengths),
    }
    if checksums:
        sums = pa.array([infos[u].checksum for u in files], pa.string())
        table["checksum"] = with_values(urls, sums)
    return table


def as_uint64(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An int64 column without nulls or negative values as uint64, sharing its buffer (the
    bits are the same below 2**63); any other column cast, as the cast refuses a negative."""
    if isinstance(column, pa.ChunkedArray) and column.num_chunks == 1:
        column = column.chunk(0)
    if (
        not isinstance(column, pa.Array)
        or column.type != pa.int64()
        or column.null_count
        or (len(column) and pc.min(column).as_py() < 0)
    ):
        return pc.cast(column, pa.uint64())
    data = column.buffers()[1]
    return pa.Array.from_buffers(pa.uint64(), len(column), [None, data], offset=column.offset)

"""Refs back out: one snapshot's chunk refs as a kerchunk reference set (the inverse of
``import_kerchunk``), so fsspec's ``ReferenceFileSystem`` and what is built on it (xarray's
``engine="kerchunk"``, ``xr.open_zarr("reference://", ...)``) read the same values with no
icechunk-spark installed.

A reference maps each Zarr key to its bytes: metadata as JSON text; a virtual chunk as
``[url, offset, length]`` into its file; a chunk we wrote as ``[url, offset, length]`` into its
object in the repository's storage (``c/<id>``, as fsspec names it: a plain path for local
repositories); an inline chunk as ``"base64:..."`` (always base64: raw text would be read back
as base64 if it started with ``base64:``).

Keys are Zarr v2's by default (``zarr_format=2``, see metadata_v2.py): kerchunk's reference
format is v2, and so are its readers: xarray's ``engine="kerchunk"`` opens with
``zarr_format=2``, and fsspec's Parquet layout (``LazyReferenceMapper``) finds an array's
chunks from its ``.zarray`` and ``.``-joined chunk indexes. ``zarr_format=3`` (JSON only) keeps
each ``zarr.json`` byte for byte and the chunk keys of each array's chunk key encoding, which
zarr >= 3 reads through ``reference://`` (and nothing older): the way out for arrays v2 cannot
say (sharded, other codecs).

``kerchunk-json`` is ``{"version": 1, "refs": {...}}`` in one file; ``kerchunk-parquet`` is a
directory written by fsspec's own ``LazyReferenceMapper`` (``.zmetadata`` plus
``<array>/refs.<i>.parq``), with the pyarrow engine: fsspec defaults to fastparquet, which we do
not depend on; the files are plain Parquet either engine reads.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import AlreadyExistsError, InvalidInputError
from ..export import IMPLICIT_GROUP, implicit_groups
from ..format.keys import chunk_key
from ..storage import LocalStorage, MemoryStorage, Storage
from ..zarr_keys import chunk_keys, encode_chunk_key, node_dir
from .metadata_v2 import array_v3_to_v2, group_v3_to_v2

if TYPE_CHECKING:
    from ..core import BaseSession, ChunkRef

FORMATS = ("kerchunk-json", "kerchunk-parquet")
# fsspec's LazyReferenceMapper default: refs per Parquet file (each file holds that many rows).
RECORD_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class ExportedRefs:
    """A snapshot as kerchunk references (``refs``, the body of a version 1 set), and how many
    chunks of each kind it points to."""

    refs: dict[str, Any]
    zarr_format: int
    nodes: int
    native_chunks: int
    inline_chunks: int
    virtual_chunks: int

    @property
    def chunks(self) -> int:
        return self.native_chunks + self.inline_chunks + self.virtual_chunks


@dataclass(frozen=True, slots=True)
class RefsExportSummary:
    """What ``export_refs`` wrote: where, in which format, and the chunks by kind."""

    destination: str
    format: str
    zarr_format: int
    nodes: int
    chunks: int
    native_chunks: int
    inline_chunks: int
    virtual_chunks: int


def export_refs(
    session: BaseSession,
    destination: str,
    *,
    format: str = "kerchunk-json",
    zarr_format: int = 2,
    storage_options: Mapping[str, Any] | None = None,
    record_size: int = RECORD_SIZE,
) -> RefsExportSummary:
    """Write ``session``'s snapshot as a kerchunk reference set at ``destination`` (a path or
    fsspec URL, opened with ``storage_options``).

    >>> export_refs(repo.readonly_session(tag="v1"), "refs.json")             # doctest: +SKIP
    >>> xr.open_dataset("refs.json", engine="kerchunk")                       # doctest: +SKIP

    Raises:
        InvalidInputError: an unknown format, ``zarr_format=3`` with Parquet, an array Zarr v2
            cannot say faithfully, or chunks in a storage fsspec cannot read (memory).
        AlreadyExistsError: something exists at ``destination`` already (nothing is written).
    """
    import fsspec.core

    if format not in FORMATS:
        raise InvalidInputError(f"unknown format {format!r}: use {' or '.join(FORMATS)}")
    if zarr_format not in (2, 3) or (zarr_format == 3 and format != "kerchunk-json"):
        raise InvalidInputError(
            f"zarr_format={zarr_format} with {format}: kerchunk-parquet keys are Zarr v2 only "
            "(fsspec finds an array's chunks from its .zarray); kerchunk-json takes 2 or 3"
        )
    fs, path = fsspec.core.url_to_fs(destination, **dict(storage_options or {}))
    # A guard against overwriting, not a lock: LazyReferenceMapper.create would delete a
    # directory in the way, so the check must come first.
    if fs.exists(path):
        raise AlreadyExistsError(
            f"{destination} exists already: export the refs elsewhere, or delete it first"
        )
    built = kerchunk_refs(session, zarr_format=zarr_format)
    if format == "kerchunk-json":
        parent = path.rsplit("/", 1)[0]
        if parent and parent != path:
            fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(path, _json_document(built))
    else:
        _write_parquet(fs, path, built.refs, record_size)
    return RefsExportSummary(
        destination,
        format,
        zarr_format,
        built.nodes,
        built.chunks,
        built.native_chunks,
        built.inline_chunks,
        built.virtual_chunks,
    )


def kerchunk_refs(session: BaseSession, *, zarr_format: int = 2) -> ExportedRefs:
    """The snapshot's references, keys in Zarr ``zarr_format`` (see the module docstring).

    The dict can go straight to ``fsspec.filesystem("reference", fo={"version": 1, "refs":
    ...})``.

    Raises:
        InvalidInputError: as ``export_refs``.
    """
    nodes = session.list_nodes()
    refs: dict[str, Any] = {}
    kinds: Counter[str] = Counter()
    for path in implicit_groups(nodes):
        _put_metadata(refs, path, IMPLICIT_GROUP, None, zarr_format)
    for node in nodes:
        if node.meta is None:
            _put_metadata(refs, node.path, node.zarr_json, None, zarr_format)
            continue
        listed = list(chunk_keys(session, node))
        every = len(listed) == node.meta.metadata_chunks
        _put_metadata(refs, node.path, node.zarr_json, every, zarr_format)
        # v2 keys are ".".join(coord) whatever the array's own encoding: the .zarray we write
        # says so, and the Parquet layout splits chunk indexes on ".".
        v2_keys = replace(node.meta, key_encoding="v2", separator=".")
        for key, coord in listed:
            ref = session.get_chunk_ref(node.path, coord)
            assert ref is not None  # listed by chunk_keys
            if zarr_format == 2:
                key = node_dir(node.path) + encode_chunk_key(v2_keys, coord)
            refs[key] = _reference(ref, session.handle.storage)
            kinds[ref.kind] += 1
    return ExportedRefs(
        refs,
        zarr_format,
        len(nodes),
        kinds["native"],
        kinds["inline"],
        kinds["virtual"],
    )


def _put_metadata(
    refs: dict[str, Any], path: str, zarr_json: bytes, every_chunk: bool | None, zarr_format: int
) -> None:
    """The node's metadata keys; ``every_chunk`` is ``None`` for groups. A node's own document
    replaces the implicit group written for its path."""
    prefix = node_dir(path)
    if zarr_format == 3:
        refs[prefix + "zarr.json"] = zarr_json.decode()
        return
    if every_chunk is None:
        documents = group_v3_to_v2(zarr_json)
    else:
        documents = array_v3_to_v2(zarr_json, path, every_chunk)
    for name in (".zgroup", ".zarray", ".zattrs"):
        refs.pop(prefix + name, None)
    refs.update({prefix + name: text for name, text in documents.items()})


def _reference(ref: ChunkRef, storage: Storage) -> Any:
    if ref.kind == "inline":
        assert ref.inline_data is not None
        return "base64:" + base64.b64encode(ref.inline_data).decode()
    if ref.length == 0:
        # The Parquet layout reads offset 0 and size 0 as "the whole file": say b"" outright.
        return "base64:"
    if ref.kind == "native":
        assert ref.chunk_id is not None
        return [object_url(storage, chunk_key(ref.chunk_id)), ref.offset, ref.length]
    return [ref.virtual_path, ref.offset, ref.length]


def object_url(storage: Storage, key: str) -> str:
    """The URL by which fsspec reads object ``key`` of ``storage``.

    Raises:
        InvalidInputError: the storage is in this process's memory, out of fsspec's reach.
    """
    if isinstance(storage, LocalStorage):
        # fsspec opens a file:// path as written, not percent-decoded (as containers.py notes).
        return "file://" + (storage.root / key).as_posix()
    if isinstance(storage, MemoryStorage):
        raise InvalidInputError(
            f"the chunks are in {storage.url}, which only this process can read: export the "
            "refs of a repository in local files or object storage"
        )
    return f"{storage.url}/{key}"


def _json_document(built: ExportedRefs) -> bytes:
    """The version 1 JSON set. With v2 keys it carries ``.zmetadata`` too, v2's consolidated
    metadata, as fsspec's Parquet layout does: zarr >= 3 lists a nested group of a reference
    file system wrongly (its FsspecStore asks for ``/group``, which ReferenceFileSystem does
    not know), so without it a nested group opens with no members."""
    refs = dict(built.refs)
    if built.zarr_format == 2:
        metadata = {k: json.loads(v) for k, v in refs.items() if _is_v2_metadata(k)}
        refs[".zmetadata"] = json.dumps({"zarr_consolidated_format": 1, "metadata": metadata})
    return json.dumps({"version": 1, "refs": refs}).encode()


def _is_v2_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in (".zgroup", ".zarray", ".zattrs")


def _write_parquet(fs: Any, path: str, refs: dict[str, Any], record_size: int) -> None:
    """fsspec's own writer (kerchunk's ``refs_to_dataframe`` minus its fastparquet default)."""
    from fsspec.implementations.reference import LazyReferenceMapper

    out = LazyReferenceMapper.create(path, fs=fs, record_size=record_size, engine="pyarrow")
    # Metadata first: a chunk's place in its array's Parquet files comes from its .zarray.
    metadata = sorted(k for k in refs if _is_v2_metadata(k))
    for key in [*metadata, *sorted(refs.keys() - set(metadata))]:
        out[key] = refs[key]
    out.flush()


__all__ = [
    "FORMATS",
    "ExportedRefs",
    "RefsExportSummary",
    "export_refs",
    "kerchunk_refs",
    "object_url",
]

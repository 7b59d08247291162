"""The chunk API every session shares: write nodes, write and delete chunks and refs (native,
inline or virtual), on top of the reads (core/session_reads.py: find and list nodes, read
chunks and refs).

``Session`` (core/session.py) and ``ForkSession`` (core/forks.py) are both a ``BaseSession``; they
differ only where reads layer over the base snapshot (``_node_layer``, ``_chunk_ref``,
``_array_refs``), where the handle and the base view come from (``handle``, ``_view``), and what a
write must do first (``_require_writable``, ``_mark_written``). The zarr store takes a
``BaseSession``, so it reads and writes a session and a fork the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..chunks.codec import chunk_codec
from ..chunks.stats import ChunkStats, StatsLog
from ..errors import AlreadyExistsError, InvalidInputError, NotFoundError
from ..format.coords import encode_coord
from ..format.ids import new_node_id
from ..format.paths import normalize_path
from ..format.structure import Node, make_node
from .changes import ChangeSet, ChangeSummary
from .chunk_writes import store_chunk, virtual_ref, write_statistics
from .manifest_cache import ChunkRef
from .node_docs import array_doc, group_doc, grown_doc
from .ref_tables import check_coord, ref_table
from .session_reads import SessionReads


class BaseSession(SessionReads):
    """Nodes and chunks of one snapshot plus the changes layered over it, read and written."""

    def __init__(self, changes: ChangeSet, stats: StatsLog, branch: str | None) -> None:
        self._changes = changes  # where this session's writes are recorded
        self._stats = stats  # chunk statistics of those writes (config-selected)
        self.branch = branch
        self.read_only = False

    # -- what a kind of session decides (and, for reads, core/session_reads.py) -----------
    def _require_writable(self) -> None:
        """Raise unless this session may write now."""

    def _mark_written(self) -> None:
        """Called before each chunk write records anything (a fork counts its writers)."""

    # -- identity -------------------------------------------------------------------------
    def has_uncommitted_changes(self) -> bool:
        """Whether anything was written or deleted since the session started."""
        return not self._changes.is_empty()

    # -- writing nodes --------------------------------------------------------------------
    def create_group(self, path: str = "/", attributes: Mapping[str, Any] | None = None) -> Node:
        """Create a group at ``path`` (default: the root).

        Raises:
            AlreadyExistsError: a group or array exists there already.
        """
        return self.set_node_metadata(path, group_doc(attributes), create_only=True)

    def create_array(
        self,
        path: str,
        shape: Sequence[int],
        chunk_shape: Sequence[int],
        dtype: str,
        *,
        fill_value: Any = 0,
        dimension_names: Sequence[str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        codecs: Sequence[Mapping[str, Any]] | None = None,
    ) -> Node:
        """Create an array from its Zarr v3 metadata (bytes codec, no compression, by default).

        Raises:
            AlreadyExistsError: a group or array exists at ``path`` already.
            InvalidInputError: zarr does not accept the metadata.
        """
        doc = array_doc(
            path,
            shape,
            chunk_shape,
            dtype,
            fill_value=fill_value,
            dimension_names=dimension_names,
            attributes=attributes,
            codecs=codecs,
        )
        return self.set_node_metadata(path, doc, create_only=True)

    def set_node_metadata(self, path: str, zarr_json: bytes, *, create_only: bool = False) -> Node:
        """Create the node at ``path`` or replace its ``zarr.json`` (exact bytes are kept)."""
        self._require_writable()
        path = normalize_path(path)
        with self._changes.lock:
            existing = self.find_node(path)
            if existing is not None and create_only:
                raise AlreadyExistsError(f"a {existing.type} exists at {path!r} already")
            node_id = existing.id if existing is not None else new_node_id()
            node = make_node(node_id, path, bytes(zarr_json))
            if existing is not None and existing.type != node.type:
                raise InvalidInputError(
                    f"{path!r} is a {existing.type}; delete it before writing a {node.type} there"
                )
            self._changes.record_node(node, existed=existing is not None)
            return node

    def ensure_array(
        self,
        path: str,
        zarr_json: bytes,
        *,
        min_shape: Sequence[int] | None = None,
        recreate: bool = False,
    ) -> Node:
        """Make an array at ``path`` ready for a write, in one call.

        A missing array is created from ``zarr_json``, with any missing parent groups (as
        zarr's ``create_array`` does); an existing one keeps its own metadata. Its shape then
        grows to at least ``min_shape`` (an append), and ``recreate`` replaces it with an
        empty array of the same metadata (an overwrite: none of its old chunks remain).

        Raises:
            InvalidInputError: a group is at ``path``, or zarr does not accept ``zarr_json``.
        """
        self._require_writable()
        path = normalize_path(path)
        with self._changes.lock:
            current = self.find_node(path)
            if current is not None and current.type != "array":
                raise InvalidInputError(f"{path!r} is a group in the repository, not an array")
            doc = current.zarr_json if current is not None else bytes(zarr_json)
            doc = grown_doc(doc, path, min_shape)
            if current is None:
                self._create_parents(path)
                return self.set_node_metadata(path, doc, create_only=True)
            if recreate:  # a new node id: the array's old refs are not carried over
                self.delete_node(path, recursive=False)
                return self.set_node_metadata(path, doc)
            if doc != current.zarr_json:
                self.set_node_metadata(path, doc)
            return self.get_node(path)

    def _create_parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for depth in range(len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if self.find_node(parent) is None:
                self.create_group(parent)

    def delete_node(self, path: str, *, recursive: bool = True) -> None:
        """Delete the node at ``path`` (and, by default, everything below it)."""
        self._require_writable()
        path = normalize_path(path)
        with self._changes.lock:
            node = self.find_node(path)
            if node is None:
                raise NotFoundError(f"cannot delete {path!r}: no group or array there")
            doomed = [node]
            if recursive:
                prefix = "/" if path == "/" else path + "/"
                doomed += [
                    n for n in self.list_nodes() if n.path.startswith(prefix) and n.path != path
                ]
            view = self._view()
            for victim in doomed:  # by id: a node this session moved is at another path there
                self._changes.forget(victim, view.committed(victim))

    # -- writing chunks -------------------------------------------------------------------
    def set_chunk(self, path: str, coord: Sequence[int], data: bytes) -> None:
        """Store one chunk's (encoded) bytes: inline when small, else as a chunk file in ``c/``.

        Raises:
            InvalidInputError: no array at ``path``, or ``coord`` outside its chunk grid.
            ReadOnlyError: the session is read-only.
        """
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
        data = bytes(data)
        stats = write_statistics(self.handle.config, node, coord, encoded=data)
        self._store_chunk(node, coord, data, stats)

    def set_chunk_values(self, path: str, coord: Sequence[int], values: np.ndarray) -> None:
        """Encode a full chunk of values with the array's codecs and store it (statistics
        come from the values, no decoding)."""
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
        values = np.asarray(values)
        data = chunk_codec(node.zarr_json).encode(values)
        stats = write_statistics(self.handle.config, node, coord, values=values)
        self._store_chunk(node, coord, data, stats)

    def set_virtual_ref(
        self,
        path: str,
        coord: Sequence[int],
        url: str,
        offset: int,
        length: int,
        checksum: str | None = None,
    ) -> None:
        """Point one chunk at bytes of another file (a virtual ref).

        Args:
            path: the array.
            coord: the chunk's index in the chunk grid.
            url: the file, inside one of the repository's virtual chunk containers (a
                relative URL resolves against the only container).
            offset: where the chunk's bytes start in the file.
            length: how many bytes.
            checksum: the file's checksum when the ref was made (``file_checksum``); readers
                refuse the ref with ``SourceChangedError`` once the file changed.

        Raises:
            VirtualRefRefusedError: ``url`` lies outside the containers.
            InvalidInputError: ``coord`` outside the chunk grid, or a negative offset/length.
        """
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
        containers = self.handle.config.virtual_chunk_containers
        ref = virtual_ref(node, coord, url, offset, length, checksum, containers)
        self._record(node, encode_coord(coord), ref, None)

    def delete_chunk(self, path: str, coord: Sequence[int]) -> None:
        """Delete one chunk: readers see the array's fill value there."""
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
        self._record(node, encode_coord(coord), None, None)

    def set_chunk_refs(self, path: str, refs: pa.Table | Mapping[str, Any]) -> int:
        """Bulk-set chunk refs of one array from an Arrow table, with no Python loop per chunk.

        Columns: ``coord`` (an ``(n, ndim)`` integer array, a list<int> column, or encoded
        binary), and per row exactly one location: ``inline_data``, ``chunk_id`` (+ ``offset``,
        ``length``) of a chunk file in ``c/``, or ``virtual_path``/``location`` (+ ``offset``,
        ``length``, optional ``checksum``). Returns the number of refs set.
        """
        self._require_writable()
        node = self._array(path)
        table = ref_table(refs, node, self.handle.config.virtual_chunk_containers)
        self._mark_written()
        with self._changes.lock:
            self._changes.array_changes(node).add_table(table)
        return int(table.num_rows)

    def _store_chunk(
        self, node: Node, coord: tuple[int, ...], data: bytes, stats: ChunkStats | None
    ) -> None:
        self._mark_written()  # before the chunk file: a fork's writer that dies after it is known
        ref = store_chunk(self.handle.storage, self.handle.config, data)
        self._record(node, encode_coord(coord), ref, stats)

    def _record(
        self, node: Node, key: bytes, ref: ChunkRef | None, stats: ChunkStats | None
    ) -> None:
        self._mark_written()
        with self._changes.lock:
            self._changes.array_changes(node).set(key, ref)
            if stats is not None and ref is not None:
                self._stats.record(node.id, key, ref.chunk_id, ref.inline_data, stats)

    # -- status ---------------------------------------------------------------------------
    def status(self) -> ChangeSummary:
        """What this session changed so far: node paths, and changed chunks per array."""
        with self._changes.lock:  # no node write between the paths and the summary
            paths = {n.id: p for p, n in self._nodes().items()}
            return self._changes.summary(paths)

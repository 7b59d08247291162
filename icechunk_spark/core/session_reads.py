"""What every session reads: the nodes and chunks of one snapshot, with the session's changes
layered over them (``BaseSession``, core/base_session.py, adds the writes).

A read that finds a manifest or chunk file gone asks why: if the snapshot left the history
meanwhile (it expired, or an amend or squash replaced it, and garbage collection deleted
its files), it says so (``SnapshotCollectedError``); files are never changed or reused, so
no read returns wrong bytes. The question costs a state read, made only by reads that fail.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..chunks.stats import StatsLog, stats_table
from ..errors import InvalidInputError, NotFoundError
from ..format.coords import coverage, decode_coords
from ..format.paths import normalize_path
from ..format.structure import Node
from . import overlay
from .changes import ChangeSet
from .chunk_reads import naming_chunk
from .handle import RepoHandle
from .manifest_cache import ChunkRef
from .ref_tables import check_coord
from .refs import raise_if_collected
from .snapshot import SnapshotView


class SessionReads:
    """Nodes and chunks of one snapshot plus the changes layered over it, read."""

    _changes: ChangeSet  # the session's changes (``BaseSession.__init__``)
    _stats: StatsLog  # chunk statistics of those changes

    # -- what a kind of session decides ---------------------------------------------------
    @property
    def handle(self) -> RepoHandle:
        """The repository handle (core/handle.py) this session reads and writes through."""
        raise NotImplementedError

    def _view(self) -> SnapshotView:
        """The base snapshot."""
        raise NotImplementedError

    def _node_layer(self) -> ChangeSet:
        """The changes whose nodes layer over the base (a fork reads its session's)."""
        return self._changes

    # -- identity -------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> str:
        """The snapshot this session reads (the parent of its commit)."""
        return self._view().snapshot_id

    # -- reading nodes --------------------------------------------------------------------
    def get_node(self, path: str) -> Node:
        """The group or array at ``path``. Raises ``NotFoundError``."""
        return overlay.node_at(self._view(), self._node_layer(), normalize_path(path))

    def find_node(self, path: str) -> Node | None:
        """The group or array at ``path``, or ``None`` when there is none."""
        return overlay.find_node_at(self._view(), self._node_layer(), normalize_path(path))

    def list_nodes(self) -> list[Node]:
        """Every node, sorted by path."""
        nodes = self._nodes()
        return [nodes[p] for p in sorted(nodes)]

    def _nodes(self) -> dict[str, Node]:
        view, layer = self._view(), self._node_layer()
        with layer.lock:
            return overlay.current_nodes(view, layer)

    def _array(self, path: str) -> Node:
        node = self.get_node(path)
        if node.type != "array":
            raise InvalidInputError(f"{node.path!r} is a group, not an array")
        return node

    # -- reading chunks -------------------------------------------------------------------
    def get_chunk_ref(self, path: str, coord: Sequence[int]) -> ChunkRef | None:
        """Where the chunk's bytes are, or ``None`` when it was never written."""
        node = self._array(path)
        return self.chunk_ref_at(node, check_coord(node, coord))

    def chunk_ref_at(self, node: Node, coord: tuple[int, ...]) -> ChunkRef | None:
        """``get_chunk_ref`` for a caller holding the array already (``find_node``) and a
        coord inside its grid: the zarr store resolves a key once and reads with this."""
        try:
            return self._chunk_ref(node, coord)
        except NotFoundError as missing:  # a manifest
            self._explain_if_collected(missing)
            raise

    def _chunk_ref(self, node: Node, coord: tuple[int, ...]) -> ChunkRef | None:
        storage = self.handle.storage
        return overlay.chunk_ref(self._view(), self._node_layer(), node, coord, storage)

    def get_chunk(
        self, path: str, coord: Sequence[int], byte_range: tuple[int, int | None] | None = None
    ) -> bytes | None:
        """The chunk's bytes (``[start, end)`` of them with ``byte_range``), or ``None``."""
        ref = self.get_chunk_ref(path, coord)
        with naming_chunk(path, coord):
            return None if ref is None else self.read_ref(ref, byte_range)

    def read_ref(self, ref: ChunkRef, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """The bytes ``ref`` points to, inline, in a chunk file or virtual (``[start, end)``
        of them with ``byte_range``)."""
        try:
            return self.handle.read_ref(ref, byte_range)
        except NotFoundError as missing:  # a chunk file
            self._explain_if_collected(missing)
            raise

    async def read_ref_async(
        self, ref: ChunkRef, byte_range: tuple[int, int | None] | None = None
    ) -> bytes:
        """``read_ref`` for an event loop: concurrent virtual reads coalesce."""
        try:
            return await self.handle.read_ref_async(ref, byte_range)
        except NotFoundError as missing:
            self._explain_if_collected(missing)
            raise

    def _explain_if_collected(self, missing: NotFoundError) -> None:
        """Raise ``SnapshotCollectedError`` when ``missing``, a manifest or chunk file this
        session read, is gone because its snapshot left the history and GC ran meanwhile
        (the state read costs only reads that fail); return when that is not why."""
        during = "while this session read it"
        advice = "open a session on a snapshot still in the history (repo.ancestry())"
        raise_if_collected(self.handle.storage, [self.snapshot_id], missing, during, advice)

    def chunk_refs(self, path: str) -> pa.Table:
        """Every ref of the array (committed and uncommitted), sorted by coord. Location
        columns written dictionary-encoded (``format.locations``) come back so."""
        return self._refs_of(self._array(path))

    def _refs_of(self, node: Node) -> pa.Table:
        try:
            return self._array_refs(node)
        except NotFoundError as missing:  # a manifest
            self._explain_if_collected(missing)
            raise

    def _array_refs(self, node: Node) -> pa.Table:
        storage = self.handle.storage
        return overlay.array_refs(self._view(), self._changes, self._stats, node, storage)

    def chunk_coords(self, path: str) -> np.ndarray:
        """The coords of every chunk the array holds, as an ``(n, ndim)`` array, sorted."""
        node = self._array(path)
        assert node.meta is not None
        return decode_coords(self._refs_of(node).column("coord"), node.meta.ndim)

    def chunk_inventory(self, path: str) -> np.ndarray:
        """Which chunks the array has, as a boolean array over its chunk grid."""
        node = self._array(path)
        assert node.meta is not None
        return coverage(self.chunk_coords(path), node.meta.grid_shape)

    def chunk_stats(self, path: str) -> pa.Table:
        """Coords and ``stat_*`` columns of the array's chunks (see ``inventory``)."""
        node = self._array(path)
        assert node.meta is not None
        return stats_table(self.chunk_refs(path), node.meta)

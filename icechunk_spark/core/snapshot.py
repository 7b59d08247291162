"""Reading one snapshot: its nodes (structure file) and its chunk refs (manifests), cached."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from ..errors import NotFoundError
from ..format.keys import attributes_key, structure_key
from ..format.manifest import refs_of_array
from ..format.structure import ManifestRef, Node
from ..format.structure_decode import decode_attributes, decode_structure, node_from_row
from ..storage import Storage
from .manifest_cache import ChunkRef, ManifestCache, RefIndex


def extent_contains(extent: tuple[tuple[int, int], ...], coord: tuple[int, ...]) -> bool:
    if not extent:
        return True
    return all(lo <= c < hi for (lo, hi), c in zip(extent, coord, strict=False))


class SnapshotView:
    """The nodes of one snapshot and lazy, cached access to their refs."""

    def __init__(
        self,
        snapshot_id: str,
        nodes: Mapping[str, Node],
        manifests: ManifestCache,
    ) -> None:
        self.snapshot_id = snapshot_id
        self.nodes = dict(nodes)
        self._by_id = {n.id: n for n in self.nodes.values()}
        self._manifests = manifests
        self.manifest_cache = manifests
        self._indexes: dict[tuple[int, str], RefIndex] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls, storage: Storage, snapshot_id: str, structure_id: str, manifests: ManifestCache
    ) -> SnapshotView:
        key = structure_key(structure_id)
        rows = decode_structure(storage.get(key), key)
        attrs: dict[str, list[bytes]] = {}
        nodes: dict[str, Node] = {}
        for row in rows:
            doc = row.zarr_json
            if doc is None and row.attrs_ref is not None:
                file_id = row.attrs_ref.attrs_file
                if file_id not in attrs:
                    akey = attributes_key(file_id)
                    attrs[file_id] = list(decode_attributes(storage.get(akey), akey))
                doc = attrs[file_id][row.attrs_ref.row]
            assert doc is not None  # decode_structure guarantees one of the two
            nodes[row.path] = node_from_row(row, doc, key)
        return cls(snapshot_id, nodes, manifests)

    def node(self, path: str) -> Node:
        try:
            return self.nodes[path]
        except KeyError:
            raise NotFoundError(
                f"no group or array at {path!r} in snapshot {self.snapshot_id}"
            ) from None

    def manifest(self, manifest_id: str) -> pa.Table:
        """A whole manifest of this snapshot (cached)."""
        return self._manifests.get(manifest_id)

    def committed(self, node: Node) -> Node | None:
        """This snapshot's version of ``node`` (the same node id, at whatever path: a session
        may have moved it), or ``None`` when the node is new since."""
        return self._by_id.get(node.id)

    def ref_index(self, node: Node, manifest: ManifestRef) -> RefIndex:
        key = (node.id, manifest.manifest_id)
        with self._lock:
            index = self._indexes.get(key)
        if index is None:
            table = refs_of_array(self._manifests.get(manifest.manifest_id), node.id)
            assert node.meta is not None
            index = RefIndex(table, node.meta.ndim)
            with self._lock:
                self._indexes[key] = index
        return index

    def lookup(self, node: Node, coord: tuple[int, ...], key: bytes) -> ChunkRef | None:
        for manifest in node.manifests:
            if extent_contains(manifest.extent, coord):
                found = self._lookup_in(node, manifest, key)
                if found is not None:
                    return found
        return None

    def _lookup_in(self, node: Node, manifest: ManifestRef, key: bytes) -> ChunkRef | None:
        with self._lock:
            index = self._indexes.get((node.id, manifest.manifest_id))
        if index is None and not self._manifests.is_cached(manifest.manifest_id):
            # Nothing decoded yet: decode the one row group that may hold the coord rather
            # than the whole manifest (a cold lookup in a 1 M-ref array: ~3 ms, not ~250).
            assert node.meta is not None
            return self._manifests.lookup(manifest.manifest_id, node.id, node.meta.ndim, key)
        return self.ref_index(node, manifest).lookup(key)

    def array_refs(
        self, node: Node, wanted: Callable[[ManifestRef], bool] | None = None
    ) -> list[pa.Table]:
        """The array's refs, one table per manifest piece (each sorted by coord, as manifests
        are written). Its rows of the manifest as they are, without building the piece's point
        lookup index unless one exists: whole-array readers merge the tables and never look
        up one coord (a small commit built one per commit, and threw it away with the view)."""
        return [self._refs_in(node, m) for m in node.manifests if wanted is None or wanted(m)]

    def _refs_in(self, node: Node, manifest: ManifestRef) -> pa.Table:
        with self._lock:
            index = self._indexes.get((node.id, manifest.manifest_id))
        if index is not None:
            return index.table
        return refs_of_array(self._manifests.get(manifest.manifest_id), node.id)

    def children(self, path: str) -> Iterable[Node]:
        prefix = path.rstrip("/") + "/"
        return (
            n for p, n in self.nodes.items() if p.startswith(prefix) and "/" not in p[len(prefix) :]
        )


@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """One manifest of a snapshot: which set, which arrays, how many refs, how many bytes."""

    id: str
    set_name: str
    arrays: tuple[str, ...]
    refs: int
    bytes: int


def manifest_infos(view: SnapshotView, sizes: Mapping[str, int]) -> list[ManifestInfo]:
    """Every manifest of ``view``'s snapshot; ``sizes``: bytes per manifest id."""
    members: dict[str, list[Node]] = {}
    refs: dict[str, int] = {}
    set_names: dict[str, str] = {}
    for node in sorted(view.nodes.values(), key=lambda n: n.path):
        for m in node.manifests:
            members.setdefault(m.manifest_id, []).append(node)
            refs[m.manifest_id] = refs.get(m.manifest_id, 0) + m.ref_count
            set_names[m.manifest_id] = m.set_name
    return [
        ManifestInfo(
            id=mid,
            set_name=set_names[mid],
            arrays=tuple(n.path for n in nodes),
            refs=refs[mid],
            bytes=sizes.get(mid, 0),
        )
        for mid, nodes in members.items()
    ]


class ViewCache:
    """The most recently used snapshot views of a repository handle, bounded."""

    SIZE = 32

    def __init__(self) -> None:
        self._views: dict[str, SnapshotView] = {}
        self._lock = threading.Lock()

    def get(self, snapshot_id: str) -> SnapshotView | None:
        with self._lock:
            return self._views.get(snapshot_id)

    def put(self, view: SnapshotView) -> None:
        with self._lock:
            if len(self._views) >= self.SIZE:
                self._views.pop(next(iter(self._views)))
            self._views[view.snapshot_id] = view

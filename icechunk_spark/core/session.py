"""Sessions: a consistent view of one snapshot, and (when writable) a change set to commit."""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import (
    AlreadyExistsError,
    CommitStateUnknownError,
    Conflict,
    ConflictError,
    IcechunkSparkError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    StaleSessionError,
)
from ..format.coords import decode_coords, encode_coord, encode_coords
from ..format.ids import new_node_id, new_object_id
from ..format.keys import chunk_key, state_key, txlog_key
from ..format.manifest import attach_stats, conform_refs, merge_refs
from ..format.paths import normalize_path
from ..format.state import Ref, SnapshotInfo, State
from ..format.structure import ManifestRef, Node, make_node
from ..format.txlog import decode_txlog
from ..inventory import (
    ChunkStats,
    StatsLog,
    chunk_codec,
    chunk_values_stats,
    encoded_chunk_stats,
    stats_enabled,
)
from ..progress import Progress
from ..splitting import ManifestConfig
from .changes import ChangeSet
from .config import RepositoryConfig
from .conflicts import OnConflict, Theirs, find_conflicts, resolve
from .containers import resolve_url
from .flush import BuiltSnapshot, build_snapshot, current_nodes
from .refs import update_state
from .snapshot import ChunkRef, SnapshotView

if TYPE_CHECKING:
    from ..zarr_store import IcechunkStore
    from .repository import Repository

MAX_REBASES = 200


def _backoff(attempt: int) -> None:
    time.sleep(random.random() * min(1.0, 0.01 * 2 ** min(attempt, 7)))


class _BranchMoved(Exception):
    """Internal: the branch tip is not our parent any more (carries the state seen)."""

    def __init__(self, state: State) -> None:
        self.state = state


class _CollectedSince(Exception):
    """Internal: garbage collection started after our objects were written (carries the
    state with its fence)."""

    def __init__(self, state: State) -> None:
        self.state = state


@dataclass(frozen=True, slots=True)
class ChangeSummary:
    """What a session changed: paths of nodes, and chunk counts per array path."""

    created: tuple[str, ...]
    updated: tuple[str, ...]
    deleted: tuple[str, ...]
    chunks: Mapping[str, int]

    def is_empty(self) -> bool:
        return not (self.created or self.updated or self.deleted or self.chunks)


class Session:
    """A view of one snapshot; writable sessions also collect changes and commit them.

    >>> session = repo.writable_session("main")            # doctest: +SKIP
    >>> session.create_group("/")                          # doctest: +SKIP
    >>> session.commit("create the root group")            # doctest: +SKIP
    """

    def __init__(
        self,
        repo: Repository,
        base: SnapshotView,
        branch: str | None,
        read_only: bool,
        fresh_since: int = -1,
    ) -> None:
        """Prefer ``repo.writable_session`` / ``repo.readonly_session``.

        ``fresh_since``: a state generation that had been published before any object this
        session's changes will reference was written (-1: unknown). It decides whether a
        garbage collection that starts later could have deleted those objects.
        """
        self._repo = repo
        self._fresh_since = fresh_since
        self._base = base
        self.branch = branch
        self.read_only = read_only
        self._changes = ChangeSet()
        self._stats = StatsLog()  # chunk statistics of this session's writes (config-selected)
        self._committed = False
        # A manifest config to build under, and the config change the commit publishes with
        # it (repack_manifests); None: the repository's, unchanged.
        self._manifest_config: ManifestConfig | None = None
        self._config_change: Callable[[RepositoryConfig], RepositoryConfig] | None = None

    # -- identity -------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> str:
        """The snapshot this session reads (the parent of its commit)."""
        return self._base.snapshot_id

    @property
    def repository(self) -> Repository:
        return self._repo

    @property
    def store(self) -> IcechunkStore:
        """A Zarr v3 store over this session (read-only for read-only sessions)."""
        from ..zarr_store import IcechunkStore

        return IcechunkStore(self)

    def has_uncommitted_changes(self) -> bool:
        return not self._changes.is_empty()

    # -- nodes ----------------------------------------------------------------------------
    def get_node(self, path: str) -> Node:
        """The group or array at ``path``. Raises ``NotFoundError``."""
        path = normalize_path(path)
        changes = self._changes
        with changes.lock:
            if path in changes.created:
                return changes.created[path]
            if path in changes.updated:
                node = changes.updated[path]
                base = self._base.nodes.get(path)
                return make_node(node.id, path, node.zarr_json, base.manifests if base else ())
            if path in changes.deleted:
                raise NotFoundError(f"no group or array at {path!r} (deleted in this session)")
        return self._base.node(path)

    def find_node(self, path: str) -> Node | None:
        """The group or array at ``path``, or ``None`` when there is none."""
        try:
            return self.get_node(path)
        except NotFoundError:
            return None

    def list_nodes(self) -> list[Node]:
        """Every node, sorted by path."""
        with self._changes.lock:
            nodes = current_nodes(self._base, self._changes)
        return [nodes[p] for p in sorted(nodes)]

    def create_group(self, path: str = "/", attributes: Mapping[str, Any] | None = None) -> Node:
        doc = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}
        return self.set_node_metadata(path, json.dumps(doc).encode(), create_only=True)

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
        """Create an array from its Zarr v3 metadata (bytes codec, no compression, by default)."""
        doc: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [int(s) for s in shape],
            "data_type": dtype,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": [int(c) for c in chunk_shape]},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill_value,
            "codecs": list(codecs or [{"name": "bytes", "configuration": {"endian": "little"}}]),
            "attributes": dict(attributes or {}),
        }
        if dimension_names is not None:
            doc["dimension_names"] = list(dimension_names)
        _validate_array_doc(path, doc)
        return self.set_node_metadata(path, json.dumps(doc).encode(), create_only=True)

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
            self._record_metadata(path, node, existing)
            return node

    def _record_metadata(self, path: str, node: Node, existing: Node | None) -> None:
        changes = self._changes
        if path in changes.created:
            changes.created[path] = node
        elif existing is not None:
            changes.updated[path] = node
        else:
            changes.created[path] = node

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
            for victim in doomed:
                self._forget(victim)

    def _forget(self, node: Node) -> None:
        changes = self._changes
        changes.updated.pop(node.path, None)
        changes.chunks.pop(node.id, None)
        changes.attached.pop(node.id, None)
        if changes.created.pop(node.path, None) is None:
            changes.deleted[node.path] = self._base.nodes[node.path]

    def _array(self, path: str) -> Node:
        node = self.get_node(path)
        if node.type != "array":
            raise InvalidInputError(f"{node.path!r} is a group, not an array")
        return node

    # -- chunks ---------------------------------------------------------------------------
    def set_chunk(self, path: str, coord: Sequence[int], data: bytes) -> None:
        """Store one chunk's (encoded) bytes: inline when small, else as a chunk file in ``c/``."""
        self._require_writable()
        node = self._array(path)
        coord = self._check_coord(node, coord)
        data = bytes(data)
        stats = None
        if stats_enabled(self._repo.config.chunk_statistics, node.path):
            stats = encoded_chunk_stats(node, coord, data)
        self._store_chunk(node, coord, data, stats)

    def set_chunk_values(self, path: str, coord: Sequence[int], values: np.ndarray) -> None:
        """Encode a full chunk of values with the array's codecs and store it (statistics
        come from the values, no decoding)."""
        self._require_writable()
        node = self._array(path)
        coord = self._check_coord(node, coord)
        data = chunk_codec(node.zarr_json).encode(np.asarray(values))
        stats = None
        if stats_enabled(self._repo.config.chunk_statistics, node.path):
            stats = chunk_values_stats(node, coord, np.asarray(values))
        self._store_chunk(node, coord, data, stats)

    def _store_chunk(
        self, node: Node, coord: tuple[int, ...], data: bytes, stats: ChunkStats | None
    ) -> None:
        if len(data) <= self._repo.config.inline_chunk_threshold_bytes:
            ref = ChunkRef("inline", inline_data=data, length=len(data))
        else:
            chunk_id = new_object_id()
            self._repo.storage.put(chunk_key(chunk_id), data)
            ref = ChunkRef("native", chunk_id=chunk_id, offset=0, length=len(data))
        key = encode_coord(coord)
        with self._changes.lock:
            self._changes.array_changes(node).set(key, ref)
            if stats is not None:
                self._stats.record(node.id, key, ref.chunk_id, ref.inline_data, stats)

    def set_virtual_ref(
        self,
        path: str,
        coord: Sequence[int],
        url: str,
        offset: int,
        length: int,
        checksum: str | None = None,
    ) -> None:
        """Point one chunk at ``length`` bytes at ``offset`` of ``url`` (inside a container)."""
        self._require_writable()
        node = self._array(path)
        coord = self._check_coord(node, coord)
        absolute, _ = resolve_url(url, self._repo.config.virtual_chunk_containers)
        if offset < 0 or length < 0:
            raise InvalidInputError(
                f"virtual ref for {node.path!r} {coord}: offset and length must be >= 0"
            )
        ref = ChunkRef(
            "virtual",
            virtual_path=absolute,
            offset=int(offset),
            length=int(length),
            checksum=checksum,
        )
        with self._changes.lock:
            self._changes.array_changes(node).set(encode_coord(coord), ref)

    def delete_chunk(self, path: str, coord: Sequence[int]) -> None:
        self._require_writable()
        node = self._array(path)
        coord = self._check_coord(node, coord)
        with self._changes.lock:
            self._changes.array_changes(node).set(encode_coord(coord), None)

    def set_chunk_refs(self, path: str, refs: pa.Table | Mapping[str, Any]) -> int:
        """Bulk-set chunk refs of one array from an Arrow table, with no Python loop per chunk.

        Columns: ``coord`` (an ``(n, ndim)`` integer array, a list<int> column, or encoded
        binary), and per row exactly one location: ``inline_data``, ``chunk_id`` (+ ``offset``,
        ``length``) of a chunk file in ``c/``, or ``virtual_path``/``location`` (+ ``offset``,
        ``length``, optional ``checksum``). Returns the number of refs set.
        """
        self._require_writable()
        node = self._array(path)
        assert node.meta is not None
        table = _as_ref_table(refs, node.meta.ndim)
        self._check_coords_in_grid(node, table)
        self._check_one_location(node, table)
        table = self._resolve_virtual_column(table)
        with self._changes.lock:
            self._changes.array_changes(node).add_table(table)
        return int(table.num_rows)

    def attach_manifests(self, path: str, manifests: Sequence[ManifestRef]) -> None:
        """Declare that prewritten manifests hold *all* of the array's refs from now on.

        For jobs too big for one process (Spark executors write the manifests with
        ``flush.write_array_manifest``); the commit links them as they are. Earlier chunk
        changes to the array in this session are replaced.
        """
        self._require_writable()
        node = self._array(path)
        with self._changes.lock:
            self._changes.chunks.pop(node.id, None)
            self._changes.attached[node.id] = tuple(manifests)

    def repack_manifests(self, config: ManifestConfig | None = None) -> None:
        """Have the commit rewrite every manifest under the repository's manifest config.

        Args:
            config: repack under this manifest config instead; the commit then also stores
                it as the repository's, in the same compare-and-swap.
        """
        self._require_writable()
        self._changes.repack_all = True
        if config is not None:
            self._manifest_config = config
            self._config_change = lambda stored: stored.with_manifests(config.to_dict())

    def get_chunk_ref(self, path: str, coord: Sequence[int]) -> ChunkRef | None:
        """Where the chunk's bytes are, or ``None`` when it was never written."""
        node = self._array(path)
        coord = self._check_coord(node, coord)
        key = encode_coord(coord)
        with self._changes.lock:
            changes = self._changes.chunks.get(node.id)
            if changes is not None:
                found, ref = changes.lookup(key)
                if found:
                    return ref
        base = self._base.nodes.get(node.path)
        if base is None or base.id != node.id:
            return None
        return self._base.lookup(base, coord, key)

    def get_chunk(
        self, path: str, coord: Sequence[int], byte_range: tuple[int, int | None] | None = None
    ) -> bytes | None:
        """The chunk's bytes (``[start, end)`` of them with ``byte_range``), or ``None``."""
        ref = self.get_chunk_ref(path, coord)
        if ref is None:
            return None
        return self._repo.read_ref(ref, byte_range)

    def chunk_coords(self, path: str) -> np.ndarray:
        """The coords of every chunk the array holds, as an ``(n, ndim)`` array, sorted."""
        node = self._array(path)
        assert node.meta is not None
        return decode_coords(self.chunk_refs(path).column("coord"), node.meta.ndim)

    def chunk_refs(self, path: str) -> pa.Table:
        """Every ref of the array (committed and uncommitted), sorted by coord."""
        node = self._array(path)
        assert node.meta is not None
        layers = []
        base = self._base.nodes.get(node.path)
        if base is not None and base.id == node.id:
            layers.extend(self._base.array_refs(base))
        with self._changes.lock:
            changes = self._changes.chunks.get(node.id)
            if changes is not None:
                stats = self._stats.table(node.id)
                layers.extend(attach_stats(t, stats) for t in changes.layers(node.id))
        return merge_refs(layers, node.meta.ndim)

    def chunk_inventory(self, path: str) -> np.ndarray:
        """Which chunks the array has, as a boolean array over its chunk grid."""
        from ..inventory import chunk_inventory

        return chunk_inventory(self, path)

    def chunk_stats(self, path: str) -> pa.Table:
        """Coords and ``stat_*`` columns of the array's chunks (see ``inventory``)."""
        from ..inventory import chunk_stats

        return chunk_stats(self, path)

    def _check_coord(self, node: Node, coord: Sequence[int]) -> tuple[int, ...]:
        assert node.meta is not None
        coord = tuple(int(c) for c in coord)
        grid = node.meta.grid_shape
        if len(coord) != len(grid) or any(
            not 0 <= c < g for c, g in zip(coord, grid, strict=False)
        ):
            raise InvalidInputError(
                f"chunk coord {coord} is outside the chunk grid {grid} of array {node.path!r}"
            )
        return coord

    def _check_coords_in_grid(self, node: Node, table: pa.Table) -> None:
        assert node.meta is not None
        if table.num_rows == 0 or node.meta.ndim == 0:
            return
        coords = decode_coords(table.column("coord"), node.meta.ndim)
        outside = np.any(coords >= np.asarray(node.meta.grid_shape, dtype=np.int64), axis=1)
        if outside.any():
            first = tuple(int(c) for c in coords[int(np.argmax(outside))])
            raise InvalidInputError(
                f"{int(outside.sum())} chunk coords lie outside the chunk grid "
                f"{node.meta.grid_shape} of array {node.path!r}, the first {first}"
            )

    @staticmethod
    def _check_one_location(node: Node, table: pa.Table) -> None:
        located = [
            pc.cast(pc.is_valid(table.column(c)), pa.int8())
            for c in ("inline_data", "chunk_id", "virtual_path")
        ]
        count = pc.add(pc.add(located[0], located[1]), located[2])
        bad = pc.not_equal(count, 1)
        if pc.any(bad).as_py():
            raise InvalidInputError(
                f"every ref for array {node.path!r} needs exactly one of inline_data, chunk_id, "
                f"virtual_path; {pc.sum(pc.cast(bad, pa.int64())).as_py()} rows do not"
            )

    def _resolve_virtual_column(self, table: pa.Table) -> pa.Table:
        column = table.column("virtual_path")
        if column.null_count == len(column):
            return table
        containers = self._repo.config.virtual_chunk_containers
        unique = pc.unique(column.drop_null()).to_pylist()
        resolved = {u: resolve_url(u, containers)[0] for u in unique}
        if all(k == v for k, v in resolved.items()):
            return table
        mapped = pa.array(
            [resolved.get(v) if v is not None else None for v in column.to_pylist()], pa.string()
        )
        return table.set_column(
            table.schema.get_field_index("virtual_path"), "virtual_path", mapped
        )

    # -- status and commit ----------------------------------------------------------------
    def status(self) -> ChangeSummary:
        with self._changes.lock:
            changes = self._changes
            paths = {n.id: p for p, n in current_nodes(self._base, changes).items()}
            return ChangeSummary(
                created=tuple(sorted(changes.created)),
                updated=tuple(sorted(changes.updated)),
                deleted=tuple(sorted(changes.deleted)),
                chunks={
                    paths[i]: len(c.changed_coords())
                    for i, c in changes.chunks.items()
                    if len(c) and i in paths
                },
            )

    def discard_changes(self) -> None:
        """Forget every uncommitted change (chunk files already written become garbage)."""
        self._changes = ChangeSet()
        self._stats = StatsLog()

    def commit(
        self,
        message: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        on_conflict: OnConflict = "fail",
        progress: Progress | None = None,
    ) -> str:
        """Atomically publish the changes as a new snapshot on the session's branch.

        If the branch moved since the session started, non-overlapping changes are rebased onto
        the new tip. Returns the new snapshot id. ``progress`` hears the manifests being written.

        Raises:
            ConflictError: our changes overlap a concurrent commit (and ``on_conflict`` is
                ``"fail"``, or the overlap is not about chunks).
            ReadOnlyError: the session is read-only or has committed already.
            InvalidInputError: nothing to commit.
        """
        self._require_writable()
        if on_conflict not in ("fail", "ours", "theirs"):
            raise InvalidInputError(
                f"on_conflict must be 'fail', 'ours' or 'theirs', not {on_conflict!r}"
            )
        if self._changes.is_empty():
            raise InvalidInputError("no changes to commit; write something first")
        assert self.branch is not None
        user_metadata = dict(metadata or {})
        json.dumps(user_metadata)  # metadata must be JSON: fail before writing anything
        for attempt in range(MAX_REBASES):
            built = build_snapshot(
                self._repo.storage,
                self._base,
                self._changes,
                self._manifest_config or self._repo.manifest_config,
                self._repo.pool,
                self._stats.tables(),
                progress,
            )
            try:
                published = update_state(
                    self._repo.storage,
                    functools.partial(
                        self._next_state, built=built, message=message, metadata=user_metadata
                    ),
                )
            except CommitStateUnknownError as unknown:
                raise CommitStateUnknownError(built.snapshot_id, unknown.reason) from unknown
            except _CollectedSince as collected:
                self._protect_from_gc(collected.state)
                continue
            except _BranchMoved as moved:
                self._rebase(moved.state, on_conflict)
                _backoff(attempt)  # many writers on one branch: spread out so each gets a turn
                continue
            if self._config_change is not None:
                self._repo.adopt_config(published.config)
            self._committed = True
            self.read_only = True
            self._base = SnapshotView(built.snapshot_id, built.nodes, self._repo.manifest_cache)
            self._repo.remember_view(self._base)
            return built.snapshot_id
        raise IcechunkSparkError(
            f"gave up committing to {self.branch!r} after {MAX_REBASES} rebases onto concurrent "
            "commits; the branch is too busy, retry later"
        )

    def _next_state(
        self, state: State, built: BuiltSnapshot, message: str, metadata: Mapping[str, Any]
    ) -> State:
        assert self.branch is not None
        fence = state.gc_fence
        if fence is not None and fence.generation > self._fresh_since:
            raise _CollectedSince(state)
        tip = state.branch(self.branch).snapshot_id
        if tip != self._base.snapshot_id:
            raise _BranchMoved(state)
        parent = state.snapshots.get(tip)
        now = int(time.time() * 1000)
        info = SnapshotInfo(
            id=built.snapshot_id,
            parent_id=tip,
            # Never before the parent, so as_of lookups stay ordered along a branch.
            timestamp_ms=max(now, parent.timestamp_ms if parent else now),
            structure_file=built.structure_id,
            message=message,
            metadata=metadata,
        )
        config = state.config
        if self._config_change is not None:
            config = self._config_change(RepositoryConfig.from_dict(config)).to_dict()
        return state.next(
            snapshots={**state.snapshots, info.id: info},
            refs={**state.refs, self.branch: Ref(self.branch, info.id, "branch")},
            config=config,
        )

    def _protect_from_gc(self, state: State) -> None:
        """Make sure GC (whose fence ``state`` carries) cannot delete what we will publish.

        GC deletes only objects older than its cut-off and older than its fence. If this
        session's objects all postdate the cut-off, nothing is to do. Otherwise the chunk files
        our changes reference are copied to new ids (written after the fence, so GC keeps
        them); manifests and the structure are rebuilt anyway. What is already gone cannot be
        saved: then the commit stops before publishing.

        Raises:
            StaleSessionError: GC deleted a chunk file this session wrote, or manifests were
                attached (their chunk files cannot be re-checked here).
        """
        fence = state.gc_fence
        assert fence is not None
        began_ms = self._fresh_since_ms()
        if began_ms is not None and fence.cutoff_ms <= began_ms:
            self._fresh_since = state.generation  # the cut-off predates every object of ours
            return
        cutoff = datetime.fromtimestamp(fence.cutoff_ms / 1000, tz=UTC).isoformat()
        if self._changes.attached:
            raise StaleSessionError(
                f"garbage collection with a cut-off of {cutoff} started while this session "
                "was writing, and may delete the chunk files of its attached manifests; "
                "nothing was committed: run the write again"
            )
        with self._changes.lock:
            renamed = self._copy_chunk_files(sorted(self._changes.chunk_ids()), cutoff)
            self._changes.rename_chunks(renamed)
            self._stats.rename_chunks(renamed)
        self._fresh_since = state.generation

    def _fresh_since_ms(self) -> int | None:
        """When (storage clock) the state ``fresh_since`` was written; None if unknown/gone."""
        if self._fresh_since < 0:
            return None
        key = state_key(self._fresh_since)
        return next((i.modified_ms for i in self._repo.storage.list(key) if i.key == key), None)

    def _copy_chunk_files(self, chunk_ids: Sequence[str], cutoff: str) -> dict[str, str]:
        storage = self._repo.storage

        def copy(old: str) -> tuple[str, str]:
            try:
                data = storage.get(chunk_key(old))
            except NotFoundError:
                raise StaleSessionError(
                    f"garbage collection with a cut-off of {cutoff} deleted chunk file "
                    f"{chunk_key(old)!r}, written by this session before the cut-off; nothing "
                    "was committed: write the data again in a new session, and collect garbage "
                    "with a cut-off older than the longest write (e.g. 7 days)"
                ) from None
            new = new_object_id()
            storage.put(chunk_key(new), data)
            return old, new

        return dict(self._repo.pool.map(copy, chunk_ids))

    def _rebase(self, state: State, on_conflict: OnConflict) -> None:
        assert self.branch is not None
        tip = state.branch(self.branch).snapshot_id
        storage = self._repo.storage
        logs = [
            decode_txlog(storage.get(txlog_key(s)), txlog_key(s))
            for s in self._snapshots_since_base(state, tip)
        ]
        tip_view = self._repo.snapshot_view(tip, state)
        with self._changes.lock:
            nodes = current_nodes(self._base, self._changes)
            found = find_conflicts(
                self._changes,
                Theirs.from_logs(logs),
                {n.id: n for n in nodes.values()},
                {n.id: n for n in tip_view.nodes.values()},
            )
            left = resolve(found, self._changes, on_conflict)
            if left:
                raise ConflictError(left, self.branch)
        self._base = tip_view

    def _snapshots_since_base(self, state: State, tip: str) -> list[str]:
        """The snapshots from ``tip`` down to our base (excluded): all we must rebase over.

        Raises:
            ConflictError: the branch does not descend from our base (it was reset elsewhere,
                or our base was expired), or the way down crosses a parent link that expiry
                re-linked, whose skipped snapshots' changes cannot be checked.
        """
        assert self.branch is not None
        base = self._base.snapshot_id
        path: list[str] = []
        relinked: str | None = None
        cursor: str | None = tip if base in state.snapshots else None
        while cursor is not None and cursor != base:
            info = state.snapshots.get(cursor)
            if info is None:
                cursor = None
                break
            if info.parent_relinked and relinked is None:
                relinked = cursor
            path.append(cursor)
            cursor = info.parent_id
        if cursor is None:
            reason = (
                "branch was reset to a snapshot that does not descend from ours, or this "
                "session's base was expired"
            )
            raise ConflictError([Conflict(self.branch, reason)], self.branch)
        if relinked is not None:
            reason = (
                f"snapshots committed since this session's base were expired (below "
                f"{relinked}), so their changes cannot be checked"
            )
            raise ConflictError([Conflict(self.branch, reason)], self.branch)
        return path

    def _require_writable(self) -> None:
        if self._committed:
            raise ReadOnlyError("this session has committed already; open a new writable session")
        if self.read_only:
            raise ReadOnlyError(
                "this session is read-only; open one with repo.writable_session(branch) to write"
            )

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writable"
        return f"<Session {mode} branch={self.branch!r} snapshot={self.snapshot_id}>"


def _validate_array_doc(path: str, doc: Mapping[str, Any]) -> None:
    """Let zarr parse the metadata first: an invalid dtype or codec committed would make
    every reader of the repository (``xr.open_zarr``) fail, not just this array's."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        ArrayV3Metadata.from_dict(dict(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"array {path!r}: invalid Zarr v3 metadata: {exc}") from exc


def _as_ref_table(refs: pa.Table | Mapping[str, Any], ndim: int) -> pa.Table:
    if not isinstance(refs, pa.Table):
        refs = dict(refs)
        coords = refs.get("coord")
        if isinstance(coords, np.ndarray):
            # A 0-d array's coords are (n, 0): -1 cannot be inferred from size 0.
            rows = coords.shape[0] if coords.ndim else 1
            refs["coord"] = encode_coords(
                coords.reshape(rows, ndim) if ndim == 0 else coords.reshape(-1, ndim)
            )
        refs = pa.table(refs)
    if "location" in refs.column_names and "virtual_path" not in refs.column_names:
        refs = refs.rename_columns(
            ["virtual_path" if c == "location" else c for c in refs.column_names]
        )
    if "coord" not in refs.column_names:
        raise InvalidInputError("bulk refs need a 'coord' column")
    coord = refs.column("coord")
    if (
        pa.types.is_list(coord.type)
        or pa.types.is_large_list(coord.type)
        or pa.types.is_fixed_size_list(coord.type)
    ):
        flat = pc.list_flatten(coord).to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(coord).to_numpy(zero_copy_only=False)
        if len(lengths) and not np.all(lengths == ndim):
            raise InvalidInputError(f"every coord must have {ndim} indices")
        if len(flat) and flat.min() < 0:
            raise InvalidInputError("chunk coords must be >= 0")
        refs = refs.set_column(
            refs.schema.get_field_index("coord"), "coord", encode_coords(flat.reshape(-1, ndim))
        )
    elif not (pa.types.is_binary(coord.type) or pa.types.is_large_binary(coord.type)):
        raise InvalidInputError(f"the 'coord' column must be list<int> or binary, not {coord.type}")
    if "array_id" not in refs.column_names:
        refs = refs.append_column("array_id", pa.array(np.zeros(refs.num_rows, np.uint64)))
    return conform_refs(refs)

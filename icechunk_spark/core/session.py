"""Sessions: a consistent view of one snapshot, and (when writable) a change set to commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..chunks.codec import chunk_codec
from ..chunks.stats import (
    ChunkStats,
    StatsLog,
    stats_table,
)
from ..errors import AlreadyExistsError, InvalidInputError, NotFoundError, ReadOnlyError
from ..format.coords import coverage, decode_coords, encode_coord
from ..format.ids import new_node_id
from ..format.paths import normalize_path
from ..format.structure import ManifestRef, Node, make_node
from ..progress import Progress
from ..splitting import ManifestConfig
from . import overlay
from .changes import ChangeSet, ChangeSummary
from .chunk_reads import naming_chunk
from .chunk_writes import store_chunk, virtual_ref, write_statistics
from .commit import Commit, CommitOptions
from .conflicts import OnConflict
from .forks import ForkLedger, ForkSession, check_forks_merged, make_fork, merge_forks
from .node_docs import array_doc, group_doc, grown_doc
from .overlay import current_nodes
from .ref_tables import check_coord, ref_table
from .snapshot import ChunkRef, SnapshotView
from .staged import StagedRefs
from .staged_writes import PieceRunner

if TYPE_CHECKING:
    from ..zarr_store import IcechunkStore
    from .repository import Repository


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
        # A manifest config to build under, which the commit stores as the repository's
        # (repack_manifests); None: the repository's, unchanged.
        self._repack: ManifestConfig | None = None
        self._fork_ledger = ForkLedger()  # the forks of this change set (core/forks.py)

    # -- identity -------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> str:
        """The snapshot this session reads (the parent of its commit)."""
        return self._base.snapshot_id

    @property
    def repository(self) -> Repository:
        """The repository this session reads and commits to."""
        return self._repo

    @property
    def store(self) -> IcechunkStore:
        """A Zarr v3 store over this session (read-only for read-only sessions)."""
        from ..zarr_store import IcechunkStore

        return IcechunkStore(self)

    def has_uncommitted_changes(self) -> bool:
        """Whether anything was written, deleted or attached since the session started."""
        return not self._changes.is_empty()

    # -- nodes ----------------------------------------------------------------------------
    def get_node(self, path: str) -> Node:
        """The group or array at ``path``. Raises ``NotFoundError``."""
        return overlay.node_at(self._base, self._changes, normalize_path(path))

    def find_node(self, path: str) -> Node | None:
        """The group or array at ``path``, or ``None`` when there is none."""
        return overlay.find_node_at(self._base, self._changes, normalize_path(path))

    def list_nodes(self) -> list[Node]:
        """Every node, sorted by path."""
        with self._changes.lock:
            nodes = current_nodes(self._base, self._changes)
        return [nodes[p] for p in sorted(nodes)]

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
            for victim in doomed:
                self._changes.forget(victim, self._base.nodes.get(victim.path))

    def _array(self, path: str) -> Node:
        node = self.get_node(path)
        if node.type != "array":
            raise InvalidInputError(f"{node.path!r} is a group, not an array")
        return node

    # -- chunks ---------------------------------------------------------------------------
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
        stats = write_statistics(self._repo.config, node, coord, encoded=data)
        self._store_chunk(node, coord, data, stats)

    def set_chunk_values(self, path: str, coord: Sequence[int], values: np.ndarray) -> None:
        """Encode a full chunk of values with the array's codecs and store it (statistics
        come from the values, no decoding)."""
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
        values = np.asarray(values)
        data = chunk_codec(node.zarr_json).encode(values)
        stats = write_statistics(self._repo.config, node, coord, values=values)
        self._store_chunk(node, coord, data, stats)

    def _store_chunk(
        self, node: Node, coord: tuple[int, ...], data: bytes, stats: ChunkStats | None
    ) -> None:
        ref = store_chunk(self._repo.storage, self._repo.config, data)
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
        containers = self._repo.config.virtual_chunk_containers
        ref = virtual_ref(node, coord, url, offset, length, checksum, containers)
        with self._changes.lock:
            self._changes.array_changes(node).set(encode_coord(coord), ref)

    def delete_chunk(self, path: str, coord: Sequence[int]) -> None:
        """Delete one chunk: readers see the array's fill value there."""
        self._require_writable()
        node = self._array(path)
        coord = check_coord(node, coord)
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
        table = ref_table(refs, node, self._repo.config.virtual_chunk_containers)
        with self._changes.lock:
            self._changes.array_changes(node).add_table(table)
        return int(table.num_rows)

    def add_staged_refs(self, path: str, staged: StagedRefs) -> None:
        """Add refs of one array that wait in staged Parquet files (see ``core.staged``).

        For writes too big for one process: the session keeps only where the rows are and
        their counts and bounds; the commit packs and splits manifests from those like any
        other change, then reads the rows manifest by manifest. Rows were checked when they
        were staged (grid, location, containers); staged rows win over committed refs, and
        a later call's rows over an earlier one's. The files of one call are one write whose
        rows have no order, so each coord may appear in only one of its rows: the commit
        raises ``RepeatedCoordError`` otherwise.

        Raises:
            InvalidInputError: the bounds do not fit the array's grid, or this session wrote
                chunks of the array (an array takes either kind of write in one session).
        """
        self._require_writable()
        node = self._array(path)
        assert node.meta is not None
        grid = node.meta.grid_shape
        if staged.ndim != node.meta.ndim or any(
            h >= g for h, g in zip(staged.hi, grid, strict=True)
        ):
            raise InvalidInputError(
                f"staged refs of {path!r} span {staged.extent()}, outside its chunk grid {grid}"
            )
        with self._changes.lock:
            self._changes.add_staged(node, staged)

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
            self._changes.staged.pop(node.id, None)
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
            self._repack = config

    def get_chunk_ref(self, path: str, coord: Sequence[int]) -> ChunkRef | None:
        """Where the chunk's bytes are, or ``None`` when it was never written."""
        node = self._array(path)
        checked = check_coord(node, coord)
        return overlay.chunk_ref(self._base, self._changes, node, checked, self._repo.storage)

    def get_chunk(
        self, path: str, coord: Sequence[int], byte_range: tuple[int, int | None] | None = None
    ) -> bytes | None:
        """The chunk's bytes (``[start, end)`` of them with ``byte_range``), or ``None``."""
        ref = self.get_chunk_ref(path, coord)
        with naming_chunk(path, coord):
            return None if ref is None else self._repo.read_ref(ref, byte_range)

    def chunk_coords(self, path: str) -> np.ndarray:
        """The coords of every chunk the array holds, as an ``(n, ndim)`` array, sorted."""
        node = self._array(path)
        assert node.meta is not None
        return decode_coords(self.chunk_refs(path).column("coord"), node.meta.ndim)

    def chunk_refs(self, path: str) -> pa.Table:
        """Every ref of the array (committed and uncommitted), sorted by coord."""
        node = self._array(path)
        storage = self._repo.storage
        return overlay.array_refs(self._base, self._changes, self._stats, node, storage)

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

    # -- status and commit ----------------------------------------------------------------
    def status(self) -> ChangeSummary:
        """What this session changed so far: node paths, and changed chunks per array."""
        with self._changes.lock:
            nodes = current_nodes(self._base, self._changes)
            return self._changes.summary({n.id: p for p, n in nodes.items()})

    def discard_changes(self) -> None:
        """Forget every uncommitted change (chunk files already written become garbage), and
        disown the forks made so far: they cannot be merged any more."""
        self._changes = ChangeSet()
        self._stats = StatsLog()
        self._fork_ledger = ForkLedger()

    def commit(
        self,
        message: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        on_conflict: OnConflict = "fail",
        progress: Progress | None = None,
        piece_runner: PieceRunner | None = None,
        once: Mapping[str, Any] | None = None,
    ) -> str:
        """Atomically publish the changes as a new snapshot on the session's branch.

        If the branch moved since the session started, non-overlapping changes are rebased onto
        the new tip (see ``core.commit``). The arguments are ``CommitOptions``'s (documented
        there); ``commit_with`` takes them as one value.

        Returns:
            The new snapshot's id.

        Raises:
            ConflictError: our changes overlap a concurrent commit (and ``on_conflict`` is
                ``"fail"``, or the overlap is not about chunks).
            ReadOnlyError: the session is read-only or has committed already.
            InvalidInputError: nothing to commit, a bad policy, or metadata that is not JSON.
            CommitStateUnknownError: storage could not say whether the commit landed.
            StaleSessionError: garbage collection deleted objects this session wrote.
            RetriesExhaustedError: the branch kept moving; nothing was committed.
            ForkError: a fork made by pickling this session or its store wrote chunks that
                were never merged (see ``fork``).
            AlreadyCommittedError: with ``once``: the branch holds that commit already
                (``snapshot_id`` says which); nothing was committed.
        """
        self._require_writable()
        options = CommitOptions(
            message, metadata or {}, on_conflict, once or {}, progress, piece_runner
        )
        return self.commit_with(options)

    def commit_with(self, options: CommitOptions) -> str:
        """``commit`` with its options as one value (a Spark write makes them from its plan).

        Raises:
            As ``commit``.
        """
        self._require_writable()
        check_forks_merged(self._repo.storage, self._fork_ledger)
        if self._changes.is_empty():
            raise InvalidInputError("no changes to commit; write something first")
        assert self.branch is not None
        commit = Commit(
            self._repo,
            self.branch,
            self._base,
            self._changes,
            self._stats,
            fresh_since=self._fresh_since,
            repack=self._repack,
            options=options,
        )
        try:
            committed = commit.run()
        finally:  # a failed commit leaves the session rebased as far as it got
            self._base, self._fresh_since = commit.base, commit.fresh_since
        if self._repack is not None:
            self._repo.adopt_config(committed.state.config)
        self._committed = True
        self.read_only = True
        built = committed.built
        self._base = SnapshotView(built.snapshot_id, built.nodes, self._repo.manifest_cache)
        self._repo.remember_view(self._base)
        return built.snapshot_id

    # -- forks (core/forks.py) ------------------------------------------------------------
    def fork(self) -> ForkSession:
        """A writable, picklable fork, to write chunks from another thread or process.

        The fork reads this session's snapshot and its changes so far, writes chunks (native,
        inline or virtual; directly or through ``fork.store``) and travels with its writes to
        Dask workers or a process pool and back; ``merge`` brings them in. It never commits
        and never changes a group or array. The rules are in ``docs/forks.md``.

        >>> fork = session.fork()                                        # doctest: +SKIP
        >>> fork = executor.submit(write_block, fork, 3).result()        # doctest: +SKIP
        >>> session.merge(fork)                                          # doctest: +SKIP
        >>> session.commit("written in parallel")                        # doctest: +SKIP

        Raises:
            ReadOnlyError: the session is read-only or has committed already.
        """
        self._require_writable()
        return make_fork(
            self._repo, self._base, self.branch, self._changes, self._fork_ledger, implicit=False
        )

    def merge(self, *forks: ForkSession) -> None:
        """Bring the writes of ``forks`` into this session, all of them or none.

        Afterwards they are this session's own changes: ``commit`` publishes them, checking
        them against concurrent commits and garbage collection like any other change.

        Raises:
            ForkError: a fork of another session, passed twice or merged already, made
                before this session rebased, or writing to an array deleted or reshaped here
                since.
            ForkConflictError: two forks wrote the same chunk, or a fork and this session
                (after the fork was made); names the chunks.
            ReadOnlyError: the session is read-only or has committed already.
        """
        self._require_writable()
        merge_forks(self._fork_ledger, self._base, self._changes, self._stats, forks)

    def __reduce__(self) -> tuple[Any, ...]:
        """A read-only session pickles as its snapshot; a writable one as a new fork (whose
        unmerged writes stop this session's commit, see ``fork``)."""
        if self.read_only:
            return (_open_snapshot, (self._repo, self.snapshot_id))
        fork = make_fork(
            self._repo, self._base, self.branch, self._changes, self._fork_ledger, implicit=True
        )
        return fork.__reduce__()

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


def _open_snapshot(repo: Repository, snapshot_id: str) -> Session:
    """Unpickling a read-only session: the same snapshot of the (reopened) repository."""
    return repo.readonly_session(snapshot_id=snapshot_id)

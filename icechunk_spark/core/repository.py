"""Repositories: open or create one, start sessions, manage branches, tags and history."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import AlreadyExistsError, InvalidInputError, NotFoundError
from ..format.ids import new_object_id
from ..format.keys import MANIFESTS_PREFIX, chunk_key, object_id, state_key, structure_key
from ..format.state import Ref, SnapshotInfo, State
from ..format.structure import Node, encode_structure
from ..ops import gc, history
from ..progress import Progress, track
from ..splitting import ManifestConfig, default_config, parse_config
from ..storage import Storage, open_storage
from .config import RepositoryConfig
from .containers import Authorization, VirtualReader
from .preload import start_preload
from .refs import publish_state, read_latest_state, update_state
from .session import Session
from .snapshot import ChunkRef, ManifestCache, SnapshotView

DEFAULT_BRANCH = "main"


@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """One manifest of a snapshot: which set, which arrays, how many refs, how many bytes."""

    id: str
    set_name: str
    arrays: tuple[str, ...]
    refs: int
    bytes: int


_VIEW_CACHE_SIZE = 32


class Repository:
    """A versioned Zarr hierarchy in one storage location.

    >>> repo = Repository.create("memory://demo")            # doctest: +SKIP
    >>> session = repo.writable_session("main")             # doctest: +SKIP
    """

    def __init__(
        self,
        storage: Storage,
        state: State,
        config_override: RepositoryConfig | Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.storage = storage
        self._storage_options = dict(storage_options or {})
        self._config_override = config_override
        self._authorized = _authorization(authorize_virtual)
        self.config = RepositoryConfig.from_dict(state.config).merged(config_override)
        self.manifest_config: ManifestConfig = (
            parse_config(self.config.manifests)
            if self.config.manifests is not None
            else default_config()
        )
        self.manifest_cache = ManifestCache(storage)
        self.pool = ThreadPoolExecutor(
            max_workers=self.config.max_concurrent_writes, thread_name_prefix="icechunk-io"
        )
        self.virtual_reader = VirtualReader(
            self.config.virtual_chunk_containers,
            self._authorized,
            verify_checksums=self.config.verify_virtual_checksums,
        )
        self._views: dict[str, SnapshotView] = {}
        self.preload_thread: threading.Thread | None = None
        self._views_lock = threading.Lock()

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> Repository:
        """Create an empty repository with one branch, ``main``, at an empty snapshot.

        Raises:
            AlreadyExistsError: a repository exists at ``url`` already.
            ConfigError: ``config`` is invalid.
        """
        storage = open_storage(url, **dict(storage_options or {}))
        repo_config = RepositoryConfig().merged(config)
        empty_structure, _, _ = encode_structure([], new_object_id())
        structure_id = new_object_id()
        storage.put(structure_key(structure_id), empty_structure)
        snapshot = SnapshotInfo(
            id=new_object_id(),
            parent_id=None,
            timestamp_ms=_now_ms(),
            structure_file=structure_id,
            message="Repository initialized",
        )
        state = State(
            id=new_object_id(),
            generation=0,
            store_root=storage.url,
            snapshots={snapshot.id: snapshot},
            refs={DEFAULT_BRANCH: Ref(DEFAULT_BRANCH, snapshot.id, "branch")},
            config=repo_config.to_dict(),
        )
        if storage.exists(state_key(0)) or not publish_state(storage, state):
            raise AlreadyExistsError(
                f"a repository exists at {storage.url} already; open it with Repository.open"
            )
        return cls(storage, state, None, authorize_virtual, storage_options)

    @classmethod
    def open(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> Repository:
        """Open an existing repository; ``config`` overrides stored settings for this handle.

        Raises:
            NotFoundError: there is no repository at ``url``.
        """
        storage = open_storage(url, **dict(storage_options or {}))
        return cls(storage, read_latest_state(storage), config, authorize_virtual, storage_options)

    @classmethod
    def open_or_create(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> Repository:
        try:
            return cls.open(url, config, storage_options, authorize_virtual)
        except NotFoundError:
            try:
                return cls.create(url, config, storage_options, authorize_virtual)
            except AlreadyExistsError:  # another process created it meanwhile
                return cls.open(url, config, storage_options, authorize_virtual)

    @staticmethod
    def exists(url: str | Storage, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            read_latest_state(open_storage(url, **dict(storage_options or {})))
            return True
        except NotFoundError:
            return False

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _reopen,
            (self.storage, self._config_override, self._authorized, self._storage_options),
        )

    # -- state ----------------------------------------------------------------------------
    def state(self) -> State:
        """The latest committed state (read fresh every call)."""
        return read_latest_state(self.storage)

    def set_config(self, config: RepositoryConfig | Mapping[str, Any]) -> RepositoryConfig:
        """Validate and store a new repository config (keys not given keep their value).

        The change is merged into the config stored at the moment of the compare-and-swap, so
        a concurrent change to other keys is kept, never overwritten.

        Raises:
            ConfigError: the merged config is invalid.
        """
        return self._update_config(lambda stored: stored.merged(config))

    def set_virtual_chunk_container(
        self, prefix: str, options: Mapping[str, Any] | None = None
    ) -> RepositoryConfig:
        """Allow virtual refs into ``prefix`` (fsspec ``options`` to read it), keeping the
        containers stored already, including ones added concurrently."""
        return self._update_config(lambda stored: stored.with_container(prefix, options or {}))

    def _update_config(
        self, change: Callable[[RepositoryConfig], RepositoryConfig]
    ) -> RepositoryConfig:
        def next_state(state: State) -> State:
            return state.next(config=change(RepositoryConfig.from_dict(state.config)).to_dict())

        published = update_state(self.storage, next_state)
        self.adopt_config(published.config)
        return RepositoryConfig.from_dict(published.config)

    def adopt_config(self, stored: Mapping[str, Any]) -> None:
        """Use ``stored`` (a state's config) from now on, under this handle's overrides."""
        new = RepositoryConfig.from_dict(stored)
        self.config = new.merged(self._config_override) if self._config_override else new
        self.manifest_config = (
            parse_config(new.manifests) if new.manifests is not None else default_config()
        )

    # -- sessions -------------------------------------------------------------------------
    def writable_session(self, branch: str = DEFAULT_BRANCH) -> Session:
        """A session that commits to ``branch``. Raises ``NotFoundError`` for an unknown branch."""
        state = self.state()
        tip = state.branch(branch).snapshot_id
        view = self._view_with_preload(tip, state)
        return Session(self, view, branch, read_only=False, fresh_since=state.generation)

    def readonly_session(
        self,
        branch: str | None = None,
        *,
        tag: str | None = None,
        snapshot_id: str | None = None,
        as_of: datetime | str | None = None,
    ) -> Session:
        """A read-only session at a branch tip, a tag, a snapshot, or a branch as of a time.

        ``as_of``: a ``datetime`` or an ISO 8601 string (``"2024-05-01"``,
        ``"2024-05-01T12:00:00+02:00"``); without a time zone it is UTC.
        """
        state = self.state()
        target = state.resolve(branch, tag, snapshot_id, DEFAULT_BRANCH)
        if as_of is not None:
            target = self._as_of(state, target, as_of)
        view = self._view_with_preload(target, state)
        on_branch = None if tag is not None or snapshot_id is not None else branch
        return Session(self, view, on_branch, read_only=True)

    def _as_of(self, state: State, tip: str, as_of: datetime | str) -> str:
        if isinstance(as_of, str):
            try:
                as_of = datetime.fromisoformat(as_of)
            except ValueError:
                raise InvalidInputError(
                    f"as_of={as_of!r} is not an ISO 8601 date or time; pass a datetime or "
                    "a string like '2024-05-01' or '2024-05-01T12:00:00+00:00'"
                ) from None
        if not isinstance(as_of, datetime):
            raise InvalidInputError(
                f"as_of must be a datetime or an ISO 8601 string, not {as_of!r}"
            )
        if as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=UTC)
        limit = int(as_of.timestamp() * 1000)
        for info in _walk(state, tip):
            if info.timestamp_ms <= limit:
                return info.id
        raise NotFoundError(f"no snapshot at or before {as_of.isoformat()} on that branch")

    def _view_with_preload(self, snapshot_id: str, state: State) -> SnapshotView:
        view = self.snapshot_view(snapshot_id, state)
        self.preload_thread = start_preload(view, self.manifest_config.preload, self.manifest_cache)
        return view

    def snapshot_view(self, snapshot_id: str, state: State | None = None) -> SnapshotView:
        with self._views_lock:
            view = self._views.get(snapshot_id)
        if view is not None:
            return view
        info = (state or self.state()).snapshot(snapshot_id)
        view = SnapshotView.load(
            self.storage, snapshot_id, info.structure_file, self.manifest_cache
        )
        self.remember_view(view)
        return view

    def remember_view(self, view: SnapshotView) -> None:
        with self._views_lock:
            if len(self._views) >= _VIEW_CACHE_SIZE:
                self._views.pop(next(iter(self._views)))
            self._views[view.snapshot_id] = view

    def read_ref(self, ref: ChunkRef, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """The bytes a chunk ref points to (a sub-range of them with ``byte_range``)."""
        start, end = 0, ref.length
        if byte_range is not None:
            start = min(byte_range[0], ref.length)
            end = ref.length if byte_range[1] is None else min(byte_range[1], ref.length)
        if ref.kind == "inline":
            assert ref.inline_data is not None
            return ref.inline_data[start:end]
        if ref.kind == "native":
            assert ref.chunk_id is not None
            return self.storage.get_range(
                chunk_key(ref.chunk_id), ref.offset + start, ref.offset + end
            )
        assert ref.virtual_path is not None
        return self.virtual_reader.read(
            ref.virtual_path, ref.offset + start, end - start, ref.checksum
        )

    # -- manifests ------------------------------------------------------------------------
    def manifests(
        self, snapshot_id: str | None = None, *, branch: str | None = None
    ) -> list[ManifestInfo]:
        """Every manifest of a snapshot (default: the tip of ``branch`` or main)."""
        state = self.state()
        target = state.resolve(branch, None, snapshot_id, DEFAULT_BRANCH)
        view = self.snapshot_view(target, state)
        members: dict[str, list[Node]] = {}
        refs: dict[str, int] = {}
        set_names: dict[str, str] = {}
        for node in sorted(view.nodes.values(), key=lambda n: n.path):
            for m in node.manifests:
                members.setdefault(m.manifest_id, []).append(node)
                refs[m.manifest_id] = refs.get(m.manifest_id, 0) + m.ref_count
                set_names[m.manifest_id] = m.set_name
        sizes = {
            object_id(info.key, MANIFESTS_PREFIX): info.size
            for info in self.storage.list(MANIFESTS_PREFIX)
        }
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

    def rewrite_manifests(
        self,
        config: ManifestConfig | Mapping[str, Any] | str,
        message: str,
        branch: str = DEFAULT_BRANCH,
        *,
        progress: Progress | None = None,
    ) -> str:
        """Store a new manifest config and repack every manifest under it, in one commit:
        if the commit fails, neither the config nor any manifest changes.

        ``progress`` hears the stages: reading manifests, then writing them.
        """
        parsed = config if isinstance(config, ManifestConfig) else parse_config(config)
        session = self.writable_session(branch)
        session.repack_manifests(parsed)  # the config is stored by the same commit
        # Read every manifest up front, in parallel, so the (cached) reads are a stage of
        # their own rather than hidden in the commit's writes.
        ids = sorted({m.manifest_id for n in session.list_nodes() for m in n.manifests})
        fetched = self.pool.map(self.manifest_cache.get, ids)
        for _ in track(progress, "reading manifests", fetched, len(ids)):
            pass
        return session.commit(message, {"rewrite_manifests": True}, progress=progress)

    # -- branches and tags ----------------------------------------------------------------
    def list_branches(self) -> dict[str, str]:
        return self.state().branches()

    def lookup_branch(self, name: str) -> str:
        return self.state().branch(name).snapshot_id

    def create_branch(self, name: str, snapshot_id: str) -> None:
        _check_ref_name(name)

        def change(state: State) -> State:
            state.snapshot(snapshot_id)
            if name in state.refs:
                raise AlreadyExistsError(f"a {state.refs[name].type} named {name!r} exists already")
            return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "branch")})

        update_state(self.storage, change)

    def reset_branch(self, name: str, snapshot_id: str) -> None:
        """Point ``name`` at ``snapshot_id`` (any snapshot, not just an ancestor)."""

        def change(state: State) -> State:
            state.branch(name)
            state.snapshot(snapshot_id)
            return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "branch")})

        update_state(self.storage, change)

    def delete_branch(self, name: str) -> None:
        if name == DEFAULT_BRANCH:
            raise InvalidInputError(f"the {DEFAULT_BRANCH!r} branch cannot be deleted")

        def change(state: State) -> State:
            state.branch(name)
            return state.next(refs={k: v for k, v in state.refs.items() if k != name})

        update_state(self.storage, change)

    def list_tags(self) -> dict[str, str]:
        return self.state().tags()

    def lookup_tag(self, name: str) -> str:
        return self.state().tag(name).snapshot_id

    def create_tag(self, name: str, snapshot_id: str) -> None:
        """Tags are immutable: creating an existing name raises ``AlreadyExistsError``."""
        _check_ref_name(name)

        def change(state: State) -> State:
            state.snapshot(snapshot_id)
            if name in state.refs:
                raise AlreadyExistsError(
                    f"a {state.refs[name].type} named {name!r} exists already; tags are immutable"
                )
            return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "tag")})

        update_state(self.storage, change)

    def delete_tag(self, name: str) -> None:
        def change(state: State) -> State:
            state.tag(name)
            return state.next(refs={k: v for k, v in state.refs.items() if k != name})

        update_state(self.storage, change)

    # -- history --------------------------------------------------------------------------
    def lookup_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        return self.state().snapshot(snapshot_id)

    def ancestry(
        self, *, branch: str | None = None, tag: str | None = None, snapshot_id: str | None = None
    ) -> Iterator[SnapshotInfo]:
        """Snapshots from the given one back to the first, newest first."""
        state = self.state()
        yield from _walk(state, state.resolve(branch, tag, snapshot_id, DEFAULT_BRANCH))

    def diff(
        self,
        *,
        from_snapshot_id: str | None = None,
        to_snapshot_id: str | None = None,
        from_branch: str | None = None,
        to_branch: str | None = None,
        from_tag: str | None = None,
        to_tag: str | None = None,
    ) -> history.Diff:
        """Nodes added, deleted and updated, and chunks changed per array, between two snapshots."""
        return history.diff(
            self,
            from_snapshot_id=from_snapshot_id,
            to_snapshot_id=to_snapshot_id,
            from_branch=from_branch,
            to_branch=to_branch,
            from_tag=from_tag,
            to_tag=to_tag,
        )

    def expire_snapshots(
        self,
        older_than: datetime,
        *,
        delete_expired_branches: bool = False,
        delete_expired_tags: bool = False,
    ) -> frozenset[str]:
        """Stop listing snapshots older than ``older_than`` (branch and tag tips stay)."""
        return history.expire_snapshots(
            self,
            older_than,
            delete_expired_branches=delete_expired_branches,
            delete_expired_tags=delete_expired_tags,
        )

    def garbage_collect(
        self,
        delete_object_older_than: datetime,
        *,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> gc.GCSummary:
        """Delete objects no listed snapshot reaches and older than the cut-off."""
        return gc.garbage_collect(
            self, delete_object_older_than, dry_run=dry_run, progress=progress
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"<Repository {self.storage.url}>"


def _walk(state: State, start: str) -> Iterator[SnapshotInfo]:
    cursor: str | None = start
    while cursor is not None:
        info = state.snapshots.get(cursor)
        if info is None:
            return  # history beyond here was expired
        yield info
        cursor = info.parent_id


def _check_ref_name(name: str) -> None:
    if not name or "/" in name or name.strip() != name:
        raise InvalidInputError(f"invalid branch or tag name {name!r}")


def _authorization(value: Authorization | list[str] | None) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {k: dict(v) for k, v in value.items()}
    return {prefix: {} for prefix in value}


def _reopen(
    storage: Storage, config: Any, authorized: Authorization, storage_options: Mapping[str, Any]
) -> Repository:
    return Repository.open(storage, config, storage_options, dict(authorized))


def _now_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)

"""Opening a repository, its config, its sessions and its manifests; the other verbs come from
``refs.py`` and ``history.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..core import (
    DEFAULT_BRANCH,
    Authorization,
    ManifestInfo,
    RepoHandle,
    RepositoryConfig,
    Session,
    ensure_writable,
    manifest_infos,
    read_latest_state,
    snapshot_as_of,
    update_state,
)
from ..errors import AlreadyExistsError, NotFoundError
from ..format.keys import MANIFESTS_PREFIX, object_id
from ..format.state import State
from ..progress import Progress, track
from ..splitting import ManifestConfig, parse_config
from ..storage import Storage, open_storage
from .history import HistoryVerbs
from .refs import RefVerbs


class Repository(RefVerbs, HistoryVerbs):
    """A versioned Zarr hierarchy in one storage location.

    >>> repo = Repository.create("memory://demo")            # doctest: +SKIP
    >>> session = repo.writable_session("main")             # doctest: +SKIP
    """

    def __init__(self, handle: RepoHandle) -> None:
        """Prefer ``Repository.open`` / ``create`` / ``open_or_create``."""
        self._handle = handle

    # -- what the handle holds (read-only) ---------------------------------------------------
    @property
    def config(self) -> RepositoryConfig:
        """The stored config under this handle's overrides."""
        return self._handle.config

    @property
    def manifest_config(self) -> ManifestConfig:
        """The manifest-splitting config that commits pack manifests under."""
        return self._handle.manifest_config

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

        Args:
            url: ``file:///path``, a plain path, ``s3://bucket/prefix`` or ``memory://name``.
            config: settings to store (keys not given take their defaults).
            storage_options: for the storage backend (s3fs's ``key``, ``endpoint_url``...).
            authorize_virtual: container prefixes this handle may read virtual refs from,
                or ``{prefix: fsspec options}``.

        Returns:
            The open repository.

        Raises:
            AlreadyExistsError: a repository exists at ``url`` already.
            ConfigError: ``config`` is invalid.
        """
        return cls(RepoHandle.create(url, config, storage_options, authorize_virtual))

    @classmethod
    def open(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> Repository:
        """Open an existing repository.

        Args:
            url: as for ``create``.
            config: overrides of stored settings, for this handle only.
            storage_options: as for ``create``.
            authorize_virtual: as for ``create``.

        Raises:
            NotFoundError: there is no repository at ``url``.
        """
        return cls(RepoHandle.open(url, config, storage_options, authorize_virtual))

    @classmethod
    def open_or_create(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> Repository:
        """Open the repository at ``url``, creating it first if there is none.

        Safe under races: when another process creates it meanwhile, that one is opened.
        Args as ``create``.
        """
        try:
            return cls.open(url, config, storage_options, authorize_virtual)
        except NotFoundError:
            try:
                return cls.create(url, config, storage_options, authorize_virtual)
            except AlreadyExistsError:  # another process created it meanwhile
                return cls.open(url, config, storage_options, authorize_virtual)

    @staticmethod
    def exists(url: str | Storage, storage_options: Mapping[str, Any] | None = None) -> bool:
        """Whether a repository exists at ``url`` (it has a readable state file)."""
        try:
            read_latest_state(open_storage(url, **dict(storage_options or {})))
            return True
        except NotFoundError:
            return False

    # -- config ---------------------------------------------------------------------------
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
        self._handle.adopt_config(published.config)
        return RepositoryConfig.from_dict(published.config)

    # -- sessions -------------------------------------------------------------------------
    def writable_session(
        self,
        branch: str = DEFAULT_BRANCH,
        *,
        base_snapshot_id: str | None = None,
        fresh_since: int | None = None,
    ) -> Session:
        """A session that commits to ``branch``.

        Args:
            branch: the branch to commit to.
            base_snapshot_id: start from this snapshot instead of the tip, e.g. the one a
                distributed write was planned on: the commit then rebases over whatever the
                branch gained since, so concurrent changes to the same chunks are conflicts.
            fresh_since: the state generation read before the first object of this write
                was written (default: now); the commit checks that no garbage collection
                since then could have deleted them.

        Raises:
            NotFoundError: an unknown branch or snapshot.
            RepositoryReadOnlyError: the repository's status is read-only.
        """
        state = self.state()
        ensure_writable(state, self.storage.url)  # now rather than after the writes
        base = base_snapshot_id or state.branch(branch).snapshot_id
        view = self._handle.view_with_preload(base, state)
        since = state.generation if fresh_since is None else fresh_since
        return Session(self._handle, view, branch, read_only=False, fresh_since=since)

    def readonly_session(
        self,
        branch: str | None = None,
        *,
        tag: str | None = None,
        snapshot_id: str | None = None,
        as_of: datetime | str | None = None,
    ) -> Session:
        """A read-only session at a branch tip, a tag, a snapshot, or a branch as of a time.

        Args:
            branch: read this branch's tip (default: ``main``, if nothing else is given).
            tag: read the snapshot this tag points at.
            snapshot_id: read this snapshot.
            as_of: with a branch, its newest snapshot at or before this time: a ``datetime``
                or an ISO 8601 string (``"2024-05-01"``, ``"2024-05-01T12:00:00+02:00"``);
                without a time zone it is UTC.

        Raises:
            NotFoundError: no such branch, tag or snapshot, or none that old.
            InvalidInputError: ``as_of`` is not a time.
        """
        state = self.state()
        target = state.resolve(branch, tag, snapshot_id, DEFAULT_BRANCH)
        if as_of is not None:
            target = snapshot_as_of(state, target, as_of)
        view = self._handle.view_with_preload(target, state)
        on_branch = None if tag is not None or snapshot_id is not None else branch
        return Session(self._handle, view, on_branch, read_only=True)

    # -- manifests ------------------------------------------------------------------------
    def manifests(
        self, snapshot_id: str | None = None, *, branch: str | None = None
    ) -> list[ManifestInfo]:
        """Every manifest of a snapshot (default: the tip of ``branch`` or main)."""
        state = self.state()
        target = state.resolve(branch, None, snapshot_id, DEFAULT_BRANCH)
        sizes = {
            object_id(info.key, MANIFESTS_PREFIX): info.size
            for info in self.storage.list(MANIFESTS_PREFIX)
        }
        return manifest_infos(self._handle.snapshot_view(target, state), sizes)

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
        fetched = self._handle.pool.map(self._handle.manifest_cache.get, ids)
        for _ in track(progress, "reading manifests", fetched, len(ids)):
            pass
        return session.commit(message, {"rewrite_manifests": True}, progress=progress)

    def close(self) -> None:
        """Wait for writes in flight and release the I/O threads."""
        self._handle.close()

    def __repr__(self) -> str:
        return f"<Repository {self.storage.url}>"

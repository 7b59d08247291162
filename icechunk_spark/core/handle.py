"""The repository handle: what every session, commit, fork and maintenance verb works with.

A ``RepoHandle`` holds one open repository's storage, its config (the stored one under this
handle's overrides), the I/O threads, the manifest and snapshot-view caches and the virtual
reader. It has no public verbs: ``Repository`` (icechunk_spark/repository/) is the face
users call, and owns one handle. The engine (``Session``, ``Commit``, forks, ``ops/``, the zarr
store) takes the handle, so nothing below the face ever names ``Repository``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import AlreadyExistsError
from ..format.keys import state_key
from ..format.state import State
from ..format.structure_encode import StructureTables
from ..splitting import ManifestConfig, default_config, parse_config
from ..storage import Storage, open_storage
from .chunk_reads import read_ref, read_ref_async
from .config import RepositoryConfig
from .containers import Authorization
from .hints import HintWriter
from .manifest_cache import ChunkRef, ManifestCache
from .preload import start_preload
from .refs import initial_state, publish_state, read_latest_state
from .snapshot import SnapshotView, ViewCache
from .virtual_reads import VirtualReader


class RepoHandle:
    """One open repository: storage, config, I/O threads, caches and the virtual reader.

    Pickles as what reopens it (storage, overrides, authorization), never its caches.
    """

    def __init__(
        self,
        storage: Storage,
        state: State,
        config_override: RepositoryConfig | Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        owns_storage: bool = False,
    ) -> None:
        self.storage = storage
        self._storage_options = dict(storage_options or {})
        self._config_override = config_override
        self._authorized = _authorization(authorize_virtual)
        self.config = RepositoryConfig.from_dict(state.config).merged(config_override)
        self.manifest_config = _manifest_config(self.config)
        self.manifest_cache = ManifestCache(storage)
        self.pool = ThreadPoolExecutor(
            max_workers=self.config.max_concurrent_writes, thread_name_prefix="icechunk-io"
        )
        self.hints = HintWriter(storage, self.pool)
        self.virtual_reader = VirtualReader(
            self.config.virtual_chunk_containers,
            self._authorized,
            verify_checksums=self.config.verify_virtual_checksums,
        )
        self._views = ViewCache()
        # The structure tables of the snapshot this handle committed last: the next commit on
        # it copies its unchanged rows (one slot: a memory bound whatever the history).
        self._last_structure: tuple[str, StructureTables] | None = None
        # The thread preloading the manifests of the latest session's snapshot, if any.
        self.preload_thread: threading.Thread | None = None
        # The newest state this handle read or published: a commit's state read starts there
        # (``read_latest_state``'s ``known``). Threads may set it in any order: it is only
        # where a probe starts, and any committed state will do.
        self.known_state = state
        # Opened from a URL, the storage is this handle's to close; one handed in is the
        # caller's (``open``, ``create``).
        self.owns_storage = owns_storage

    @classmethod
    def create(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> RepoHandle:
        """A handle on a new, empty repository at ``url``. Raises ``AlreadyExistsError``."""
        storage = open_storage(url, **dict(storage_options or {}))
        state = initial_state(storage, RepositoryConfig().merged(config).to_dict())
        if storage.exists(state_key(0)) or not publish_state(storage, state):
            raise AlreadyExistsError(
                f"a repository exists at {storage.url} already; open it with Repository.open"
            )
        owned = not isinstance(url, Storage)
        return cls(storage, state, None, authorize_virtual, storage_options, owns_storage=owned)

    @classmethod
    def open(
        cls,
        url: str | Storage,
        config: RepositoryConfig | Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        authorize_virtual: Authorization | list[str] | None = None,
    ) -> RepoHandle:
        """A handle on the existing repository at ``url``. Raises ``NotFoundError``."""
        storage = open_storage(url, **dict(storage_options or {}))
        state = read_latest_state(storage)
        owned = not isinstance(url, Storage)
        return cls(storage, state, config, authorize_virtual, storage_options, owns_storage=owned)

    def __reduce__(self) -> tuple[Any, ...]:
        reopen = (self.storage, self._config_override, self._storage_options, self._authorized)
        return (RepoHandle.open, reopen)

    def state(self) -> State:
        """The latest committed state (read fresh every call)."""
        self.known_state = read_latest_state(self.storage)
        return self.known_state

    def adopt_config(self, stored: Mapping[str, Any]) -> None:
        """Use ``stored`` (a state's config) from now on, under this handle's overrides."""
        new = RepositoryConfig.from_dict(stored)
        self.config = new.merged(self._config_override) if self._config_override else new
        self.manifest_config = _manifest_config(new)

    # -- snapshots ------------------------------------------------------------------------
    def snapshot_view(self, snapshot_id: str, state: State | None = None) -> SnapshotView:
        """The (cached) view of one snapshot; ``state``: where to look its files up.

        Raises:
            NotFoundError: no such snapshot.
        """
        view = self._views.get(snapshot_id)
        if view is not None:
            return view
        info = (state or self.state()).snapshot(snapshot_id)
        view = SnapshotView.load(
            self.storage, snapshot_id, info.structure_file, self.manifest_cache
        )
        self.remember_view(view)
        return view

    def view_with_preload(self, snapshot_id: str, state: State) -> SnapshotView:
        """``snapshot_view``, then preload its chosen manifests in the background."""
        view = self.snapshot_view(snapshot_id, state)
        self.preload_thread = start_preload(view, self.manifest_config.preload, self.manifest_cache)
        return view

    def remember_view(self, view: SnapshotView, structure: StructureTables | None = None) -> None:
        """Cache ``view`` (a session's own commit) so new sessions skip reading it, and the
        ``structure`` tables it was written from, for the next commit on it."""
        self._views.put(view)
        if structure is not None:
            self._last_structure = (view.snapshot_id, structure)

    def structure_of(self, snapshot_id: str) -> StructureTables | None:
        """The structure tables this handle wrote for ``snapshot_id``, if it wrote it last."""
        last = self._last_structure
        return last[1] if last is not None and last[0] == snapshot_id else None

    def read_ref(self, ref: ChunkRef, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """The bytes a chunk ref points to (a sub-range of them with ``byte_range``)."""
        return read_ref(self.storage, self.virtual_reader, ref, byte_range)

    async def read_ref_async(
        self, ref: ChunkRef, byte_range: tuple[int, int | None] | None = None
    ) -> bytes:
        """``read_ref`` for an event loop (virtual reads coalesce, see ``chunk_reads``)."""
        return await read_ref_async(self.storage, self.virtual_reader, ref, byte_range)

    def close(self) -> None:
        """Wait for writes in flight and release the I/O threads (and the storage, when this
        handle opened it)."""
        self.pool.shutdown(wait=True)
        if self.owns_storage:
            self.storage.close()

    def __repr__(self) -> str:
        return f"<RepoHandle {self.storage.url}>"


def _manifest_config(config: RepositoryConfig) -> ManifestConfig:
    return parse_config(config.manifests) if config.manifests is not None else default_config()


def _authorization(value: Authorization | list[str] | None) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {k: dict(v) for k, v in value.items()}
    return {prefix: {} for prefix in value}

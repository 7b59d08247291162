"""The transactional engine: the repository handle, sessions, change sets and the commit protocol.

This module is the core's face: the layers above it (``ops/``, the zarr store, ``virtual/``,
``spark/``, the ``Repository`` face) import from here, never from the rooms inside. Reading
order for a newcomer: ``handle`` (one open repository), ``base_session`` (the chunk API every
session shares), ``session`` (a view of one snapshot and the changes made to it), ``forks`` and
``fork_merge`` (children of a session that write elsewhere, and bringing them back), ``commit``
(how changes become a snapshot: build, publish with compare-and-swap, rebase), then
``conflicts``, ``flush`` (manifests and the structure file), ``snapshot`` (reading one),
``chunk_reads`` (a ref's bytes), ``refs`` (the state file) and ``preload``.
"""

from .base_session import BaseSession
from .branches import DEFAULT_BRANCH, check_ref_name, snapshot_as_of, walk
from .changes import ChangeSummary
from .chunk_reads import naming_chunk
from .commit_options import CommitOptions
from .config import RepositoryConfig
from .conflicts import ConflictPolicy
from .containers import Authorization, normalize_prefix, resolve_target, resolve_url
from .forks import ForkSession
from .handle import RepoHandle
from .manifest_cache import ChunkRef, ManifestCache
from .refs import (
    ensure_writable,
    initial_state,
    publish_state,
    raise_if_collected,
    read_hint,
    read_latest_state,
    update_state,
)
from .requirements import AssertNoGCSince, AssertNotCommitted, landed_once
from .rewrite import check_unheld, merged_txlog, replacement, rewritten, run_below
from .session import Session
from .snapshot import ManifestInfo, SnapshotView, manifest_infos
from .staged import STAGED_SCHEMA, StagedFile, StagedRefs, write_staged
from .staged_writes import PieceRunner, PieceTask, write_piece_task
from .virtual_reads import CoalesceSettings, VirtualReader, VirtualRequest, file_checksum

__all__ = [
    "DEFAULT_BRANCH",
    "STAGED_SCHEMA",
    "AssertNoGCSince",
    "AssertNotCommitted",
    "Authorization",
    "BaseSession",
    "ChangeSummary",
    "ChunkRef",
    "CoalesceSettings",
    "CommitOptions",
    "ConflictPolicy",
    "ForkSession",
    "ManifestCache",
    "ManifestInfo",
    "PieceRunner",
    "PieceTask",
    "RepoHandle",
    "RepositoryConfig",
    "Session",
    "SnapshotView",
    "StagedFile",
    "StagedRefs",
    "VirtualReader",
    "VirtualRequest",
    "check_ref_name",
    "check_unheld",
    "ensure_writable",
    "file_checksum",
    "initial_state",
    "landed_once",
    "manifest_infos",
    "merged_txlog",
    "naming_chunk",
    "normalize_prefix",
    "publish_state",
    "raise_if_collected",
    "read_hint",
    "read_latest_state",
    "replacement",
    "resolve_target",
    "resolve_url",
    "rewritten",
    "run_below",
    "snapshot_as_of",
    "update_state",
    "walk",
    "write_piece_task",
    "write_staged",
]

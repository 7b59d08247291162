"""icechunk-spark: a transactional, version-controlled store for Zarr arrays.

>>> from icechunk_spark import Repository             # doctest: +SKIP
>>> repo = Repository.create("file:///tmp/my-repo")  # doctest: +SKIP

Every error is a subclass of ``IcechunkSparkError`` (the tree is in ``errors``).
"""

from .core import ChangeSummary, ConflictPolicy, ForkSession, RepositoryConfig, Session
from .errors import (
    AlreadyCommittedError,
    AlreadyExistsError,
    CommitStateUnknownError,
    ConfigError,
    Conflict,
    ConflictError,
    CoordinateOrderError,
    ForkConflictError,
    ForkError,
    FormatError,
    HistoryExpiredError,
    HistoryRewrittenError,
    IcechunkSparkError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    ReadOnlyStorageError,
    ReadOnlyStoreError,
    RepositoryReadOnlyError,
    RetriesExhaustedError,
    RewriteRefusedError,
    SourceChangedError,
    StaleSessionError,
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
    TruncatedChunkError,
    VirtualRangeError,
    VirtualRefRefusedError,
)
from .format.state import SnapshotInfo
from .repository import Repository

__all__ = [
    "AlreadyCommittedError",
    "AlreadyExistsError",
    "ChangeSummary",
    "CommitStateUnknownError",
    "ConfigError",
    "Conflict",
    "ConflictError",
    "ConflictPolicy",
    "CoordinateOrderError",
    "ForkConflictError",
    "ForkError",
    "ForkSession",
    "FormatError",
    "HistoryExpiredError",
    "HistoryRewrittenError",
    "IcechunkSparkError",
    "InvalidInputError",
    "NotFoundError",
    "ReadOnlyError",
    "ReadOnlyStorageError",
    "ReadOnlyStoreError",
    "Repository",
    "RepositoryConfig",
    "RepositoryReadOnlyError",
    "RetriesExhaustedError",
    "RewriteRefusedError",
    "Session",
    "SnapshotInfo",
    "SourceChangedError",
    "StaleSessionError",
    "StorageCredentialsError",
    "StorageError",
    "StorageNotFoundError",
    "StorageUnreachableError",
    "TruncatedChunkError",
    "VirtualRangeError",
    "VirtualRefRefusedError",
]

"""icechunk-spark: a transactional, version-controlled store for Zarr arrays.

>>> from icechunk_spark import Repository             # doctest: +SKIP
>>> repo = Repository.create("file:///tmp/my-repo")  # doctest: +SKIP
"""

from .core.config import RepositoryConfig
from .core.repository import Repository
from .core.session import ChangeSummary, Session
from .errors import (
    AlreadyExistsError,
    CommitStateUnknownError,
    ConfigError,
    Conflict,
    ConflictError,
    FormatError,
    IcechunkSparkError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    StaleSessionError,
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from .format.state import SnapshotInfo

__all__ = [
    "AlreadyExistsError",
    "ChangeSummary",
    "CommitStateUnknownError",
    "ConfigError",
    "Conflict",
    "ConflictError",
    "FormatError",
    "IcechunkSparkError",
    "InvalidInputError",
    "NotFoundError",
    "ReadOnlyError",
    "Repository",
    "RepositoryConfig",
    "Session",
    "SnapshotInfo",
    "StaleSessionError",
    "StorageCredentialsError",
    "StorageError",
    "StorageNotFoundError",
    "StorageUnreachableError",
]

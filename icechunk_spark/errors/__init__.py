"""One error tree for everything icechunk-spark raises.

::

    IcechunkSparkError
    ├── ConflictError            a commit overlaps changes another writer committed first
    ├── CommitStateUnknownError  storage could not say whether a commit landed (look it up)
    ├── StaleSessionError        GC deleted objects a session wrote before it could commit
    ├── HistoryRewrittenError    a branch no longer holds a snapshot a change feed had reached
    │   └── HistoryExpiredError  the snapshots between a feed's position and its end expired
    ├── AlreadyCommittedError    a commit made once (``once=``) is on the branch already
    ├── RewriteRefusedError      an amend or squash would lose history a ref holds, or raced
    ├── NotFoundError(KeyError)  a branch, tag, snapshot, node, chunk or object does not exist
    │   └── SnapshotCollectedError  a snapshot left the history and was collected while read
    ├── AlreadyExistsError       a repository, tag, branch or node of that name exists already
    ├── InvalidInputError(ValueError)  the caller passed something we cannot accept
    │   ├── ConfigError          a configuration file or value is invalid (names the YAML path)
    │   ├── VirtualRefRefusedError  a virtual ref outside the containers, or not authorized
    │   ├── CoordinateOrderError  files' times overlap or do not increase (names the files)
    │   └── ForkError            a fork used or merged against its rules (says which, and why)
    │       └── ForkConflictError  two forks (or a fork and its session) wrote the same chunk
    ├── SourceChangedError       a virtual ref's target changed since the ref was written
    ├── ReadOnlyError            a write on a read-only session or store
    │   ├── ReadOnlyStoreError   the same through the zarr store (also zarr's ValueError)
    │   ├── ReadOnlyStorageError a write to storage that only reads (plain HTTP)
    │   └── RepositoryReadOnlyError  the repository's status is read-only (says why, since when)
    ├── RetriesExhaustedError    gave up after many lost races on a busy branch (retry later)
    ├── StorageError(OSError)    the storage backend failed (after retries)
    │   ├── StorageCredentialsError  no credentials, wrong ones, or access denied
    │   ├── StorageNotFoundError     the bucket (or container) itself does not exist
    │   ├── StorageUnreachableError  no connection, a timeout, an endpoint of another kind
    │   └── VirtualRangeError        a virtual ref asks for bytes past the end of its file
    └── FormatError              a repository file is truncated, corrupt or of an unknown version
        └── TruncatedChunkError  a chunk's object holds fewer bytes than its ref points to

Every message says what went wrong and, where there is one, what to do next.
"""

from .conflicts import CHUNK_CONFLICT, RANGE_CONFLICT, Conflict, ConflictError
from .general import (
    AlreadyCommittedError,
    AlreadyExistsError,
    CommitStateUnknownError,
    ConfigError,
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
    RepeatedCoordError,
    RepositoryReadOnlyError,
    RetriesExhaustedError,
    RewriteRefusedError,
    SnapshotCollectedError,
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

__all__ = [
    "CHUNK_CONFLICT",
    "RANGE_CONFLICT",
    "AlreadyCommittedError",
    "AlreadyExistsError",
    "CommitStateUnknownError",
    "ConfigError",
    "Conflict",
    "ConflictError",
    "CoordinateOrderError",
    "ForkConflictError",
    "ForkError",
    "FormatError",
    "HistoryExpiredError",
    "HistoryRewrittenError",
    "IcechunkSparkError",
    "InvalidInputError",
    "NotFoundError",
    "ReadOnlyError",
    "ReadOnlyStorageError",
    "ReadOnlyStoreError",
    "RepeatedCoordError",
    "RepositoryReadOnlyError",
    "RetriesExhaustedError",
    "RewriteRefusedError",
    "SnapshotCollectedError",
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

# The classes are defined in submodules; they are shown (in tracebacks and reprs) and pickled
# under the package's name, the one users import them from.
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = __name__
del _name, _value

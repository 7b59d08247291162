"""Which options each front door takes: a name it does not know is refused, never ignored.

Spark hands a data source every option a user set, misspelled or not, and the Python API's
keywords (``snapshot_id``) differ from the source's options (``snapshot``). Ignoring a name
silently reads the wrong snapshot or writes at the wrong place, so each reader, writer, stream
and driver-API call checks its options against its own list and names the closest known one.
``storage.<name>`` options stay open-ended: they go to the storage backend, which knows its
own.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ..errors import InvalidInputError

STORAGE_PREFIX = "storage."

# Where the repository is and what it may read; Spark adds ``path`` (``load``/``save``) and
# ``paths`` (``load`` of several) itself.
REPOSITORY = frozenset({"path", "paths", "url", "authorize_virtual"})
READ_TARGET = frozenset({"branch", "tag", "snapshot", "as_of"})

CHUNKS_READ = REPOSITORY | READ_TARGET | {"table", "arrays", "rows_per_partition"}
METADATA_READ = REPOSITORY | READ_TARGET | {"table"}
VALUES_READ = (
    REPOSITORY | READ_TARGET | {"table", "arrays", "group", "decode", "where", "rows_per_partition"}
)
# One list for the batch table and the stream: ``schema()`` runs for both and cannot tell
# which it serves. The target options are listed so the feed can refuse them with a reason.
CHANGES_READ = (
    REPOSITORY
    | READ_TARGET
    | {"table", "from", "to", "starting", "max_snapshots_per_trigger", "partitions_per_snapshot"}
)
WRITE = REPOSITORY | {
    "branch",
    "append_dim",
    "arrays",
    "groups",
    "shapes",
    "message",
    "metadata",
    "on_conflict",
    "placement",
    "pack_chunks",
    "stage_rows",
}
# Spark keeps a query's checkpoint location among the sink's options.
STREAM_WRITE = WRITE | {"checkpointLocation"}
CHUNK_STATS_READ = REPOSITORY | READ_TARGET | {"table", "arrays", "group"}
# ``aggregate`` (driver API) reads one array of a group at one snapshot.
AGGREGATE = REPOSITORY | READ_TARGET | {"group"}
# ``read_chunks`` reads with Spark's Parquet reader (its partitioning is Spark's), and takes
# how Spark's file sources reach the repository.
NATIVE_READ = REPOSITORY | READ_TARGET | {"arrays", "hadoop_url"}


def read_options(table: str) -> frozenset[str]:
    """The options a read of ``table`` takes (an unknown table is refused elsewhere)."""
    if table == "chunks":
        return CHUNKS_READ
    if table == "changes":
        return CHANGES_READ
    if table == "values":
        return VALUES_READ
    if table == "chunk_stats":
        return CHUNK_STATS_READ
    return METADATA_READ


def check_options(names: Iterable[str], known: frozenset[str], where: str) -> None:
    """Refuse any option in ``names`` that ``where`` does not take (case-insensitively).

    Raises:
        InvalidInputError: naming the unknown option, the closest known one, and the list.
    """
    lowered = {k.lower() for k in known}
    for name in names:
        low = name.lower()
        if low in lowered or low.startswith(STORAGE_PREFIX):
            continue
        close = difflib.get_close_matches(low, sorted(known, key=str.lower), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInputError(
            f"unknown option {name!r} for {where}{hint}; it takes "
            f"{', '.join(sorted(known, key=str.lower))} and {STORAGE_PREFIX}<name>"
        )


__all__ = [
    "AGGREGATE",
    "CHANGES_READ",
    "CHUNKS_READ",
    "CHUNK_STATS_READ",
    "METADATA_READ",
    "NATIVE_READ",
    "STREAM_WRITE",
    "VALUES_READ",
    "WRITE",
    "check_options",
    "read_options",
]

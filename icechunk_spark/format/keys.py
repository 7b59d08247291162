"""The object-key layout of a repository (spec section "Storage layout"): the one place that
spells the prefixes.

    icechunk.json   the hint: a copy of the latest state file
    t/<generation>  state files, zero-padded so listing order is generation order
    s/<id>          structure files        m/<id>  chunk manifests
    a/<id>          attribute files        c/<id>  chunk files
    x/<id>          transaction logs       staging/  write areas of Spark jobs (never reachable)
    staging/forks/<session>/<writer>   marks a fork made by pickling a writable session that
                    wrote (never reachable: GC deletes it after the cut-off, like all staging/)
"""

from __future__ import annotations

HINT_KEY = "icechunk.json"
STATE_PREFIX = "t/"
STRUCTURES_PREFIX = "s/"
MANIFESTS_PREFIX = "m/"
ATTRIBUTES_PREFIX = "a/"
CHUNKS_PREFIX = "c/"
TXLOGS_PREFIX = "x/"
STAGING_PREFIX = "staging/"
FORK_MARKERS_PREFIX = f"{STAGING_PREFIX}forks/"


def state_key(generation: int) -> str:
    return f"{STATE_PREFIX}{generation:020d}"


def structure_key(structure_id: str) -> str:
    return f"{STRUCTURES_PREFIX}{structure_id}"


def manifest_key(manifest_id: str) -> str:
    return f"{MANIFESTS_PREFIX}{manifest_id}"


def attributes_key(attrs_id: str) -> str:
    return f"{ATTRIBUTES_PREFIX}{attrs_id}"


def chunk_key(chunk_id: str) -> str:
    return f"{CHUNKS_PREFIX}{chunk_id}"


def txlog_key(snapshot_id: str) -> str:
    return f"{TXLOGS_PREFIX}{snapshot_id}"


def object_id(key: str, prefix: str) -> str:
    """The id part of ``key`` (``m/abc`` -> ``abc``), which must start with ``prefix``."""
    assert key.startswith(prefix), (key, prefix)
    return key[len(prefix) :]


def fork_markers_prefix(session_token: str) -> str:
    return f"{FORK_MARKERS_PREFIX}{session_token}/"


def fork_marker_key(session_token: str, writer_id: str) -> str:
    return f"{fork_markers_prefix(session_token)}{writer_id}"

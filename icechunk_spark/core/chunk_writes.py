"""Turning one chunk write into a ref: inline bytes, a chunk file, or a virtual ref."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Executor

import numpy as np

from ..chunks.stats import ChunkStats, chunk_values_stats, encoded_chunk_stats, stats_enabled
from ..errors import InvalidInputError, NotFoundError, StaleSessionError
from ..format.ids import new_object_id
from ..format.keys import chunk_key
from ..format.structure import Node
from ..storage import Storage
from .config import RepositoryConfig
from .containers import resolve_url
from .manifest_cache import ChunkRef


def store_chunk(storage: Storage, config: RepositoryConfig, data: bytes) -> ChunkRef:
    """A ref to encoded ``data``: inline when small (config), else a new chunk file in ``c/``."""
    if len(data) <= config.inline_chunk_threshold_bytes:
        return ChunkRef("inline", inline_data=data, length=len(data))
    chunk_id = new_object_id()
    storage.put(chunk_key(chunk_id), data)
    return ChunkRef("native", chunk_id=chunk_id, offset=0, length=len(data))


def write_statistics(
    config: RepositoryConfig,
    node: Node,
    coord: Sequence[int],
    *,
    encoded: bytes | None = None,
    values: np.ndarray | None = None,
) -> ChunkStats | None:
    """Statistics of a chunk written to ``node``, if the config selects the array.

    From ``values`` when the writer has them (no decoding), else decoded from ``encoded``.

    Raises:
        InvalidInputError: ``encoded`` does not decode with the array's codecs.
    """
    if not stats_enabled(config.chunk_statistics, node.path):
        return None
    if values is not None:
        return chunk_values_stats(node, coord, values)
    assert encoded is not None
    return encoded_chunk_stats(node, coord, encoded)


def virtual_ref(
    node: Node,
    coord: Sequence[int],
    url: str,
    offset: int,
    length: int,
    checksum: str | None,
    containers: Iterable[str],
) -> ChunkRef:
    """A ref to ``length`` bytes at ``offset`` of ``url``, which must lie inside a container.

    Raises:
        VirtualRefRefusedError: ``url`` lies outside the containers.
        InvalidInputError: a negative offset or length.
    """
    absolute, _ = resolve_url(url, containers)
    if offset < 0 or length < 0:
        raise InvalidInputError(
            f"virtual ref for {node.path!r} {tuple(coord)}: offset and length must be >= 0"
        )
    return ChunkRef(
        "virtual", virtual_path=absolute, offset=int(offset), length=int(length), checksum=checksum
    )


def copy_chunk_files(
    storage: Storage, pool: Executor, chunk_ids: Sequence[str], cutoff: str
) -> dict[str, str]:
    """Copy a session's chunk files to new ids (old id -> new), so a garbage collection with
    cut-off ``cutoff`` keeps them: the copies are younger than its fence.

    Raises:
        StaleSessionError: the collection deleted one already (nothing can save it).
    """

    def copy(old: str) -> tuple[str, str]:
        try:
            data = storage.get(chunk_key(old))
        except NotFoundError:
            raise StaleSessionError(
                f"garbage collection with a cut-off of {cutoff} deleted chunk file "
                f"{chunk_key(old)!r}, written by this session before the cut-off; nothing "
                "was committed: write the data again in a new session, and collect garbage "
                "with a cut-off older than the longest write (e.g. 7 days)"
            ) from None
        new = new_object_id()
        storage.put(chunk_key(new), data)
        return old, new

    return dict(pool.map(copy, chunk_ids))

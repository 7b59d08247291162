"""Chunk values: the one codec (zarr's pipeline) and per-chunk statistics.

Shared by the core (``Session.set_chunk_values``, statistics on write), the inventory, virtual
imports and Spark executors; it imports only ``format`` and ``errors`` (and zarr, lazily).
"""

from .codec import ChunkCodec, chunk_codec
from .stats import ChunkStats, StatsLog, compute_stats

__all__ = ["ChunkCodec", "ChunkStats", "StatsLog", "chunk_codec", "compute_stats"]

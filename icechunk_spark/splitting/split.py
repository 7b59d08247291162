"""Splitting one huge array over several manifests along one dimension (seed 000's next step).

A set may declare ``split-along`` (a dimension name or axis) and ``chunks-per-split`` (chunk
indices along that dimension per manifest). Arrays whose rule target is ``default`` and whose
refs exceed its ``max-manifest-size`` are split along their first dimension automatically, with
pieces sized to stay under the limit. Piece ``p`` covers indices
``[p * chunks_per_split, (p + 1) * chunks_per_split)`` along the split dimension, so an append
along that dimension touches only the last piece (and new ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .config import DEFAULT_SET, ManifestConfig
from .packing import ArrayStats, assign_set


@dataclass(frozen=True, slots=True)
class SplitSpec:
    """Split an array along ``axis`` into pieces of ``chunks_per_split`` chunk indices."""

    set_name: str
    axis: int
    chunks_per_split: int

    def piece_of(self, index: int) -> int:
        return index // self.chunks_per_split

    def piece_range(self, piece: int) -> tuple[int, int]:
        return piece * self.chunks_per_split, (piece + 1) * self.chunks_per_split


def split_spec(
    array: ArrayStats,
    grid_shape: Sequence[int],
    dimension_names: Sequence[str | None] | None,
    config: ManifestConfig,
) -> SplitSpec | None:
    """How ``array`` is split, or ``None`` when it goes whole into one manifest."""
    if not grid_shape:
        return None
    target = config.set(assign_set(array, config))
    if target.split_along is not None:
        axis = _axis(target.split_along, dimension_names, len(grid_shape), array.path)
        per_split = target.chunks_per_split or _auto_chunks_per_split(
            target.max_manifest_size, grid_shape, axis
        )
        return SplitSpec(target.name, axis, per_split)
    limit = target.max_manifest_size
    if target.name == DEFAULT_SET and limit is not None and array.initialized_chunks > limit:
        return SplitSpec(target.name, 0, _auto_chunks_per_split(limit, grid_shape, 0))
    return None


def _axis(along: str | int, names: Sequence[str | None] | None, ndim: int, path: str) -> int:
    if isinstance(along, int):
        if along >= ndim:
            raise ConfigError(f"split-along {along} is beyond the {ndim} dimensions of {path!r}")
        return along
    if names is None or along not in names:
        raise ConfigError(f"split-along {along!r}: array {path!r} has no dimension of that name")
    return list(names).index(along)


def _auto_chunks_per_split(limit: int | None, grid_shape: Sequence[int], axis: int) -> int:
    """As many indices along ``axis`` as keep a full piece's refs within ``limit``."""
    if limit is None:
        return max(1, grid_shape[axis])
    slab = 1
    for i, n in enumerate(grid_shape):
        if i != axis:
            slab *= max(1, n)
    return max(1, limit // slab)

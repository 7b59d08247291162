"""Where tidy rows land: the grid a write of ``(dims..., values...)`` rows makes or grows.

A tidy table holds one row per element: a label per dimension, then the values. Writing it
as arrays needs, before any row is placed, every dimension's labels in index order (the
coordinate arrays) and each array's Zarr metadata. :func:`plan_new_grid` makes them for a new
dataset the way ``xr.Dataset.from_dataframe(df.set_index(dims)).to_zarr(...)`` does: each
dimension's sorted distinct labels, metadata and CF encoding from xarray itself (a lazy
template written to memory, so no value is computed). :func:`plan_grown_grid` grows an
existing dataset along one dimension: new labels go after the existing ones, encoded as the
coordinate array already is. Either way :class:`Grid` then tells each row its chunk, and
:mod:`.assemble` turns the rows of a chunk into its stored bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import InvalidInputError
from .labels import Labels

# How an append treats labels of ``append_dim`` that the dataset has already.
Placement = Literal["after", "update"]
PLACEMENTS: tuple[Placement, ...] = ("after", "update")
# The CF and packing keys of xarray's ``encoding`` that decide stored values.
ENCODING_KEYS = ("dtype", "_FillValue", "missing_value", "scale_factor", "add_offset")
TIME_KEYS = ("units", "calendar")


@dataclass(frozen=True, slots=True)
class TidySpec:
    """What the caller said: the dimension columns in order, chunk sizes, the group, the
    per-array ``encoding`` (xarray's keys), and how an append places labels."""

    dims: tuple[str, ...]
    chunks: Mapping[str, int]
    group: str = "/"
    encoding: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    append_dim: str | None = None
    placement: Placement = "after"

    def __post_init__(self) -> None:
        if not self.dims:
            raise InvalidInputError("option dims must name the dimension columns, in order")
        if len(set(self.dims)) != len(self.dims):
            raise InvalidInputError(f"option dims names a column twice: {list(self.dims)}")
        unknown = sorted(set(self.chunks) - set(self.dims))
        if unknown:
            raise InvalidInputError(f"option chunks names {unknown}, which are not in dims")
        bad = {d: n for d, n in self.chunks.items() if not isinstance(n, int) or n < 1}
        if bad:
            raise InvalidInputError(f"option chunks needs sizes >= 1, not {bad}")
        if self.append_dim is not None and self.append_dim not in self.dims:
            raise InvalidInputError(
                f"option append_dim={self.append_dim!r} is not one of dims {list(self.dims)}"
            )
        if self.placement not in PLACEMENTS:
            raise InvalidInputError(
                f"option placement={self.placement!r}: use {' or '.join(PLACEMENTS)}"
            )

    def path(self, name: str) -> str:
        """The repository path of the array ``name`` in the dataset's group."""
        return f"{self.group.rstrip('/')}/{name}"


@dataclass(frozen=True, slots=True, eq=False)
class Variable:
    """One value array: its metadata, and how a block of decoded values is stored."""

    name: str
    path: str
    zarr_json: bytes
    dtype: np.dtype[Any]  # of a block of decoded values
    encoding: Mapping[str, Any]  # xarray's, for encode_zarr_variable

    @property
    def hole(self) -> Any:
        """What an element no row gives holds, decoded (xarray's NaN, or the fill value)."""
        if self.dtype.kind in "fc":
            return np.nan
        return json.loads(self.zarr_json).get("fill_value", 0)


@dataclass(frozen=True, slots=True, eq=False)
class Coordinate:
    """A coordinate array and the stored bytes of each chunk the write must (re)write."""

    path: str
    zarr_json: bytes
    chunks: tuple[tuple[int, bytes], ...]  # (chunk index, raw C-order bytes)


@dataclass(frozen=True, slots=True, eq=False)
class Grid:
    """The dataset after the write: labels per dimension, shapes, the arrays to write."""

    spec: TidySpec
    labels: tuple[Labels, ...]
    chunk_shape: tuple[int, ...]
    variables: tuple[Variable, ...]
    coordinates: tuple[Coordinate, ...]
    # The extent the dataset had before (all zeros: new): a chunk reaching into it that the
    # rows do not cover whole keeps the elements they leave out.
    old_shape: tuple[int, ...]
    # Paths whose nodes the write replaces (an overwrite drops the group's old arrays).
    replaced: tuple[str, ...] = ()
    group_attributes: Mapping[str, Any] | None = None  # a group to create, with these

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(labels.size for labels in self.labels)

    def documents(self) -> tuple[tuple[str, bytes], ...]:
        """(path, ``zarr.json``) of every array the write makes or changes."""
        coordinates = [(c.path, c.zarr_json) for c in self.coordinates]
        return (*coordinates, *[(v.path, v.zarr_json) for v in self.variables])

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk_shape, strict=True))

    def indexes(self, columns: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Each row's index along each dimension, from its labels.

        Raises:
            InvalidInputError: a label the dimension does not have (the dataset never grows
                silently along a dimension the write does not append to).
        """
        return tuple(
            _positions(labels, values) for labels, values in zip(self.labels, columns, strict=True)
        )

    def offsets(self, indexes: Sequence[np.ndarray]) -> np.ndarray:
        """Each row's place in its chunk, as one number (C order over the chunk's shape)."""
        local = [i % c for i, c in zip(indexes, self.chunk_shape, strict=True)]
        return np.ravel_multi_index(local, self.chunk_shape).astype(np.int64)

    def labels_at(self, chunk: int, offset: int) -> dict[str, str]:
        """The labels of the element at ``offset`` in ``chunk``, as text (for errors)."""
        coord = np.unravel_index(chunk, self.grid_shape)
        local = np.unravel_index(offset, self.chunk_shape)
        return {
            lab.dim: shown(lab.values[int(c) * n + int(i)])
            for lab, c, n, i in zip(self.labels, coord, self.chunk_shape, local, strict=True)
        }

    def chunk_ids(self, indexes: Sequence[np.ndarray]) -> np.ndarray:
        """Each row's chunk, as one number (C order over the chunk grid)."""
        coords = [i // c for i, c in zip(indexes, self.chunk_shape, strict=True)]
        return np.ravel_multi_index(coords, self.grid_shape).astype(np.int64)


def check_known(labels: Labels, values: np.ndarray) -> None:
    """Refuse labels ``labels`` lacks (see :meth:`Grid.indexes`)."""
    _positions(labels, values)


def _positions(labels: Labels, values: np.ndarray) -> np.ndarray:
    """Where each of ``values`` is among the sorted ``labels``."""
    known = labels.values
    found = np.searchsorted(known, values)
    inside = found < known.shape[0]
    hit = np.zeros(values.shape[0], dtype=bool)
    hit[inside] = known[found[inside]] == values[inside]
    if not hit.all():
        missing = np.min(values[~hit])  # the smallest: rows have no order
        raise InvalidInputError(
            f"dimension {labels.dim!r} has no label {shown(missing)}: only the append "
            "dimension takes new labels (see append_dim)"
        )
    return found.astype(np.int64)


def shown(value: Any) -> str:
    """A label as an error names it: times to the second when they are whole seconds."""
    if isinstance(value, np.datetime64):
        seconds = value.astype("datetime64[s]")
        return str(seconds) if seconds == value else str(value)
    return repr(value.item() if isinstance(value, np.generic) else value)


def sorted_labels(dim: str, values: np.ndarray) -> Labels:
    """A new dimension's labels: the distinct values, sorted (xarray's from_dataframe)."""
    return Labels(dim, np.unique(values))


def grown_labels(
    existing: Labels, incoming: np.ndarray, placement: Placement
) -> tuple[Labels, int]:
    """The append dimension's labels after the write, and how many were there before.

    New labels go after the existing ones, in order.

    Raises:
        InvalidInputError: a new label sorts before the last existing one (it would have to
            go in between), or a label is there already and ``placement`` is not ``update``.
    """
    old = existing.values
    distinct = np.unique(incoming)
    present = np.isin(distinct, old)
    if present.any() and placement != "update":
        raise InvalidInputError(
            f"dimension {existing.dim!r} has label {shown(distinct[present][0])} already; "
            "placement='update' writes the rows into the elements that are there"
        )
    new = distinct[~present]
    if old.size and new.size and new[0] < old[-1]:
        raise InvalidInputError(
            f"label {shown(new[0])} of dimension {existing.dim!r} sorts before the last "
            f"one there ({shown(old[-1])}): appended labels go after the existing ones"
        )
    return Labels(existing.dim, np.concatenate([old, new.astype(old.dtype)])), int(old.size)


def encoding_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of an xarray ``encoding`` that decide how values are stored."""
    return {k: raw[k] for k in (*ENCODING_KEYS, *TIME_KEYS) if k in raw and raw[k] is not None}


__all__ = [
    "ENCODING_KEYS",
    "PLACEMENTS",
    "Coordinate",
    "Grid",
    "Placement",
    "TidySpec",
    "Variable",
    "check_known",
    "encoding_of",
    "grown_labels",
    "shown",
    "sorted_labels",
]

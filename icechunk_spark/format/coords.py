"""The chunk coord codec: each index a big-endian ``uint32``, concatenated.

Byte order equals numeric order, so sorted coords are sorted chunks and a coord is a plain
binary predicate in Arrow and Parquet statistics. The draft spec said ``uint16``; 65,535 chunks
per dimension is too few for real datacubes, so we widened to ``uint32`` (docs/format.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..errors import InvalidInputError

_MAX_INDEX = 2**32 - 1
_BE_U32 = np.dtype(">u4")


def encode_coord(coord: Sequence[int]) -> bytes:
    """Encode one chunk coord, e.g. ``(5, 30, 10)``."""
    for index in coord:
        if not 0 <= index <= _MAX_INDEX:
            raise InvalidInputError(
                f"chunk coord {tuple(coord)} has index {index} outside [0, {_MAX_INDEX}]"
            )
    return np.asarray(coord, dtype=_BE_U32).tobytes()


def decode_coord(data: bytes) -> tuple[int, ...]:
    """Decode one chunk coord."""
    if len(data) % 4:
        raise InvalidInputError(f"encoded chunk coord has {len(data)} bytes, not a multiple of 4")
    return tuple(int(i) for i in np.frombuffer(data, dtype=_BE_U32))


def encode_coords(coords: np.ndarray) -> pa.BinaryArray:
    """Encode an ``(n, ndim)`` integer array of coords without a Python loop per chunk."""
    coords = np.asarray(coords)
    if coords.ndim != 2:
        raise InvalidInputError(f"coords must be a 2-D (n, ndim) array, got shape {coords.shape}")
    if coords.size and (coords.min() < 0 or coords.max() > _MAX_INDEX):
        raise InvalidInputError(f"chunk coords must lie in [0, {_MAX_INDEX}]")
    n, ndim = coords.shape
    # Buffers over the numpy arrays, not bytes copies of them: 10 M coords are 80 MB.
    data = np.ascontiguousarray(coords, dtype=_BE_U32)
    if data is coords and coords.flags.writeable:  # the column must not change with it
        data = data.copy()
    offsets = np.arange(n + 1, dtype=np.int32) * (4 * ndim)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def decode_coords(encoded: pa.Array | pa.ChunkedArray, ndim: int) -> np.ndarray:
    """Decode a column of coords of one array (all ``ndim`` wide) into an ``(n, ndim)`` array."""
    if ndim == 0:  # a 0-d array's only chunk has the empty coord
        return np.zeros((len(encoded), 0), dtype=np.int64)
    return coords_view(encoded, ndim).astype(np.int64)


def coords_view(encoded: pa.Array | pa.ChunkedArray, ndim: int) -> np.ndarray:
    """The coords of one array as an ``(n, ndim)`` big-endian uint32 array *viewing* the
    column's bytes (read-only): no copy, where ``decode_coords`` makes an int64 one (10 M
    2-d coords: 160 MB). Compare, index and reduce it; it is not for arithmetic that may
    leave uint32. A column of several chunks is combined first (that copy is the view's)."""
    if ndim == 0:
        return np.zeros((len(encoded), 0), dtype=_BE_U32)
    view = keys_as_coords(coord_keys(encoded, ndim), ndim)
    view.flags.writeable = False  # the column's bytes: Arrow arrays are immutable
    return view


def keys_as_coords(keys: np.ndarray, ndim: int) -> np.ndarray:
    """``coord_keys`` output (of ``ndim``-wide coords) as ``coords_view`` gives them: an
    ``(n, ndim)`` big-endian uint32 array viewing the keys' bytes."""
    if ndim == 0:
        return np.zeros((len(keys), 0), dtype=_BE_U32)
    return keys.view(np.uint8).view(_BE_U32).reshape(-1, ndim)


def key_coord(keys: np.ndarray, i: int, ndim: int) -> tuple[int, ...]:
    """The coord of ``keys[i]`` (``coord_keys`` output). Sliced, not indexed: a numpy bytes
    scalar drops trailing zero bytes, which are part of the coord."""
    if ndim == 0:
        return ()
    return tuple(int(c) for c in np.frombuffer(keys[i : i + 1].tobytes(), dtype=_BE_U32))


def coord_keys(encoded: pa.Array | pa.ChunkedArray, ndim: int) -> np.ndarray:
    """Coords as a numpy fixed-width bytes array, sortable and searchable with ``searchsorted``.

    All coords of one array have the same width, so the binary column's data buffer is a dense
    ``n x 4*ndim`` block we can view without copying each value.
    """
    width = 4 * ndim
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
    n = len(encoded)
    if width == 0:
        return np.zeros(n, dtype="S1")
    if encoded.type != pa.binary():  # a cast, even to its own type, costs ~20 us a call
        encoded = encoded.cast(pa.binary())
    offsets = np.frombuffer(encoded.buffers()[1], dtype=np.int32)[
        encoded.offset : encoded.offset + n + 1
    ]
    # Not np.diff: its Python wrapper was most of this function's time in a small commit.
    if n and not (offsets[1:] - offsets[:-1] == width).all():
        raise InvalidInputError(f"chunk coords are not all {ndim}-dimensional")
    data = encoded.buffers()[2]
    start = int(offsets[0]) if n else 0
    raw = (
        np.frombuffer(data, dtype=np.uint8)[start : start + n * width]
        if n
        else np.empty(0, np.uint8)
    )
    return raw.view(f"S{width}") if n else np.empty(0, dtype=f"S{width}")


def keys_to_coords(keys: np.ndarray) -> pa.BinaryArray:
    """The inverse of ``coord_keys``: a fixed-width bytes array back to a binary column."""
    n, width = len(keys), keys.dtype.itemsize
    offsets = np.arange(n + 1, dtype=np.int32) * width
    data = np.ascontiguousarray(keys).view(np.uint8)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def coords_extent(coords: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Per dimension ``[min, max + 1)`` of decoded ``(n, ndim)`` coords; ``()`` for none."""
    if len(coords) == 0:
        return ()
    return tuple(
        (int(lo), int(hi) + 1)
        for lo, hi in zip(coords.min(axis=0), coords.max(axis=0), strict=True)
    )


def coverage(coords: np.ndarray, grid_shape: Sequence[int]) -> np.ndarray:
    """A boolean array over the chunk grid, true at each of ``coords`` (an ``(n, ndim)``
    array); a 0-d grid is true when any coord is given."""
    mask = np.zeros(tuple(grid_shape), dtype=bool)
    if len(grid_shape) == 0:
        mask[()] = len(coords) > 0
    elif len(coords):
        mask[tuple(np.asarray(coords).T)] = True
    return mask

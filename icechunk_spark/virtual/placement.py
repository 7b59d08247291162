"""Where new files go along the concat dimension, decided from their summaries alone.

The driver of a distributed ingest knows each new file's summary (``file_rows``), never its
refs, and what the dataset holds already (its arrays' metadata). From those it checks that
the files agree with each other and with the dataset, and computes per (file, array) the
shift of the file's chunk coords along the dimension; executors apply the shifts. Files
follow the dataset in the order of their coordinate (time), whatever their names: each must
start after the dataset's last value and after the file before it ends (``ordering``; a
file falling before or inside the dataset, or repeating times, is refused).

Rules (stricter than ``combine``, which sees every file at once and may rewrite arrays):

- every file has the same arrays as the others and as the dataset, with the same data type,
  fill value, dimensions, packing attributes (``scale_factor``...), ``units`` and
  ``calendar`` (CF time units may differ: values are converted), and the same shape off
  the dimension;
- arrays without the dimension must have the same values everywhere (digests compared);
  the first file's refs are kept when the dataset is new;
- an array along the dimension stays virtual (its chunk coords shifted by the chunks before
  its file) when every file and the dataset have its chunking and codecs, and everything
  before a file holds whole chunks along the dimension;
- otherwise, and always for the dimension's own coordinate, its values are copied: the new
  chunks from the dataset's last partial chunk on are encoded here (values are small and
  carried in the summaries; time values in the dataset's units). A copied array too big to
  carry is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..chunks.codec import chunk_codec
from ..errors import InvalidInputError
from .file_rows import ArraySummary, FileSummary
from .materialize import PACKING
from .ordering import Span, coordinate_path, order_spans, span_of
from .time_units import is_time_units, rebase_time_values

# (array path, start, stop) along its concat axis -> the values the dataset holds there
ReadHeld = Callable[[str, int, int], np.ndarray]
# array path -> digest of the values the dataset holds (arrays without the dimension)
HeldDigest = Callable[[str], str]
_SAME_FOR_ALL = ("data_type", "fill_value", "dimension_names")
_SAME_FOR_VIRTUAL = ("codecs", "chunk_grid")


@dataclass(frozen=True, slots=True)
class Shift:
    """Add ``chunks`` to axis ``axis`` of the coords of ``array``'s rows from ``file``."""

    file: str
    array: str
    axis: int  # -1: coords stay as they are
    chunks: int


@dataclass(frozen=True, slots=True)
class CopiedChunk:
    """A chunk whose values were copied: its encoded bytes, for an ``inline_data`` row."""

    array: str
    coord: tuple[int, ...]
    data: bytes


@dataclass(frozen=True, slots=True)
class Placement:
    """What the commit needs: row shifts, new arrays, exact shapes, groups, copied chunks.

    Rows of a (file, array) without a shift are not committed (copied arrays, constants of
    all but the first file).
    """

    shifts: tuple[Shift, ...]
    declared: Mapping[str, Mapping[str, Any]]
    shapes: Mapping[str, tuple[int, ...]]
    groups: Mapping[str, Mapping[str, Any]]
    copied: tuple[CopiedChunk, ...]
    length: int  # the dataset's length along the dimension afterwards

    def unreferenced(self, files: Sequence[FileSummary]) -> set[str]:
        """The files no committed ref will point into: every chunk of theirs that is kept
        is inline (tiny) or unwritten, or their arrays were copied. They must be recorded
        apart, or they would look new on the next run."""
        by_url = {f.url: f for f in files}
        pointed = {s.file for s in self.shifts if by_url[s.file].arrays[s.array].virtual_refs > 0}
        return set(by_url) - pointed


def place(
    files: Sequence[FileSummary],
    held: Mapping[str, Mapping[str, Any]],
    dim: str,
    read_held: ReadHeld,
    held_digest: HeldDigest,
) -> Placement:
    """Check ``files`` against each other and the dataset's arrays ``held`` (path ->
    ``zarr.json`` dict), and place them after it along ``dim``, in their coordinate's order.

    Raises:
        CoordinateOrderError: the files' coordinate values repeat or overlap each other's,
            do not increase, or do not start after the dataset's last value.
        InvalidInputError: the files or the dataset disagree (naming the array and files).
    """
    if not files:
        raise InvalidInputError("nothing to place: no files")
    _check_same_arrays(files, held)
    files = _in_coordinate_order(files, held, dim, read_held)
    first = files[0]
    held_length = _held_length(held, dim)
    starts = np.cumsum([held_length] + [f.length for f in files[:-1]]).tolist()
    total = held_length + sum(f.length for f in files)
    shifts: list[Shift] = []
    declared: dict[str, dict[str, Any]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    copied: list[CopiedChunk] = []
    held_attrs = _held_inherited(held)
    for path, head in sorted(first.arrays.items()):
        parts = [f.arrays[path] for f in files]
        reference = dict(held[path]) if path in held else head.doc
        attrs = held_attrs.get(path, {}) if path in held else dict(head.attrs)
        _check_agree(path, parts, files, reference, attrs)
        if head.axis is None:
            _check_constant(path, parts, files, held_digest if path in held else None)
            if path not in held:
                shifts.append(Shift(first.url, path, -1, 0))
                declared[path] = head.doc
            continue
        shape = [int(n) for n in reference["shape"]]
        shape[head.axis] = total
        shapes[path] = tuple(shape)
        if path not in held:
            declared[path] = {**head.doc, "shape": shape}
        chunk = int(reference["chunk_grid"]["configuration"]["chunk_shape"][head.axis])
        reason = _why_copied(path, parts, files, reference, attrs, held_length, chunk, dim)
        if reason is None:
            shifts += [
                Shift(f.url, path, head.axis, start // chunk)
                for f, start in zip(files, starts, strict=True)
            ]
            continue
        missing = [f.url for f, p in zip(files, parts, strict=True) if p.values is None]
        if missing:
            raise InvalidInputError(
                f"{path!r}: {reason}, so its values must be copied, but in {missing[0]!r} "
                "they are too big to copy; such files cannot be appended to this dataset"
            )
        values = [_in_units(p, attrs) for p in parts]
        copied += _copied_chunks(path, reference, shape, head.axis, held_length, values, read_held)
    groups: dict[str, Mapping[str, Any]] = {}
    for summary in reversed(files):  # the first file's group attributes win
        groups.update(summary.groups)
    return Placement(tuple(shifts), declared, shapes, groups, tuple(copied), total)


def _check_same_arrays(files: Sequence[FileSummary], held: Mapping[str, Any]) -> None:
    names = set(files[0].arrays)
    for summary in files[1:]:
        if set(summary.arrays) != names:
            odd = sorted(set(summary.arrays) ^ names)[0]
            raise InvalidInputError(
                f"{files[0].url!r} and {summary.url!r} do not have the same variables "
                f"({odd!r} is in only one); every file must have the same variables"
            )
    if held and set(held) != names:
        odd = sorted(set(held) ^ names)[0]
        side = "the dataset" if odd in held else repr(files[0].url)
        raise InvalidInputError(
            f"{odd!r} is only in {side}: new files must have the variables the dataset has"
        )


def _in_coordinate_order(
    files: Sequence[FileSummary],
    held: Mapping[str, Mapping[str, Any]],
    dim: str,
    read_held: ReadHeld,
) -> list[FileSummary]:
    """The files in the order of their coordinate, each after the dataset's last value."""
    end: Span | None = None
    path = coordinate_path({p: d.get("dimension_names") for p, d in held.items()}, dim)
    if path is not None and int(held[path]["shape"][0]) > 0:
        length = int(held[path]["shape"][0])
        attrs = held[path].get("attributes") or {}
        end = span_of(f"the dataset's {path}", read_held(path, length - 1, length), attrs)
    return [files[k] for k in order_spans([f.span for f in files], dim, after=end)]


def _held_length(held: Mapping[str, Mapping[str, Any]], dim: str) -> int:
    lengths = {
        int(doc["shape"][doc["dimension_names"].index(dim)])
        for doc in held.values()
        if dim in (doc.get("dimension_names") or ())
    }
    if len(lengths) > 1:
        raise InvalidInputError(
            f"the dataset's arrays have different lengths along {dim!r} ({sorted(lengths)}); "
            "it was not written by an ingest and cannot be appended to"
        )
    return lengths.pop() if lengths else 0


def _held_inherited(held: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The dataset's attributes per array, with units/calendar inherited via CF bounds."""
    out = {path: dict(doc.get("attributes") or {}) for path, doc in held.items()}
    for path, attrs in list(out.items()):
        parent = path.rsplit("/", 1)[0]
        for link in ("bounds", "climatology"):
            target = f"{parent}/{attrs[link]}" if isinstance(attrs.get(link), str) else None
            if target in out:
                labels = {k: attrs[k] for k in ("units", "calendar") if k in attrs}
                out[target] = {**labels, **out[target]}
    return out


def _check_agree(
    path: str,
    parts: Sequence[ArraySummary],
    files: Sequence[FileSummary],
    reference: Mapping[str, Any],
    attrs: Mapping[str, Any],
) -> None:
    """Data type, fill value, dimensions, packing, labels and off-axis shape agree."""
    ref_attrs = dict(reference.get("attributes") or {})
    for part, summary in zip(parts, files, strict=True):
        doc = part.doc
        for key in _SAME_FOR_ALL:
            if doc.get(key) != reference.get(key):
                raise _disagree(path, key, reference.get(key), doc.get(key), summary.url)
        own = dict(doc.get("attributes") or {})
        for key in (*PACKING, "_FillValue"):
            if own.get(key) != ref_attrs.get(key):
                raise _disagree(path, key, ref_attrs.get(key), own.get(key), summary.url)
        for key in ("units", "calendar"):
            mine, theirs = part.attrs.get(key), attrs.get(key)
            if mine != theirs and not (
                key == "units" and is_time_units(mine) and is_time_units(theirs)
            ):
                raise _disagree(path, key, theirs, mine, summary.url)
        off = [n for d, n in enumerate(part.shape) if d != part.axis]
        ref_off = [int(n) for d, n in enumerate(reference["shape"]) if d != part.axis]
        if off != ref_off:
            raise _disagree(path, "shape off the concat dimension", ref_off, off, summary.url)


def _disagree(path: str, key: str, expected: Any, got: Any, url: str) -> InvalidInputError:
    return InvalidInputError(
        f"{path!r}: {key} is {got!r} in {url!r} but {expected!r} in the dataset (or its first "
        "file); files appended to one dataset must agree"
    )


def _check_constant(
    path: str,
    parts: Sequence[ArraySummary],
    files: Sequence[FileSummary],
    held_digest: HeldDigest | None,
) -> None:
    expected = held_digest(path) if held_digest is not None else parts[0].digest
    for part, summary in zip(parts, files, strict=True):
        if part.digest != expected:
            raise InvalidInputError(
                f"{path!r} does not have the concatenation dimension but its values in "
                f"{summary.url!r} differ from the dataset's (or its first file's); a dataset "
                "holds one"
            )


def _why_copied(
    path: str,
    parts: Sequence[ArraySummary],
    files: Sequence[FileSummary],
    reference: Mapping[str, Any],
    attrs: Mapping[str, Any],
    held_length: int,
    chunk: int,
    dim: str,
) -> str | None:
    """Why the array's values must be copied rather than referenced; ``None``: they need not."""
    if len(parts[0].shape) == 1 and path.rsplit("/", 1)[-1] == dim:
        return f"it is the coordinate of {dim!r}"
    for part, summary in zip(parts, files, strict=True):
        for key in _SAME_FOR_VIRTUAL:
            if part.doc.get(key) != reference.get(key):
                return f"its {key} in {summary.url!r} differ from the dataset's"
        if part.attrs.get("units") != attrs.get("units"):
            return f"its time units in {summary.url!r} differ from the dataset's"
    lengths = [held_length, *(f.length for f in files[:-1])]
    if any(n % chunk for n in lengths):
        return f"the files do not hold whole chunks of {chunk} along {dim!r}"
    return None


def _in_units(part: ArraySummary, attrs: Mapping[str, Any]) -> np.ndarray:
    """A file's values in the dataset's time units (other values as they are)."""
    assert part.values is not None
    units, target = part.attrs.get("units"), attrs.get("units")
    if isinstance(units, str) and isinstance(target, str) and units != target:
        return rebase_time_values(part.values, units, target, attrs.get("calendar"), part.path)
    return part.values


def _copied_chunks(
    path: str,
    doc: Mapping[str, Any],
    shape: Sequence[int],
    axis: int,
    held_length: int,
    pieces: Sequence[np.ndarray],
    read_held: ReadHeld,
) -> list[CopiedChunk]:
    """The encoded chunks from the dataset's last partial chunk along ``axis`` to the end."""
    codec = chunk_codec(json.dumps({**doc, "shape": list(shape)}).encode())
    size = codec.chunk_shape[axis]
    start = (held_length // size) * size
    head = [read_held(path, start, held_length)] if held_length > start else []
    values = np.concatenate([*head, *(p.astype(codec.numpy_dtype) for p in pieces)], axis=axis)
    grid = [math.ceil(n / c) for n, c in zip(shape, codec.chunk_shape, strict=True)]
    out = []
    for coord in np.ndindex(*grid):
        if coord[axis] < start // size:
            continue
        box = tuple(
            slice(
                i * c - (start if d == axis else 0),
                min((i + 1) * c, n) - (start if d == axis else 0),
            )
            for d, (i, c, n) in enumerate(zip(coord, codec.chunk_shape, shape, strict=True))
        )
        block = values[box]
        full = np.full(codec.chunk_shape, codec.fill_value, dtype=codec.numpy_dtype)
        full[tuple(slice(0, s) for s in block.shape)] = block
        out.append(CopiedChunk(path, tuple(int(c) for c in coord), codec.encode(full)))
    return out


__all__ = ["CopiedChunk", "Placement", "Shift", "place"]

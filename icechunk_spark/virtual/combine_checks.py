"""What a combined import refuses: arrays that differ between files where xarray's
``combine_by_coords`` would not concatenate them as they are, named by file and variable."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import InvalidInputError
from .materialize import PACKING, Fetch, FilePart, read_values
from .references import ArrayRefs
from .time_units import is_time_units

LABELS = ("units", "calendar")
_READERS = 16  # files read at once when comparing arrays without the concat dimension


def check_constant(
    path: str, present: Sequence[FilePart], fetch: Fetch, label: Sequence[str]
) -> None:
    """An array without the concat dimension must be the same in every file holding it."""
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        if part.array.shape != first.array.shape:
            raise InvalidInputError(
                f"{path!r} does not have the concatenation dimension but its shape differs "
                f"between {label[first.k]} {first.array.shape} and {label[part.k]} "
                f"{part.array.shape}; such files cannot be combined"
            )
        for key in ("data_type", "fill_value"):
            if part.array.doc.get(key) != first.array.doc.get(key):
                raise InvalidInputError(
                    f"{path!r} does not have the concatenation dimension but its {key} "
                    f"differs between {label[first.k]} and {label[part.k]}"
                )
    if len(present) == 1:
        return
    values = read_values(first.array, fetch)

    def differs(part: FilePart) -> bool:
        assert part.array is not None
        return not np.array_equal(read_values(part.array, fetch), values, equal_nan=True)

    # A daily update re-reads e.g. lat/lon of every file: in parallel, for object stores.
    with ThreadPoolExecutor(max_workers=min(_READERS, len(present) - 1)) as pool:
        for part, bad in zip(present[1:], pool.map(differs, present[1:]), strict=True):
            if bad:
                raise InvalidInputError(
                    f"{path!r} does not have the concatenation dimension but its values "
                    f"differ between {label[first.k]} and {label[part.k]}; a combined dataset "
                    "can hold only one (xarray would need join='outer' and re-grid every chunk)"
                )


def check_compatible(
    path: str, present: Sequence[FilePart], axis: int, label: Sequence[str]
) -> None:
    first = present[0].array
    assert first is not None
    for part in present[1:]:
        assert part.array is not None
        if part.array.dimension_names != first.dimension_names:
            raise InvalidInputError(
                f"{path!r}: dimensions {part.array.dimension_names} in {label[part.k]}, "
                f"{first.dimension_names} in {label[present[0].k]}; cannot concatenate"
            )
        others = [s for d, s in enumerate(part.array.shape) if d != axis]
        if others != [s for d, s in enumerate(first.shape) if d != axis]:
            raise InvalidInputError(
                f"{path!r}: {label[part.k]} differs in shape off the concat axis from "
                f"{label[present[0].k]} ({part.array.shape} vs {first.shape})"
            )


def check_labels(path: str, present: Sequence[FilePart], label: Sequence[str]) -> None:
    """``units`` and ``calendar`` must agree, but for CF time units (converted)."""
    first = present[0]
    for part in present[1:]:
        for key in LABELS:
            mine, theirs = part.attrs.get(key), first.attrs.get(key)
            if mine == theirs or (key == "units" and is_time_units(mine) and is_time_units(theirs)):
                continue
            raise InvalidInputError(
                f"{path!r}: attribute {key!r} is {theirs!r} in {label[first.k]} but {mine!r} "
                f"in {label[part.k]}; the files cannot be combined into one array"
            )


def first_difference(path: str, present: Sequence[FilePart], label: Sequence[str]) -> str | None:
    """A sentence naming the first decoding attribute that differs between files, if any."""
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        for key in PACKING:
            if part.attrs.get(key) != first.attrs.get(key):
                return _difference(key, first, part, label)
        for key, name in (("data_type", "dtype"), ("fill_value", "_FillValue")):
            if part.array.doc.get(key) != first.array.doc.get(key):
                return _difference(name, first, part, label, key)
    return None


def _difference(
    name: str, first: FilePart, part: FilePart, label: Sequence[str], doc_key: str | None = None
) -> str:
    assert first.array is not None and part.array is not None
    if doc_key is None:
        a, b = first.attrs.get(name), part.attrs.get(name)
    else:
        a, b = first.array.doc.get(doc_key), part.array.doc.get(doc_key)
    return f"{name} differs between {label[first.k]} ({a!r}) and {label[part.k]} ({b!r})"


def check_same(
    path: str, present: Sequence[FilePart], keys: Sequence[str], label: Sequence[str]
) -> None:
    first = present[0]
    assert first.array is not None
    for part in present[1:]:
        assert part.array is not None
        for key in keys:
            if part.array.doc.get(key) != first.array.doc.get(key):
                raise InvalidInputError(
                    f"{path!r}: {label[part.k]} has another {key} ({part.array.doc.get(key)!r}) "
                    f"than {label[first.k]} ({first.array.doc.get(key)!r}); such arrays cannot "
                    "be concatenated"
                )


def same(arrays: Sequence[ArrayRefs | None], keys: Sequence[str]) -> bool:
    docs = [a.doc for a in arrays if a is not None]
    return all(d.get(k) == docs[0].get(k) for d in docs for k in keys)

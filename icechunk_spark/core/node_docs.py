"""The ``zarr.json`` documents of new groups and arrays, checked by zarr itself."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError


def group_doc(attributes: Mapping[str, Any] | None) -> bytes:
    """A Zarr v3 group's ``zarr.json``."""
    doc = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}
    return json.dumps(doc).encode()


def array_doc(
    path: str,
    shape: Sequence[int],
    chunk_shape: Sequence[int],
    dtype: str,
    *,
    fill_value: Any,
    dimension_names: Sequence[str] | None,
    attributes: Mapping[str, Any] | None,
    codecs: Sequence[Mapping[str, Any]] | None,
) -> bytes:
    """A Zarr v3 array's ``zarr.json`` (bytes codec, no compression, by default).

    Raises:
        InvalidInputError: zarr does not accept the metadata (dtype, codecs, shapes...).
    """
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [int(s) for s in shape],
        "data_type": dtype,
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [int(c) for c in chunk_shape]},
        },
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value,
        "codecs": list(codecs or [{"name": "bytes", "configuration": {"endian": "little"}}]),
        "attributes": dict(attributes or {}),
    }
    if dimension_names is not None:
        doc["dimension_names"] = list(dimension_names)
    return _validated_text(path, doc).encode()


class _RecentlyValid:
    """The texts of the last documents zarr accepted. Thousands of arrays made alike (one
    document) are checked once: zarr's parse costs about 0.3 ms an array, over a second for
    5,760 arrays. Only accepted documents are kept; a rejected one is parsed every time."""

    SIZE = 64

    def __init__(self) -> None:
        self._texts: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, text: str) -> bool:
        with self._lock:
            if text in self._texts:
                self._texts.move_to_end(text)
                return True
            return False

    def add(self, text: str) -> None:
        with self._lock:
            self._texts[text] = None
            if len(self._texts) > self.SIZE:
                self._texts.popitem(last=False)


_RECENTLY_VALID = _RecentlyValid()


def _validated_text(path: str, doc: Mapping[str, Any]) -> str:
    """``doc`` as JSON text, once zarr accepts it (or accepted the same text lately)."""
    try:
        text: str | None = json.dumps(doc)
    except (TypeError, ValueError):
        text = None  # zarr gets its say first, as before: its error names the field
    if text is None or text not in _RECENTLY_VALID:
        _validate_array_doc(path, doc)
        if text is None:
            text = json.dumps(doc)  # zarr took it, JSON cannot: the same error as ever
        _RECENTLY_VALID.add(text)
    return text


def _validate_array_doc(path: str, doc: Mapping[str, Any]) -> None:
    """Let zarr parse the metadata first: an invalid dtype or codec committed would make
    every reader of the repository (``xr.open_zarr``) fail, not just this array's."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        ArrayV3Metadata.from_dict(dict(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"array {path!r}: invalid Zarr v3 metadata: {exc}") from exc


def grown_doc(zarr_json: bytes, path: str, min_shape: Sequence[int] | None) -> bytes:
    """``zarr_json`` with its shape grown to at least ``min_shape`` (unchanged bytes if not).

    Raises:
        InvalidInputError: not an array document, or ``min_shape`` of another rank.
    """
    if min_shape is None:
        return zarr_json
    try:
        doc = json.loads(zarr_json)
        shape = [int(n) for n in doc["shape"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"{path!r}: not a Zarr array document ({exc})") from exc
    if len(shape) != len(min_shape):
        raise InvalidInputError(
            f"{path!r} has {len(shape)} dimensions; cannot grow it to {tuple(min_shape)}"
        )
    grown = [max(n, int(m)) for n, m in zip(shape, min_shape, strict=True)]
    if grown == shape:
        return zarr_json
    doc["shape"] = grown
    return json.dumps(doc).encode()

"""The ``zarr.json`` documents of new groups and arrays, checked by zarr itself."""

from __future__ import annotations

import functools
import json
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


def _validated_text(path: str, doc: Mapping[str, Any]) -> str:
    """``doc`` as JSON text, once zarr accepts it."""
    try:
        text = json.dumps(doc)
    except (TypeError, ValueError):
        _validate_array_doc(path, doc)  # zarr gets its say first, as before: it names the field
        return json.dumps(doc)  # zarr took it, JSON cannot: the same error as ever
    _validate_array_doc(path, text)
    return text


def _validate_array_doc(path: str, doc: Mapping[str, Any] | str) -> None:
    """Let zarr parse the metadata first: an invalid dtype or codec committed would make
    every reader of the repository (``xr.open_zarr``) fail, not just this array's. ``doc``:
    the document, or its JSON text (then a text zarr accepted lately is not parsed again)."""
    try:
        if isinstance(doc, str):
            _zarr_accepts(doc)
        else:
            _zarr_parse(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"array {path!r}: invalid Zarr v3 metadata: {exc}") from exc


@functools.lru_cache(maxsize=64)
def _zarr_accepts(text: str) -> None:
    """``_zarr_parse`` of the document ``text``, remembered for the last 64 texts zarr
    accepted: thousands of arrays made alike (one document) are parsed once, not at about
    0.3 ms each (over a second for 5,760). A refused text raises, and a raise is not
    remembered: it is refused every time."""
    _zarr_parse(json.loads(text))


def _zarr_parse(doc: Mapping[str, Any]) -> None:
    from zarr.core.metadata.v3 import ArrayV3Metadata

    ArrayV3Metadata.from_dict(dict(doc))


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

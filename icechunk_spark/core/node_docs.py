"""The ``zarr.json`` documents of new groups and arrays, checked by zarr itself."""

from __future__ import annotations

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
    _validate_array_doc(path, doc)
    return json.dumps(doc).encode()


def _validate_array_doc(path: str, doc: Mapping[str, Any]) -> None:
    """Let zarr parse the metadata first: an invalid dtype or codec committed would make
    every reader of the repository (``xr.open_zarr``) fail, not just this array's."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        ArrayV3Metadata.from_dict(dict(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"array {path!r}: invalid Zarr v3 metadata: {exc}") from exc

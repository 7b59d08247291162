"""Zarr v3 ``zarr.json`` back to Zarr v2 metadata (``.zgroup``, ``.zarray``, ``.zattrs``): the
inverse of metadata.py, for kerchunk reference sets (export_refs.py), whose keys are v2's.

Faithful or refused: a conversion either reads the same through zarr and xarray as the v3
array does, or raises ``InvalidInputError`` naming the array and what v2 cannot say.

- The data type and fill value go through zarr's own data types (``to_json(zarr_format=2)``);
  the ``bytes`` codec's endianness moves into the v2 dtype (``>f8``).
- Codecs: a ``transpose`` reversing the axes is ``order: "F"`` (other orders are refused);
  ``vlen-utf8`` / ``vlen-bytes`` become v2's object codec; every other codec is a v2 filter in
  the v3 order, the last bytes-to-bytes one being the compressor. ``gzip``, ``zstd``, ``blosc``
  and ``crc32c`` become the numcodecs ids of those names, ``numcodecs.<id>`` becomes ``<id>``.
  ``sharding_indexed`` is refused: a shard's inner chunks have no key of their own in v2.
- ``dimension_names`` become the ``_ARRAY_DIMENSIONS`` attribute, which xarray reads in v2.
- Fill value: xarray masks a v2 array's values equal to ``fill_value`` but a v3 array's only
  through the ``_FillValue`` attribute. So v2's ``fill_value`` is that attribute's value (and
  it leaves the attributes), or ``null`` when there is none (zarr reads a missing chunk of a
  null-filled v2 array as the data type's default: 0). Present values read the same either
  way; a missing chunk reads as v2's fill, so an array with chunks missing from its grid is
  refused when that differs from its v3 fill value (a NaN fill with no ``_FillValue``...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError
from .metadata import BLOSC_SHUFFLES, VLEN_CODECS, loads, xarray_fill_value_decoded

ZGROUP = json.dumps({"zarr_format": 2})
# What a Zarr v3 reader would need from v2 that no v2 key can say: they name the way out.
_USE_V3 = "export it with zarr_format=3 (--zarr-format 3, kerchunk-json only)"


@dataclass(frozen=True, slots=True)
class _Chain:
    """A v3 codec list as v2 says it."""

    order: str
    filters: tuple[dict[str, Any], ...]
    compressor: dict[str, Any] | None
    big_endian: bool


def group_v3_to_v2(zarr_json: bytes) -> dict[str, str]:
    """``.zgroup`` and ``.zattrs`` of a v3 group's ``zarr.json``."""
    attributes = loads(zarr_json).get("attributes") or {}
    return {".zgroup": ZGROUP, ".zattrs": json.dumps(attributes, allow_nan=True)}


def array_v3_to_v2(zarr_json: bytes, name: str, every_chunk: bool) -> dict[str, str]:
    """``.zarray`` and ``.zattrs`` of a v3 array's ``zarr.json``; ``every_chunk`` says whether
    the array holds every chunk of its grid (else what a missing chunk reads as must agree).

    Raises:
        InvalidInputError: v2 cannot express the array faithfully (the message says why).
    """
    from zarr.core.chunk_grids import RegularChunkGrid
    from zarr.core.dtype import get_data_type_from_native_dtype
    from zarr.core.metadata.v2 import ArrayV2Metadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    doc = loads(zarr_json)
    try:
        with quiet_numcodecs():
            v3 = ArrayV3Metadata.from_dict(dict(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: invalid zarr.json: {exc}") from exc
    if not isinstance(v3.chunk_grid, RegularChunkGrid):
        raise InvalidInputError(f"{name}: Zarr v2 has only regular chunk grids; {_USE_V3}")
    chain = _codecs(doc["codecs"], len(v3.shape), name)
    native = v3.data_type.to_native_dtype()
    dtype = v3.data_type
    if chain.big_endian and native.itemsize > 1:
        dtype = get_data_type_from_native_dtype(native.newbyteorder(">"))
    attributes = dict(v3.attributes)
    fill: Any = None
    if "_FillValue" in attributes:
        decoded, fill = xarray_fill_value_decoded(attributes.pop("_FillValue"), native)
        if not decoded:
            raise InvalidInputError(
                f"{name}: its _FillValue attribute is not in xarray's v3 encoding, so its v2 "
                f"fill value is unknown; {_USE_V3}"
            )
    missing_reads = dtype.default_scalar() if fill is None else dtype.cast_scalar(fill)
    if not every_chunk and not _same(missing_reads, v3.fill_value):
        raise InvalidInputError(
            f"{name}: a missing chunk reads as {_plain(v3.fill_value)!r} in v3 but would read as "
            f"{_plain(missing_reads)!r} in v2 (v2's fill value is what xarray masks: _FillValue, "
            f"else none); {_USE_V3}"
        )
    if v3.dimension_names is not None and all(d is not None for d in v3.dimension_names):
        attributes["_ARRAY_DIMENSIONS"] = list(v3.dimension_names)
    try:
        v2 = ArrayV2Metadata(
            shape=v3.shape,
            dtype=dtype,
            chunks=v3.chunk_grid.chunk_shape,
            fill_value=fill,
            order=chain.order,  # type: ignore[arg-type]  # "C" or "F", as _codecs chose
            compressor=chain.compressor,
            filters=chain.filters or None,
            attributes=attributes,
        )
        zarray = v2.to_dict()
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: no Zarr v2 metadata says this array: {exc}") from exc
    zattrs = zarray.pop("attributes", None) or {}
    return {
        ".zarray": json.dumps(zarray, allow_nan=True),
        ".zattrs": json.dumps(zattrs, allow_nan=True),
    }


def _codecs(codecs: list[Any], ndim: int, name: str) -> _Chain:
    order = "C"
    before: list[dict[str, Any]] = []  # array-to-array, ahead of the array-to-bytes codec
    serializer: dict[str, Any] | None = None  # v2's object codec, when the chunk holds objects
    after: list[dict[str, Any]] = []  # bytes-to-bytes
    big_endian = False
    seen_bytes = False
    for entry in codecs:
        spec: dict[str, Any] = {"name": entry} if isinstance(entry, str) else dict(entry)
        codec, config = str(spec["name"]), dict(spec.get("configuration") or {})
        if codec == "transpose":
            # v2's order is the layout the first filter sees: only a leading transpose says it.
            permutation = [int(i) for i in config.get("order", ())]
            if (
                before
                or seen_bytes
                or permutation
                not in (
                    list(range(ndim)),
                    list(range(ndim - 1, -1, -1)),
                )
            ):
                raise InvalidInputError(
                    f"{name}: transpose {permutation} is not C or F order; {_USE_V3}"
                )
            order = "F" if permutation != list(range(ndim)) else "C"
        elif codec == "bytes":
            seen_bytes = True
            big_endian = config.get("endian") == "big"
        elif codec in VLEN_CODECS:
            seen_bytes = True
            serializer = {"id": codec}
        elif codec == "sharding_indexed":
            raise InvalidInputError(
                f"{name}: sharded; Zarr v2 keys name whole chunks, not a shard's inner chunks, "
                f"so no kerchunk v2 reference can point at one; {_USE_V3}"
            )
        else:
            (after if seen_bytes else before).append(_numcodec(codec, config, name))
    filters = [*before, *([serializer] if serializer else []), *after]
    compressor = filters.pop() if after else None
    return _Chain(order, tuple(filters), compressor, big_endian)


def _numcodec(codec: str, config: dict[str, Any], name: str) -> dict[str, Any]:
    """The numcodecs (v2) config of one v3 codec (the inverse of metadata._convert)."""
    if codec.startswith("numcodecs."):
        return {**config, "id": codec[len("numcodecs.") :]}
    if codec in ("gzip", "zstd"):
        return {"id": codec, **config}
    if codec == "blosc" and config.get("shuffle") in BLOSC_SHUFFLES:
        return {
            "id": "blosc",
            "cname": config.get("cname", "zstd"),
            "clevel": int(config.get("clevel", 5)),
            "shuffle": BLOSC_SHUFFLES.index(config["shuffle"]),
            "blocksize": int(config.get("blocksize", 0)),
        }
    if codec == "crc32c":
        return {"id": "crc32c", "location": "end"}  # v3 appends the little-endian checksum
    raise InvalidInputError(f"{name}: codec {codec!r} has no Zarr v2 (numcodecs) id; {_USE_V3}")


def _plain(value: Any) -> Any:
    """A numpy scalar as Python's (``nan``, not ``np.float32(nan)``), for messages."""
    return value.item() if isinstance(value, np.generic) else value


def _same(a: Any, b: Any) -> bool:
    """Whether two fill values read the same (NaN is NaN)."""
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    except TypeError:  # strings and objects have no NaN
        return bool(a == b)


__all__ = ["ZGROUP", "array_v3_to_v2", "group_v3_to_v2"]

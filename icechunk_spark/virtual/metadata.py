"""Zarr v2 metadata (``.zarray``, ``.zattrs``, ``.zgroup``; kerchunk output) to v3 ``zarr.json``.

Decisions (the lead copies these to ``docs/``):

- ``dtype`` and ``fill_value`` go through zarr's own data type parsing; a ``null`` v2 fill
  value becomes the dtype's default (0, 0.0, false, ""): v3 requires one. NetCDF scans
  (``scan_netcdf``) fill it in with the HDF5 fill value instead, flagged ``UNMASKED_FILL``.
- Codecs: ``order: "F"`` becomes a ``transpose`` codec; array-to-array v2 filters come before
  the ``bytes`` codec; bytes-to-bytes filters (HDF5's ``shuffle`` and ``zlib`` are v2
  *filters* in kerchunk output) and the compressor come after it, in v2 order. ``gzip``,
  ``zstd`` and ``blosc`` map to the v3 codecs of those names; anything else becomes
  ``numcodecs.<id>`` (zarr's numcodecs wrappers; zarr warns when it loads them because they are
  not in the v3 spec). A v2 filter chain that needs an array-to-array codec after a
  bytes-to-bytes one cannot be expressed in v3 and is refused.
- The chunk key encoding becomes v3's ``default`` (``c/0/1``): keys are ours to choose since
  refs are stored by chunk coord, not by key.
- v2's object codecs ``vlen-utf8`` / ``vlen-bytes`` become v3's codecs of those names.
- ``_ARRAY_DIMENSIONS`` becomes ``dimension_names`` and leaves the attributes.
- A non-null v2 fill value is also written as the ``_FillValue`` attribute in xarray's v3
  encoding (base64 of a little-endian double for floats), because xarray masks fill values of
  v3 arrays only through that attribute while it masks v2 arrays through ``fill_value``: so
  ``xr.open_zarr`` sees the same data the v2 reference set showed.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from typing import Any

from ..chunks.codec import quiet_numcodecs
from ..errors import InvalidInputError

_NATIVE = {"gzip", "zstd", "blosc"}
VLEN_CODECS = ("vlen-utf8", "vlen-bytes")
# v3 blosc's shuffle names, at the index v2 (numcodecs) numbers them.
BLOSC_SHUFFLES = ("noshuffle", "shuffle", "bitshuffle")
# A ``.zarray`` flag of ours: its fill value is what the source returns for unwritten chunks
# but the source's readers do not mask it (NetCDF default fills), so no ``_FillValue``.
UNMASKED_FILL = "icechunk_spark:unmasked_fill"


def loads(value: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """A metadata value of a reference set (JSON text, bytes, or already a mapping)."""
    if isinstance(value, Mapping):
        return dict(value)
    try:
        loaded = json.loads(value)
    except ValueError as exc:
        raise InvalidInputError(f"reference metadata is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise InvalidInputError("reference metadata must be a JSON object")
    return loaded


def group_v2_to_v3(zattrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The v3 ``zarr.json`` document of a v2 group."""
    return {"zarr_format": 3, "node_type": "group", "attributes": dict(zattrs or {})}


def array_v2_to_v3(
    zarray: Mapping[str, Any], zattrs: Mapping[str, Any] | None, name: str = "array"
) -> dict[str, Any]:
    """The v3 ``zarr.json`` document of a v2 array.

    Raises:
        InvalidInputError: the v2 metadata is invalid or uses codecs v3 cannot express.
    """
    from zarr.core.metadata.v2 import ArrayV2Metadata

    v2 = dict(zarray)
    v2.setdefault("zarr_format", 2)
    v2.pop("dimension_separator", None)  # keys are not kept (see module docstring)
    unmasked = bool(v2.pop(UNMASKED_FILL, False))
    try:
        parsed = ArrayV2Metadata.from_dict({**v2, "attributes": {}})
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: invalid v2 array metadata: {exc}") from exc
    dtype = parsed.dtype
    fill = parsed.fill_value if parsed.fill_value is not None else dtype.default_scalar()
    attributes = dict(zattrs or {})
    dims = attributes.pop("_ARRAY_DIMENSIONS", None)
    if parsed.fill_value is not None and "_FillValue" not in attributes and not unmasked:
        encoded = xarray_fill_value(parsed.fill_value, dtype.to_native_dtype())
        if encoded is not None:
            attributes["_FillValue"] = encoded
    ndim = len(parsed.shape)
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(parsed.shape),
        "data_type": dtype.to_json(zarr_format=3),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(parsed.chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": dtype.to_json_scalar(fill, zarr_format=3),
        "codecs": _codecs(v2, ndim, dtype.to_native_dtype(), name),
        "attributes": attributes,
    }
    if isinstance(dims, list) and len(dims) == ndim:
        doc["dimension_names"] = [str(d) for d in dims]
    _validate(doc, name)
    return doc


def _codecs(v2: Mapping[str, Any], ndim: int, native: Any, name: str) -> list[dict[str, Any]]:
    array_array: list[dict[str, Any]] = []
    bytes_bytes: list[dict[str, Any]] = []
    if v2.get("order", "C") == "F" and ndim > 1:
        array_array.append(
            {"name": "transpose", "configuration": {"order": list(range(ndim - 1, -1, -1))}}
        )
    chain = [*(v2.get("filters") or []), *([v2["compressor"]] if v2.get("compressor") else [])]
    array_bytes: dict[str, Any] | None = None
    for config in chain:
        codec, kind = _convert(dict(config), native.itemsize, name)
        if kind == "array_bytes" and array_bytes is None and not bytes_bytes:
            array_bytes = codec  # v2's object codec (vlen-utf8...) serializes the chunk
        elif kind == "array_array":
            if bytes_bytes:
                raise InvalidInputError(
                    f"{name}: filter {config.get('id')!r} transforms arrays after a bytes codec; "
                    "zarr v3 cannot express that order"
                )
            array_array.append(codec)
        elif kind == "bytes_bytes":
            bytes_bytes.append(codec)
        else:
            raise InvalidInputError(f"{name}: v2 codec {config.get('id')!r} is not supported")
    if array_bytes is not None:
        return [*array_array, array_bytes, *bytes_bytes]
    endian = {"<": "little", ">": "big"}.get(native.byteorder, "little")
    bytes_codec: dict[str, Any] = {"name": "bytes"}
    if native.itemsize > 1:
        bytes_codec["configuration"] = {"endian": endian}
    return [*array_array, bytes_codec, *bytes_bytes]


def _convert(config: dict[str, Any], itemsize: int, name: str) -> tuple[dict[str, Any], str]:
    codec_id = str(config.pop("id", ""))
    if codec_id in VLEN_CODECS:  # zarr v3's own codecs for v2's variable-length object codecs
        return {"name": codec_id}, "array_bytes"
    if codec_id == "gzip":
        return {"name": "gzip", "configuration": {"level": int(config.get("level", 1))}}, (
            "bytes_bytes"
        )
    if codec_id == "zstd":
        level, checksum = int(config.get("level", 0)), bool(config.get("checksum", False))
        return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}, (
            "bytes_bytes"
        )
    if codec_id == "blosc" and config.get("shuffle", 1) in (0, 1, 2):
        shuffle = BLOSC_SHUFFLES[int(config.get("shuffle", 1))]
        blosc = {
            "cname": config.get("cname", "lz4"),
            "clevel": int(config.get("clevel", 5)),
            "shuffle": shuffle,
            "typesize": itemsize,
            "blocksize": int(config.get("blocksize", 0)),
        }
        return {"name": "blosc", "configuration": blosc}, "bytes_bytes"
    return {"name": f"numcodecs.{codec_id}", "configuration": config}, _kind(codec_id, name)


def _kind(codec_id: str, name: str) -> str:
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import get_codec_class

    try:
        cls = get_codec_class(f"numcodecs.{codec_id}")
    except KeyError:
        raise InvalidInputError(
            f"{name}: v2 codec {codec_id!r} has no zarr v3 equivalent (numcodecs.{codec_id})"
        ) from None
    if issubclass(cls, ArrayArrayCodec):
        return "array_array"
    if issubclass(cls, BytesBytesCodec):
        return "bytes_bytes"
    return "array_bytes" if issubclass(cls, ArrayBytesCodec) else "unknown"


def xarray_fill_value(value: Any, native: Any) -> Any:
    """``_FillValue`` as xarray writes it for zarr v3 (``xarray.backends.zarr.FillValueCoder``)."""
    kind = native.kind
    if kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    if kind in "iu":
        return int(value)
    if kind == "b":
        return bool(value)
    return None  # strings, datetimes...: xarray reads them through fill_value itself


def xarray_fill_value_decoded(value: Any, native: Any) -> tuple[bool, Any]:
    """``(True, value)`` of a v3 ``_FillValue`` attribute as xarray decodes it (the inverse of
    ``xarray_fill_value``, after ``xarray.backends.zarr.FillValueCoder.decode``), or
    ``(False, None)`` when xarray could not decode it either."""
    kind = native.kind
    try:
        if kind == "f":
            return True, struct.unpack("<d", base64.standard_b64decode(value))[0]
        if kind == "c":
            real, imag = (struct.unpack("<d", base64.standard_b64decode(v))[0] for v in value)
            return True, complex(real, imag)
        if kind in "iu":
            return True, int(value)
        if kind == "b":
            return True, bool(value)
        if kind == "S":
            return True, base64.standard_b64decode(value)
        if kind in "UT":
            return True, str(value)
    except (TypeError, ValueError, struct.error):  # binascii.Error is a ValueError
        pass
    return False, None


def _validate(doc: Mapping[str, Any], name: str) -> None:
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        with quiet_numcodecs():
            ArrayV3Metadata.from_dict(dict(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: the converted v3 metadata is invalid: {exc}") from exc

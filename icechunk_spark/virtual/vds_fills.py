"""Masking that VirtualiZarr's v2 -> v3 conversion drops, put back (our faithful-import rule).

A Zarr v2 array (a v2 store, a kerchunk reference set, kerchunk's NetCDF3 scan) says which
value is missing with its ``.zarray`` ``fill_value``: xarray masks it on v2 arrays (that is
where NetCDF's ``_FillValue`` goes). On v3 arrays xarray masks only the ``_FillValue``
attribute. VirtualiZarr's ``ZarrParser`` (v2 stores) and kerchunk translator (NetCDF3 and
kerchunk parsers) keep the fill value as the v3 ``fill_value`` but add no ``_FillValue``, so
a virtual dataset written as-is reads ``-999`` where the source reads NaN. ``metadata.py``
states our rule for v2 metadata: a non-null v2 fill value is also written as the
``_FillValue`` attribute in xarray's v3 encoding. Here the rule is applied to the virtual
variables of those three parsers, from the source's own ``.zarray`` documents (a null fill
value stays unmasked, as the source reads).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .metadata import loads, xarray_fill_value
from .vds_refs import is_manifest_array

V2_PARSERS = ("netcdf3", "kerchunk", "zarr")


def v2_fill_values(
    url: str, parser: str, storage_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Root array name -> its non-null v2 ``fill_value`` (JSON form), for a source read by
    ``parser``; empty for sources that are not v2 (a v3 Zarr store keeps ``_FillValue``)."""
    metadata = _v2_metadata(url, parser, storage_options)
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        name, _, leaf = key.rpartition("/")
        if leaf != ".zarray" or not name or "/" in name:
            continue
        fill = loads(value).get("fill_value")
        if fill is not None:
            out[name] = fill
    return out


def _v2_metadata(
    url: str, parser: str, storage_options: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    import fsspec.core

    options = dict(storage_options or {})
    if parser == "netcdf3":
        from kerchunk.netCDF3 import NetCDF3ToZarr

        refs = NetCDF3ToZarr(url, inline_threshold=0, storage_options=options).translate()
        return dict(refs.get("refs", refs))
    fs, path = fsspec.core.url_to_fs(url, **options)
    path = path.rstrip("/")
    if parser == "kerchunk":
        if fs.isdir(path):
            return dict(json.loads(fs.cat_file(f"{path}/.zmetadata")).get("metadata", {}))
        loaded = json.loads(fs.cat_file(path))
        return dict(loaded.get("refs", loaded))
    if parser == "zarr" and fs.exists(f"{path}/.zgroup"):
        return {
            f"{name.rstrip('/').rsplit('/', 2)[-2]}/.zarray": fs.cat_file(name)
            for name in fs.glob(f"{path}/*/.zarray")
        }
    return {}


def restore_masking(vds: Any, fills: Mapping[str, Any]) -> None:
    """Give each virtual variable with a v2 fill value and no ``_FillValue`` one, in place."""
    for name, variable in vds.variables.items():
        if name not in fills or not is_manifest_array(variable.data):
            continue
        if "_FillValue" in variable.attrs or "_FillValue" in variable.encoding:
            continue
        encoded = fill_attribute(fills[name], variable.data.dtype)
        if encoded is not None:
            variable.attrs["_FillValue"] = encoded


def masked_docs(
    docs: Mapping[str, Mapping[str, Any]], fills: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """``restore_masking`` for arrays as v3 documents (name -> ``zarr.json``): the documents
    that gain a ``_FillValue`` attribute, as new documents."""
    out = {}
    for name, doc in docs.items():
        attributes = dict(doc.get("attributes") or {})
        if name not in fills or "_FillValue" in attributes:
            continue
        encoded = fill_attribute(fills[name], np.dtype(doc["data_type"]))
        if encoded is not None:
            out[name] = {**doc, "attributes": {**attributes, "_FillValue": encoded}}
    return out


def fill_attribute(value: Any, native: np.dtype[Any]) -> Any | None:
    """The ``_FillValue`` attribute (xarray's v3 encoding) of a v2 fill value, or None."""
    scalar = np.array(float(value) if isinstance(value, str) else value).astype(native)
    return xarray_fill_value(scalar.item(), native)

"""v3 zarr.json back to v2 metadata: what cannot be said faithfully is refused, saying why.

What converts is checked end to end in test_export_refs.py (every codec mapping, fill values,
NetCDF imports), by reading the export through fsspec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from icechunk_spark import InvalidInputError
from icechunk_spark.virtual.metadata_v2 import array_v3_to_v2, group_v3_to_v2


def zarr_json(**changes: Any) -> bytes:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [4, 6],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"units": "K"},
        "dimension_names": ["y", "x"],
    }
    return json.dumps({**doc, **changes}).encode()


def test_a_plain_array_and_a_group() -> None:
    v2 = array_v3_to_v2(zarr_json(attributes={"_FillValue": "AAAAAICHw8A="}), "/a", True)
    zarray, zattrs = json.loads(v2[".zarray"]), json.loads(v2[".zattrs"])
    assert zarray["dtype"] == "<f4" and zarray["chunks"] == [2, 3]
    assert zarray["fill_value"] == -9999.0  # what xarray masks, out of the attributes
    assert zattrs == {"_ARRAY_DIMENSIONS": ["y", "x"]}
    group = group_v3_to_v2(b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}}')
    assert group == {".zgroup": '{"zarr_format": 2}', ".zattrs": '{"a": 1}'}


SHARDED = {
    "name": "sharding_indexed",
    "configuration": {
        "chunk_shape": [1, 3],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    },
}


@pytest.mark.parametrize(
    ("changes", "every_chunk", "message"),
    [
        ({"codecs": [SHARDED]}, True, "sharded"),
        (
            {
                "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "numcodecs.nonesuch", "configuration": {}},
                ]
            },
            True,
            "codec 'numcodecs.nonesuch'|nonesuch",
        ),
        ({"fill_value": "NaN"}, False, "a missing chunk reads as nan in v3"),
        ({"attributes": {"_FillValue": "not base64"}}, True, "not in xarray's v3 encoding"),
    ],
    ids=["sharded", "unknown-codec", "missing-chunk-fill", "undecodable-fill"],
)
def test_refused_saying_why(changes: dict[str, Any], every_chunk: bool, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as refused:
        array_v3_to_v2(zarr_json(**changes), "/a", every_chunk)
    assert str(refused.value).startswith("/a: ")


def test_a_nan_fill_is_fine_when_no_chunk_is_missing() -> None:
    v2 = array_v3_to_v2(zarr_json(fill_value="NaN"), "/a", True)
    assert json.loads(v2[".zarray"])["fill_value"] is None  # nothing to mask, nothing missing

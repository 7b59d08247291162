"""Kerchunk reference sets: v2 metadata to v3, every kind of ref, templates, whole files."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from icechunk_spark import InvalidInputError
from icechunk_spark.virtual import import_kerchunk, parse_json_refs
from icechunk_spark.virtual.metadata import array_v2_to_v3

from .conftest import NUMCODECS_WARNING, RepoFactory

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)


def zarray(**overrides: Any) -> dict[str, Any]:
    base = {
        "shape": [4, 6],
        "chunks": [2, 3],
        "dtype": "<i4",
        "fill_value": None,
        "order": "C",
        "filters": None,
        "compressor": None,
        "zarr_format": 2,
    }
    return {**base, **overrides}


def test_metadata_conversion() -> None:
    doc = array_v2_to_v3(
        zarray(
            dtype=">f8",
            fill_value="NaN",
            order="F",
            filters=[{"id": "delta", "dtype": ">f8"}],
            compressor={"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 2, "blocksize": 0},
        ),
        {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"},
    )
    assert doc["data_type"] == "float64"
    assert doc["fill_value"] == "NaN"
    assert doc["dimension_names"] == ["y", "x"]
    assert doc["attributes"]["units"] == "m" and "_ARRAY_DIMENSIONS" not in doc["attributes"]
    names = [c["name"] for c in doc["codecs"]]
    assert names == ["transpose", "numcodecs.delta", "bytes", "blosc"]
    assert doc["codecs"][2]["configuration"]["endian"] == "big"
    assert doc["codecs"][3]["configuration"]["shuffle"] == "bitshuffle"
    assert array_v2_to_v3(zarray(dtype="|u1"), None)["codecs"] == [{"name": "bytes"}]
    assert array_v2_to_v3(zarray(), None)["fill_value"] == 0  # null -> the dtype's default
    gzip = array_v2_to_v3(zarray(compressor={"id": "gzip", "level": 3}), None)
    assert gzip["codecs"][-1] == {"name": "gzip", "configuration": {"level": 3}}


def test_metadata_refusals() -> None:
    with pytest.raises(InvalidInputError, match="codec"):
        array_v2_to_v3(zarray(compressor={"id": "no-such-codec"}), None)
    with pytest.raises(InvalidInputError, match="cannot express"):
        array_v2_to_v3(
            zarray(filters=[{"id": "zlib", "level": 1}, {"id": "delta", "dtype": "<i4"}]), None
        )
    with pytest.raises(InvalidInputError, match="invalid v2 array metadata"):
        array_v2_to_v3({"shape": [1]}, None)


def test_every_kind_of_ref(data_dir: Path, make_repo: RepoFactory) -> None:
    """Inline base64, inline plain strings, [url, offset, length], [url] and templates."""
    values = np.arange(24, dtype="<i4").reshape(4, 6)
    chunks = {
        (i, j): values[i * 2 : i * 2 + 2, j * 3 : j * 3 + 3].tobytes()
        for i in range(2)
        for j in range(2)
    }
    (data_dir / "packed.bin").write_bytes(b"HEADER" + chunks[(0, 1)] + chunks[(1, 0)])
    (data_dir / "whole.bin").write_bytes(chunks[(1, 1)])
    container = data_dir.as_uri() + "/"
    refs = {
        "version": 1,
        "templates": {"d": container.rstrip("/")},
        "refs": {
            ".zgroup": json.dumps({"zarr_format": 2}),
            ".zattrs": json.dumps({"title": "kinds"}),
            "g/.zgroup": json.dumps({"zarr_format": 2}),
            "g/a/.zarray": json.dumps(zarray()),
            "g/a/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"]}),
            "g/a/0.0": "base64:" + base64.b64encode(chunks[(0, 0)]).decode(),
            "g/a/0.1": ["{{d}}/packed.bin", 6, 24],
            "g/a/1.0": [container + "packed.bin", 30, 24],
            "g/a/1.1": [container + "whole.bin"],
            "g/s/.zarray": json.dumps(zarray(shape=[5], chunks=[5], dtype="|u1")),
            "g/s/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["n"]}),
            "g/s/0": "hello",
        },
    }
    repo = make_repo([container])
    session = repo.writable_session()
    summary = import_kerchunk(session, refs, group="/imported")
    session.commit("kinds")
    assert summary.virtual_refs == 3 and summary.inline_refs == 2
    assert summary.groups == ("/imported", "/imported/g")
    whole = repo.readonly_session().get_chunk_ref("/imported/g/a", (1, 1))
    assert whole is not None and whole.length == 24 and whole.offset == 0
    store = repo.readonly_session().store
    root = zarr.open_group(store, mode="r")
    a = zarr.open_array(store, path="imported/g/a", mode="r")
    np.testing.assert_array_equal(a[:], values)
    s = zarr.open_array(store, path="imported/g/s", mode="r")
    assert np.asarray(s[:]).tobytes() == b"hello"
    assert root["imported"].attrs["title"] == "kinds"
    ds = xr.open_zarr(repo.readonly_session().store, group="imported/g", consolidated=False)
    assert ds["a"].dims == ("y", "x")


def test_refusals_in_reference_sets() -> None:
    with pytest.raises(InvalidInputError, match="gen"):
        parse_json_refs({"version": 1, "gen": [{"key": "x"}], "refs": {}})
    with pytest.raises(InvalidInputError, match="version"):
        parse_json_refs({"version": 2, "refs": {}})
    base = {".zgroup": '{"zarr_format": 2}', "a/.zarray": json.dumps(zarray())}
    with pytest.raises(InvalidInputError, match="belongs to no array"):
        parse_json_refs({**base, "b/0.0": "x"})
    with pytest.raises(InvalidInputError, match="not a chunk"):
        parse_json_refs({**base, "a/0.0.0": "x"})
    with pytest.raises(InvalidInputError, match="undefined template"):
        parse_json_refs({**base, "a/0.0": ["{{nope}}/x", 0, 1]})


def test_scheme_less_paths_are_local_files(data_dir: Path, make_repo: RepoFactory) -> None:
    (data_dir / "raw.bin").write_bytes(np.arange(4, dtype="<i4").tobytes())
    refs = {
        ".zgroup": '{"zarr_format": 2}',
        "a/.zarray": json.dumps(zarray(shape=[4], chunks=[4])),
        "a/0": [str(data_dir / "raw.bin"), 0, 16],
    }
    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    import_kerchunk(session, refs)
    ref = session.get_chunk_ref("/a", (0,))
    assert ref is not None and ref.virtual_path == (data_dir / "raw.bin").as_uri()
    assert session.get_chunk("/a", (0,)) == np.arange(4, dtype="<i4").tobytes()


def test_reimport_keeps_the_array_and_drops_chunks_the_new_refs_lack(
    make_repo: RepoFactory, data_dir: Path
) -> None:
    def refs(*coords: str) -> dict[str, Any]:
        chunk = "base64:" + base64.b64encode(np.arange(6, dtype="<i4").tobytes()).decode()
        return {
            "version": 1,
            "refs": {
                ".zgroup": json.dumps({"zarr_format": 2}),
                "a/.zarray": json.dumps(zarray()),
                **{f"a/{c}": chunk for c in coords},
            },
        }

    repo = make_repo([data_dir.as_uri() + "/"])
    session = repo.writable_session()
    import_kerchunk(session, refs("0.0", "0.1", "1.1"))
    first = session.commit("three chunks")
    session = repo.writable_session()
    import_kerchunk(session, refs("0.0", "1.0"), overwrite=True)
    second = session.commit("two chunks, one of them new")

    reader = repo.readonly_session()
    assert reader.chunk_coords("/a").tolist() == [[0, 0], [1, 0]]
    d = repo.diff(from_snapshot_id=first, to_snapshot_id=second)
    assert d.nodes_added == d.nodes_deleted == ()  # the same array, updated in place
    assert d.chunks_changed == {"/a": 3}  # (0, 1) and (1, 1) gone, (1, 0) new

"""A cold chunk lookup decodes one manifest row group, never the whole manifest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import Repository
from icechunk_spark.format import manifest as manifest_format


@pytest.fixture
def repo_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Two arrays sharing one manifest (the `coordinates` set), in row groups of 50 refs."""
    monkeypatch.setattr(manifest_format, "ROW_GROUP_SIZE", 50)
    url = tmp_path.as_uri()
    repo = Repository.create(url)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", (40, 10), (2, 1), "int32")  # 200 chunks, 3 arrays per group
    session.create_array("/b", (130,), (1,), "int32")
    coords_a = np.stack(np.unravel_index(np.arange(0, 200, 2), (20, 10)), axis=1)
    session.set_chunk_refs(
        "/a",
        {
            "coord": coords_a,
            "chunk_id": [f"A{i}" for i in range(100)],
            "offset": np.zeros(100),
            "length": np.arange(100) + 1,
        },
    )
    session.set_chunk_refs(
        "/b",
        {
            "coord": np.arange(130).reshape(-1, 1),
            "inline_data": [bytes([i]) * (i % 5 + 1) for i in range(130)],
        },
    )
    session.commit("refs")
    return url


def test_cold_lookups_match_the_full_manifest_and_decode_single_row_groups(repo_url: str) -> None:
    expected = Repository.open(repo_url).readonly_session()
    full = {
        path: dict(
            zip(
                map(tuple, expected.chunk_coords(path).tolist()),
                expected.chunk_refs(path).to_pylist(),
                strict=True,
            )
        )
        for path in ("/a", "/b")
    }
    repo = Repository.open(repo_url)
    session = repo.readonly_session()
    (manifest,) = {m.manifest_id for n in session.list_nodes() for m in n.manifests}
    ref = session.get_chunk_ref("/b", (77,))
    assert ref is not None and ref.inline_data == bytes([77]) * 3
    assert repo.handle.manifest_cache.groups_decoded == 1
    assert not repo.handle.manifest_cache.is_cached(
        manifest
    )  # the whole manifest was never decoded
    for path, grid in (("/a", (20, 10)), ("/b", (130,))):
        for coord in np.ndindex(grid):
            ref = session.get_chunk_ref(path, coord)
            row = full[path].get(coord)
            if row is None:
                assert ref is None, (path, coord)
            elif row["inline_data"] is not None:
                assert ref is not None and ref.inline_data == row["inline_data"]
            else:
                assert ref is not None and (ref.chunk_id, ref.length) == (
                    row["chunk_id"],
                    row["length"],
                )
    # 230 refs in groups of 50: every group decoded once per array it holds, then reused.
    assert repo.handle.manifest_cache.groups_decoded <= 5 + 1
    assert repo.handle.manifest_cache.fetches == 1
    assert not repo.handle.manifest_cache.is_cached(manifest)


def test_a_decoded_manifest_serves_lookups_without_decoding_groups(repo_url: str) -> None:
    repo = Repository.open(repo_url)
    session = repo.readonly_session()
    assert session.chunk_refs("/a").num_rows == 100  # decodes the whole manifest
    assert session.get_chunk_ref("/a", (4, 2)) is not None
    assert repo.handle.manifest_cache.groups_decoded == 0
    assert repo.handle.manifest_cache.fetches == 1
    assert isinstance(session.chunk_refs("/b"), pa.Table)

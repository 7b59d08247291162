"""Concurrent changes to the node tree or to array metadata conflict.

Each case was silent data loss before: a commit reported success and the other writer's data,
or its own, was gone (orphan nodes, dropped chunk writes, manifests of a deleted array).
"""

from __future__ import annotations

import json

import pytest

from icechunk_spark import ConflictError, Repository
from tests.support.helpers import create_repo


@pytest.fixture
def repo(backend) -> Repository:
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    session.create_group("/")
    session.create_group("/g")
    session.create_array("/g/old", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/a", shape=(10,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"\x01")
    session.commit("base")
    return repo


def _resize(repo: Repository, path: str, shape: tuple[int, ...], chunks: tuple[int, ...]) -> str:
    session = repo.writable_session()
    doc = json.loads(session.get_node(path).zarr_json)
    doc["shape"] = list(shape)
    doc["chunk_grid"]["configuration"]["chunk_shape"] = list(chunks)
    session.set_node_metadata(path, json.dumps(doc).encode())
    return session.commit(f"resize {path}")


def _assert_conflict(session, kind: str) -> None:
    with pytest.raises(ConflictError) as info:
        session.commit("loses")
    assert any(kind in c.kind for c in info.value.conflicts), info.value.conflicts


def test_create_under_a_group_deleted_concurrently(repo):
    session = repo.writable_session()
    session.create_array("/g/new", shape=(2,), chunk_shape=(1,), dtype="uint8")
    other = repo.writable_session()
    other.delete_node("/g")
    other.commit("delete /g")
    _assert_conflict(session, "parent group deleted concurrently")


def test_delete_a_subtree_while_a_child_was_created(repo):
    session = repo.writable_session()
    session.delete_node("/g")
    other = repo.writable_session()
    other.create_array("/g/child", shape=(2,), chunk_shape=(1,), dtype="uint8")
    other.commit("create /g/child")
    _assert_conflict(session, "created concurrently below")


def test_chunk_write_outside_a_grid_shrunk_concurrently(repo):
    session = repo.writable_session()
    session.set_chunk("/a", (8,), b"\x08")
    _resize(repo, "/a", (5,), (1,))
    _assert_conflict(session, "outside the chunk grid")


def test_chunk_write_after_chunk_shape_changed_concurrently(repo):
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"\x08")
    _resize(repo, "/a", (10,), (2,))
    _assert_conflict(session, "chunk shape changed concurrently")


def test_shrink_over_chunks_written_concurrently(repo):
    session = repo.writable_session()
    doc = json.loads(session.get_node("/a").zarr_json)
    doc["shape"] = [5]
    session.set_node_metadata("/a", json.dumps(doc).encode())
    other = repo.writable_session()
    other.set_chunk("/a", (8,), b"\x08")
    other.commit("write chunk 8")
    _assert_conflict(session, "outside the chunk grid")


def test_growth_and_writes_inside_the_grid_still_rebase(repo):
    session = repo.writable_session()
    session.set_chunk("/a", (3,), b"\x03")
    _resize(repo, "/a", (20,), (1,))
    session.commit("write chunk 3")
    reader = repo.readonly_session()
    assert reader.get_node("/a").meta.shape == (20,)
    assert reader.get_chunk("/a", (3,)) == b"\x03"
    assert reader.get_chunk("/a", (0,)) == b"\x01"


def test_advice_names_on_conflict_only_for_chunk_conflicts(repo):
    session = repo.writable_session()
    doc = json.loads(session.get_node("/a").zarr_json)
    doc["attributes"] = {"mine": 1}
    session.set_node_metadata("/a", json.dumps(doc).encode())
    _resize(repo, "/a", (12,), (1,))
    with pytest.raises(ConflictError) as info:
        session.commit("both changed the metadata", on_conflict="ours")
    assert "on_conflict='ours'" not in str(info.value)
    assert "resolves only chunks written by both" in str(info.value)

    chunks = repo.writable_session()
    chunks.set_chunk("/a", (0,), b"\x09")
    other = repo.writable_session()
    other.set_chunk("/a", (0,), b"\x07")
    other.commit("same chunk")
    with pytest.raises(ConflictError, match="on_conflict='ours' or 'theirs'"):
        chunks.commit("same chunk too")

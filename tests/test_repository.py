"""The repository behaviour suite: runs unchanged on memory, local files and S3."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import (
    AlreadyExistsError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    Repository,
)
from tests.support.helpers import create_repo, make_array, open_repo


def test_create_then_open_shows_the_initial_snapshot(backend):
    repo = create_repo(backend)
    again = open_repo(backend)
    assert again.list_branches() == repo.list_branches()
    [initial] = list(again.ancestry(branch="main"))
    assert initial.message == "Repository initialized"
    assert initial.parent_id is None
    assert Repository.exists(backend.url, backend.options)


def test_create_twice_is_refused_and_open_missing_is_not_found(backend):
    create_repo(backend)
    with pytest.raises(AlreadyExistsError):
        create_repo(backend)
    with pytest.raises(NotFoundError, match="no repository"):
        Repository.open(backend.url + "-missing", storage_options=backend.options)


def test_commit_makes_groups_arrays_and_chunks_readable(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 16})
    session = repo.writable_session("main")
    session.create_group("/", attributes={"title": "demo"})
    session.create_array("/grp/a", shape=(10, 10), chunk_shape=(5, 5), dtype="int32")
    session.set_chunk("/grp/a", (0, 0), b"tiny")  # inline
    session.set_chunk("/grp/a", (1, 1), b"x" * 100)  # a chunk file
    snapshot = session.commit("write", metadata={"author": "test"})

    reader = open_repo(backend).readonly_session(branch="main")
    assert reader.snapshot_id == snapshot
    assert reader.get_chunk("/grp/a", (0, 0)) == b"tiny"
    assert reader.get_chunk("/grp/a", (1, 1)) == b"x" * 100
    assert reader.get_chunk("/grp/a", (1, 1), byte_range=(10, 20)) == b"x" * 10
    assert reader.get_chunk("/grp/a", (0, 1)) is None
    assert [n.path for n in reader.list_nodes()] == ["/", "/grp/a"]
    assert reader.chunk_coords("/grp/a").tolist() == [[0, 0], [1, 1]]
    [latest, _] = list(repo.ancestry(branch="main"))
    assert (latest.message, dict(latest.metadata)) == ("write", {"author": "test"})
    assert reader.get_chunk_ref("/grp/a", (0, 0)).kind == "inline"
    assert reader.get_chunk_ref("/grp/a", (1, 1)).kind == "native"


def test_uncommitted_changes_are_invisible_to_other_sessions(backend):
    repo = create_repo(backend)
    writer = repo.writable_session()
    make_array(writer)
    writer.set_chunk("/a", (0, 0), b"1")
    assert writer.get_chunk("/a", (0, 0)) == b"1"
    with pytest.raises(NotFoundError):
        repo.readonly_session().get_node("/a")


def test_status_and_discard_changes(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"1")
    session.set_chunk("/a", (0, 1), b"2")
    status = session.status()
    assert status.created == ("/", "/a")
    assert dict(status.chunks) == {"/a": 2}
    session.discard_changes()
    assert session.status().is_empty()
    with pytest.raises(InvalidInputError, match="no changes"):
        session.commit("nothing")


def test_delete_chunk_and_node(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    make_array(session, "/b")
    session.set_chunk("/a", (0, 0), b"1")
    session.set_chunk("/a", (1, 1), b"2")
    session.commit("two arrays")

    session = repo.writable_session()
    session.delete_chunk("/a", (0, 0))
    session.delete_node("/b")
    session.commit("delete")
    reader = repo.readonly_session()
    assert reader.get_chunk("/a", (0, 0)) is None
    assert reader.get_chunk("/a", (1, 1)) == b"2"
    assert [n.path for n in reader.list_nodes()] == ["/", "/a"]


def test_bulk_refs_without_a_loop_per_chunk(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    session.create_array("/big", shape=(1000, 100), chunk_shape=(1, 1), dtype="uint8")
    coords = np.stack(np.unravel_index(np.arange(100_000), (1000, 100)), axis=1)
    data = [bytes([i % 251]) for i in range(100_000)]
    assert session.set_chunk_refs("/big", {"coord": coords, "inline_data": data}) == 100_000
    session.commit("bulk")
    reader = repo.readonly_session()
    assert reader.get_chunk("/big", (999, 99)) == bytes([99_999 % 251])
    assert reader.get_chunk("/big", (0, 5)) == bytes([5])
    assert len(reader.chunk_coords("/big")) == 100_000


def test_bulk_refs_as_list_coords_and_later_single_writes_win(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    table = pa.table({"coord": [[0, 0], [0, 1]], "inline_data": [b"a", b"b"]})
    session.set_chunk_refs("/a", table)
    session.set_chunk("/a", (0, 1), b"B")
    assert session.get_chunk("/a", (0, 1)) == b"B"
    session.set_chunk_refs("/a", pa.table({"coord": [[0, 1]], "inline_data": [b"again"]}))
    session.commit("mix")
    reader = repo.readonly_session()
    assert reader.get_chunk("/a", (0, 0)) == b"a"
    assert reader.get_chunk("/a", (0, 1)) == b"again"


def test_branches_are_independent(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"main-1")
    base = session.commit("on main")
    repo.create_branch("dev", base)
    assert repo.list_branches() == {"main": base, "dev": base}

    dev = repo.writable_session("dev")
    dev.set_chunk("/a", (0, 0), b"dev-1")
    dev_tip = dev.commit("on dev")
    assert repo.lookup_branch("main") == base
    assert repo.readonly_session(branch="main").get_chunk("/a", (0, 0)) == b"main-1"
    assert repo.readonly_session(branch="dev").get_chunk("/a", (0, 0)) == b"dev-1"

    repo.reset_branch("main", dev_tip)
    assert repo.readonly_session(branch="main").get_chunk("/a", (0, 0)) == b"dev-1"
    repo.delete_branch("dev")
    assert "dev" not in repo.list_branches()
    with pytest.raises(NotFoundError, match="branch 'dev'"):
        repo.writable_session("dev")
    with pytest.raises(AlreadyExistsError):
        repo.create_branch("main", base)


def test_tags_are_immutable(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    first = session.commit("first")
    repo.create_tag("v1", first)
    with pytest.raises(AlreadyExistsError, match="immutable"):
        repo.create_tag("v1", first)
    assert repo.list_tags() == {"v1": first}
    assert repo.lookup_tag("v1") == first
    with pytest.raises(ReadOnlyError):
        repo.readonly_session(tag="v1").create_group("/x")
    repo.delete_tag("v1")
    with pytest.raises(NotFoundError, match="tag 'v1'"):
        repo.lookup_tag("v1")


def test_time_travel_by_id_tag_and_as_of(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.commit("array")
    history = []
    for i in range(10):
        session = repo.writable_session()
        session.set_chunk("/a", (0, 0), f"value-{i}".encode())
        snapshot = session.commit(f"write {i}")
        repo.create_tag(f"t{i}", snapshot)
        history.append((snapshot, repo.lookup_snapshot(snapshot).written_at))
        time.sleep(0.002)  # distinct millisecond timestamps
    for i, (snapshot, written_at) in enumerate(history):
        expected = f"value-{i}".encode()
        assert repo.readonly_session(snapshot_id=snapshot).get_chunk("/a", (0, 0)) == expected
        assert repo.readonly_session(tag=f"t{i}").get_chunk("/a", (0, 0)) == expected
        assert (
            repo.readonly_session(branch="main", as_of=written_at).get_chunk("/a", (0, 0))
            == expected
        )
    with pytest.raises(NotFoundError):
        repo.readonly_session(as_of=datetime(2000, 1, 1, tzinfo=UTC))
    later = history[-1][1] + timedelta(days=1)
    assert repo.readonly_session(as_of=later).snapshot_id == history[-1][0]


def test_concurrent_sessions_on_different_arrays_rebase(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session, "/a")
    make_array(session, "/b")
    session.commit("arrays")
    first, second = repo.writable_session(), repo.writable_session()
    first.set_chunk("/a", (0, 0), b"a")
    second.set_chunk("/b", (0, 0), b"b")
    s1 = first.commit("a")
    s2 = second.commit("b")
    reader = repo.readonly_session()
    assert reader.snapshot_id == s2
    assert (reader.get_chunk("/a", (0, 0)), reader.get_chunk("/b", (0, 0))) == (b"a", b"b")
    assert [s.id for s in repo.ancestry()][:2] == [s2, s1]


def test_overlapping_chunk_writes_conflict_unless_a_policy_says(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.commit("array")
    winner, loser = repo.writable_session(), repo.writable_session()
    winner.set_chunk("/a", (1, 1), b"winner")
    loser.set_chunk("/a", (1, 1), b"loser")
    loser.set_chunk("/a", (0, 0), b"mine")
    winner.commit("first")
    with pytest.raises(ConflictError) as caught:
        loser.commit("second")
    [conflict] = caught.value.conflicts
    assert (conflict.path, conflict.coords) == ("/a", ((1, 1),))
    assert repo.readonly_session().get_chunk("/a", (1, 1)) == b"winner"

    loser.commit("theirs", on_conflict="theirs")
    reader = repo.readonly_session()
    assert (reader.get_chunk("/a", (1, 1)), reader.get_chunk("/a", (0, 0))) == (b"winner", b"mine")

    a, b = repo.writable_session(), repo.writable_session()
    a.set_chunk("/a", (1, 1), b"a")
    b.set_chunk("/a", (1, 1), b"b")
    a.commit("a")
    b.commit("b", on_conflict="ours")
    assert repo.readonly_session().get_chunk("/a", (1, 1)) == b"b"


def test_node_conflicts_are_never_auto_resolved(backend):
    repo = create_repo(backend)
    first, second = repo.writable_session(), repo.writable_session()
    make_array(first, "/x")
    make_array(second, "/x")
    first.commit("x")
    with pytest.raises(ConflictError, match="created concurrently"):
        second.commit("x again", on_conflict="ours")


def test_bad_input_is_refused_and_nothing_changes(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.set_chunk("/a", (0, 0), b"keep")
    committed = session.commit("ok")

    session = repo.writable_session()
    with pytest.raises(InvalidInputError, match="outside the chunk grid"):
        session.set_chunk("/a", (2, 0), b"x")
    with pytest.raises(InvalidInputError, match="outside the chunk grid"):
        session.set_chunk("/a", (0,), b"x")
    with pytest.raises(InvalidInputError, match="outside the chunk grid"):
        session.set_chunk_refs(
            "/a", {"coord": np.array([[0, 0], [5, 5]]), "inline_data": [b"a", b"b"]}
        )
    with pytest.raises(InvalidInputError, match="exactly one of"):
        session.set_chunk_refs(
            "/a", pa.table({"coord": [[0, 0]], "inline_data": pa.array([None], pa.binary())})
        )
    with pytest.raises(AlreadyExistsError):
        session.create_array("/a", shape=(1,), chunk_shape=(1,), dtype="int8")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        session.set_node_metadata("/bad", b"{not json")
    with pytest.raises(InvalidInputError, match="zarr_format"):
        session.set_node_metadata("/bad", b'{"zarr_format": 2, "node_type": "group"}')
    with pytest.raises(NotFoundError):
        repo.writable_session("nope")
    with pytest.raises(NotFoundError):
        repo.readonly_session(snapshot_id="NOSUCHSNAPSHOT")
    with pytest.raises(NotFoundError):
        repo.create_tag("t", "NOSUCHSNAPSHOT")
    reader = repo.readonly_session()
    with pytest.raises(ReadOnlyError):
        reader.set_chunk("/a", (0, 0), b"x")
    assert repo.lookup_branch("main") == committed
    assert repo.readonly_session().get_chunk("/a", (0, 0)) == b"keep"


def test_a_committed_session_cannot_commit_again(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session)
    session.commit("once")
    with pytest.raises(ReadOnlyError, match="committed already"):
        session.set_chunk("/a", (0, 0), b"x")


def test_large_attributes_go_to_an_attribute_file(backend):
    repo = create_repo(backend)
    session = repo.writable_session()
    attrs = {"history": "x" * 100_000}
    session.create_group("/", attributes=attrs)
    session.commit("big attrs")
    keys = [info.key for info in repo.storage.list("a/")]
    assert len(keys) == 1
    node = open_repo(backend).readonly_session().get_node("/")
    assert b"x" * 100_000 in node.zarr_json
    session = repo.writable_session()
    make_array(session, "/b")
    session.commit("reuses the attribute file")
    assert len(list(repo.storage.list("a/"))) == 1


def test_an_array_whose_shared_manifest_is_rewritten_keeps_its_attribute_row(backend):
    # Two small arrays share a manifest; a chunk written to one rewrites it, so the other's
    # row names the new manifest, and its document must stay where it was, not be copied.
    repo = create_repo(backend)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/big", (4,), (2,), "int32", attributes={"history": "x" * 100_000})
    make_array(session, "/small")
    session.set_chunk("/big", (0,), b"\0" * 8)
    session.set_chunk("/small", (0, 0), b"\0" * 100)
    session.commit("both")
    session = repo.writable_session()
    session.set_chunk("/small", (0, 1), b"\1" * 100)
    session.commit("rewrites the shared manifest")
    assert len(list(repo.storage.list("a/"))) == 1
    big = open_repo(backend).readonly_session().get_node("/big")
    assert b"x" * 100_000 in big.zarr_json

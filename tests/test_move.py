"""``session.move``: a group or array moves (or is renamed) by metadata alone; a concurrent
write to the moved node follows it or conflicts clearly; diff, the change feed and the log
show the move."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import numpy as np
import pytest
import xarray as xr
import zarr

from icechunk_spark import (
    AlreadyExistsError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    Repository,
)
from icechunk_spark.core.manifest_cache import ManifestCache
from icechunk_spark.ops import feed


@pytest.fixture
def repo() -> Repository:
    """``/raw/temp`` (4 chunks of 3, written as chunk files) and ``/raw/time``; ``/clean``."""
    repo = Repository.create(
        f"memory://move-{uuid.uuid4().hex}", config={"inline_chunk_threshold_bytes": 0}
    )
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_group("/raw", attributes={"source": "station"})
    session.create_group("/clean")
    session.create_array("/raw/temp", (12,), (3,), "float64", dimension_names=["t"])
    session.create_array("/raw/time", (12,), (12,), "int64", dimension_names=["t"])
    for i in range(4):
        session.set_chunk_values("/raw/temp", (i,), np.arange(3.0) + 10 * i)
    session.set_chunk_values("/raw/time", (0,), np.arange(12))
    session.commit("raw data")
    return repo


def values(repo: Repository, path: str, **at: str) -> list[float]:
    session = repo.readonly_session(**at) if at else repo.readonly_session("main")
    return zarr.open_array(session.store, path=path.lstrip("/"), mode="r")[:].tolist()


def objects(repo: Repository, prefix: str) -> set[str]:
    return {info.key for info in repo.storage.list(prefix)}


def test_moving_a_group_copies_nothing_and_keeps_every_value(repo):
    before = values(repo, "/raw/temp")
    chunks, manifests = objects(repo, "c/"), objects(repo, "m/")
    session = repo.writable_session("main")
    session.move("/raw", "/clean/station")
    assert session.status().moved == {
        "/raw": "/clean/station",
        "/raw/temp": "/clean/station/temp",
        "/raw/time": "/clean/station/time",
    }
    assert session.find_node("/raw/temp") is None
    moved = session.commit("move raw under clean")
    assert objects(repo, "c/") == chunks and objects(repo, "m/") == manifests  # metadata only
    assert values(repo, "/clean/station/temp") == before
    group = json.loads(repo.readonly_session("main").get_node("/clean/station").zarr_json)
    assert group["attributes"] == {"source": "station"}
    assert {n.path for n in repo.readonly_session("main").list_nodes()} == {
        "/",
        "/clean",
        "/clean/station",
        "/clean/station/temp",
        "/clean/station/time",
    }
    first = repo.lookup_snapshot(moved).parent_id
    assert first is not None and values(repo, "/raw/temp", snapshot_id=first) == before
    store = repo.readonly_session("main").store
    dataset = xr.open_zarr(store, group="clean/station", consolidated=False)
    assert dataset["temp"].values.tolist() == before


def test_writes_before_and_after_a_move_follow_the_node(repo):
    session = repo.writable_session("main")
    session.set_chunk_values("/raw/temp", (0,), np.full(3, -1.0))
    session.move("/raw/temp", "/temperature")
    session.set_chunk_values("/temperature", (1,), np.full(3, -2.0))
    session.commit("fix two chunks and rename")
    got = values(repo, "/temperature")
    assert got[:6] == [-1.0] * 3 + [-2.0] * 3 and got[6:] == [20.0, 21.0, 22.0, 30.0, 31.0, 32.0]


def test_move_back_move_twice_and_delete_after_a_move(repo):
    session = repo.writable_session("main")
    session.move("/raw/temp", "/a")
    session.move("/a", "/raw/temp")
    assert not session.has_uncommitted_changes()
    session.move("/raw/temp", "/a")
    session.move("/a", "/b")
    assert session.status().moved == {"/raw/temp": "/b"}
    session.move("/raw/time", "/gone")
    session.delete_node("/gone")
    session.commit("twice, and one deleted")
    assert sorted(repo.diff(from_snapshot_id=_parent(repo), to_branch="main").nodes_deleted) == [
        "/raw/time"
    ]
    assert values(repo, "/b")[:3] == [0.0, 1.0, 2.0]


def test_bad_moves_are_refused_and_change_nothing(repo):
    session = repo.writable_session("main")
    cases = [
        (("/nothing", "/x"), NotFoundError, "no group or array"),
        (("/raw/temp", "/clean"), AlreadyExistsError, "group is there"),
        (("/raw", "/raw/inner"), InvalidInputError, "into itself"),
        (("/", "/x"), InvalidInputError, "root"),
        (("/raw/temp", "/nowhere/temp"), NotFoundError, "create the group"),
        (("/raw/temp", "/raw/time/temp"), InvalidInputError, "is an array"),
    ]
    for (src, dst), error, match in cases:
        with pytest.raises(error, match=match):
            session.move(src, dst)
    assert not session.has_uncommitted_changes()


# -- concurrent writers ------------------------------------------------------------------------
def test_a_concurrent_chunk_write_rebases_onto_the_new_path(repo):
    writer = repo.writable_session("main")
    mover = repo.writable_session("main")
    mover.move("/raw", "/station")
    mover.commit("rename")
    writer.set_chunk_values("/raw/temp", (3,), np.full(3, 7.0))
    writer.commit("a chunk written at the old path")
    assert values(repo, "/station/temp")[9:] == [7.0] * 3


def test_a_move_rebases_over_a_concurrent_chunk_write(repo):
    mover = repo.writable_session("main")
    writer = repo.writable_session("main")
    writer.set_chunk_values("/raw/temp", (3,), np.full(3, 7.0))
    writer.commit("a chunk")
    mover.move("/raw", "/station")
    mover.commit("rename after it")
    assert values(repo, "/station/temp")[9:] == [7.0] * 3


@pytest.mark.parametrize(
    "theirs",
    [
        "update_metadata",
        "delete",
        "create_below",
        "move_elsewhere",
        "create_at_target",
    ],
)
@pytest.mark.parametrize("who_first", ["mover", "other"])
def test_a_move_and_a_concurrent_node_change_conflict(repo, theirs, who_first):
    mover = repo.writable_session("main")
    other = repo.writable_session("main")
    mover.move("/raw", "/station")
    if theirs == "update_metadata":
        doc = json.loads(other.get_node("/raw").zarr_json)
        doc["attributes"] = {"source": "buoy"}
        other.set_node_metadata("/raw", json.dumps(doc).encode())
    elif theirs == "delete":
        other.delete_node("/raw")
    elif theirs == "create_below":
        other.create_array("/raw/pressure", (4,), (4,), "float32")
    elif theirs == "move_elsewhere":
        other.move("/raw", "/elsewhere")
    else:
        other.create_group("/station")
    first, second = (mover, other) if who_first == "mover" else (other, mover)
    landed = first.commit("first")
    with pytest.raises(ConflictError):
        second.commit("second")
    assert repo.lookup_branch("main") == landed


# -- what shows the move -----------------------------------------------------------------------
def _parent(repo: Repository) -> str:
    parent = repo.lookup_snapshot(repo.lookup_branch("main")).parent_id
    assert parent is not None
    return parent


def test_diff_feed_and_log_show_the_move(repo):
    session = repo.writable_session("main")
    session.move("/raw", "/station")
    session.set_chunk_values("/station/temp", (0,), np.full(3, 5.0))
    moved = session.commit("rename")
    d = repo.diff(from_snapshot_id=_parent(repo), to_snapshot_id=moved)
    assert d.nodes_moved == {
        "/raw": "/station",
        "/raw/temp": "/station/temp",
        "/raw/time": "/station/time",
    }
    assert d.nodes_added == () and d.nodes_deleted == () and d.nodes_updated == ()
    assert d.chunks_changed == {"/station/temp": 1}

    state = repo.state()
    step = feed.steps_after(state, feed.Position(_parent(repo), 2), moved, "main")[0]
    rows = feed.snapshot_changes(repo.storage, ManifestCache(repo.storage), step).to_pylist()
    assert [(r["change"], r["path"], r["location"]) for r in rows if r["coord"] is None] == [
        ("move_node", "/station", "/raw"),
        ("move_node", "/station/temp", "/raw/temp"),
        ("move_node", "/station/time", "/raw/time"),
    ]
    assert [(r["change"], r["path"], r["coord"]) for r in rows if r["coord"] is not None] == [
        ("set", "/station/temp", [0])
    ]


def test_the_log_command_lists_moves(tmp_path):
    url = (tmp_path / "repo").as_uri()
    repo = Repository.create(url)
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/a", (2,), (2,), "int8")
    session.commit("create")
    session = repo.writable_session("main")
    session.move("/a", "/b")
    session.commit("rename")
    proc = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "log", url, "--changes", "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)
    assert entries[0]["changes"] == [{"kind": "move_node", "path": "/b", "from": "/a"}]
    text = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "log", url, "--changes"],
        capture_output=True,
        text=True,
    ).stdout
    assert "    > /a -> /b" in text.splitlines()[1]

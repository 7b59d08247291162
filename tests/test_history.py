"""History maintenance on every backend: diff, snapshot expiry, garbage collection."""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from icechunk_spark import (
    ConflictError,
    FormatError,
    InvalidInputError,
    NotFoundError,
    Repository,
)
from icechunk_spark.core.waiters import WAITERS_PREFIX
from icechunk_spark.ops.gc import GCSummary
from icechunk_spark.ops.history import diff, utc_ms
from icechunk_spark.storage import Storage
from tests.conftest import Backend
from tests.support.helpers import create_repo, cutoff_after_writes, open_repo

PREFIXES = ("c/", "m/", "s/", "a/", "x/", "t/")
BIG_ATTRS = {"blob": "x" * 20_000}  # over the 16 KiB inline limit: goes to an a/ file
Contents = dict[str, tuple[bytes, dict[tuple[int, ...], bytes | None]]]


# -- helpers ----------------------------------------------------------------------------------
def objects(storage: Storage) -> dict[str, int]:
    """Every object of the repository (but the icechunk.json hint) with its size."""
    return {info.key: info.size for prefix in PREFIXES for info in storage.list(prefix)}


def read_all(backend: Backend, snapshot_ids: list[str]) -> dict[str, Contents]:
    """Every node and chunk of each snapshot, read through a fresh repository (no caches)."""
    repo = open_repo(backend)
    try:
        out = {}
        for snapshot_id in snapshot_ids:
            session = repo.readonly_session(snapshot_id=snapshot_id)
            contents: Contents = {}
            for node in session.list_nodes():
                chunks = {}
                if node.type == "array":
                    for coord in session.chunk_coords(node.path).tolist():
                        chunks[tuple(coord)] = session.get_chunk(node.path, coord)
                contents[node.path] = (node.zarr_json, chunks)
            out[snapshot_id] = contents
        return out
    finally:
        repo.close()


def needed_keys(backend: Backend) -> set[str]:
    """What the listed snapshots need, found through the public API (not through gc.py)."""
    repo = open_repo(backend)
    try:
        keys = set()
        for info in repo.state().snapshots.values():
            keys |= {f"s/{info.structure_file}", f"x/{info.id}"}
            session = repo.readonly_session(snapshot_id=info.id)
            for node in session.list_nodes():
                if node.attrs_ref is not None:
                    keys.add(f"a/{node.attrs_ref.attrs_file}")
                keys |= {f"m/{m.manifest_id}" for m in node.manifests}
                if node.type == "array":
                    chunk_ids = session.chunk_refs(node.path).column("chunk_id").to_pylist()
                    keys |= {f"c/{c}" for c in chunk_ids if c is not None}
        return keys
    finally:
        repo.close()


def commit_chunk(repo: Repository, path: str, coord: tuple[int, ...], data: bytes) -> str:
    session = repo.writable_session("main")
    session.set_chunk(path, coord, data)
    return session.commit(f"write {path} {coord}")


def setup_array(repo: Repository, path: str = "/a", shape: tuple[int, ...] = (4,)) -> str:
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array(path, shape=shape, chunk_shape=(1,) * len(shape), dtype="uint8")
    return session.commit("setup")


# -- diff -------------------------------------------------------------------------------------
def test_diff_reports_nodes_and_changed_chunk_counts(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 8})
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_group("/g", attributes={"v": 1})
    session.create_array("/a", shape=(4, 4), chunk_shape=(2, 2), dtype="uint8")
    session.create_array("/b", shape=(4,), chunk_shape=(2,), dtype="uint8")
    session.create_array("/gone", shape=(4,), chunk_shape=(2,), dtype="uint8")
    session.set_chunk("/a", (0, 0), b"inline")
    session.set_chunk("/a", (0, 1), b"a chunk file, not inline")
    session.set_chunk("/a", (1, 0), b"kept")
    session.set_chunk("/b", (0,), b"b")
    session.set_chunk("/gone", (0,), b"1")
    session.set_chunk("/gone", (1,), b"2")
    first = session.commit("first")

    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"changed")  # changed
    session.delete_chunk("/a", (0, 1))  # removed
    session.set_chunk("/a", (1, 1), b"new")  # added; (1, 0) untouched
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {"v": 2}}
    session.set_node_metadata("/g", json.dumps(doc).encode())
    session.delete_node("/gone")
    session.create_array("/new", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/new", (1,), b"n")
    second = session.commit("second")
    repo.create_tag("v1", first)

    d = repo.diff(from_snapshot_id=first, to_snapshot_id=second)
    assert (d.from_snapshot_id, d.to_snapshot_id) == (first, second)
    assert d.nodes_added == ("/new",)
    assert d.nodes_deleted == ("/gone",)
    assert d.nodes_updated == ("/g",)
    assert d.chunks_changed == {"/a": 3, "/gone": 2, "/new": 1}  # /b's refs are the same
    assert not d.is_empty()

    assert repo.diff(from_tag="v1", to_branch="main") == d
    back = repo.diff(from_branch="main", to_tag="v1")
    assert back.nodes_added == ("/gone",) and back.nodes_deleted == ("/new",)
    assert back.nodes_updated == ("/g",)
    assert back.chunks_changed == d.chunks_changed
    assert repo.diff(from_branch="main", to_snapshot_id=second).is_empty()


def test_diff_of_a_recreated_node_shows_it_deleted_and_added(backend):
    repo = create_repo(backend)
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/a", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"x")
    first = session.commit("first")
    session = repo.writable_session("main")
    session.delete_node("/a")
    session.create_array("/a", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"x")  # the same bytes, inline: the same ref at that path
    session.set_chunk("/a", (1,), b"y")
    second = session.commit("second")

    d = repo.diff(from_snapshot_id=first, to_snapshot_id=second)
    assert (d.nodes_added, d.nodes_deleted, d.nodes_updated) == (("/a",), ("/a",), ())
    assert d.chunks_changed == {"/a": 1}


def test_diff_reads_no_manifest_of_arrays_whose_refs_did_not_change(backend):
    repo = create_repo(backend)
    setup = setup_array(repo, shape=(3,))
    commit_chunk(repo, "/a", (0,), b"1")
    before = commit_chunk(repo, "/a", (1,), b"2")
    session = repo.writable_session("main")
    doc = json.loads(session.get_node("/a").zarr_json)
    doc["attributes"] = {"units": "m"}
    session.set_node_metadata("/a", json.dumps(doc).encode())
    after = session.commit("attributes only")

    fresh = open_repo(backend)
    d = diff(fresh.handle, from_snapshot_id=before, to_snapshot_id=after)
    assert (d.nodes_updated, d.chunks_changed) == (("/a",), {})
    assert fresh.handle.manifest_cache.fetches == 0  # decided from the structure files alone
    assert diff(fresh.handle, from_snapshot_id=setup, to_snapshot_id=after).chunks_changed == {
        "/a": 2
    }
    fresh.close()


def test_diff_validates_its_arguments(backend):
    repo = create_repo(backend)
    tip = repo.lookup_branch("main")
    with pytest.raises(InvalidInputError, match="exactly one of from_"):
        repo.diff(to_branch="main")
    with pytest.raises(InvalidInputError, match="from_snapshot_id, from_branch"):
        repo.diff(from_snapshot_id=tip, from_branch="main", to_branch="main")
    with pytest.raises(InvalidInputError, match="exactly one of to_"):
        repo.diff(from_branch="main")
    with pytest.raises(NotFoundError, match="snapshot"):
        repo.diff(from_snapshot_id="nope", to_branch="main")
    with pytest.raises(NotFoundError, match="branch"):
        repo.diff(from_branch="main", to_branch="nope")
    with pytest.raises(NotFoundError, match="tag"):
        repo.diff(from_tag="nope", to_branch="main")


# -- expiry -----------------------------------------------------------------------------------
def test_expire_keeps_branch_and_tag_tips_and_relinks_history(backend):
    repo = create_repo(backend)
    initial = repo.lookup_branch("main")
    setup = setup_array(repo)
    commits = [commit_chunk(repo, "/a", (i % 4,), bytes([i])) for i in range(6)]
    repo.create_tag("t2", commits[2])
    repo.create_branch("dev", commits[4])
    dev = repo.writable_session("dev")
    dev.set_chunk("/a", (0,), b"dev")
    dev_tip = dev.commit("on dev")
    tips = [repo.lookup_branch("main"), dev_tip, commits[2]]
    before = read_all(backend, tips)

    expired = repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))

    assert expired == {initial, setup, *commits} - set(tips)
    state = repo.state()
    assert set(state.snapshots) == set(tips)
    assert [s.id for s in repo.ancestry(branch="main")] == [commits[5], commits[2]]
    assert [s.id for s in repo.ancestry(branch="dev")] == [dev_tip, commits[2]]
    assert state.snapshot(commits[2]).parent_id is None
    assert (repo.list_branches(), repo.list_tags()) == (
        {"main": commits[5], "dev": dev_tip},
        {"t2": commits[2]},
    )
    assert read_all(backend, tips) == before
    generation = state.generation
    assert repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1)) == frozenset()
    assert repo.state().generation == generation  # nothing to do: no new state file


def test_expire_older_than_a_middle_snapshot_keeps_the_newer_ones(backend):
    repo = create_repo(backend)
    setup_array(repo)
    commits = []
    for i in range(4):
        time.sleep(0.005)  # distinct timestamps
        commits.append(commit_chunk(repo, "/a", (i,), bytes([i])))
    limit = repo.lookup_snapshot(commits[2]).written_at
    # A naive datetime is read as UTC: the same instant as the aware one.
    expired = repo.expire_snapshots(limit.replace(tzinfo=None))
    assert commits[2] not in expired and commits[1] in expired
    assert [s.id for s in repo.ancestry(branch="main")] == [commits[3], commits[2]]


def test_expire_can_delete_refs_whose_tip_expired_but_never_main(backend):
    repo = create_repo(backend)
    setup_array(repo)
    old = commit_chunk(repo, "/a", (0,), b"old")
    repo.create_branch("stale", old)
    repo.create_tag("old-tag", old)
    main_tip = commit_chunk(repo, "/a", (1,), b"new")
    limit = datetime.now(UTC) + timedelta(seconds=1)

    assert old not in repo.expire_snapshots(limit)  # tips of refs stay by default
    expired = repo.expire_snapshots(limit, delete_expired_branches=True)
    assert old not in expired  # the tag still points at it
    assert repo.list_branches() == {"main": main_tip}
    assert repo.expire_snapshots(limit, delete_expired_tags=True) == {old}
    assert (repo.list_tags(), set(repo.state().snapshots)) == ({}, {main_tip})
    assert read_all(backend, [main_tip])[main_tip]["/a"][1] == {(0,): b"old", (1,): b"new"}


def test_a_session_whose_parent_was_expired_cannot_commit(backend):
    repo = create_repo(backend)
    setup_array(repo)
    stale = repo.writable_session("main")
    stale.set_chunk("/a", (0,), b"stale")
    tip = commit_chunk(repo, "/a", (1,), b"moved on")
    assert stale.snapshot_id in repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    with pytest.raises(ConflictError, match="does not descend"):
        stale.commit("on an expired parent")
    assert repo.lookup_branch("main") == tip


def test_expiry_and_gc_reject_what_is_not_a_datetime(backend):
    repo = create_repo(backend)
    with pytest.raises(InvalidInputError, match="older_than must be a datetime"):
        repo.expire_snapshots("2024-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="delete_object_older_than must be a datetime"):
        repo.garbage_collect(0)  # type: ignore[arg-type]
    aware = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert utc_ms(aware.replace(tzinfo=None), "t") == utc_ms(aware, "t")


# -- garbage collection -----------------------------------------------------------------------
def test_gc_after_many_commits_keeps_exactly_what_remaining_snapshots_need(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session("main")
    session.create_group("/", attributes=BIG_ATTRS)
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.commit("setup")
    for i in range(50):
        time.sleep(0.002)  # distinct timestamps, so "the last 5" is exact
        session = repo.writable_session("main")
        session.set_chunk("/a", (i % 4,), f"value {i}".encode() * 4)
        if i in (25, 40):  # a new a/ file each time
            doc = {"zarr_format": 3, "node_type": "group", "attributes": {**BIG_ATTRS, "i": i}}
            session.set_node_metadata("/", json.dumps(doc).encode())
        snapshot = session.commit(f"commit {i}")
        if i == 30:
            repo.create_tag("keep", snapshot)
    history = list(repo.ancestry(branch="main"))
    remaining = [s.id for s in history[:5]] + [repo.lookup_tag("keep")]
    before = read_all(backend, remaining)

    expired = repo.expire_snapshots(history[4].written_at)
    assert set(repo.state().snapshots) == set(remaining)
    assert len(expired) == len(history) - len(remaining)
    cutoff = cutoff_after_writes(backend)
    stored = objects(repo.storage)

    dry = repo.garbage_collect(cutoff, dry_run=True)
    assert objects(repo.storage) == stored  # a dry run deletes nothing
    summary = repo.garbage_collect(cutoff)
    assert summary == dry

    left = objects(repo.storage)
    needed = needed_keys(backend)
    assert {k for k in left if not k.startswith("t/")} == {k for k in stored if k in needed}
    assert [k for k in left if k.startswith("t/")] == [f"t/{repo.state().generation:020d}"]
    fence = left[f"t/{repo.state().generation:020d}"]  # the state file GC writes (its fence)
    assert sum(left.values()) == sum(stored.values()) - summary.bytes_deleted + fence
    written_chunks = 50
    assert summary.chunks_deleted == written_chunks - sum(k.startswith("c/") for k in needed)
    assert summary.structures_deleted == len(expired)
    assert summary.transaction_logs_deleted == len(expired) - 1  # the first snapshot has none
    assert summary.attributes_deleted == 1  # setup's; the tag (30) needs 25's, the tips 40's
    assert summary.state_files_deleted == repo.state().generation
    assert summary.temporary_files_deleted == 0
    assert summary.manifests_deleted > 0

    assert read_all(backend, remaining) == before
    assert repo.garbage_collect(cutoff) == GCSummary()  # nothing left to collect
    tip = commit_chunk(repo, "/a", (0,), b"after gc")
    assert read_all(backend, [tip])[tip]["/a"][1][(0,)] == b"after gc"


def test_gc_keeps_fresh_objects_and_everything_without_expiry(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    setup_array(repo)
    for i in range(3):
        commit_chunk(repo, "/a", (0,), bytes([i]) * 4)
    abandoned = repo.writable_session("main")
    abandoned.set_chunk("/a", (1,), b"never committed")  # an orphan chunk file
    stored = objects(repo.storage)

    # Nothing is older than this cut-off: nothing goes, not even the orphan or old states.
    assert repo.garbage_collect(datetime.now(UTC) - timedelta(hours=1)) == GCSummary()
    # Nothing was expired: only the orphan and the superseded state files are garbage.
    summary = repo.garbage_collect(cutoff_after_writes(backend))
    assert summary.chunks_deleted == 1 and summary.manifests_deleted == 0
    assert summary.state_files_deleted == repo.state().generation
    assert {k for k in stored if not k.startswith("t/")} - set(objects(repo.storage)) == {
        k for k in stored if k.startswith("c/") and k not in needed_keys(backend)
    }


def test_a_session_opened_before_gc_commits_after_it_and_stays_readable(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    setup_array(repo)
    for i in range(10):
        commit_chunk(repo, "/a", (i % 4,), f"old {i}".encode())
    cutoff = cutoff_after_writes(backend)  # older than the session below, as the contract says
    writer = repo.writable_session("main")
    writer.set_chunk("/a", (0,), b"written before gc")

    repo.expire_snapshots(cutoff)
    summary = repo.garbage_collect(cutoff)
    assert summary.chunks_deleted > 0 and summary.structures_deleted > 0
    writer.set_chunk("/a", (1,), b"written after gc")
    snapshot = writer.commit("after gc")

    contents = read_all(backend, [snapshot])[snapshot]["/a"][1]
    assert contents[(0,)] == b"written before gc"
    assert contents[(1,)] == b"written after gc"
    assert contents[(2,)] == b"old 6" and contents[(3,)] == b"old 7"  # carried over


def test_a_commit_landing_while_gc_runs_keeps_its_objects(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    setup_array(repo)
    commit_chunk(repo, "/a", (0,), b"old")
    writer = repo.writable_session("main")
    writer.set_chunk("/a", (1,), b"written before the cut-off")
    # A cut-off later than the writer's chunk file: only GC's second look at the state saves it.
    cutoff = cutoff_after_writes(backend)
    storage = repo.storage
    real_list = storage.list
    landed: list[str] = []

    def list_then_commit(prefix: str) -> Any:
        # GC lists objects after reading the state (and writing its fence): commit now.
        if not landed and not prefix.startswith(("t/", WAITERS_PREFIX)):
            landed.append(writer.commit("during gc"))
        return real_list(prefix)

    storage.list = list_then_commit  # type: ignore[method-assign]
    try:
        repo.garbage_collect(cutoff)
    finally:
        storage.list = real_list  # type: ignore[method-assign]
    [snapshot] = landed
    assert read_all(backend, [snapshot])[snapshot]["/a"][1] == {
        (0,): b"old",
        (1,): b"written before the cut-off",
    }


def test_gc_stops_without_deleting_when_a_listed_manifest_is_missing(backend):
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    setup_array(repo)
    for i in range(3):
        commit_chunk(repo, "/a", (0,), bytes([i]))
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    needed = needed_keys(backend)
    manifest = next(k for k in objects(repo.storage) if k.startswith("m/") and k in needed)
    repo.storage.delete([manifest])
    stored = objects(repo.storage)
    with pytest.raises(FormatError, match="nothing deleted"):
        repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=5))
    assert objects(repo.storage) == stored


# -- a real concurrent writer -----------------------------------------------------------------
def commit_in_a_loop(url: str, options: dict[str, Any], commits: int) -> list[str]:
    """Run in another process: commit ``commits`` times to ``/w``, one chunk file each."""
    repo = Repository.open(url, storage_options=options)
    snapshots = []
    for j in range(commits):
        session = repo.writable_session("main")
        session.set_chunk("/w", (j % 4,), f"w{j}".encode() * 8)
        snapshots.append(session.commit(f"w{j}"))
    return snapshots


@pytest.mark.slow
def test_gc_and_expiry_race_a_committing_process(tmp_path):
    backend = Backend("local", (tmp_path / "repo").as_uri(), {})
    repo = create_repo(backend, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/w", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.commit("setup")
    for i in range(20):
        commit_chunk(repo, "/a", (i % 4,), f"a{i}".encode() * 8)
    cutoff = cutoff_after_writes(backend)

    summaries = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        future = pool.submit(commit_in_a_loop, backend.url, backend.options, 30)
        while not future.done() or not summaries:
            # The cut-off is older than every session of the writer, as the contract asks.
            repo.expire_snapshots(cutoff)
            summaries.append(repo.garbage_collect(cutoff))
        written = future.result()
    summaries.append(repo.garbage_collect(cutoff))

    assert sum(s.chunks_deleted for s in summaries) >= 16  # the old /a history went
    listed = set(repo.state().snapshots)
    assert set(written) <= listed  # every commit landed and was kept (newer than the cut-off)
    contents = read_all(backend, sorted(listed))  # and every listed snapshot reads in full
    assert contents[written[-1]]["/w"][1] == {(j % 4,): f"w{j}".encode() * 8 for j in range(26, 30)}
    assert contents[written[-1]]["/a"][1] == {(i % 4,): f"a{i}".encode() * 8 for i in range(16, 20)}


def test_gc_reads_local_times_to_the_millisecond(tmp_path):
    """Only S3's listings round to whole seconds: a local file whose time happens to fall on
    a whole second is exactly that old, and goes when the cut-off is later."""
    import os

    url = (tmp_path / "repo").as_uri()
    repo = Repository.create(url, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session()
    session.create_array("/a", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"\1")
    session.commit("a chunk file")
    session = repo.writable_session()
    session.set_chunk("/a", (0,), b"\2")
    session.commit("replace it")
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    (old,) = [
        k
        for k in objects(repo.storage)
        if k.startswith("c/") and k not in needed_keys(Backend("local", url, {}))
    ]
    whole_second = int(time.time()) - 5
    os.utime(tmp_path / "repo" / old, (whole_second, whole_second))

    cutoff = datetime.fromtimestamp(whole_second + 0.5, UTC)
    assert repo.garbage_collect(cutoff).chunks_deleted == 1
    assert old not in objects(repo.storage)

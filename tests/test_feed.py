"""The change feed's pure core (``ops.feed``): history positions and the rows of one snapshot."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from icechunk_spark import Repository
from icechunk_spark.core.manifest_cache import ManifestCache
from icechunk_spark.errors import (
    HistoryExpiredError,
    HistoryRewrittenError,
    InvalidInputError,
    SnapshotCollectedError,
)
from icechunk_spark.ops import feed
from tests.trust.test_staged_refs import stage


def changes(repo: Repository, start: feed.Position = feed.BEFORE_HISTORY) -> list[dict[str, Any]]:
    """Every row of the feed after ``start`` up to the tip of ``main``, without the time."""
    state = repo.state()
    cache = ManifestCache(repo.storage)
    rows = []
    for step in feed.steps_after(state, start, state.branch("main").snapshot_id):
        for row in feed.snapshot_changes(repo.storage, cache, step).to_pylist():
            del row["time"]
            rows.append(row)
    return rows


def short(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["seq"], r["change"], r["path"], r["coord"]) for r in rows]


@pytest.fixture
def repo() -> Repository:
    repo = Repository.create(f"memory://feed-{uuid.uuid4().hex}")
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/a", shape=(4, 4), chunk_shape=(2, 2), dtype="uint8")
    session.commit("create")
    return repo


def test_listed_chunk_writes_and_deletes(repo: Repository) -> None:
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    session.set_chunk("/a", (1, 1), b"\x02" * 4)
    first = session.commit("write")
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x03" * 4)
    session.delete_chunk("/a", (1, 1))
    second = session.commit("rewrite and delete")

    rows = changes(repo)
    assert short(rows) == [
        (1, "new_group", "/", None),
        (1, "new_array", "/a", None),
        (2, "set", "/a", [0, 0]),
        (2, "set", "/a", [1, 1]),
        (3, "set", "/a", [0, 0]),
        (3, "delete", "/a", [1, 1]),
    ]
    set_row = rows[4]
    assert set_row["snapshot"] == second
    assert (set_row["kind"], set_row["length"], set_row["location"]) == ("inline", 4, None)
    assert rows[5]["kind"] is None and rows[5]["length"] is None
    # The start is exclusive: after the first write, only the second snapshot's rows.
    after = changes(repo, feed.Position(first, 2))
    assert short(after) == short(rows[4:])


def test_range_write_yields_exact_coords(repo: Repository) -> None:
    session = repo.writable_session("main")
    session.add_staged_refs("/a", stage(repo, "/a", {(0, 0): b"a", (1, 0): b"b", (0, 1): b"x"}))
    first = session.commit("staged")
    session = repo.writable_session("main")
    # (1, 0) again with the same bytes: the same ref, no change; (0, 1) untouched.
    session.add_staged_refs("/a", stage(repo, "/a", {(1, 0): b"b", (1, 1): b"c", (0, 0): b"z"}))
    session.commit("staged again")

    rows = changes(repo, feed.Position(first, 2))
    assert short(rows) == [(3, "set", "/a", [0, 0]), (3, "set", "/a", [1, 1])]
    first_rows = changes(repo)
    assert [r["coord"] for r in first_rows if r["seq"] == 2] == [[0, 0], [0, 1], [1, 0]]


def test_deleted_array_is_one_node_row(repo: Repository) -> None:
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    first = session.commit("write")
    session = repo.writable_session("main")
    session.delete_node("/a")
    session.commit("delete")
    assert short(changes(repo, feed.Position(first, 2))) == [(3, "delete_node", "/a", None)]


def test_history_positions_and_reset(repo: Repository) -> None:
    state = repo.state()
    tip = state.branch("main").snapshot_id
    line = feed.lineage(state, tip)
    assert [s.id for s in line][-1] == tip and line[0].parent_id is None
    assert feed.position_of(line, tip, "main") == feed.Position(tip, 1)
    # The initial snapshot has no transaction log and no changes.
    root = feed.steps_after(state, feed.BEFORE_HISTORY, tip)[0]
    assert feed.snapshot_changes(repo.storage, ManifestCache(repo.storage), root).num_rows == 0

    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    lost = session.commit("soon reset away")
    repo.reset_branch("main", tip)
    state = repo.state()
    with pytest.raises(HistoryRewrittenError, match="no longer in the history of main"):
        feed.steps_after(state, feed.Position(lost, 2), tip, "main")


def test_offsets_round_trip_and_refuse_others() -> None:
    position = feed.Position("ABC", 4)
    assert feed.Position.from_offset(position.to_offset()) == position
    assert feed.Position.from_offset(feed.BEFORE_HISTORY.to_offset()) == feed.BEFORE_HISTORY
    with pytest.raises(InvalidInputError, match="not an icechunk change feed offset"):
        feed.Position.from_offset({"offset": 3})


def test_overwrite_is_a_recreated_array_with_its_chunks(repo: Repository) -> None:
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    first = session.commit("write")
    session = repo.writable_session("main")
    doc = session.get_node("/a").zarr_json
    session.ensure_array("/a", doc, recreate=True)  # what a Spark overwrite does
    session.add_staged_refs("/a", stage(repo, "/a", {(1, 1): b"new"}))
    session.commit("overwrite")
    assert sorted(short(changes(repo, feed.Position(first, 2)))) == [
        (3, "delete_node", "/a", None),
        (3, "new_array", "/a", None),
        (3, "set", "/a", [1, 1]),
    ]


def test_shards_split_a_snapshot_by_node(repo: Repository) -> None:
    session = repo.writable_session("main")
    session.create_array("/b", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    session.set_chunk("/b", (1,), b"\x02")
    session.commit("two arrays")
    state = repo.state()
    step = feed.steps_after(state, feed.BEFORE_HISTORY, state.branch("main").snapshot_id)[-1]
    cache = ManifestCache(repo.storage)
    whole = feed.snapshot_changes(repo.storage, cache, step).to_pylist()
    shares = [feed.snapshot_changes(repo.storage, cache, step, i, 3).to_pylist() for i in range(3)]
    assert sorted(map(str, whole)) == sorted(str(r) for share in shares for r in share)
    assert len(whole) == 3  # new_array /b, /a (0, 0), /b (1,)


def test_range_compare_reads_only_rewritten_manifests() -> None:
    config = {
        "manifests": {
            "chunk-manifests": {"sets": [{"default": {"max-manifest-size": 10}}], "rules": []}
        }
    }
    repo = Repository.create(f"memory://feed-{uuid.uuid4().hex}", config=config)
    session = repo.writable_session("main")
    session.create_array("/big", shape=(40, 1), chunk_shape=(1, 1), dtype="uint8")
    session.add_staged_refs("/big", stage(repo, "/big", {(i, 0): bytes([i]) for i in range(40)}))
    first = session.commit("40 refs in pieces of 10")
    session = repo.writable_session("main")
    session.add_staged_refs("/big", stage(repo, "/big", {(3, 0): b"x", (5, 0): b"y"}))
    session.commit("two refs of one piece")
    pieces = len(repo.readonly_session("main").get_node("/big").manifests)
    assert pieces >= 4

    state = repo.state()
    step = feed.steps_after(state, feed.Position(first, 1), state.branch("main").snapshot_id)[0]
    cache = ManifestCache(repo.storage)
    rows = feed.snapshot_changes(repo.storage, cache, step).to_pylist()
    assert [(r["change"], r["coord"]) for r in rows] == [("set", [3, 0]), ("set", [5, 0])]
    assert cache.fetches == 2  # the rewritten piece, and the piece it replaced


def commit_chunk(repo: Repository, coord: tuple[int, int], data: bytes) -> str:
    session = repo.writable_session("main")
    session.set_chunk("/a", coord, data)
    return session.commit(f"write {coord}")


@pytest.mark.parametrize("collect", [False, True], ids=["expired", "expired-and-collected"])
def test_reading_across_expired_history_is_an_error(repo: Repository, collect: bool) -> None:
    tagged = commit_chunk(repo, (0, 0), b"\x01" * 4)
    repo.create_tag("v1", tagged)
    commit_chunk(repo, (0, 1), b"\x02" * 4)  # expired below: its change would be skipped
    tip = commit_chunk(repo, (1, 1), b"\x03" * 4)
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))  # all but tips and tags
    if collect:
        repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=1))
    state = repo.state()
    assert state.snapshot(tip).parent_id == tagged and state.snapshot(tip).parent_relinked

    gap = f"between snapshot {tagged} .* and snapshot {tip} .* expired"
    # A consumer positioned at the tag (a stream's offset, or the table's from) ...
    with pytest.raises(HistoryExpiredError, match=gap):
        feed.steps_after(state, feed.Position(tagged, 5), tip, "branch 'main'")
    # ... or before the history: reading from the start would cross the same gap.
    with pytest.raises(HistoryExpiredError, match=gap):
        feed.steps_after(state, feed.BEFORE_HISTORY, tip)
    # An expiry is a rewrite of history: who handles HistoryRewrittenError handles it too.
    assert issubclass(HistoryExpiredError, HistoryRewrittenError)

    # Up to the gap, and after it, the feed reads on (the files it needs were kept).
    assert short(changes_between(repo, feed.BEFORE_HISTORY, tagged)) == [(0, "set", "/a", [0, 0])]
    after = commit_chunk(repo, (1, 0), b"\x04" * 4)
    assert short(changes_between(repo, feed.Position(tip, 1), after)) == [(2, "set", "/a", [1, 0])]


def changes_between(repo: Repository, start: feed.Position, end: str) -> list[dict[str, Any]]:
    cache = ManifestCache(repo.storage)
    steps = feed.steps_after(repo.state(), start, end)
    return [r for s in steps for r in feed.snapshot_changes(repo.storage, cache, s).to_pylist()]


def test_rewriting_identical_bytes_is_no_change(repo: Repository) -> None:
    first = commit_chunk(repo, (0, 0), b"\x01" * 4)
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)  # the same (inline) bytes again: no change
    session.set_chunk("/a", (0, 1), b"\x02" * 4)  # new
    session.delete_chunk("/a", (1, 1))  # never written: nothing to delete
    session.commit("rewrite")
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x05" * 4)  # other bytes: a change
    session.set_chunk("/a", (0, 1), b"\x02" * 4)
    session.commit("change one")
    assert short(changes(repo, feed.Position(first, 2))) == [
        (3, "set", "/a", [0, 1]),
        (4, "set", "/a", [0, 0]),
    ]


def test_a_native_chunk_written_again_is_a_new_ref(repo: Repository) -> None:
    big = bytes(range(256)) * 4  # over the inline threshold: a chunk file of its own
    commit_chunk(repo, (0, 0), big)
    commit_chunk(repo, (0, 0), big)
    old, new = changes(repo)[-2:]
    # The same bytes in a new chunk file: the ref's location changed, and a consumer that
    # keeps locations needs the new one (the old file goes once older snapshots expire).
    assert (new["change"], new["kind"], new["coord"]) == ("set", "native", [0, 0])
    assert new["location"] != old["location"] and new["length"] == old["length"] == len(big)


def test_xarray_append_reports_no_rewritten_coordinates(repo: Repository) -> None:
    xr = pytest.importorskip("xarray")
    import numpy as np

    def dataset(start: int) -> Any:
        values = np.arange(start * 6, start * 6 + 12, dtype="f4").reshape(2, 3, 2)
        coords = {"time": [start, start + 1], "lat": [0.0, 0.5, 1.0], "lon": [10.0, 20.0]}
        return xr.Dataset({"t": (("time", "lat", "lon"), values)}, coords=coords)

    session = repo.writable_session("main")
    dataset(0).to_zarr(session.store, group="ds", zarr_format=3, consolidated=False)
    first = session.commit("first")
    session = repo.writable_session("main")
    dataset(2).to_zarr(session.store, group="ds", append_dim="time", consolidated=False)
    session.commit("append")  # xarray wrote lat and lon again, with the same bytes
    rows = changes(repo, feed.Position(first, 2))
    assert sorted((r["change"], r["path"], r["coord"]) for r in rows if r["coord"]) == [
        ("set", "/ds/t", [1, 0, 0]),
        ("set", "/ds/time", [1]),
    ]


def test_a_squashed_range_reads_as_one_snapshot_of_all_its_changes(repo: Repository) -> None:
    """The feed over a squash lists what the range changed, from its merged log; a feed that
    had read into the range is told its history was rewritten, never skipped silently."""
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    a = session.commit("A")
    session = repo.writable_session("main")
    session.set_chunk("/a", (1, 1), b"\x02" * 4)
    session.delete_chunk("/a", (0, 0))
    b = session.commit("B")
    assert short(changes(repo))[2:] == [
        (2, "set", "/a", [0, 0]),
        (3, "delete", "/a", [0, 0]),
        (3, "set", "/a", [1, 1]),
    ]
    squashed = repo.squash("main", a, b, "A+B")
    after = changes(repo)
    # The net change of the range: (0, 0) came and went, so it is no change at all.
    assert short(after)[2:] == [(2, "set", "/a", [1, 1])]
    assert after[2]["snapshot"] == squashed
    state = repo.state()
    with pytest.raises(HistoryRewrittenError):
        feed.steps_after(state, feed.Position(a, 2), state.branch("main").snapshot_id, "main")


def test_an_amended_tip_reads_as_one_snapshot_of_its_changes_and_the_amends(
    repo: Repository,
) -> None:
    """The amended snapshot's log is the replaced tip's merged with the amend's, so the feed
    loses neither; a feed that had read the replaced tip is told its history was rewritten."""
    session = repo.writable_session("main")
    session.set_chunk("/a", (0, 0), b"\x01" * 4)
    tip = session.commit("A")
    session = repo.writable_session("main")
    session.set_chunk("/a", (1, 1), b"\x02" * 4)
    amended = session.amend("A, amended")
    after = changes(repo)
    assert short(after)[2:] == [(2, "set", "/a", [0, 0]), (2, "set", "/a", [1, 1])]
    assert {r["snapshot"] for r in after[2:]} == {amended}
    state = repo.state()
    with pytest.raises(HistoryRewrittenError, match="no longer in the history"):
        feed.steps_after(state, feed.Position(tip, 2), amended, "main")


def test_steps_whose_snapshots_are_collected_after_planning_say_so(repo: Repository) -> None:
    # A Spark query plans its steps on the driver; its tasks read them later. Expiry and GC
    # may remove a step's snapshot, or its parent's, in between.
    first = commit_chunk(repo, (0, 0), b"\x01" * 4)
    second = commit_chunk(repo, (0, 0), b"\x02" * 4)  # replaces first's chunk and manifest
    commit_chunk(repo, (1, 1), b"\x03" * 4)
    state = repo.state()
    planned = feed.steps_after(state, feed.Position(first, 1), state.branch("main").snapshot_id)
    assert [s.snapshot_id for s in planned[:1]] == [second]
    expired = repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    assert first in expired and second in expired  # only the tip and its root stay
    repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=1))

    cache = ManifestCache(repo.storage)
    for step, gone in zip(planned, [second, second], strict=True):  # a step, then a parent
        with pytest.raises(SnapshotCollectedError, match=f"snapshot {gone} left") as raised:
            feed.snapshot_changes(repo.storage, cache, step)
        assert "change feed" in str(raised.value), step.snapshot_id

"""Long operations report their stages: every step they announce is one they did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from icechunk_spark.progress import track
from tests.conftest import Backend
from tests.support.helpers import create_repo, cutoff_after_writes, make_array
from tests.support.progress import Recorder


def test_track_reports_each_item_and_ends_even_on_error() -> None:
    recorder = Recorder()
    assert list(track(recorder, "counting", iter("abc"), 3)) == ["a", "b", "c"]
    assert [(s.name, s.total, s.done, s.ended) for s in recorder.stages] == [
        ("counting", 3, 3, True)
    ]

    def failing():
        yield 1
        raise RuntimeError("storage fell over")

    with pytest.raises(RuntimeError):
        list(track(recorder, "failing", failing(), 2))
    assert (recorder.stages[-1].done, recorder.stages[-1].ended) == (1, True)
    assert list(track(None, "silent", [1, 2])) == [1, 2]  # no progress: nothing to report to


def _history(backend: Backend, commits: int = 6):
    """A repository whose main has ``commits`` snapshots writing fresh chunks, all but the
    last expired: their chunks, manifests and structures are garbage."""
    repo = create_repo(backend)
    session = repo.writable_session()
    make_array(session, "/a", shape=(40,), chunks=(4,))
    session.commit("create")
    for i in range(commits):
        session = repo.writable_session()
        session.set_chunk("/a", (i,), bytes([i]) * 4096)  # above the inline limit: a c/ file
        session.commit(f"write {i}")
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    return repo


def test_gc_reports_reading_listing_and_deleting(backend: Backend) -> None:
    repo = _history(backend)
    cutoff = cutoff_after_writes(backend)  # everything unreachable may go

    dry = Recorder()
    would = repo.garbage_collect(cutoff, dry_run=True, progress=dry)
    assert "deleting objects" not in dry.names()  # a dry run deletes nothing

    recorder = Recorder()
    summary = repo.garbage_collect(cutoff, progress=recorder)
    assert summary == would and summary.objects_deleted > 0
    assert recorder.all_complete()
    assert recorder.names()[:3] == ["reading snapshots", "reading manifests", "listing objects"]
    assert recorder.stage("reading snapshots").total == len(repo.state().snapshots)
    # c/ m/ s/ a/ x/ t/ staging/, and the storage's leftover temporary files
    assert recorder.stage("listing objects").total == 8
    assert recorder.stage("deleting objects").total == summary.objects_deleted
    assert recorder.names()[-1] == "deleting objects"


def test_rewrite_manifests_reports_reading_then_writing(backend: Backend) -> None:
    repo = create_repo(backend)
    session = repo.writable_session()
    for name in ("x", "y", "z"):
        make_array(session, f"/{name}", shape=(8,), chunks=(2,))
        for i in range(4):
            session.set_chunk(f"/{name}", (i,), bytes([i]) * 64)
    session.commit("three arrays")
    before = repo.manifests()
    one_each = """
chunk-manifests:
  sets:
    - own:
        max-manifest-size: null
        max-arrays-per-manifest: 1
        cardinality: null
  rules:
    - path: .*
      target: own
"""

    recorder = Recorder()
    snapshot = repo.rewrite_manifests(one_each, "one manifest per array", progress=recorder)
    assert recorder.all_complete()
    assert recorder.names() == ["reading manifests", "writing manifests"]
    assert recorder.stage("reading manifests").total == len(before)
    assert recorder.stage("writing manifests").total == len(repo.manifests(snapshot)) == 3

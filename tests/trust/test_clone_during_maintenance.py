"""A clone copies one state of a repository (ops/clone.py) while expiry and GC may run on the
source: what the clone publishes must name only objects it copied. A clone of a big repository
takes hours, and maintenance runs on a schedule, so they meet. An export (export.py) of a
snapshot that leaves the history meanwhile must fail clearly and leave nothing a reader opens;
listing its sources must fail clearly too."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from icechunk_spark import NotFoundError, Repository, RetriesExhaustedError
from icechunk_spark.export import export_zarr
from icechunk_spark.format.keys import MANIFESTS_PREFIX, STRUCTURES_PREFIX
from icechunk_spark.ops.clone import MAX_ROUNDS, CloneSummary, clone
from icechunk_spark.storage import Storage, open_storage
from tests.support.faults import FaultyStorage, Rule, run_held
from tests.support.helpers import cutoff_after_writes, make_array
from tests.trust.conftest import create


def with_a_replaced_chunk(faulty: FaultyStorage) -> tuple[Repository, str]:
    """main: a chunk file written (``first``), then replaced; only ``first`` names the old
    one, so expiring ``first`` and collecting garbage deletes it."""
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session("main")
    make_array(session, "/a", shape=(8,), chunks=(4,))
    session.set_chunk_values("/a", (0,), np.full(4, 1, dtype="int32"))
    session.set_chunk_values("/a", (1,), np.full(4, 3, dtype="int32"))
    first = session.commit("first")
    session = repo.writable_session("main")
    session.set_chunk_values("/a", (0,), np.full(4, 2, dtype="int32"))
    session.commit("second")
    return repo, first


def every_listed_snapshot_reads(storage: Storage) -> dict[str, list[int]]:
    """Each listed snapshot's chunks of /a, read in full (a missing object raises)."""
    repo = Repository.open(storage)
    out = {}
    for snapshot_id in repo.state().snapshots:
        session = repo.readonly_session(snapshot_id=snapshot_id)
        if session.find_node("/a") is not None:
            chunks = [session.get_chunk("/a", (i,)) for i in range(2)]
            out[snapshot_id] = [int(np.frombuffer(c, "int32")[0]) for c in chunks if c]
    return out


@pytest.mark.parametrize(
    ("method", "prefix", "workers"),
    [
        # Between the state read and the listing: `first`'s files are never listed.
        ("list", STRUCTURES_PREFIX, 4),
        # Between the listing and the copies: one copier, held at its first read; `first`'s
        # structure file and log, listed, come later in key order than any chunk.
        ("get", "c/", 1),
    ],
    ids=["before-listing", "before-copies"],
)
def test_expiry_and_gc_during_a_clone(faulty, backend, method, prefix, workers):
    repo, first = with_a_replaced_chunk(faulty)
    destination = open_storage(f"memory://clone-{uuid.uuid4().hex}")
    other = Repository.open(faulty.inner)

    def maintain() -> None:
        assert first in other.expire_snapshots(datetime.now(UTC))
        other.garbage_collect(cutoff_after_writes(backend))  # deletes what only `first` named

    summary = run_held(
        faulty, method, prefix, lambda: clone(faulty, destination, workers=workers), maintain
    )
    assert isinstance(summary, CloneSummary), summary
    copied = every_listed_snapshot_reads(destination)
    assert first not in copied  # the clone is of the state after the maintenance
    assert list(copied.values()) == [[2, 3]]
    assert summary.generation == repo.state().generation
    assert Repository.open(destination).state().generation == summary.generation


def test_a_clone_collected_under_it_every_round_gives_up_and_publishes_nothing():
    # In memory: the bound is the clone's loop, which no backend changes.
    faulty = FaultyStorage(open_storage(f"memory://source-{uuid.uuid4().hex}"))
    with_a_replaced_chunk(faulty)
    destination = open_storage(f"memory://clone-{uuid.uuid4().hex}")
    other = Repository.open(faulty.inner)

    def collect_first(listing):  # type: ignore[no-untyped-def]
        other.garbage_collect(datetime.now(UTC))
        return listing()

    faulty._add(Rule("list", STRUCTURES_PREFIX, collect_first, times=MAX_ROUNDS))
    with pytest.raises(RetriesExhaustedError, match="garbage collection ran"):
        clone(faulty, destination)
    assert not Repository.exists(destination)


def test_an_export_whose_snapshot_is_collected_under_it_fails_and_opens_as_nothing(faulty, backend):
    repo, first = with_a_replaced_chunk(faulty)
    session = repo.readonly_session(snapshot_id=first)
    destination = open_storage(f"memory://export-{uuid.uuid4().hex}")
    other = Repository.open(faulty.inner)

    def maintain() -> None:  # held at the export's first chunk read
        assert first in other.expire_snapshots(datetime.now(UTC))
        other.garbage_collect(cutoff_after_writes(backend))  # deletes first's old chunk

    outcome = run_held(
        faulty, "get_range", "c/", lambda: export_zarr(session, destination, workers=1), maintain
    )
    assert isinstance(outcome, NotFoundError), outcome
    assert f"snapshot {first} left the repository's history during the export" in str(outcome)
    assert "session" not in str(outcome)  # the session's own explanation is not nested in it
    assert not destination.exists("zarr.json")  # metadata goes last: no reader opens it
    assert list(every_listed_snapshot_reads(faulty.inner).values()) == [[2, 3]]


def test_sources_of_a_snapshot_collected_under_them_fail_saying_so(faulty, backend):
    _, first = with_a_replaced_chunk(faulty)
    reader = Repository.open(faulty)  # a handle of its own: no manifest in its memory
    other = Repository.open(faulty.inner)

    def maintain() -> None:  # held at the first manifest read
        assert first in other.expire_snapshots(datetime.now(UTC))
        other.garbage_collect(cutoff_after_writes(backend))  # deletes first's manifest

    outcome = run_held(
        faulty, "get", MANIFESTS_PREFIX, lambda: reader.sources(snapshot_id=first), maintain
    )
    assert isinstance(outcome, NotFoundError), outcome
    assert f"snapshot {first} left the repository's history" in str(outcome)

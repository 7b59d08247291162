"""A reader holds a session on a snapshot while expiry and garbage collection remove it.

Objects are immutable and their ids never reused, so nothing wrong can be read: a read that
finds a manifest or chunk file gone must fail, and say why (the snapshot left the history)
and what to do, through every way a session reads (its own calls, zarr, sync and async).
A file gone while its snapshot is still listed is damage, not maintenance, and must not be
blamed on it.
"""

from __future__ import annotations

import pickle
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import zarr

from icechunk_spark import NotFoundError, Repository, SnapshotCollectedError
from icechunk_spark.format.keys import MANIFESTS_PREFIX, chunk_key
from icechunk_spark.storage import open_storage
from tests.support.faults import run_held
from tests.support.helpers import cutoff_after_writes
from tests.trust.test_clone_during_maintenance import with_a_replaced_chunk

LEFT = "left the repository's history while this session read it"


def collected_as_it_should(raised: BaseException, snapshot_id: str, what: str = "") -> None:
    assert isinstance(raised, SnapshotCollectedError), f"{what}: {raised!r}"
    assert raised.snapshot_id == snapshot_id, what
    assert f"snapshot {snapshot_id} {LEFT}" in str(raised), what
    assert "open a session on a snapshot still in the history" in str(raised), what


def test_reads_of_a_snapshot_collected_under_its_sessions_say_so(faulty, backend):
    _, first = with_a_replaced_chunk(faulty)
    # Handles of their own: `cold` holds no manifest of `first` (its next read is of one), and
    # `warm` holds its manifest (its next read of chunk 0 is of a chunk file only `first` names).
    cold = Repository.open(faulty).readonly_session(snapshot_id=first)
    warm = Repository.open(faulty).readonly_session(snapshot_id=first)
    assert np.frombuffer(warm.get_chunk("/a", (1,)) or b"", "int32")[0] == 3
    through_zarr = zarr.open_array(
        Repository.open(faulty).readonly_session(snapshot_id=first).store, path="a", mode="r"
    )
    assert (through_zarr[4:] == 3).all()  # its manifest held too: chunk 0 is a file read

    other = Repository.open(faulty.inner)
    assert first in other.expire_snapshots(datetime.now(UTC))
    other.garbage_collect(cutoff_after_writes(backend))  # first's manifest and chunk 0 go

    reads = {
        "a manifest, one chunk": lambda: cold.get_chunk("/a", (0,)),
        "a manifest, every ref": lambda: cold.chunk_refs("/a"),
        "a chunk file": lambda: warm.get_chunk("/a", (0,)),
        "a chunk file through zarr (async)": lambda: through_zarr[:],
    }
    for what, read in reads.items():
        with pytest.raises(NotFoundError) as raised:
            read()
        collected_as_it_should(raised.value, first, what)
    # Chunk 1 is the newest snapshot's too, so GC kept it: reads that can succeed still do.
    assert np.frombuffer(warm.get_chunk("/a", (1,)) or b"", "int32")[0] == 3
    # Spark tasks send errors back to the driver pickled.
    collected_as_it_should(pickle.loads(pickle.dumps(raised.value)), first)


def test_a_file_gone_from_a_listed_snapshot_is_not_blamed_on_maintenance(faulty):
    _, first = with_a_replaced_chunk(faulty)
    session = Repository.open(faulty).readonly_session(snapshot_id=first)
    ref = session.get_chunk_ref("/a", (0,))
    assert ref is not None and ref.chunk_id is not None
    faulty.inner.delete([chunk_key(ref.chunk_id)])  # damage: no expiry, no GC
    with pytest.raises(NotFoundError) as raised:
        session.get_chunk("/a", (0,))
    assert not isinstance(raised.value, SnapshotCollectedError)
    assert chunk_key(ref.chunk_id) in str(raised.value)


def test_a_diff_whose_snapshot_is_collected_under_it_says_so(faulty, backend):
    _, first = with_a_replaced_chunk(faulty)
    reader = Repository.open(faulty)  # a handle of its own: no manifest in its memory
    other = Repository.open(faulty.inner)

    def maintain() -> None:  # held at the diff's first manifest read
        assert first in other.expire_snapshots(datetime.now(UTC))
        other.garbage_collect(cutoff_after_writes(backend))  # deletes first's manifest

    outcome = run_held(
        faulty,
        "get",
        MANIFESTS_PREFIX,
        lambda: reader.diff(from_snapshot_id=first, to_branch="main"),
        maintain,
    )
    assert isinstance(outcome, SnapshotCollectedError), repr(outcome)
    assert outcome.snapshot_id == first
    assert f"snapshot {first} left the repository's history while it was compared" in str(outcome)


def test_a_session_on_a_snapshot_squashed_away_and_collected_says_so():
    # Expiry is not the only way out of the history: an amend or a squash replaces snapshots.
    storage = open_storage(f"memory://squashed-{uuid.uuid4().hex}")
    repo, first = with_a_replaced_chunk(storage)  # type: ignore[arg-type]
    second = repo.state().branch("main").snapshot_id
    session = Repository.open(storage).readonly_session(snapshot_id=first)
    assert np.frombuffer(session.get_chunk("/a", (1,)) or b"", "int32")[0] == 3  # manifest held
    repo.squash("main", first, second, "first and second as one")
    repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=1))  # first's chunk 0 goes
    with pytest.raises(SnapshotCollectedError, match="an amend or squash replaced it") as raised:
        session.get_chunk("/a", (0,))
    assert raised.value.snapshot_id == first

"""A soak: writer processes commit to one branch while another process expires and collects.

Issue 30, item 6, as a bounded reliability test (bench/bench_writers.py measures the writers
alone, beside Icechunk). Writers are separate processes that never cooperate: each writes its
own chunks of one array, one chunk a commit, and commits with the default rebase. A
maintenance process expires snapshots and collects garbage with a short cut-off every
second or so, so both land between any two steps of a commit. Afterwards:

* every snapshot id a commit returned is in the branch's history, or that process expired it;
* every snapshot the state lists reads completely (every chunk file it references is there);
* the tip holds every chunk every writer was told it committed.

A commit refused because GC or expiry overtook its session (``StaleSessionError``, or a
``ConflictError`` saying its base was expired) committed nothing and says so: the writer
redoes it, as the error tells it to.

``ICECHUNK_SOAK_SECONDS`` lengthens the run (default 20 s of writing, in the suite's budget).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from icechunk_spark import ConflictError, Repository, StaleSessionError

WRITERS = 4
PER_WRITER = 64  # chunks of the array each writer owns: more than it commits in the run
CUTOFF_S = 1.0  # a short cut-off: sessions and commits regularly straddle a collection
SECONDS = float(os.environ.get("ICECHUNK_SOAK_SECONDS", "20"))


def value(writer: int, n: int) -> bytes:
    return f"writer {writer} chunk {n} ".encode() * 4  # over the inline threshold: a file


def write(url: str, writer: int, until: float, out: Any) -> None:
    """Commit one chunk at a time until ``until``; report (snapshot id, chunk) of each."""
    repo = Repository.open(url)
    landed, stale = [], 0
    n = 0
    while time.time() < until and n < PER_WRITER:
        session = repo.writable_session()
        session.set_chunk("/w", (writer * PER_WRITER + n,), value(writer, n))
        try:
            landed.append((session.commit(f"writer {writer} chunk {n}"), n))
        except StaleSessionError:
            # GC collected this session's chunk file before its commit (the cut-off is
            # shorter than the session): nothing was committed, and the writer is told so.
            stale += 1
            continue
        except ConflictError as refused:
            # Expiry took this session's base (or snapshots since it) before the commit could
            # rebase: their changes cannot be checked, so it is refused, and says to redo it.
            # Writers own disjoint chunks: any other conflict is a bug.
            if "expired" not in str(refused):
                raise
            stale += 1
            continue
        n += 1
    out.put(("writer", writer, landed, stale))


def maintain(url: str, until: float, out: Any) -> None:
    """Expire and collect with a ``CUTOFF_S`` cut-off until ``until``; report what expired."""
    repo = Repository.open(url)
    expired: set[str] = set()
    runs = 0
    while time.time() < until:
        cutoff = datetime.now(UTC) - timedelta(seconds=CUTOFF_S)
        expired |= repo.expire_snapshots(cutoff)
        repo.garbage_collect(cutoff)
        runs += 1
        time.sleep(0.5)
    out.put(("maintenance", runs, expired))


@pytest.mark.slow
def test_writers_with_expiry_and_gc_running_lose_nothing(tmp_path: Path) -> None:
    url = (tmp_path / "repo").as_uri()
    repo = Repository.create(url, config={"inline_chunk_threshold_bytes": 8})
    session = repo.writable_session()
    session.create_array("/w", shape=(WRITERS * PER_WRITER,), chunk_shape=(1,), dtype="uint8")
    session.commit("the array")

    spawn = multiprocessing.get_context("spawn")  # no forked locks or pools
    out = spawn.Queue()
    start = time.time() + 5  # every process has imported and opened the repository by then
    until = start + SECONDS
    processes = [spawn.Process(target=write, args=(url, w, until, out)) for w in range(WRITERS)]
    processes.append(spawn.Process(target=maintain, args=(url, until + 2, out)))
    for process in processes:
        process.start()
    reports = [out.get(timeout=SECONDS + 120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0

    expired: set[str] = next(r[2] for r in reports if r[0] == "maintenance")
    runs = next(r[1] for r in reports if r[0] == "maintenance")
    landed = {r[1]: r[2] for r in reports if r[0] == "writer"}
    assert runs >= 3, "maintenance must have run between the commits"
    assert all(landed.values()), "every writer must have landed commits"

    history = {info.id for info in repo.ancestry(branch="main")}
    returned = {snapshot for commits in landed.values() for snapshot, _ in commits}
    assert returned - history <= expired, "a returned commit vanished without being expired"
    assert expired, "expiry must have taken some of the writers' snapshots"

    # Every listed snapshot reads completely: no chunk a live snapshot references is gone.
    for snapshot_id in repo.state().snapshots:
        reader = repo.readonly_session(snapshot_id=snapshot_id)
        for coord in reader.chunk_coords("/w"):
            assert reader.get_chunk("/w", tuple(int(i) for i in coord)) is not None

    tip = repo.readonly_session()
    for writer, commits in landed.items():
        for _, n in commits:
            assert tip.get_chunk("/w", (writer * PER_WRITER + n,)) == value(writer, n)

"""Many processes committing to one branch: linear history, nothing lost."""

from __future__ import annotations

import itertools
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from icechunk_spark import Repository
from tests.support import workers
from tests.support.helpers import create_repo

WORKERS = 8
COMMITS = 25


def _pool(size: int = WORKERS) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))


@pytest.mark.slow
def test_eight_processes_commit_to_one_branch_linearly(process_backend):
    _commit_from_processes(process_backend, WORKERS, COMMITS)  # local disk: the default


@pytest.mark.slow
@pytest.mark.parametrize("process_backend", ["s3", "gcs", "azure"], indirect=True)
def test_four_processes_commit_eight_times_each_on_object_storage(process_backend):
    # Every commit is a race for the next state file, decided by the server's conditional
    # create: none lost means If-None-Match: * / ifGenerationMatch=0 let exactly one in. The
    # servers here answer one request at a time (8 x 8 commits on moto took 50-100 s of CI);
    # eight writers and 200 commits race on local disk above, 32 writers on moto in
    # bench/bench_writers.py.
    _commit_from_processes(process_backend, workers_count=4, commits=8)


def _commit_from_processes(backend, workers_count: int, commits: int) -> None:
    """``workers_count`` processes each commit ``commits`` times to main: none may be lost."""
    repo = create_repo(backend)
    session = repo.writable_session()
    session.create_group("/")
    for w in range(workers_count):
        session.create_array(f"/w{w}", shape=(commits,), chunk_shape=(1,), dtype="uint8")
    setup = session.commit("arrays")

    with _pool(workers_count) as pool:
        futures = [
            pool.submit(workers.commit_own_array, backend.url, backend.options, w, commits)
            for w in range(workers_count)
        ]
        results = [f.result() for f in futures]

    history = list(repo.ancestry(branch="main"))
    assert len(history) == 2 + workers_count * commits  # nothing lost, nothing doubled
    assert history[-2].id == setup
    for child, parent in itertools.pairwise(history):
        assert child.parent_id == parent.id  # linear: every snapshot's parent is the one before
    by_id = {info.id: info for info in history}
    for w, snapshots in enumerate(results):
        assert len(set(snapshots)) == commits
        for j, snapshot in enumerate(snapshots):
            assert by_id[snapshot].message == f"worker {w} commit {j}"
            reader = repo.readonly_session(snapshot_id=snapshot)
            assert reader.get_chunk(f"/w{w}", (j,)) == f"{w}-{j}".encode()
    final = repo.readonly_session()
    for w in range(workers_count):
        assert final.chunk_coords(f"/w{w}").ravel().tolist() == list(range(commits))


@pytest.mark.slow
@pytest.mark.parametrize("process_backend", ["local", "s3"], indirect=True)
def test_processes_writing_the_same_chunk_commit_or_conflict(process_backend):
    repo = create_repo(process_backend)
    session = repo.writable_session()
    session.create_array("/a", shape=(1,), chunk_shape=(1,), dtype="uint8")
    setup = session.commit("array")

    start_at = time.time() + 4.0  # every worker has opened its session by then
    with _pool() as pool:
        futures = [
            pool.submit(
                workers.commit_same_chunk, process_backend.url, process_backend.options, w, start_at
            )
            for w in range(WORKERS)
        ]
        outcomes = [f.result() for f in futures]

    committed = {w: s for w, s in enumerate(outcomes) if s is not None}
    assert committed, "at least one writer must win"
    history = list(
        Repository.open(process_backend.url, storage_options=process_backend.options).ancestry()
    )
    new = [info.id for info in history if info.id != setup and info.parent_id is not None]
    assert sorted(new) == sorted(committed.values())  # every success is in history, nothing else
    for w, snapshot in committed.items():
        assert (
            repo.readonly_session(snapshot_id=snapshot).get_chunk("/a", (0,))
            == f"worker-{w}".encode()
        )
    assert len(committed) < WORKERS  # they all started from one base: the losers saw conflicts

"""Commits through an S3 endpoint that throttles, loses answers and answers 500 after applying.

The proxy (tests/support/faulty_proxy.py) sits between s3fs and the moto server. botocore and
s3fs retry such faults themselves; when the first attempt of a state-file PUT was applied, the
retry meets our own ``t/<g>`` and gets 412. A commit must still tell the truth: the snapshot id it
returns is in history exactly once, and a failure it reports did not land.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from icechunk_spark import Repository
from tests.conftest import new_s3_bucket, s3_options
from tests.support import workers
from tests.support.faulty_proxy import STATE_FILE_PUTS, FaultRule, FaultyProxy, background_faults

WRITERS = 4
COMMITS = 6
ATTEMPTS = 4  # a writer retries a reported failure (new session, same change) this often
# What an injected fault may make a commit report. Never a conflict: each writer has its own
# array, so a ConflictError (or any other error) would be a bug that the retries hid.
FAULT_ERRORS = {"StorageError", "StorageUnreachableError", "CommitStateUnknownError"}
SEED = int(os.environ.get("FAULT_SEED", "2026"))
STATE_FILE = r"/t/\d+$"


def _new_repo(endpoint: str) -> tuple[str, Repository]:
    url = f"s3://{new_s3_bucket(endpoint)}/{uuid.uuid4().hex}"
    repo = Repository.create(
        url, storage_options=s3_options(endpoint), config={"inline_chunk_threshold_bytes": 8}
    )
    return url, repo


@pytest.mark.parametrize("kind", ["drop", "error"])
def test_a_commit_whose_state_file_answer_is_lost_reports_its_snapshot(s3_endpoint, kind):
    url, repo = _new_repo(s3_endpoint)
    once = FaultRule("PUT", STATE_FILE, 1.0, kinds=(kind,), max_faults=1)
    with FaultyProxy(s3_endpoint, SEED, [once]) as proxy:
        faulty = Repository.open(url, storage_options=s3_options(proxy.url))
        session = faulty.writable_session()
        session.create_array("/a", shape=(1,), chunk_shape=(1,), dtype="uint8")
        snapshot = session.commit("through a lost answer")
        assert proxy.counts(STATE_FILE) == Counter({kind: 1})
    history = [info.id for info in repo.ancestry()]
    assert history.count(snapshot) == 1
    assert history[0] == snapshot


@pytest.mark.parametrize("kind", ["drop", "error"])
def test_create_whose_state_file_answer_is_lost_succeeds(s3_endpoint, kind):
    url = f"s3://{new_s3_bucket(s3_endpoint)}/{uuid.uuid4().hex}"
    once = FaultRule("PUT", STATE_FILE, 1.0, kinds=(kind,), max_faults=1)
    with FaultyProxy(s3_endpoint, SEED, [once]) as proxy:
        created = Repository.create(url, storage_options=s3_options(proxy.url))
        assert proxy.counts(STATE_FILE) == Counter({kind: 1})
    reopened = Repository.open(url, storage_options=s3_options(s3_endpoint))
    assert reopened.lookup_branch("main") == created.lookup_branch("main")


@pytest.mark.slow
def test_writers_through_faults_get_truthful_results(s3_endpoint):
    url, repo = _new_repo(s3_endpoint)
    session = repo.writable_session()
    session.create_group("/")
    for w in range(WRITERS):
        session.create_array(f"/w{w}", shape=(COMMITS,), chunk_shape=(1,), dtype="uint8")
    session.commit("arrays")

    rules = [STATE_FILE_PUTS, background_faults(0.02)]
    context = multiprocessing.get_context("spawn")
    with (
        FaultyProxy(s3_endpoint, SEED, rules) as proxy,
        ProcessPoolExecutor(WRITERS, mp_context=context) as pool,
    ):
        options = s3_options(proxy.url)
        futures = [
            pool.submit(workers.commit_own_array_retrying, url, options, w, COMMITS, ATTEMPTS)
            for w in range(WRITERS)
        ]
        outcomes = {w: f.result() for w, f in enumerate(futures)}
        faults, state_faults = proxy.counts(), proxy.counts(STATE_FILE)

    figures = _check(url, s3_endpoint, outcomes)
    figures["faults injected"] = dict(faults)
    figures["state-file faults"] = dict(state_faults)
    print(f"\nfault run (seed {SEED}): {figures}")
    # Each rule draws from its own seeded sequence, so the first state-file PUTs (there are at
    # least one per commit) are faulted the same way in every run, whatever the interleaving.
    planned = FaultyProxy.planned(SEED, rules, 0, WRITERS * COMMITS)
    assert planned > 0, f"seed {SEED} faults no state-file PUT: choose another"
    assert sum(state_faults.values()) >= planned
    assert figures["false failures"] == 0
    assert figures["values landed twice"] == 0
    assert figures["commits returned"] == WRITERS * COMMITS
    assert figures["conflicts"] == 0, figures["errors"]
    # Every retry answers a failure that an injected fault explains.
    assert set(figures["errors"]) <= FAULT_ERRORS, figures["errors"]
    assert figures["retries"] <= sum(faults.values())


def _check(url: str, endpoint: str, outcomes: dict[int, list[Any]]) -> dict[str, Any]:
    """Assert what must hold whatever the faults; count what the issue wants reported."""
    repo = Repository.open(url, storage_options=s3_options(endpoint))
    history = list(repo.ancestry())
    for child, parent in itertools.pairwise(history):
        assert child.parent_id == parent.id
    landed = Counter(info.message for info in history)
    by_message = {info.message: info.id for info in history}
    false_failures = 0
    for w, attempts in outcomes.items():
        for j, attempt, snapshot, _error in attempts:
            message = workers.fault_message(w, j, attempt)
            if snapshot is not None:
                # A returned id is in history exactly once, as this very commit.
                assert landed[message] == 1, f"{message} returned {snapshot}, landed {landed}"
                assert by_message[message] == snapshot
            elif landed[message]:
                false_failures += 1  # reported as failed, yet in history
    twice = 0
    for w, j in itertools.product(range(WRITERS), range(COMMITS)):
        copies = sum(landed[workers.fault_message(w, j, a)] for a in range(ATTEMPTS))
        twice += copies > 1
        if any(o[0] == j and o[2] is not None for o in outcomes[w]):
            assert copies, f"worker {w} value {j} was reported committed and is not in history"
    _assert_history_reads(repo, history)
    repo.garbage_collect(datetime.now(UTC))
    # A new handle: the old one caches manifests, which must be read again after GC.
    _assert_history_reads(Repository.open(url, storage_options=s3_options(endpoint)), history)
    errors = [o[3].split(":")[0] for a in outcomes.values() for o in a if o[3]]
    return {
        "commits returned": sum(o[2] is not None for a in outcomes.values() for o in a),
        "failures reported": sum(o[2] is None for a in outcomes.values() for o in a),
        "retries": sum(o[1] > 0 for a in outcomes.values() for o in a),
        "conflicts": errors.count("ConflictError"),
        "false failures": false_failures,
        "values landed twice": twice,
        "errors": sorted(set(errors)),
    }


def _assert_history_reads(repo: Repository, history: list[Any]) -> None:
    """Each snapshot holds exactly the values committed up to it (so none is lost), and every
    chunk file it names holds its writer's bytes (each file read once: snapshots share them)."""
    assert set(repo.state().snapshots) == {info.id for info in history}
    expected: dict[str, set[int]] = {f"/w{w}": set() for w in range(WRITERS)}
    checked: set[str] = set()
    for info in reversed(history):  # oldest first
        if info.message.startswith("worker "):
            _, w, _, j, *_ = info.message.split()
            expected[f"/w{w}"].add(int(j))
        if info.parent_id is None:
            continue  # the empty first snapshot
        reader = repo.readonly_session(snapshot_id=info.id)
        for path, coords in expected.items():
            refs = reader.chunk_refs(path)
            found = reader.chunk_coords(path).ravel().tolist()
            assert set(found) == coords, f"{path} at {info.message!r}"
            w = int(path[len("/w") :])
            for j, chunk_id in zip(found, refs.column("chunk_id").to_pylist(), strict=True):
                if chunk_id not in checked:
                    assert reader.get_chunk(path, (j,)) == workers.fault_value(w, j)
                    checked.add(chunk_id)

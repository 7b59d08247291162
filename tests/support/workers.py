"""Entry points run in separate processes by the concurrency and crash-safety tests."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from icechunk_spark import (
    CommitStateUnknownError,
    ConflictError,
    IcechunkSparkError,
    NotFoundError,
    Repository,
)


def commit_own_array(url: str, options: dict[str, Any], worker: int, commits: int) -> list[str]:
    """Make ``commits`` commits, each writing one chunk of this worker's own array."""
    repo = Repository.open(url, storage_options=options)
    snapshots = []
    for j in range(commits):
        session = repo.writable_session("main")
        session.set_chunk(f"/w{worker}", (j,), f"{worker}-{j}".encode())
        snapshots.append(session.commit(f"worker {worker} commit {j}"))
    return snapshots


def commit_same_chunk(
    url: str, options: dict[str, Any], worker: int, start_at: float
) -> str | None:
    """Write chunk (0,) of /a from a session opened before ``start_at``; None on conflict."""
    repo = Repository.open(url, storage_options=options)
    session = repo.writable_session("main")
    session.set_chunk("/a", (0,), f"worker-{worker}".encode())
    time.sleep(max(0.0, start_at - time.time()))
    try:
        return session.commit(f"worker {worker}")
    except ConflictError:
        return None


def commit_and_die_at(url: str, options: dict[str, Any], key_prefix: str) -> None:
    """Commit a change, killing this process with SIGKILL when it first writes ``key_prefix``."""
    repo = Repository.open(url, storage_options=options)
    storage = repo.storage
    real_put, real_put_if_absent = storage.put, storage.put_if_absent
    real_put_best_effort = storage.put_best_effort

    def die_if_reached(key: str) -> None:
        if key.startswith(key_prefix):
            os.kill(os.getpid(), signal.SIGKILL)

    def put(key: str, data: bytes) -> None:
        die_if_reached(key)
        real_put(key, data)

    def put_if_absent(key: str, data: bytes) -> bool:
        die_if_reached(key)
        return real_put_if_absent(key, data)

    def put_best_effort(key: str, data: bytes) -> None:  # the hint, on local storage
        die_if_reached(key)
        real_put_best_effort(key, data)

    storage.put = put  # type: ignore[method-assign]
    storage.put_if_absent = put_if_absent  # type: ignore[method-assign]
    storage.put_best_effort = put_best_effort  # type: ignore[method-assign]
    session = repo.writable_session("main")
    session.set_chunk("/a", (0,), b"new" * 100)  # a chunk file, written before the commit
    session.set_chunk("/a", (1,), b"n")
    session.commit("doomed")
    raise SystemExit("the commit finished without reaching " + key_prefix)


def fault_value(worker: int, commit: int) -> bytes:
    """The chunk a fault-run writer stores for its ``commit``-th commit: recognisable bytes."""
    return f"worker {worker} value {commit};".encode() * 4


def fault_message(worker: int, commit: int, attempt: int) -> str:
    return f"worker {worker} commit {commit} attempt {attempt}"


def commit_own_array_retrying(
    url: str, options: dict[str, Any], worker: int, commits: int, attempts: int
) -> list[tuple[int, int, str | None, str | None]]:
    """Commit chunk (j,) of ``/w<worker>`` for each j, retrying a reported failure the way a user
    would (a new session, the same change) up to ``attempts`` times.

    Returns ``(commit, attempt, snapshot id or None, error or None)`` for every attempt.
    """
    repo = Repository.open(url, storage_options=options)
    outcomes: list[tuple[int, int, str | None, str | None]] = []
    for j in range(commits):
        for attempt in range(attempts):
            try:
                session = repo.writable_session("main")
                session.set_chunk(f"/w{worker}", (j,), fault_value(worker, j))
                snapshot = session.commit(fault_message(worker, j, attempt))
            except CommitStateUnknownError as exc:
                # The documented way out: look the snapshot up, then retry only if absent.
                snapshot = _look_up(repo, exc.snapshot_id)
                if snapshot is None:
                    outcomes.append((j, attempt, None, f"CommitStateUnknownError: {exc}"[:300]))
                    continue
            except IcechunkSparkError as exc:
                outcomes.append((j, attempt, None, f"{type(exc).__name__}: {exc}"[:300]))
                continue
            outcomes.append((j, attempt, snapshot, None))
            break
    return outcomes


def _look_up(repo: Repository, snapshot: str | None) -> str | None:
    for _ in range(5):  # the lookup goes through the same faulty endpoint
        try:
            return repo.lookup_snapshot(snapshot).id if snapshot else None
        except NotFoundError:
            return None
        except IcechunkSparkError:
            continue
    raise AssertionError(f"could not look snapshot {snapshot} up through the faults")

"""One writer process of bench_writers.py: ``--commits`` commits to ``main``, each to a chunk
of ``/w`` no other writer touches, as soon as the orchestrator says go; prints JSON.

Runs with either system's interpreter (Icechunk's needs bench/.venv312). Each commit is a
new session from the branch tip, one chunk written through zarr, and the system's own commit
call with its own rebase on a moved branch (ours: always; Icechunk: ``rebase_with``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

BUCKET = "bench"


def open_repo(system: str, location: str, create: bool = False) -> Any:
    """The repository at ``location``: a folder, or ``s3://bench/<prefix>`` on the S3
    endpoint in ``BENCH_S3_ENDPOINT`` (moto, started by bench_writers.py --s3)."""
    if system == "icechunk":
        import icechunk as ic

        if location.startswith("s3://"):
            storage = ic.s3_storage(
                bucket=BUCKET,
                prefix=location.removeprefix(f"s3://{BUCKET}/"),
                endpoint_url=os.environ["BENCH_S3_ENDPOINT"],
                allow_http=True,
                force_path_style=True,
                region="us-east-1",
                access_key_id="testing",
                secret_access_key="testing",
            )
        else:
            storage = ic.local_filesystem_storage(location)
        return ic.Repository.create(storage) if create else ic.Repository.open(storage)
    from icechunk_spark import Repository

    if location.startswith("s3://"):
        options = {"endpoint_url": os.environ["BENCH_S3_ENDPOINT"], "key": "testing"}
        options["secret"] = "testing"
        return (Repository.create if create else Repository.open)(location, storage_options=options)
    url = Path(location).as_uri()
    return Repository.create(url) if create else Repository.open(url)


def commit(system: str, session: Any, message: str) -> str:
    if system == "icechunk":
        import icechunk as ic

        return str(session.commit(message, rebase_with=ic.ConflictDetector()))
    return str(session.commit(message))


def parent_of(repo: Any, snapshot_id: str) -> str | None:
    """The landed snapshot's parent; Icechunk's lookup may miss a snapshot it just returned
    (seen on its local file system storage, which it says is not safe for concurrent
    commits): then look it up through a fresh open."""
    try:
        return repo.lookup_snapshot(snapshot_id).parent_id  # type: ignore[no-any-return]
    except Exception:
        return None


def warm_up(system: str, repo: Any, worker: int, commit_path: bool) -> None:
    """The same on both sides, before the start: a zarr read through a session and (unless
    ``commit_path`` is off) one commit of one chunk on a branch of the writer's own, so the
    timed commits pay for the commit itself, not for 32 processes at once importing their
    write path (for ours that includes pandas, which pyarrow imports on its first array built
    from Python values: about 0.23 s of CPU each) and starting their I/O threads."""
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="w", mode="r")[:10]
    if not commit_path:
        return
    for attempt in range(50):  # 32 writers create their branches at once: some races lost
        try:
            branch = f"warm-up-{worker}-{attempt}"
            repo.create_branch(branch, snapshot_id=repo.lookup_branch("main"))
            session = repo.writable_session(branch)
            array = zarr.open_array(session.store, path="w", mode="r+")
            array[:10] = np.full(10, -1, dtype="int32")
            commit(system, session, "warm-up")
            return
        except Exception:
            time.sleep(random.random() * 0.1)
    raise SystemExit(f"{system} writer {worker}: the warm-up commit failed 50 times")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["ours", "icechunk"], required=True)
    parser.add_argument("--location", required=True, help="the repository's folder")
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--commits", type=int, default=4)
    parser.add_argument("--go", required=True, help="start once this file exists")
    parser.add_argument("--cold-start", action="store_true", help="warm up by a read only")
    args = parser.parse_args()
    repo = open_repo(args.system, args.location)
    warm_up(args.system, repo, args.worker, commit_path=not args.cold_start)
    Path(f"{args.go}.ready-{args.worker}").touch()
    while not Path(args.go).exists():
        time.sleep(0.001)
    out: dict[str, Any] = {
        "ids": [],
        "latency_s": [],
        "landed_at": [],
        "rebased": [],
        "gave_up": None,
    }
    try:
        for k in range(args.commits):
            t0 = time.perf_counter()
            session = repo.writable_session("main")
            base = str(session.snapshot_id)
            chunk = args.worker * args.commits + k
            array = zarr.open_array(session.store, path="w", mode="r+")
            array[chunk * 10 : (chunk + 1) * 10] = np.full(10, chunk + 1, dtype="int32")
            landed = commit(args.system, session, f"worker {args.worker} commit {k}")
            out["latency_s"].append(time.perf_counter() - t0)
            out["landed_at"].append(time.time())
            out["ids"].append(landed)
            out["rebased"].append(str(parent_of(repo, landed)) != base)
    except Exception as exc:  # a writer that gave up: the table says so
        out["gave_up"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(out), flush=True)
    # Stay alive until every writer has printed: exiting now would take CPU from the others'
    # commits (the orchestrator creates the file, or gives up on us).
    done = Path(f"{args.go}.done")
    deadline = time.monotonic() + 3600
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    main()

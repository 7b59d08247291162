"""Concurrent commits on every writable backend: 4 processes x 8 commits, none may be lost.

    .venv/bin/python bench/bench_backends.py [--workers 4] [--commits 8]

Local files, and the GCS and Azure emulators the tests use (fake-gcs-server, Azurite; each
skipped, with the reason, when not installed). Every process opens the repository itself
and commits to ``main`` as fast as it can, all starting together; the table counts the
commits returned, those in main's history (a returned commit missing from it is lost),
and the put-if-absent races on state files lost along the way (each then rebased).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table
from icechunk_spark import Repository
from icechunk_spark.storage import open_storage


def commit_many(url: str, options: dict[str, Any], worker: int, commits: int, at: float) -> Any:
    """One process: ``commits`` commits to main; (their ids, state-file races it lost)."""
    repo = Repository.open(url, storage_options=options)
    storage = repo.storage
    create = storage.put_if_absent
    lost = [0]

    def counting(key: str, data: bytes) -> bool:
        created = create(key, data)
        lost[0] += not created and key.startswith("t/")
        return created

    storage.put_if_absent = counting  # type: ignore[method-assign]  # count, do not change
    time.sleep(max(0.0, at - time.time()))
    made = []
    for j in range(commits):
        session = repo.writable_session("main")
        session.set_chunk(f"/w{worker}", (j,), f"{worker}-{j}".encode())
        made.append(session.commit(f"worker {worker} commit {j}"))
    return made, lost[0]


def race(name: str, url: str, options: dict[str, Any], workers: int, commits: int) -> list[Any]:
    repo = Repository.create(url, storage_options=options)
    session = repo.writable_session()
    session.create_group("/")
    for w in range(workers):
        session.create_array(f"/w{w}", shape=(commits,), chunk_shape=(1,), dtype="uint8")
    session.commit("arrays")
    at = time.time() + 5  # every process has opened the repository by then
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        futures = [pool.submit(commit_many, url, options, w, commits, at) for w in range(workers)]
        results = [f.result() for f in futures]
    seconds = time.time() - at
    made = [s for ids, _ in results for s in ids]
    history = list(repo.ancestry(branch="main"))
    in_history = {h.id for h in history}
    linear = all(c.parent_id == p.id for c, p in itertools.pairwise(history))
    final = repo.readonly_session()
    complete = all(
        final.chunk_coords(f"/w{w}").ravel().tolist() == list(range(commits))
        for w in range(workers)
    )
    lost = sum(1 for s in made if s not in in_history)
    races = sum(r for _, r in results)
    return [name, len(made), len(made) - lost, lost, races, linear and complete, seconds]


@contextmanager
def local() -> Iterator[tuple[str, dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as root:
        yield Path(root).as_uri(), {}


@contextmanager
def gcs() -> Iterator[tuple[str, dict[str, Any]]]:
    from tests.support import emulators

    server = emulators.start_fake_gcs()
    try:
        options = {"endpoint_url": server.endpoint, "token": "anon", "project": "bench"}
        open_storage("gs://bench", **options).fs.mkdir("bench")  # type: ignore[attr-defined]
        yield f"gs://bench/{uuid.uuid4().hex}", options
    finally:
        server.stop()


@contextmanager
def azure() -> Iterator[tuple[str, dict[str, Any]]]:
    from tests.support import emulators

    server = emulators.start_azurite()
    try:
        options = {"connection_string": emulators.azurite_connection_string(server.endpoint)}
        open_storage("az://bench", **options).fs.mkdir("bench")  # type: ignore[attr-defined]
        yield f"az://bench/{uuid.uuid4().hex}", options
    finally:
        server.stop()


BACKENDS: dict[str, Callable[[], Any]] = {
    "local files": local,
    "GCS (fake-gcs-server)": gcs,
    "Azure (Azurite)": azure,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--commits", type=int, default=8)
    args = parser.parse_args()
    rows = []
    for name, backend in BACKENDS.items():
        try:
            with backend() as (url, options):
                rows.append(race(name, url, options, args.workers, args.commits))
        except Exception as exc:  # an emulator that is not installed: say so, go on
            rows.append([name, "-", "-", "-", "-", f"skipped: {exc}", "-"])
    print_table(
        f"{args.workers} processes x {args.commits} commits to one branch",
        ["backend", "returned", "in history", "lost", "CAS races lost", "linear+complete", "s"],
        rows,
    )


if __name__ == "__main__":
    main()

"""The floor of a small commit on local disk: its storage steps alone, with no encoding.

    .venv/bin/python bench/bench_commit_floor.py [--commits 300]

A small commit of ``bench_small_commits.py`` (one chunk of `small7`, a session each) is timed
beside its storage skeleton, alternating one of each: the same calls on a storage of the same
kind, from the same threads, with bytes of the sizes that commit wrote (its manifest,
structure file and transaction log, read back). The skeleton: the three objects put on a pool
of the handle's size; beside them, on the calling thread, the state read (a probe for the next
generation, a check of the current one) and the next state file prepared (written and synced
under a temporary name); once the puts are done, the compare-and-swap (a link), the check that
the current generation is still there, and the hint handed to the pool. Per kind: the median
wall time and the process's CPU time.

What the skeleton takes is what this design pays with no Python work at all (each object
synced with its folder, as a commit is durable); what a commit takes beyond it is the work a
faster implementation could cut.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import committed_repository, small_commit
from bench.common import print_table
from icechunk_spark.core.hints import HintWriter
from icechunk_spark.format.keys import HINT_KEY, state_key
from icechunk_spark.storage import Storage, open_storage
from icechunk_spark.storage.spares import TEMP_PREFIX

WARM_UP = 10


def newest(folder: Path) -> bytes:
    """The bytes of the newest object under ``folder`` (a commit's object of that kind; not a
    spare or temporary file)."""
    objects = [p for p in folder.iterdir() if not p.name.startswith(TEMP_PREFIX)]
    return max(objects, key=lambda p: p.stat().st_mtime_ns).read_bytes()


def object_sizes(url: str) -> dict[str, bytes]:
    """The last commit's manifest, structure file, log and state file, read back."""
    root = Path(url.removeprefix("file://"))
    return {prefix: newest(root / prefix) for prefix in ("m", "s", "x", "t")}


class Skeleton:
    """The storage steps of a commit, on a storage and a pool of its own."""

    def __init__(self, objects: dict[str, bytes], workers: int) -> None:
        self.storage: Storage = open_storage(Path(tempfile.mkdtemp(prefix="bench-floor-")).as_uri())
        self.storage.ready_for_writes()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="floor-io")
        self.hints = HintWriter(self.storage, self.pool)
        self.objects = objects
        self.generation = 0
        self.storage.put(state_key(0), objects["t"])

    def commit(self, k: int) -> None:
        storage, objects, g = self.storage, self.objects, self.generation
        puts = [
            self.pool.submit(storage.put, f"{prefix}/{k:020d}", objects[prefix])
            for prefix in ("m", "s", "x")
        ]
        storage.exists(state_key(g + 1))  # the state read: nothing newer,
        storage.exists(state_key(g))  # and ours still there
        storage.prepare_put_if_absent(state_key(g + 1), objects["t"])
        wait(puts)
        for put in puts:
            put.result()
        assert storage.put_if_absent(state_key(g + 1), objects["t"])
        storage.exists(state_key(g))  # GC did not take the generation we replaced
        self.hints.write(g + 1, objects["t"])
        self.generation = g + 1

    def close(self) -> None:
        self.hints.wait(30)
        self.pool.shutdown()
        assert self.storage.exists(HINT_KEY)


def wall_and_cpu(call: Callable[[], object]) -> tuple[float, float]:
    """Seconds of wall time and of the process's CPU time (every thread) for ``call``."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=300)
    args = parser.parse_args()
    url, repo = committed_repository(100_000, "bench-floor-repo-", WARM_UP)
    skeleton = Skeleton(object_sizes(url), repo.handle.config.max_concurrent_writes)
    for k in range(WARM_UP):
        skeleton.commit(-1 - k)
    runs: dict[str, list[tuple[float, float]]] = {"commit": [], "skeleton": []}
    for k in range(args.commits):
        commit = small_commit(repo, WARM_UP + k)
        runs["commit"].append((commit.wall, commit.cpu))
        runs["skeleton"].append(wall_and_cpu(partial(skeleton.commit, k)))
    skeleton.close()

    def median_ms(kind: str, field: int) -> float:
        return statistics.median(run[field] for run in runs[kind]) * 1000

    sizes = ", ".join(f"{p}/ {len(b):,} B" for p, b in skeleton.objects.items())
    print_table(
        f"{args.commits} of each, alternating; objects: {sizes}",
        ["", "wall: median ms", "process CPU: median ms"],
        [
            ["a small commit", median_ms("commit", 0), median_ms("commit", 1)],
            ["its storage steps alone", median_ms("skeleton", 0), median_ms("skeleton", 1)],
        ],
    )


if __name__ == "__main__":
    main()

"""What-if experiments on a small commit: the package as it is beside the same package with
one step changed, commits alternating in one process.

    .venv/bin/python bench/pair_variants.py VARIANT [--commits 250] [--refs 100000]

``pair_small_commits.py`` compares two revisions; this compares the package with itself,
one step altered on side B only, to learn what a step costs before rewriting it: bounds, not
changes to ship (some variants give up durability). The repository is bench_splitting's,
copied for each side; each commit changes one chunk of `small7` in a session of its own,
sides alternating as there (``pair_small_commits.alternate``), so a slow phase of the
machine slows both alike. Printed: each side's median wall, process CPU and calling-thread
CPU per commit, and the median of B/A over the pairs.

Variants (side B):
- ``none``: nothing changed (the harness's own noise).
- ``data-unsynced``: the build's objects (manifest, structure file, transaction log) are
  written without fsync, of the file or its folder.
- ``folders-unsynced``: the build's objects are fsync'ed, written to their folder's spare
  (as ``put`` does), but their folders are not fsync'ed after the rename.
- ``spare-unsynced``: as ``data-unsynced``, but written to their folder's spare as ``put``
  does (``data-unsynced`` creates a file each: the sync alone, not the spare).
- ``state-unsynced``: the state file's temporary copy is not fsync'ed before it is linked
  into place, prepared or not (its folder still is).
- ``busy-start`` / ``busy-end``: 0.5 ms more of the calling thread's CPU at the start of the
  build, or beside its last writes (while reading the state to swap): whether that thread's
  work is what the commit waits for.
- ``yield-after-start``: the calling thread sleeps 0.1 ms right after handing the build's
  objects to the I/O threads (``DeferredPuts.start``), so they take the interpreter's lock
  first: whether their late start (``bench_commit_phases.py``: taken up 0.3-1.1 ms after the
  hand-over) is the lock held by the calling thread's state read.
- ``spin-wait``: the calling thread polls for the build's last writes (``time.sleep(0)``
  between looks) instead of sleeping on them: whether waking an idle virtual CPU (this VM
  halts one at once: ``haltpoll.guest_halt_poll_ns=0``) is what a commit waits for.
- ``inline-objects``: the build's objects are encoded and put one after another on the
  calling thread, then the state is read: no thread hand-offs (which ``taskset -c 0`` showed
  to cost a fifth of a commit's CPU), their fsyncs in sequence.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import CommitTimes, build, small_commit
from bench.common import busy, patched, print_table
from bench.pair_small_commits import WARM_UP, alternate, copy_repository, wall_ratio
from icechunk_spark import Repository
from icechunk_spark.core import commit as commit_module
from icechunk_spark.core import flush, manifest_writes
from icechunk_spark.format.keys import STATE_PREFIX
from icechunk_spark.storage import local

BUSY_S = 0.0005
YIELD_S = 0.0001


def _data_unsynced() -> Any:
    def put(self: local.LocalStorage, key: str, data: bytes) -> None:
        os.replace(self._write_temp(key, data, durable=False), self._path(key))

    return patched(local.LocalStorage, "put", put)


def _folders_unsynced() -> Any:
    def put(self: local.LocalStorage, key: str, data: bytes) -> None:
        os.replace(self._write_temp(key, data, spare=True), self._path(key))

    return patched(local.LocalStorage, "put", put)


def _spare_unsynced() -> Any:
    def put(self: local.LocalStorage, key: str, data: bytes) -> None:
        os.replace(self._write_temp(key, data, durable=False, spare=True), self._path(key))

    return patched(local.LocalStorage, "put", put)


def _state_unsynced() -> Any:
    """State files' temporary copies written without fsync, prepared (the usual path: a
    commit prepares its state file beside its last objects) or not. By key: the objects
    written on the pool meanwhile stay synced."""
    write_temp = local.LocalStorage._write_temp

    def write(
        self: local.LocalStorage, key: str, data: bytes, durable: bool = True, spare: bool = False
    ) -> str:
        durable = durable and not key.startswith(STATE_PREFIX)
        return write_temp(self, key, data, durable=durable, spare=spare)

    return patched(local.LocalStorage, "_write_temp", write)


def _busy_start() -> Any:
    original = flush.current_nodes  # type: ignore[attr-defined]

    def current_nodes(*args: Any) -> Any:
        busy(BUSY_S)
        return original(*args)

    return patched(flush, "current_nodes", current_nodes)


def _busy_end() -> Any:
    original = commit_module.Commit._read_state

    def read_state(self: commit_module.Commit, snapshot_id: str, structure_id: str) -> None:
        busy(BUSY_S)
        original(self, snapshot_id, structure_id)

    return patched(commit_module.Commit, "_read_state", read_state)


def _spin_wait() -> Any:
    def wait(self: manifest_writes.DeferredPuts) -> None:
        self.start()
        with self._lock:
            writes = list(self._writes)
        while not all(write.done() for write in writes):
            time.sleep(0)  # lets the writers take the interpreter's lock, and keeps the CPU
        for write in writes:
            write.result()

    return patched(manifest_writes.DeferredPuts, "wait", wait)


def _yield_after_start() -> Any:
    start = manifest_writes.DeferredPuts.start

    def started(self: manifest_writes.DeferredPuts) -> None:
        handing_over = bool(self._held)
        start(self)
        if handing_over:  # not the second start() in wait(), which hands over nothing
            time.sleep(YIELD_S)

    return patched(manifest_writes.DeferredPuts, "start", started)


def _inline_objects() -> Any:
    """The build's objects encoded and put one after another on the calling thread, before
    its state read: no hand-over to the I/O threads (their fsyncs in sequence)."""

    def start(self: manifest_writes.DeferredPuts) -> None:
        with self._lock:
            held, self._held = self._held, []
        for key, encode in held:
            self._write(key, encode)

    return patched(manifest_writes.DeferredPuts, "start", start)


VARIANTS: dict[str, Callable[[], Any]] = {
    "none": lambda: patched(commit_module, "MAX_REBASES", commit_module.MAX_REBASES),
    "data-unsynced": _data_unsynced,
    "state-unsynced": _state_unsynced,
    "folders-unsynced": _folders_unsynced,
    "spare-unsynced": _spare_unsynced,
    "busy-start": _busy_start,
    "busy-end": _busy_end,
    "spin-wait": _spin_wait,
    "yield-after-start": _yield_after_start,
    "inline-objects": _inline_objects,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--commits", type=int, default=250)
    parser.add_argument("--refs", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-variants-"))
    build((work / "built").as_uri(), args.refs)
    repos = {}
    for side in "AB":
        copy_repository(work / "built", work / side)
        repos[side] = Repository.open((work / side).as_uri())
    os.sync()  # no commit's fsync waits for the copies' writeback

    def commit(side: str, k: int, settle_s: float) -> CommitTimes:
        if side == "A":
            return small_commit(repos["A"], k, settle_s)
        with VARIANTS[args.variant]():
            return small_commit(repos["B"], k, settle_s)

    times = alternate(commit, args.commits, WARM_UP)
    ratio = wall_ratio(times)
    print_table(
        f"{args.commits} small commits a side, B = {args.variant}; B/A wall per pair, median: "
        f"{ratio:.3f}",
        ["side", "wall median ms", "process CPU ms", "calling thread CPU ms"],
        [
            [
                side,
                statistics.median(t.wall for t in times[side]) * 1e3,
                statistics.median(t.cpu for t in times[side]) * 1e3,
                statistics.median(t.thread_cpu for t in times[side]) * 1e3,
            ]
            for side in "AB"
        ],
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

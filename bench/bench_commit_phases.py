"""Where a small commit's wall time goes, phase by phase and object by object.

    .venv/bin/python bench/bench_commit_phases.py [--refs 100000] [--commits 400] [--pause-ms P]

The repository of ``bench_splitting.py``; each commit changes one chunk of `small7` in a
session of its own, as there. Per commit, median over the commits after the first 50:

- the **build**: from the call to the moment its objects (manifest ``m``, structure file
  ``s``, transaction log ``x``) are handed to the I/O threads, with the build's steps
  (``core/flush.py``) timed inside it;
- each **object**: how long after the hand-over an I/O thread took it up, its encoding (wall
  and that thread's CPU) and its put (write, fsync, rename, folder fsync);
- the calling thread's **state read** (and its prepared next state file) beside them, its
  wait for the objects, and what follows (the compare-and-swap, its folder's fsync, the check
  and the landing).

``--pause-ms P``: each commit waits P ms first (after its chunk is set), so the work the last
commit left on the I/O threads (its hint, the spare files of the next writes) is done.

The timers wrap the package's functions (``bench.common.patched``), so each adds a
microsecond or two; the total is printed beside them. For what a change saves, pair it
(``pair_small_commits.py``, ``pair_variants.py``): this script says where to look.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import committed_repository
from bench.common import patched, print_table
from icechunk_spark.core import commit as commit_module
from icechunk_spark.core import flush, manifest_writes

WARM_UP = 50
BUILD_STEPS = (
    "_merge_modified",
    "write_packed_manifests",
    "structure_tables",
    "_chunk_change_tables",
    "plan_manifests",
    "split_arrays",
    "_existing_manifests",
    "current_nodes",
)


class Marks:
    """Times (``perf_counter`` seconds) of one commit, by name."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.spans: dict[str, float] = defaultdict(float)


@contextmanager
def timed_steps(marks: Marks) -> Iterator[None]:
    """The package with timers around the build's steps and the objects' writes."""
    with ExitStack() as stack:
        for name in BUILD_STEPS:
            stack.enter_context(patched(flush, name, _summed(getattr(flush, name), marks, name)))
        stack.enter_context(_timed_start(marks))
        stack.enter_context(_timed_writes(marks))
        stack.enter_context(_timed_state_read(marks))
        yield


def _summed(function: Callable[..., Any], marks: Marks, name: str) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            marks.spans[name] += time.perf_counter() - start

    return timed


def _timed_start(marks: Marks) -> Any:
    start = manifest_writes.DeferredPuts.start

    def started(self: manifest_writes.DeferredPuts) -> None:
        marks.at.setdefault("handed over", time.perf_counter())  # the first start() only
        start(self)

    return patched(manifest_writes.DeferredPuts, "start", started)


def _timed_writes(marks: Marks) -> Any:
    def write(self: manifest_writes.DeferredPuts, key: str, encode: Callable[[], bytes]) -> None:
        kind = key.split("/", 1)[0]
        taken, cpu = time.perf_counter(), time.thread_time()
        data = encode()
        encoded, encode_cpu = time.perf_counter(), time.thread_time() - cpu
        self._storage.put(key, data)
        marks.at[f"{kind} taken up"] = taken
        marks.at[f"{kind} encoded"] = encoded
        marks.at[f"{kind} written"] = time.perf_counter()
        marks.spans[f"{kind} encoding CPU"] = encode_cpu

    return patched(manifest_writes.DeferredPuts, "_write", write)


def _timed_state_read(marks: Marks) -> Any:
    read_state = commit_module.Commit._read_state

    def timed(self: commit_module.Commit, snapshot_id: str, structure_id: str) -> None:
        start = time.perf_counter()
        read_state(self, snapshot_id, structure_id)
        marks.spans["state read and next state file"] = time.perf_counter() - start

    return patched(commit_module.Commit, "_read_state", timed)


def phases(marks: Marks, begun: float, ended: float) -> dict[str, float]:
    """The figures of one commit, in ms."""
    handed = marks.at["handed over"]
    written = max(v for k, v in marks.at.items() if k.endswith(" written"))
    out = {
        "commit (wall)": ended - begun,
        "build, to the objects' hand-over": handed - begun,
        **{f"  {name}": marks.spans[name] for name in BUILD_STEPS},
        "state read and next state file (beside the objects)": marks.spans[
            "state read and next state file"
        ],
        "hand-over to the last object written": written - handed,
    }
    for kind in ("m", "s", "x"):
        if f"{kind} taken up" not in marks.at:
            continue
        taken, encoded = marks.at[f"{kind} taken up"], marks.at[f"{kind} encoded"]
        out[f"  {kind}: taken up after the hand-over"] = taken - handed
        out[f"  {kind}: encoding, wall"] = encoded - taken
        out[f"  {kind}: encoding, its thread's CPU"] = marks.spans[f"{kind} encoding CPU"]
        out[f"  {kind}: put (write, fsync, rename, folder fsync)"] = (
            marks.at[f"{kind} written"] - encoded
        )
    out["after the last object (swap, its fsync, check, landing)"] = ended - written
    return {k: v * 1000 for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--pause-ms", type=float, default=0.0)
    args = parser.parse_args()
    _, repo = committed_repository(args.refs, "bench-phases-", 20)
    figures: dict[str, list[float]] = defaultdict(list)
    marks = Marks()
    with timed_steps(marks):
        for k in range(args.commits):
            session = repo.writable_session()
            session.set_chunk("/small7", (k % 10,), bytes([k % 256]) * 80)
            time.sleep(args.pause_ms / 1000)
            marks.at.clear()
            marks.spans.clear()
            begun = time.perf_counter()
            session.commit(f"small commit {k}")
            ended = time.perf_counter()
            if k >= WARM_UP:
                for name, value in phases(marks, begun, ended).items():
                    figures[name].append(value)
    print_table(
        f"{args.commits - WARM_UP} small commits, one chunk of small7 each (bench_splitting's "
        f"repository, {args.refs:,} refs in its big variable), {args.pause_ms:g} ms apart; "
        "medians",
        ["phase", "ms"],
        [[name, statistics.median(values)] for name, values in figures.items()],
    )


if __name__ == "__main__":
    main()

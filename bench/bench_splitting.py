"""Manifest-splitting benchmarks (issue: manifest splitting).

    .venv/bin/python bench/bench_splitting.py [--refs 10000000]

A repository holding N virtual refs in one big variable (time x cell, one ref per chunk, into
1,000 files with irregular compressed lengths), three coordinate arrays and fifty small arrays,
on local disk, default manifest config. Figures:
- cold open + zarr read of the whole `time` coordinate (``zarr.open_array(store)[:]`` on a
  freshly opened repository, after one zarr read of `lat`): ms, and share of manifest bytes
  read (<= 50 ms, <= 1 %)
- commit changing one chunk of one small array (the chunk set before the timer): ms, manifest
  bytes written vs that array's manifest plus the chunk (80 new bytes, stored inline: the
  manifest is rewritten with them, and written with its old bytes it keeps its size); then
  the median of 20 more such commits, each in a session of its own (a process that keeps
  committing small changes), and the CPU time the process used during each (all threads:
  where the wall time goes on 2 cores)
- append 1,000 refs (one time step) to the big variable: setting the refs (made before the
  timer) + the commit, ms (<= 0.5 s), and the commit's part of it
- total manifest bytes per ref (<= 4)

Icechunk (``icechunk_side.py``, in bench/.venv312) times the same calls: zarr for the read,
``set_virtual_refs_arr`` + commit for the append, the commit alone for the small array.
Both sides ``os.sync()`` after the build, so no timed fsync waits for the build's writeback.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zarr

from bench.common import print_table, timed
from icechunk_spark import Repository
from icechunk_spark.storage import open_storage
from tests.support.counting import CountingStorage

CELLS = 1000
CONTAINER = "file:///data/"


def virtual_refs(steps: int, first_step: int = 0, seed: int = 0) -> dict[str, object]:
    """One ref per (step, cell): files of 10 steps each, irregular lengths, contiguous offsets."""
    n = steps * CELLS
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20_000, 40_000, n).astype(np.uint64)
    step = np.repeat(np.arange(first_step, first_step + steps), CELLS)
    file_no = step // 10
    # Offsets restart at each file: cumulative lengths minus the file's starting total.
    ends = np.cumsum(lengths)
    starts = ends - lengths
    file_start = starts[np.searchsorted(file_no, file_no, side="left")]
    offsets = starts - file_start
    names = pc.binary_join_element_wise(
        pa.scalar(CONTAINER + "run/day-"), pa.array(file_no).cast(pa.string()), pa.scalar(".nc"), ""
    )
    coords = np.stack([step, np.tile(np.arange(CELLS), steps)], axis=1)
    return {"coord": coords, "virtual_path": names, "offset": offsets, "length": lengths}


def build(url: str, refs: int) -> None:
    repo = Repository.create(url, config={"virtual_chunk_containers": {CONTAINER: {}}})
    steps = refs // CELLS
    session = repo.writable_session()
    session.create_group("/")
    for name, size in (("time", steps), ("lat", 180), ("lon", 360)):
        session.create_array(f"/{name}", shape=(size,), chunk_shape=(100,), dtype="float64")
        n = -(-size // 100)
        session.set_chunk_refs(
            f"/{name}", {"coord": np.arange(n).reshape(-1, 1), "inline_data": [b"\0" * 800] * n}
        )
    for i in range(50):
        session.create_array(f"/small{i}", shape=(100,), chunk_shape=(10,), dtype="float64")
        session.set_chunk_refs(
            f"/small{i}", {"coord": np.arange(10).reshape(-1, 1), "inline_data": [b"\1" * 80] * 10}
        )
    session.create_array(
        "/var",
        shape=(steps, CELLS),
        chunk_shape=(1, 1),
        dtype="float32",
        dimension_names=["time", "cell"],
    )
    session.set_chunk_refs("/var", virtual_refs(steps))
    session.commit("datacube")


# Small commits timed after the first, each in a session of its own (a process that keeps
# committing small changes); icechunk_side.py makes as many.
SMALL_COMMITS_AGAIN = 20


@dataclass(frozen=True, slots=True)
class CommitTimes:
    """Seconds of one small commit: wall, CPU of the whole process (every thread), and CPU of
    the calling thread (the part nothing overlaps)."""

    wall: float
    cpu: float
    thread_cpu: float


def small_commit(
    repo: Any,
    k: int,
    settle_s: float = 0.0,
    path: str = "/small7",
    chunks: int = 10,
    pause_s: float = 0.0,
) -> CommitTimes:
    """Commit one changed chunk of `small7` (or of ``path``, ``chunks`` long) in a session of
    its own (the chunk set before the timer); icechunk_side.py times the same. ``settle_s``: a
    pause inside the CPU window but after the wall timer, so work the commit leaves behind (the
    hint) is counted here and not in the next commit's window. ``pause_s``: a pause before the
    timers (the chunk set), so the work the last commit left behind is done. ``repo``: any
    revision's ``Repository`` (pair_small_commits)."""
    session = repo.writable_session()
    session.set_chunk(path, (k % chunks,), bytes([k % 256]) * 80)
    if pause_s:
        time.sleep(pause_s)
    wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    session.commit(f"small commit {k}")
    wall = time.perf_counter() - wall
    own = time.thread_time() - own
    if settle_s:
        time.sleep(settle_s)
    return CommitTimes(wall, time.process_time() - cpu, own)


def committed_repository(refs: int, prefix: str, commits: int) -> tuple[str, Any]:
    """A new ``build`` of ``refs`` refs under a temporary folder named ``prefix``, on disk
    (synced: no commit's fsync waits for its writeback), opened, with ``commits`` small
    commits made (untimed: the process's first ones): its URL and ``Repository``."""
    url = Path(tempfile.mkdtemp(prefix=prefix)).as_uri()
    build(url, refs)
    os.sync()
    repo = Repository.open(url)
    for k in range(commits):
        small_commit(repo, k)
    return url, repo


def warm_up_zarr(store: Any) -> None:
    """One zarr read of `lat`, so the timed read is not zarr's first in this process."""
    zarr.open_array(store, path="lat", mode="r")[:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=10_000_000)
    args = parser.parse_args()
    url = Path(tempfile.mkdtemp(prefix="bench-split-")).as_uri()
    build_s, _ = timed(lambda: build(url, args.refs))
    # The build's tens of MB reach the disk before anything is timed (icechunk_side.py does
    # the same): a commit's fsync would otherwise wait for their writeback.
    os.sync()

    manifests = Repository.open(url).manifests()
    total_bytes = sum(m.bytes for m in manifests)
    total_refs = sum(m.refs for m in manifests)

    # Both sides read `time` through zarr from a freshly opened repository, after one zarr read
    # of `lat` from another (the same warm-up in icechunk_side.py).
    warm_up_zarr(Repository.open(url).readonly_session().store)
    storage = CountingStorage(open_storage(url))
    start = time.perf_counter()
    reader = Repository.open(storage).readonly_session()
    zarr.open_array(reader.store, path="time", mode="r")[:]
    cold_ms = (time.perf_counter() - start) * 1000
    read_share = storage.get_bytes["m"] / total_bytes

    storage = CountingStorage(open_storage(url))
    repo = Repository.open(storage)
    small_manifest = next(m for m in repo.manifests() if "/small7" in m.arrays)
    session = repo.writable_session()
    changed = b"\2" * 80  # inline: stored in the manifest
    session.set_chunk("/small7", (3,), changed)
    small_s, _ = timed(lambda: session.commit("one chunk of one small array"))
    written = sum(i.size for i in storage.list("m/")) - total_bytes
    again = [small_commit(repo, k) for k in range(SMALL_COMMITS_AGAIN)]
    small_again_s = statistics.median(t.wall for t in again)
    small_again_cpu_s = statistics.median(t.cpu for t in again)

    # Both sides time setting the step's refs and the commit; the refs are made before.
    session = repo.writable_session()
    steps = args.refs // CELLS
    node = session.get_node("/var")
    session.set_node_metadata(
        "/var",
        node.zarr_json.replace(f"[{steps}, {CELLS}]".encode(), f"[{steps + 1}, {CELLS}]".encode()),
    )
    step = virtual_refs(1, first_step=steps, seed=1)
    puts_before = storage.puts["m"]
    start = time.perf_counter()
    session.set_chunk_refs("/var", step)
    set_done = time.perf_counter()
    session.commit("append 1,000 refs")
    append_s, append_commit_s = time.perf_counter() - start, time.perf_counter() - set_done

    ic_plain, ic_split = (
        icechunk_figures(args.refs, split=False),
        icechunk_figures(args.refs, split=True),
    )
    print_table(
        f"manifest splitting: {total_refs:,} refs, {len(manifests)} manifests, local disk "
        f"(build {build_s:.1f} s)",
        ["benchmark", "icechunk-spark", "target", "Icechunk", "Icechunk split"],
        [
            [
                "cold open + zarr read of `time`: ms",
                cold_ms,
                "<= 50",
                *_pair(ic_plain, ic_split, "cold_read_time_ms"),
            ],
            ["  manifest bytes read / all manifest bytes %", read_share * 100, "<= 1", "", ""],
            [
                "commit one chunk of one small array: ms",
                small_s * 1000,
                "<= 100",
                *_pair(ic_plain, ic_split, "small_commit_ms"),
            ],
            [
                "  manifest bytes written",
                written,
                f"<= {small_manifest.bytes} + {len(changed)}",
                "",
                "",
            ],
            [
                f"  then {SMALL_COMMITS_AGAIN} more, a session each: median ms",
                small_again_s * 1000,
                "<= 5",
                *_pair(ic_plain, ic_split, "small_commit_again_ms"),
            ],
            [
                "  CPU time of the process during each: median ms",
                small_again_cpu_s * 1000,
                "",
                *_pair(ic_plain, ic_split, "small_commit_again_cpu_ms"),
            ],
            [
                "append 1,000 refs to the big variable, set refs + commit: ms",
                append_s * 1000,
                "<= 500",
                *_pair(ic_plain, ic_split, "append_ms"),
            ],
            [
                "  of which the commit: ms",
                append_commit_s * 1000,
                "",
                *_pair(ic_plain, ic_split, "append_commit_ms"),
            ],
            ["  manifests written by that commit", storage.puts["m"] - puts_before, "", "", ""],
            [
                "total manifest bytes per ref",
                total_bytes / total_refs,
                "<= 4",
                *_pair(ic_plain, ic_split, "bytes_per_ref"),
            ],
        ],
    )


ICECHUNK_PYTHON = Path(__file__).resolve().parent / ".venv312" / "bin" / "python"


def icechunk_figures(refs: int, split: bool) -> dict[str, float] | None:
    """The same scenario in Icechunk, when its venv exists (``make bench`` builds it)."""
    if not ICECHUNK_PYTHON.exists():
        return None
    command = [
        str(ICECHUNK_PYTHON),
        str(Path(__file__).with_name("icechunk_side.py")),
        "--refs",
        str(refs),
    ]
    out = subprocess.run(
        [*command, *(["--split"] if split else [])], capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _pair(plain: dict[str, float] | None, split: dict[str, float] | None, key: str) -> list[object]:
    return [("not installed" if d is None else d[key]) for d in (plain, split)]


if __name__ == "__main__":
    main()

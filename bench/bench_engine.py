"""Repository engine benchmarks (issue: repository engine).

    .venv/bin/python bench/bench_engine.py [--refs 1000000] [--snapshots 1000]

1. Commit of N native chunk refs (one array, refs into c/, no inline data) on local disk:
   seconds for set_chunk_refs + commit, and the process's peak RSS (measured in a fresh
   subprocess so nothing else counts). Target: <= 2.0 s and <= 500 MB for 1,000,000 refs.
2. Open a repository with an H-snapshot history and read one chunk, cold (a new Repository
   each time): median of 20. Target: <= 30 ms for 1,000 snapshots.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import median_seconds, peak_rss_mb, print_table, timed
from icechunk_spark import Repository


def commit_refs(refs: int) -> dict[str, float]:
    """Runs in its own process: build refs, then time set_chunk_refs + commit."""
    root = tempfile.mkdtemp(prefix="bench-engine-")
    repo = Repository.create(Path(root).as_uri())
    side = int(np.ceil(np.sqrt(refs)))
    coords = np.stack(np.unravel_index(np.arange(refs), (side, side)), axis=1)
    # One chunk file per chunk, as zarr writes them: a distinct random id per ref.
    random_ids = pa.array(np.random.default_rng(0).integers(0, 2**62, refs)).cast(pa.string())
    chunk_ids = pc.binary_join_element_wise(pa.scalar("C"), random_ids, "")
    table = {
        "coord": coords,
        "chunk_id": chunk_ids,
        "offset": np.zeros(refs, np.uint64),
        "length": np.full(refs, 4096, np.uint64),
    }
    before = peak_rss_mb()
    session = repo.writable_session()
    session.create_array(
        "/var", shape=(side * 10, side * 10), chunk_shape=(10, 10), dtype="float32"
    )

    def run() -> str:
        session.set_chunk_refs("/var", table)
        return session.commit("a million refs")

    seconds, _ = timed(run)
    manifest_bytes = sum(i.size for i in repo.storage.list("m/"))
    return {
        "seconds": seconds,
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_mb": before,
        "manifest_bytes_per_ref": manifest_bytes / refs,
    }


def open_and_read(snapshots: int) -> tuple[float, float]:
    root = tempfile.mkdtemp(prefix="bench-history-")
    url = Path(root).as_uri()
    repo = Repository.create(url)
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", shape=(100,), chunk_shape=(10,), dtype="float32")
    session.commit("array")
    for i in range(snapshots - 2):
        session = repo.writable_session()
        session.set_chunk("/a", (i % 10,), np.full(10, i, np.float32).tobytes())
        session.commit(f"commit {i}")
    assert len(list(repo.ancestry())) == snapshots

    def cold_read() -> bytes | None:
        return Repository.open(url).readonly_session(branch="main").get_chunk("/a", (3,))

    cold_read()  # warm the OS page cache and Python imports, not our caches
    return median_seconds(cold_read, 20), len(list(repo.ancestry()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--snapshots", type=int, default=1_000)
    parser.add_argument("--child", choices=["commit"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "commit":
        print(json.dumps(commit_refs(args.refs)))
        return
    out = subprocess.run(
        [sys.executable, __file__, "--child", "commit", "--refs", str(args.refs)],
        check=True,
        capture_output=True,
        text=True,
    )
    commit = json.loads(out.stdout)
    read_s, history = open_and_read(args.snapshots)
    print_table(
        "icechunk-spark engine (local disk)",
        ["benchmark", "figure", "target"],
        [
            [f"commit {args.refs:,} native refs: seconds", commit["seconds"], "<= 2.0"],
            [f"commit {args.refs:,} native refs: peak RSS MB", commit["peak_rss_mb"], "<= 500"],
            ["  (RSS before the commit, test data built) MB", commit["rss_before_mb"], ""],
            ["  manifest bytes per ref", commit["manifest_bytes_per_ref"], ""],
            [f"open + read 1 chunk, {history} snapshots: ms", read_s * 1000, "<= 30"],
        ],
    )


if __name__ == "__main__":
    main()

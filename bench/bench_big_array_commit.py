"""A commit changing one chunk of an array of many refs, beside Icechunk.

    .venv/bin/python bench/bench_big_array_commit.py [--refs 1000000] [--commits 10]

One array of ``--refs`` chunks, each a virtual ref (the same refs on both sides), committed
once; then ``--commits`` commits, each in a session of its own, each changing one chunk (set
before the timer). Every such commit rewrites the array's one manifest. Printed: the median
commit, ours with the changed row spliced into the committed refs (``format.merge.splice``)
and, in the same run, ours merging by the general sort (``SPLICE_MAX_ROWS = 0``), beside
Icechunk (``big_array_side.py`` in ``bench/.venv312``, when present).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import ICECHUNK_PYTHON
from bench.common import print_table, run_json
from icechunk_spark import Repository
from icechunk_spark.format import merge

CONTAINER = "file:///data/"  # as big_array_side.py


def build(refs: int) -> Repository:
    url = Path(tempfile.mkdtemp(prefix="bench-big-array-")).as_uri()
    repo = Repository.create(url, config={"virtual_chunk_containers": {CONTAINER: {}}})
    session = repo.writable_session()
    session.create_array("/a", shape=(refs,), chunk_shape=(1,), dtype="float64")
    session.set_chunk_refs(
        "/a",
        {
            "coord": np.arange(refs).reshape(-1, 1),
            "virtual_path": [f"{CONTAINER}f.nc"] * refs,
            "offset": np.arange(refs, dtype=np.uint64) * 8,
            "length": np.full(refs, 8, dtype=np.uint64),
        },
    )
    session.commit(f"{refs:,} refs")
    return repo


def commit_s(repo: Repository, refs: int, k: int, splice: bool) -> float:
    """Seconds of commit ``k``, changing one chunk (spread over the array); ``splice=False``:
    merged by the general sort."""
    session = repo.writable_session()
    session.set_chunk("/a", ((k * 7919 + 1) % refs,), np.float64(k).tobytes())
    splice_max = merge.SPLICE_MAX_ROWS
    merge.SPLICE_MAX_ROWS = splice_max if splice else 0
    try:
        start = time.perf_counter()
        session.commit(f"one chunk {k}")
        return time.perf_counter() - start
    finally:
        merge.SPLICE_MAX_ROWS = splice_max


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    repo = build(args.refs)
    # Alternating, so a slow phase of the machine or a longer history slows both alike.
    times: dict[bool, list[float]] = {True: [], False: []}
    for k in range(2 * args.commits):
        splice = k % 4 in (0, 3)
        times[splice].append(commit_s(repo, args.refs, k, splice))
    spliced, sorted_ms = (statistics.median(times[s]) * 1000 for s in (True, False))
    icechunk = (
        run_json(
            [
                str(ICECHUNK_PYTHON),
                str(Path(__file__).with_name("big_array_side.py")),
                "--refs",
                str(args.refs),
                "--commits",
                str(args.commits),
            ]
        )["commit_ms"]
        if ICECHUNK_PYTHON.exists()
        else "not installed"
    )
    print_table(
        f"one changed chunk of an array of {args.refs:,} refs, local disk: median of "
        f"{args.commits} commits each",
        ["benchmark", "icechunk-spark", "without splicing", "Icechunk"],
        [["commit: ms", spliced, sorted_ms, icechunk]],
    )


if __name__ == "__main__":
    main()

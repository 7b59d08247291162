"""A commit changing one chunk of an array of many refs, beside Icechunk.

    .venv/bin/python bench/bench_big_array_commit.py [--refs 1000000] [--commits 10]

One array of ``--refs`` chunks, each a virtual ref (the same refs on both sides), committed
once; then ``--commits`` commits, each in a session of its own, each changing one chunk (set
before the timer). Every such commit rewrites the manifest of the array's refs that holds the
chunk: below a million refs the array's one packed manifest (``--refs 500000``), from a
million on a piece of a million refs (the default manifest config). Printed: the median
commit, ours, and in the same run ours without each of two steps, each on a repository of
its own, their commits taking turns (a slow phase of the machine slows all alike): without
splicing the changed row into the committed refs (``format.merge.splice``;
``SPLICE_MAX_ROWS = 0``: the general merge sorts every row), and without keeping the
rewritten manifest decoded for the next commit (``split_writes._few_changed``,
``flush._few_changed``). Beside Icechunk (``big_array_side.py`` in ``bench/.venv312``, when
present).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import ICECHUNK_PYTHON
from bench.common import patched, print_table, run_json
from icechunk_spark import Repository
from icechunk_spark.core import flush, split_writes
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


# Each side: a context to commit in.
SIDES: dict[str, Callable[[], Any]] = {
    "icechunk-spark": nullcontext,
    "without splicing": lambda: patched(merge, "SPLICE_MAX_ROWS", 0),
    "without keeping it decoded": lambda: _never_kept(),
}


def _never_kept() -> Any:
    """Neither a split array's piece nor a packed manifest kept decoded for the next commit."""
    stack = ExitStack()
    stack.enter_context(patched(split_writes, "_few_changed", lambda layers: False))
    stack.enter_context(patched(flush, "_few_changed", lambda arrays, changes, ids: False))
    return stack


def commit_s(repo: Repository, refs: int, k: int) -> float:
    """Seconds of commit ``k``, changing one chunk (spread over the array)."""
    session = repo.writable_session()
    session.set_chunk("/a", ((k * 7919 + 1) % refs,), np.float64(k).tobytes())
    start = time.perf_counter()
    session.commit(f"one chunk {k}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    repos = {side: build(args.refs) for side in SIDES}
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    order = list(SIDES)
    for k in range(args.commits):
        for side in order if k % 2 == 0 else order[::-1]:
            with SIDES[side]():
                times[side].append(commit_s(repos[side], args.refs, k))
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
        ["benchmark", *SIDES, "Icechunk"],
        [["commit: ms", *(statistics.median(times[s]) * 1000 for s in SIDES), icechunk]],
    )


if __name__ == "__main__":
    main()

"""One step of a small commit timed three ways: in a loop, alone after a sleep, and alone after
as long spinning: whether a step alone costs more than in a loop, and whether idling is why.

    .venv/bin/python bench/bench_cold_steps.py [--refs 100000] [--calls 300] [--idle-ms 5]

The step is the overlay of the changed chunk on the committed refs (``core/flush.py
_merge_modified``), its arguments taken from a real commit of ``small7`` in
bench_splitting's repository. Each step of a commit costs several times inside a commit what
it costs repeated in a loop (docs/operations.md, "Small commits"), and a commit's threads
sleep and wake about 90 times a commit (bench_small_commits.py). Sleeping lets the CPU go idle
(this VM halts an idle virtual CPU at once), spinning keeps it busy; the two are alternated,
so a slow phase of the machine slows both. Slower after the sleep than after the spin: idling
costs; alike: a step alone is slower than in a loop whatever came before it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import committed_repository, small_commit
from bench.common import busy, patched, print_table, timed
from icechunk_spark import Repository
from icechunk_spark.core import flush


def captured_step(repo: Repository) -> Callable[[], Any]:
    """``_merge_modified`` bound to the arguments of one real small commit's call."""
    merge = flush._merge_modified
    seen: list[tuple[Any, ...]] = []

    def capture(*args: Any) -> Any:
        seen.append(args)
        return merge(*args)

    with patched(flush, "_merge_modified", capture):
        small_commit(repo, 0)
    args = seen[-1]
    return lambda: merge(*args)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--idle-ms", type=float, default=5.0)
    args = parser.parse_args()
    _, repo = committed_repository(args.refs, "bench-cold-", 10)
    step = captured_step(repo)
    idle = args.idle_ms / 1000
    loop, slept, spun = [], [], []
    for _ in range(args.calls):
        loop.append(timed(step)[0])
    for _ in range(args.calls):  # alternating, so a slow phase of the machine slows both
        time.sleep(idle)
        slept.append(timed(step)[0])
        busy(idle)
        spun.append(timed(step)[0])
    in_loop = statistics.median(loop)
    print_table(
        f"the overlay of one changed chunk (core/flush.py _merge_modified), median of "
        f"{args.calls} calls",
        ["called", "us", "x the loop"],
        [
            ["in a loop", in_loop * 1e6, 1.0],
            [
                f"alone, after sleeping {args.idle_ms:g} ms",
                statistics.median(slept) * 1e6,
                statistics.median(slept) / in_loop,
            ],
            [
                f"alone, after spinning {args.idle_ms:g} ms",
                statistics.median(spun) * 1e6,
                statistics.median(spun) / in_loop,
            ],
        ],
    )


if __name__ == "__main__":
    main()

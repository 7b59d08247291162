"""Where a small commit's time goes on local disk: wall time beside CPU time, per commit.

    .venv/bin/python bench/bench_small_commits.py [--refs 100000] [--commits 300] [--history N]
        [--pause-ms P]

The repository of ``bench_splitting.py`` (its big variable at ``--refs`` refs: a small commit
does not touch it), then ``--commits`` commits each changing one chunk of `small7` in a session
of its own, the chunk set before the timer. Per commit: wall time (median and quartiles), CPU
time of the whole process and of the calling thread during the commit, and over the whole run
user and system CPU and context switches (sessions included). On 2 cores, wall time below half
the process's CPU time is out of reach; the calling thread's CPU is the part nothing overlaps.
``--history N`` makes N such commits first, untimed: the state file lists every snapshot, so
its size (printed) and what a commit pays for it grow with history. ``--pause-ms P``: every
other commit waits P ms first (after its chunk is set), and the table gives the median of each
kind: a commit leaves work behind it on the I/O threads (its hint, and the spare files of the
next one's writes, ``storage/spares.py``), which a commit made at once (as bench_splitting.py's
20 are) meets, and one made after a pause does not.

For where the CPU goes, run it under a sampling profiler, e.g.::

    perf record -e cpu-clock -F 2000 -o /tmp/perf.data -- \\
        .venv/bin/python bench/bench_small_commits.py
    perf report -i /tmp/perf.data --sort dso --stdio
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import CommitTimes, committed_repository, small_commit
from bench.common import print_table

WARM_UP = 10


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return q1 * 1000, median * 1000, q3 * 1000


def newest_state(url: str) -> tuple[int, float]:
    """How many snapshots the newest state file lists, and its size in KB."""
    data = sorted((Path(url.removeprefix("file://")) / "t").iterdir())[-1].read_bytes()
    return len(json.loads(data)["snapshots"]), len(data) / 1000


def median_ms(runs: list[CommitTimes], field: str) -> float:
    return float(statistics.median(getattr(r, field) for r in runs)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--history", type=int, default=0)
    parser.add_argument("--pause-ms", type=float, default=0.0)
    args = parser.parse_args()
    url, repo = committed_repository(args.refs, "bench-small-", WARM_UP + args.history)
    pause = args.pause_ms / 1000
    before = resource.getrusage(resource.RUSAGE_SELF)
    runs = [small_commit(repo, k, pause_s=pause * (k % 2)) for k in range(args.commits)]
    after = resource.getrusage(resource.RUSAGE_SELF)
    n: int = args.commits
    pause_rows = []
    if pause:
        pause_rows = [
            ["commits made at once: median ms", median_ms(runs[0::2], "wall")],
            [f"commits made after {args.pause_ms:g} ms: median ms", median_ms(runs[1::2], "wall")],
        ]

    def per_commit(field: str) -> float:
        return float(getattr(after, field) - getattr(before, field)) / n

    wall = quartiles([r.wall for r in runs])
    snapshots, state_kb = newest_state(url)
    print_table(
        f"{n} small commits, a session each, local disk (bench_splitting's repository, "
        f"{args.refs:,} refs in its big variable; the state file at the end: "
        f"{snapshots:,} snapshots, {state_kb:,.0f} KB)",
        ["figure", "value"],
        [
            ["wall time of a commit: median ms", wall[1]],
            ["  quartiles ms", f"{wall[0]:.2f} - {wall[2]:.2f}"],
            [
                "CPU time of the process during a commit: median ms",
                quartiles([r.cpu for r in runs])[1],
            ],
            ["  of which the calling thread: median ms", median_ms(runs, "thread_cpu")],
            [
                "wall time, first tenth of the commits: median ms",
                median_ms(runs[: n // 10], "wall"),
            ],
            [
                "  last tenth (a longer history in the state file)",
                median_ms(runs[-n // 10 :], "wall"),
            ],
            ["whole run per commit, sessions included: user CPU ms", per_commit("ru_utime") * 1000],
            ["  system CPU ms", per_commit("ru_stime") * 1000],
            ["  voluntary context switches", per_commit("ru_nvcsw")],
            ["  involuntary context switches", per_commit("ru_nivcsw")],
            *pause_rows,
        ],
    )


if __name__ == "__main__":
    main()

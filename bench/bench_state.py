"""Reading and writing the state file as history grows (issue 30, item 6: rebase cost that
grows with history).

    .venv/bin/python bench/bench_state.py [--snapshots 100 1000 10000]

Every commit attempt decodes the latest state (it lists every snapshot) and encodes the next
one. For states of N snapshots (messages, metadata and once-marks as commits write them):
decoding and encoding a state whose snapshots were never seen (a fresh process), and the
next state (one snapshot more, the rest unchanged: what a commit after a commit pays, where
``format.state_text`` parses only the new entry and ``format.snapshot_memo`` reuses the
unchanged ones' text). Medians of 20 runs, ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import icechunk_spark.format.state as state_format
from bench.common import print_table
from icechunk_spark.format import SnapshotInfo, State, decode_state, encode_state
from icechunk_spark.format.snapshot_memo import SnapshotMemo


def history(n: int) -> dict[str, SnapshotInfo]:
    out: dict[str, SnapshotInfo] = {}
    parent = None
    for i in range(n):
        sid = f"{i:016X}"
        out[sid] = SnapshotInfo(
            sid,
            parent,
            1_700_000_000_000 + i,
            f"{i:032X}",
            message=f"append day {i}",
            metadata={"job": "ingest", "run": i},
            once_marks=({"query": "ingest", "batch": i},),
        )
        parent = sid
    return out


def median_ms(timed: Callable[[], None], prepare: Callable[[], None], repeat: int = 20) -> float:
    """The median of ``timed``'s wall time, ``prepare`` run (untimed) before each run."""
    times = []
    for _ in range(repeat):
        prepare()
        start = time.perf_counter()
        timed()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1000


def forget() -> None:
    """A fresh process: no snapshot decoded or encoded yet."""
    state_format._MEMO = SnapshotMemo()
    state_format._LAST_TEXT = None


def measure(n: int) -> list[object]:
    snapshots = history(n)
    state = State("R", n, "file:///repo", snapshots, {}, change_id="c")
    following = state.next(
        snapshots={**snapshots, "NEXT": SnapshotInfo("NEXT", f"{n - 1:016X}", 1, "F")}
    )
    data, next_data = encode_state(state), encode_state(following)
    assert decode_state(data, "t/check") == state
    return [
        f"{n:,}",
        f"{len(data) / 1e6:.2f}",
        median_ms(lambda: state_format._decode_state(data, "t/1"), forget),
        median_ms(
            lambda: state_format._decode_state(next_data, "t/2"),
            lambda: state_format._decode_state(data, "t/1"),
        ),
        median_ms(lambda: encode_state(state), forget),
        median_ms(lambda: encode_state(following), lambda: encode_state(state)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, nargs="+", default=[100, 1000, 10000])
    args = parser.parse_args()
    print_table(
        "the state file: decode and encode, ms (medians of 20)",
        ["snapshots", "MB", "decode fresh", "decode next", "encode fresh", "encode next"],
        [measure(n) for n in args.snapshots],
    )


if __name__ == "__main__":
    main()

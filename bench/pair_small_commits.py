"""Two revisions of the package, the same small commits, paired in one process.

    .venv/bin/python bench/pair_small_commits.py REV_A REV_B [--commits 200] [--refs 100000] \
        [--history N] [--arrays N] [--churn N]

This machine's speed changes by up to 2.5x over tens of minutes, so two runs minutes apart
differ by more than most changes do. Here both revisions run side by side instead: each
revision's ``icechunk_spark`` (``git archive``) is imported under a name of its own, each
opens its own copy of bench_splitting's repository, and their small commits (one chunk of
`small7`, a session each, the chunk set before the timer) alternate, A B B A A B..., so a
slow phase slows both alike. Printed: each side's wall time (median, quartiles) and process
CPU time per commit (all threads, tails of the other side's commit included alike), and the
median of B/A over the pairs. ``--history N``: N more untimed commits a side first (the state
file lists every snapshot, so its cost grows with history). ``--arrays N``: instead, a
repository of N arrays of one chunk each (bench_many_arrays.py's, made through our API), all
sharing one manifest, and each commit changes the chunk of one of them (every array gets a
new manifest ref, as in icechunk#2348's case). ``--churn N``: before the timed commits,
N empty files are created beside the repositories and deleted, as a test suite or another
benchmark deletes its temporary folders: on ext4 without a journal (this machine's root),
every file created in the next minutes is allocated past those freed inodes one by one
(``storage/spares.py``).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import CommitTimes, build, small_commit
from bench.common import print_table
from bench.many_arrays_side import create_arrays_natively

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 10
SETTLE_S = 0.004  # the hint a commit writes behind it lands before the next side's timer


def import_revision(rev: str, name: str, into: Path) -> ModuleType:
    """``icechunk_spark`` as of ``rev``, importable as ``name`` (its imports are relative)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "icechunk_spark"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into / "src", filter="data")
    shutil.move(into / "src" / "icechunk_spark", into / name)
    sys.path.insert(0, str(into))
    return importlib.import_module(name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=0)
    parser.add_argument("--arrays", type=int, default=0)
    parser.add_argument("--churn", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pair-"))
    modules = {
        "A": import_revision(args.rev_a, "ics_rev_a", work / "a"),
        "B": import_revision(args.rev_b, "ics_rev_b", work / "b"),
    }
    if args.arrays:
        build_many((work / "built").as_uri(), args.arrays)
        commit = touch_one
    else:
        build((work / "built").as_uri(), args.refs)
        commit = small_commit
    repos = {}
    for side, module in modules.items():
        copy_repository(work / "built", work / f"repo-{side}")
        repos[side] = module.Repository.open((work / f"repo-{side}").as_uri())
    os.sync()  # no commit's fsync waits for the copies' writeback
    churn(work / "churn", args.churn)

    def commit_and_settle(side: str, k: int, settle_s: float) -> CommitTimes:
        times = commit(repos[side], k, settle_s)
        # What a commit leaves behind it (the hint, and from e4c4c89 on the spare files of
        # the next writes) ends before the other side's timer starts.
        repos[side].handle.hints.wait(30)
        return times

    runs = alternate(commit_and_settle, args.commits, WARM_UP + args.history)

    rows = []
    for side, rev in (("A", args.rev_a), ("B", args.rev_b)):
        q1, median, q3 = statistics.quantiles([t.wall for t in runs[side]], n=4)
        cpu = statistics.median(t.cpu for t in runs[side])
        rows.append(
            [f"{side}: {rev}", median * 1000, f"{q1 * 1000:.2f} - {q3 * 1000:.2f}", cpu * 1000]
        )
    repository = (
        f"{args.arrays:,} arrays of one chunk sharing a manifest, one changed a commit"
        if args.arrays
        else f"bench_splitting's repository, {args.refs:,} refs in its big variable"
    )
    if args.churn:
        repository += f"; {args.churn:,} files created and deleted beside it before"
    print_table(
        f"{args.commits} small commits per side, alternating in one process "
        f"({repository}, {WARM_UP + args.history:,} commits before); "
        f"B/A wall time per pair, median: {wall_ratio(runs):.3f}",
        ["revision", "wall median ms", "quartiles ms", "process CPU median ms"],
        rows,
    )
    shutil.rmtree(work, ignore_errors=True)


def copy_repository(built: Path, to: Path) -> None:
    """A copy of the repository at ``built`` for one side, without the temporary files of
    the hint its last commit may still be writing."""
    shutil.copytree(built, to, ignore=shutil.ignore_patterns(".tmp-*"))


def churn(folder: Path, files: int) -> None:
    """Create ``files`` empty files in ``folder``, then delete them all (``--churn``)."""
    if not files:
        return
    folder.mkdir()
    for i in range(files):
        (folder / str(i)).touch()
    shutil.rmtree(folder)


def alternate(
    commit: Callable[[str, int, float], CommitTimes], commits: int, warm_up: int
) -> dict[str, list[CommitTimes]]:
    """``commit(side, k, settle_s)`` on sides "A" and "B": ``warm_up`` untimed commits a side,
    then ``commits`` a side in the order BA AB AB BA ..., so a slow phase of the machine slows
    both alike. Returns each side's times, pair by pair."""
    for k in range(warm_up):
        for side in "AB":
            commit(side, k, 0.0)
    runs: dict[str, list[CommitTimes]] = {"A": [], "B": []}
    for k in range(commits):
        for side in "AB" if (k // 2 + k) % 2 else "BA":
            runs[side].append(commit(side, k, SETTLE_S))
    return runs


def wall_ratio(runs: dict[str, list[CommitTimes]]) -> float:
    """The median of B's wall time over A's, pair by pair."""
    return statistics.median(b.wall / a.wall for a, b in zip(runs["A"], runs["B"], strict=True))


def build_many(url: str, arrays: int) -> None:
    """A repository of ``arrays`` one-chunk arrays in one commit (bench_many_arrays.py's)."""
    from icechunk_spark import Repository

    session = Repository.create(url).writable_session()
    create_arrays_natively(session, arrays)
    session.commit(f"{arrays} arrays")


def touch_one(repo: Any, k: int, settle_s: float = 0.0) -> CommitTimes:
    """``small_commit`` for ``build_many``'s repository: the one chunk of ``/g000/a001``."""
    return small_commit(repo, k, settle_s, path="/g000/a001", chunks=1)


if __name__ == "__main__":
    main()

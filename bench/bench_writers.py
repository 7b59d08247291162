"""Dozens of writers on one branch (icechunk#1012, #1205: 100 writers took up to 20 s, some stuck
in rebase loops): N processes x M commits, each to its own chunks of one array; beside
Icechunk in the same run, on local disk or (``--s3``) on moto's S3 server on 127.0.0.1.

    .venv/bin/python bench/bench_writers.py [--writers 32] [--commits 4] [--s3] [--cold-start]

Every process opens the repository, warms up, says it is ready, and starts when all are (a
file the orchestrator creates); it prints its figures when done and stays alive until every
writer has: a process exiting (its interpreter's teardown) takes CPU from the commits still
running, and with exits in the window our last 30 landings took 3x as long as the rest. The
warm-up is the same on both sides: a zarr read and one commit to a branch of the writer's own,
so the timed commits are those of long-lived writers (Dask or Spark workers), not 32 fresh
processes importing their write path at once on few cores; ``--cold-start`` warms up by the
read only, as a fleet of fresh processes would start.
The table: commits that landed, writers that gave up, time from the start to the last
landing, commit latency p50/p99 (a new session, one chunk written, the commit with its
rebases), the p99 of each writer's commits after its first ("warm"), the share of commits
that rebased, and whether the final array holds every writer's chunks. Icechunk runs in
bench/.venv312 (`make bench`), committing with ``rebase_with=ConflictDetector()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.support.ports import server_port  # noqa: E402

SIDE = HERE / "writers_side.py"
ICECHUNK_PYTHON = HERE / ".venv312" / "bin" / "python"
CREATE = """
import sys, zarr
sys.path.insert(0, sys.argv[4])
from writers_side import open_repo
system, location, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
repo = open_repo(system, location, create=True)
session = repo.writable_session("main")
zarr.create_array(session.store, name="w", shape=(size,), chunks=(10,), dtype="int32")
session.commit("the array")
"""
READ = """
import json, sys, zarr
sys.path.insert(0, sys.argv[3])
from writers_side import open_repo
system, location = sys.argv[1], sys.argv[2]
repo = open_repo(system, location)
history = [s.id for s in repo.ancestry(branch="main")]
values = zarr.open_array(repo.readonly_session(branch="main").store, path="w", mode="r")[:]
print(json.dumps({"history": history, "values": values.tolist()}))
"""


def _figures(system: str, line: str) -> Any:
    if not line:
        raise SystemExit(f"{system}: a writer died without printing its figures")
    return json.loads(line)


def run_system(
    python: Path | str, system: str, writers: int, commits: int, s3: bool, cold: bool
) -> list[Any]:
    scratch = tempfile.mkdtemp(prefix=f"bench-writers-{system}-")
    location = f"s3://bench/writers-{system}-{uuid.uuid4().hex[:8]}" if s3 else scratch
    size = writers * commits * 10
    subprocess.run([str(python), "-c", CREATE, system, location, str(size), str(HERE)], check=True)
    go = Path(scratch + ".go")
    procs = [
        subprocess.Popen(
            [
                str(python),
                str(SIDE),
                "--system",
                system,
                "--location",
                location,
                "--worker",
                str(w),
                "--commits",
                str(commits),
                "--go",
                str(go),
                *(["--cold-start"] if cold else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for w in range(writers)
    ]
    while len(list(go.parent.glob(go.name + ".ready-*"))) < writers:
        if any(p.poll() not in (None, 0) for p in procs):
            for p in procs:  # the others would wait for the start signal forever
                p.kill()
            raise SystemExit(f"{system}: a writer failed to start")
        time.sleep(0.05)
    start = time.time()
    go.touch()
    # Each writer prints its figures and stays alive until all have: a process exiting (its
    # interpreter's teardown, ~0.1 s of CPU) would compete with the commits still running.
    results = [_figures(system, p.stdout.readline() if p.stdout else "") for p in procs]
    Path(f"{go}.done").touch()
    for p in procs:
        p.wait()
    if os.environ.get("BENCH_WRITERS_DUMP"):  # every writer's raw figures, for a closer look
        Path(os.environ["BENCH_WRITERS_DUMP"]).write_text(json.dumps(results))
    landed_at = [t for r in results for t in r["landed_at"]]
    seconds = max(landed_at) - start if landed_at else float("nan")
    read = subprocess.run(
        [str(python), "-c", READ, system, location, str(HERE)],
        capture_output=True,
        text=True,
        check=True,
    )
    final = json.loads(read.stdout)
    ids = [i for r in results for i in r["ids"]]
    in_history = set(final["history"])
    latencies = np.array([t for r in results for t in r["latency_s"]])
    warm = np.array([t for r in results for t in r["latency_s"][1:]])  # each writer's later
    rebased = [b for r in results for b in r["rebased"]]
    expected = np.repeat(np.arange(1, writers * commits + 1), 10).tolist()
    return [
        system,
        f"{writers} x {commits}",
        sum(1 for i in ids if i in in_history),
        sum(1 for r in results if r["gave_up"]),
        seconds,
        float(np.percentile(latencies, 50)) if len(latencies) else float("nan"),
        float(np.percentile(latencies, 99)) if len(latencies) else float("nan"),
        float(np.percentile(warm, 99)) if len(warm) else float("nan"),
        f"{sum(rebased)}/{len(rebased)}",
        final["values"] == expected,
        sorted({r["gave_up"] for r in results if r["gave_up"]}),
    ]


@contextlib.contextmanager
def s3_server() -> Iterator[None]:
    """moto's S3 server with a ``bench`` bucket; writers find it in BENCH_S3_ENDPOINT."""
    port = server_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "tests.support.moto_server", str(port)],
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    )
    assert moto.stdout is not None and moto.stdout.readline().strip() == b"ready"
    endpoint = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT")).close()
    os.environ["BENCH_S3_ENDPOINT"] = endpoint  # the writer processes inherit it
    try:
        yield
    finally:
        moto.terminate()
        moto.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--commits", type=int, default=4)
    parser.add_argument("--ours-only", action="store_true")
    parser.add_argument("--s3", action="store_true", help="on moto's S3 server on 127.0.0.1")
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="writers warm up by a read only: their first timed commit imports the write path",
    )
    args = parser.parse_args()
    shape = (args.writers, args.commits, args.s3, args.cold_start)
    with s3_server() if args.s3 else contextlib.nullcontext():
        rows = [run_system(sys.executable, "ours", *shape)]
        if ICECHUNK_PYTHON.exists() and not args.ours_only:
            rows.append(run_system(ICECHUNK_PYTHON, "icechunk", *shape))
    header = [
        "system",
        "writers",
        "landed",
        "gave up",
        "to last s",
        "p50 s",
        "p99 s",
        "warm p99 s",
        "rebased",
        "all chunks",
    ]
    where = "S3 (moto on 127.0.0.1, one request at a time)" if args.s3 else "local disk"
    start = "cold start (warmed by a read only)" if args.cold_start else "warm processes"
    print(f"\n{args.writers} writers x {args.commits} commits to one branch, {where}, {start}")
    print("  ".join(f"{h:>10}" for h in header))
    for row in rows:
        cells = row[:-1]
        print("  ".join(f"{v:>10.3f}" if isinstance(v, float) else f"{v!s:>10}" for v in cells))
    for row in rows:
        for reason in row[-1]:
            print(f"{row[0]}: a writer gave up: {reason}")


if __name__ == "__main__":
    main()

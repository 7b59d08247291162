"""Storage requests of a small commit on S3, ours beside Icechunk's (issue 30, item 7).

    .venv/bin/python bench/bench_commit_requests.py [--commits 10]

moto's S3 server on 127.0.0.1 behind a recording proxy (``request_log.py``, a process of its
own); each side (``commit_requests_side.py``, Icechunk's in bench/.venv312) builds 50 small
arrays, then commits one changed chunk of one array ``--commits`` times. Per commit: the
requests the commit sent, the longest chain of them sent one after another (each round trip
adds its latency on real object storage, where one takes 10-50 ms; moto on loopback takes
about 1 ms, so the milliseconds here are mostly each side's own work), and the time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_writers import s3_server
from bench.common import print_table
from bench.request_log import sequential_rounds
from tests.support.ports import server_port

HERE = Path(__file__).resolve().parent
ICECHUNK_PYTHON = HERE / ".venv312" / "bin" / "python"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "PATH": "/usr/bin"}


def start(command: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        command, cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready", command
    return proc


def side(python: Path, system: str, endpoint: str, commits: int) -> list[dict[str, Any]]:
    command = [str(python), str(HERE / "commit_requests_side.py"), "--system", system]
    command += ["--endpoint", endpoint, "--prefix", f"{system}-{uuid.uuid4().hex[:8]}"]
    out = subprocess.run(
        [*command, "--commits", str(commits)], capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def row(name: str, figures: list[dict[str, Any]]) -> list[object]:
    methods: Counter[str] = Counter()
    for f in figures:
        methods.update(r["method"] for r in f["log"])
    per_commit = ", ".join(f"{m} {n / len(figures):g}" for m, n in sorted(methods.items()))
    return [
        name,
        statistics.median(f["seconds"] * 1000 for f in figures),
        statistics.median(len(f["log"]) for f in figures),
        statistics.median(sequential_rounds(f["log"]) for f in figures),
        per_commit,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    proxy_port = server_port()
    with s3_server():  # moto with a ``bench`` bucket, in BENCH_S3_ENDPOINT
        moto = os.environ["BENCH_S3_ENDPOINT"]
        proxy = start([sys.executable, str(HERE / "request_log.py"), str(proxy_port), moto])
        try:
            endpoint = f"http://127.0.0.1:{proxy_port}"
            ours = side(Path(sys.executable), "ours", endpoint, args.commits)
            rows = [row("icechunk-spark", ours)]
            if ICECHUNK_PYTHON.exists():
                theirs = side(ICECHUNK_PYTHON, "icechunk", endpoint, args.commits)
                rows.append(row("Icechunk 2.3", theirs))
            else:
                rows.append(
                    ["Icechunk", "not installed (make bench/.venv312/bin/python)", "", "", ""]
                )
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
    print_table(
        f"a small commit on S3 (moto on 127.0.0.1, through a recording proxy), "
        f"median of {args.commits}",
        ["system", "commit ms", "requests", "in sequence", "requests by method, per commit"],
        rows,
    )


if __name__ == "__main__":
    main()

"""One side of bench_commit_requests.py: small commits on S3 through the recording proxy.

    python bench/commit_requests_side.py --system ours|icechunk --endpoint URL --prefix P

Runs with either system's interpreter (Icechunk's needs bench/.venv312). Builds the same
repository on both sides (50 small float64 arrays of 10 chunks, written through zarr, one
commit), makes one warm-up commit, then ``--commits`` timed ones: each writes one chunk of
one array through zarr, clears the proxy's log, commits, and reads the log back. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from typing import Any

import numpy as np
import zarr
from writers_side import BUCKET, open_repo  # the same opening for both systems


def proxy_log(endpoint: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{endpoint}/__log__") as response:
        return list(json.loads(response.read()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["ours", "icechunk"], required=True)
    parser.add_argument("--endpoint", required=True, help="the recording proxy")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    os.environ["BENCH_S3_ENDPOINT"] = args.endpoint  # the proxy, in front of moto
    repo = open_repo(args.system, f"s3://{BUCKET}/{args.prefix}", create=True)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w")
    for i in range(50):
        array = root.create_array(f"small{i}", shape=(100,), chunks=(10,), dtype="float64")
        array[:] = np.arange(100.0) + i
    session.commit("fifty small arrays")
    figures = []
    for n in range(args.commits + 1):  # the first is a warm-up
        session = repo.writable_session("main")
        zarr.open_array(session.store, path="small7", mode="r+")[30:40] = float(n)
        proxy_log(args.endpoint)  # clears what the write itself sent
        start = time.perf_counter()
        session.commit(f"one chunk, {n}")
        seconds = time.perf_counter() - start
        figures.append({"seconds": seconds, "log": proxy_log(args.endpoint)})
    print(json.dumps(figures[1:]))


if __name__ == "__main__":
    main()

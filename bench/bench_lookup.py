"""Cold lookup of one chunk ref (issue 12, item 6: <= 20 ms for a 1 M-ref array, local disk).

    .venv/bin/python bench/bench_lookup.py [--refs 1000000] [--runs 15]

One array of N virtual refs in the default manifest config (so one manifest of up to 1 M
refs), refs made as bench_virtual.py makes them (100 files, random lengths of 20-40 kB).
Every run is a fresh Python process (nothing cached but the OS page cache): it imports the
package (timed apart: a long-lived process pays it once), then times ``Repository.open`` +
``readonly_session`` and ``get_chunk_ref`` of one random coord. Median of R runs, with min and
max. Rows:

- today's layout (row groups of 16 Ki rows): the lookup decodes one row group;
- the layout before (256 Ki-row groups), read by today's code: what an old manifest costs;
- today's layout, whole manifest decoded first: the code path lookups took before.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from icechunk_spark import Repository
t1 = time.perf_counter()
url, mode, coord = sys.argv[1], sys.argv[2], tuple(json.loads(sys.argv[3]))
repo = Repository.open(url)
session = repo.readonly_session()
t2 = time.perf_counter()
if mode == "whole":  # what every lookup did before: decode the manifest, index it, search
    for node in session.list_nodes():
        for m in node.manifests:
            repo.manifest_cache.get(m.manifest_id)
ref = session.get_chunk_ref("/var", coord)
t3 = time.perf_counter()
assert ref is not None and ref.kind == "virtual", ref
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "lookup": t3 - t2, "total": t3 - t1}))
"""


def build(root: Path, refs: int, row_group_size: int | None) -> str:
    """A repository holding one array of ``refs`` virtual refs; returns its URL."""
    import pyarrow as pa

    from bench.bench_virtual import CELLS, CONTAINER, virtual_refs
    from icechunk_spark import Repository
    from icechunk_spark.format import manifest as manifest_format

    saved = manifest_format.ROW_GROUP_SIZE
    if row_group_size is not None:
        manifest_format.ROW_GROUP_SIZE = row_group_size
    try:
        repo = Repository.create(
            root.as_uri(), config={"virtual_chunk_containers": {CONTAINER: {}}}
        )
        coords, urls, offsets, lengths = virtual_refs(refs)
        session = repo.writable_session()
        session.create_group("/")
        session.create_array("/var", (refs // CELLS, CELLS), (1, 1), "float32")
        session.set_chunk_refs(
            "/var",
            {"coord": coords, "virtual_path": pa.array(urls), "offset": offsets, "length": lengths},
        )
        session.commit("refs")
    finally:
        manifest_format.ROW_GROUP_SIZE = saved
    return root.as_uri()


def cold_runs(url: str, mode: str, runs: int, refs: int) -> list[dict[str, float]]:
    from bench.bench_virtual import CELLS

    rng = random.Random(0)
    results = []
    for _ in range(runs):
        coord = [rng.randrange(refs // CELLS), rng.randrange(CELLS)]
        out = subprocess.run(
            [sys.executable, "-c", CHILD, url, mode, json.dumps(coord)],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def summary(results: list[dict[str, float]], key: str) -> str:
    values = [r[key] * 1000 for r in results]
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    from bench.common import print_table

    root = Path(tempfile.mkdtemp(prefix="bench-lookup-"))
    try:
        start = time.perf_counter()
        today = build(root / "today", args.refs, None)
        before = build(root / "before", args.refs, 256 * 1024)
        built_s = time.perf_counter() - start
        rows: list[list[Any]] = []
        for label, url, mode in (
            ("16 Ki-row groups (today): one row group", today, "point"),
            ("256 Ki-row groups (old manifest): one row group", before, "point"),
            ("16 Ki-row groups, whole manifest decoded (before)", today, "whole"),
        ):
            results = cold_runs(url, mode, args.runs, args.refs)
            manifest = sum(p.stat().st_size for p in Path(url[7:], "m").iterdir())
            rows.append(
                [
                    label,
                    f"{manifest / args.refs:.2f}",
                    summary(results, "import"),
                    summary(results, "open"),
                    summary(results, "lookup"),
                    summary(results, "total"),
                ]
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"(built both repositories in {built_s:.1f} s)")
    print_table(
        f"Cold lookup of one ref, {args.refs:,} virtual refs in one array, local disk, "
        f"fresh process per run, median (min-max) of {args.runs} runs, ms",
        ["manifest layout / read path", "B/ref", "import", "open+session", "lookup", "total"],
        rows,
    )
    print("total = open+session+lookup (the target: <= 20 ms); import is paid once per process")


if __name__ == "__main__":
    main()

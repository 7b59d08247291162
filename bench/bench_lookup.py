"""Cold lookup of one chunk ref (issue 12, item 6: <= 20 ms for a 1 M-ref array, local disk).

    .venv/bin/python bench/bench_lookup.py [--refs 1000000] [--runs 15] [--pieces 1000]

One array of N virtual refs in the default manifest config (so one manifest of up to 1 M
refs), refs made as bench_virtual.py makes them (100 files, random lengths of 20-40 kB).
Every run is a fresh Python process (nothing cached but the OS page cache): it imports the
package (timed apart: a long-lived process pays it once), then times ``Repository.open`` +
``readonly_session`` and ``get_chunk_ref`` of one random coord. Median of R runs, with min and
max. Rows:

- today's layout (row groups of 16 Ki rows): the lookup decodes one row group;
- the layout before (256 Ki-row groups), read by today's code: what an old manifest costs;
- today's layout, whole manifest decoded first: the code path lookups took before;
- today's layout split into ``--pieces`` manifests (1,000: what the 1 B-ref run makes), so
  opening the snapshot decodes that many manifest refs from the structure file.

Then the same cold read through zarr on both sides (issue 12, item 7): one element of a
(1000 x 1000)-chunk float32 array of 4-byte virtual chunks in 100 real local files,
``zarr.open_array(session.store, path="var", mode="r")[i, j]`` after open + session, here and
in Icechunk (pinned ``ICECHUNK_VERSION``, run in ``bench/.venv312``; unsplit, and split into
10 manifests along the first axis); imports (zarr's included) timed apart.
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
            repo.handle.manifest_cache.get(m.manifest_id)
ref = session.get_chunk_ref("/var", coord)
t3 = time.perf_counter()
assert ref is not None and ref.kind == "virtual", ref
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "lookup": t3 - t2, "total": t3 - t1}))
"""


ICECHUNK_VERSION = "2.3.0"  # what `make bench` installs into bench/.venv312
ICECHUNK_PYTHON = Path(__file__).resolve().parent / ".venv312" / "bin" / "python"
STEPS = CELLS_Z = 1000  # the zarr comparison's chunk grid
PER_FILE_Z = 10_000

ZARR_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import zarr
side, url, container, coord = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if side == "ours":
    from icechunk_spark import Repository
else:
    import icechunk as ic
t1 = time.perf_counter()
if side == "ours":
    session = Repository.open(url, authorize_virtual=[container]).readonly_session()
else:
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(container, ic.local_filesystem_store(container[7:])))
    repo = ic.Repository.open(ic.local_filesystem_storage(url), config,
                              authorize_virtual_chunk_access={container: None})
    session = repo.readonly_session("main")
t2 = time.perf_counter()
value = zarr.open_array(session.store, path="var", mode="r")[coord[0], coord[1]]
t3 = time.perf_counter()
assert value == coord[0] * 1000 + coord[1], value
version = "" if side == "ours" else ic.__version__
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "lookup": t3 - t2, "total": t3 - t1,
                  "version": version}))
"""

ICECHUNK_BUILD = """
import sys
import numpy as np, icechunk as ic, zarr
path, container, split = sys.argv[1], sys.argv[2], sys.argv[3] == "split"
steps, cells, per_file = 1000, 1000, 10000
config = ic.RepositoryConfig.default()
config.set_virtual_chunk_container(
    ic.VirtualChunkContainer(container, ic.local_filesystem_store(container[7:])))
if split:
    by_step = {ic.ManifestSplitDimCondition.Axis(0): 100}
    config.manifest = ic.ManifestConfig(splitting=ic.ManifestSplittingConfig.from_dict(
        {ic.ManifestSplitCondition.path_matches(".*var"): by_step}))
repo = ic.Repository.create(ic.local_filesystem_storage(path), config,
                            authorize_virtual_chunk_access={container: None})
session = repo.writable_session("main")
root = zarr.group(session.store)
root.create_array("var", shape=(steps, cells), chunks=(1, 1), dtype="<f4", compressors=None,
                  fill_value=0.0)
k = np.arange(steps * cells)
names = [f"{container}run/day-{f}.nc" for f in (k // per_file).tolist()]
session.store.set_virtual_refs_arr("var", (steps, cells), names,
                                   ((k % per_file) * 4).astype(np.uint64),
                                   np.full(k.size, 4, np.uint64), validate_containers=False)
session.commit("refs")
"""


def build_zarr_data(root: Path) -> tuple[str, str]:
    """100 local files of 10,000 float32 values (the value of chunk (i, j) is 1000 i + j) and
    our repository of the 1 M virtual refs to them; returns (repository URL, container)."""
    import numpy as np
    import pyarrow as pa

    from icechunk_spark import Repository

    data = root / "data" / "run"
    data.mkdir(parents=True)
    k = np.arange(STEPS * CELLS_Z)
    for f in range(len(k) // PER_FILE_Z):
        (data / f"day-{f}.nc").write_bytes(
            k[f * PER_FILE_Z : (f + 1) * PER_FILE_Z].astype("<f4").tobytes()
        )
    container = (root / "data").as_uri() + "/"
    url = (root / "ours").as_uri()
    repo = Repository.create(url, config={"virtual_chunk_containers": {container: {}}})
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/var", (STEPS, CELLS_Z), (1, 1), "float32", fill_value=0.0)
    names = pa.array([f"{container}run/day-{f}.nc" for f in range(len(k) // PER_FILE_Z)])
    session.set_chunk_refs(
        "/var",
        {
            "coord": np.stack([k // CELLS_Z, k % CELLS_Z], axis=1),
            "virtual_path": names.take(pa.array(k // PER_FILE_Z)),
            "offset": ((k % PER_FILE_Z) * 4).astype(np.uint64),
            "length": np.full(k.size, 4, np.uint64),
        },
    )
    session.commit("refs")
    return url, container


def zarr_runs(python: str, side: str, url: str, container: str, runs: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    results = []
    for _ in range(runs):
        coord = [rng.randrange(STEPS), rng.randrange(CELLS_Z)]
        out = subprocess.run(
            [python, "-c", ZARR_CHILD, side, url, container, json.dumps(coord)],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def zarr_rows(root: Path, runs: int) -> list[list[Any]]:
    """Our side and, when bench/.venv312 has it, Icechunk's: cold zarr reads of one element."""
    url, container = build_zarr_data(root)
    rows = [
        [
            "icechunk-spark (default config)",
            *_figures(zarr_runs(sys.executable, "ours", url, container, runs)),
        ]
    ]
    if not ICECHUNK_PYTHON.exists():
        rows.append(["Icechunk: bench/.venv312 missing (make bench)", "", "", "", ""])
        return rows
    for variant in ("unsplit", "split"):
        path = root / f"icechunk-{variant}"
        subprocess.run(
            [str(ICECHUNK_PYTHON), "-c", ICECHUNK_BUILD, str(path), container, variant],
            check=True,
            capture_output=True,
        )
        results = zarr_runs(str(ICECHUNK_PYTHON), "icechunk", str(path), container, runs)
        version = results[0]["version"]
        note = "" if version == ICECHUNK_VERSION else f", not the pinned {ICECHUNK_VERSION}"
        label = f"Icechunk {version}{note}, " + (
            "split: 100 steps per manifest" if variant == "split" else "one manifest"
        )
        rows.append([label, *_figures(results)])
    return rows


def _figures(results: list[dict[str, Any]]) -> list[str]:
    return [summary(results, k) for k in ("import", "open", "lookup", "total")]


def build(root: Path, refs: int, row_group_size: int | None, pieces: int = 1) -> str:
    """A repository holding one array of ``refs`` virtual refs (split into ``pieces``
    manifests); returns its URL."""
    import pyarrow as pa

    from bench.bench_virtual import CELLS, CONTAINER, virtual_refs
    from icechunk_spark import Repository
    from icechunk_spark.format import manifest as manifest_format

    saved = manifest_format.ROW_GROUP_SIZE
    if row_group_size is not None:
        manifest_format.ROW_GROUP_SIZE = row_group_size
    try:
        config: dict[str, Any] = {"virtual_chunk_containers": {CONTAINER: {}}}
        if pieces > 1:
            per_piece = {"default": {"max-manifest-size": -(-refs // pieces)}}
            config["manifests"] = {"chunk-manifests": {"sets": [per_piece], "rules": []}}
        repo = Repository.create(root.as_uri(), config=config)
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
    parser.add_argument("--skip-zarr", action="store_true", help="no zarr side-by-side")
    parser.add_argument(
        "--pieces", type=int, default=1000, help="manifests of the split row (as 1 B refs make)"
    )
    args = parser.parse_args()
    from bench.common import print_table

    root = Path(tempfile.mkdtemp(prefix="bench-lookup-"))
    try:
        start = time.perf_counter()
        today = build(root / "today", args.refs, None)
        before = build(root / "before", args.refs, 256 * 1024)
        split = build(root / "split", args.refs, None, args.pieces)
        built_s = time.perf_counter() - start
        rows: list[list[Any]] = []
        for label, url, mode in (
            ("16 Ki-row groups (today): one row group", today, "point"),
            ("256 Ki-row groups (old manifest): one row group", before, "point"),
            ("16 Ki-row groups, whole manifest decoded (before)", today, "whole"),
            (f"split into {args.pieces:,} manifests: the structure lists them all", split, "point"),
        ):
            results = cold_runs(url, mode, args.runs, args.refs)
            manifest = sum(p.stat().st_size for p in Path(url[7:], "m").iterdir())
            rows.append([label, f"{manifest / args.refs:.2f}", *_figures(results)])
        zarr = [] if args.skip_zarr else zarr_rows(root / "zarr", args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"(built the repositories in {built_s:.1f} s)")
    print_table(
        f"Cold lookup of one ref, {args.refs:,} virtual refs in one array, local disk, "
        f"fresh process per run, median (min-max) of {args.runs} runs, ms",
        ["manifest layout / read path", "B/ref", "import", "open+session", "lookup", "total"],
        rows,
    )
    print("total = open+session+lookup (the target: <= 20 ms); import is paid once per process")
    if zarr:
        print_table(
            "Cold zarr read of one element (one 4-byte virtual chunk) of a 1,000 x 1,000-chunk "
            f"array, fresh process per run, median (min-max) of {args.runs} runs, ms",
            ["system", "import (+zarr)", "open+session", "zarr read", "total"],
            zarr,
        )


if __name__ == "__main__":
    main()

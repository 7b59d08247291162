"""Virtual-ref benchmarks (issue: virtual refs, kerchunk import and the chunk inventory).

    .venv/bin/python bench/bench_virtual.py [--part 1 2 3] [--refs 1000000] [--chunks 1000]
                                            [--icechunk]

1. Import N virtual refs through the bulk path (``Session.set_chunk_refs``) and commit, on
   local disk, in a fresh subprocess: seconds to set the refs and to commit, manifest bytes
   per ref, peak RSS (MB = 10^6 bytes), and a cold lookup of one ref (a new Repository). Refs
   point into 100 files (10,000 chunks each, random lengths of 20-40 kB), with a checksum per
   file (and once without). ``--icechunk`` runs the same refs through Icechunk
   (``bench/.venv312``) too. Both sides get the URLs as a Python list of str and offsets and
   lengths as numpy arrays, made before the timer; turning them into each library's own
   form is inside it. Ours also takes a numpy array of coords (made before the timer), where
   Icechunk takes the grid's shape.
2. Read M adjacent virtual chunks (4 KiB each) of one local file and count the requests
   fsspec serves (``cat_file`` calls): ``VirtualReader.read_many``; 16 threads of single
   reads (the 2 ms batching window); zarr through ``session.store``; N concurrent
   ``read_async`` coroutines (what an async store could do); and one read at a time
   (nothing to coalesce: the baseline). Target: <= 10 requests for 1,000 chunks.
3. A VirtualiZarr virtual dataset of N refs (one ManifestArray variable, the refs of part 1)
   written by our ``write_virtual_dataset`` and by VirtualiZarr's own Icechunk writer
   (``vds.vz.to_icechunk``, Icechunk 2.3 in ``bench/.venv312``), each in a fresh process
   (bench/virtualizarr_side.py): seconds of the write and the commit, and the peak RSS of
   the process tree (MB = 10^6 bytes). Goal: ours <= 0.25x Icechunk's time and <= 1 GB.
   ``bench_virtual.py --part 3 --refs 10000000`` (only part 3 is run by default, of the
   three, never: it is the slow one).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from bench.common import peak_rss_mb, print_table, run_json, timed
from bench.virtualizarr_side import CELLS, FILE_NAME, ref_layout
from icechunk_spark import Repository
from icechunk_spark.core import VirtualRequest

CONTAINER = "file:///data/"
HERE = Path(__file__).resolve().parent
ICECHUNK_PYTHON = HERE / ".venv312" / "bin" / "python"
VIRTUALIZARR_SIDE = HERE / "virtualizarr_side.py"
# Issue 31's goal for part 3: our write + commit against VirtualiZarr's writer into Icechunk.
GOAL_TIME_RATIO = 0.25
GOAL_PEAK_MB = 1000  # 1 GB


def virtual_refs(refs: int, seed: int = 0) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """Coords (steps x CELLS grid), URLs, offsets, lengths: one file per 10 steps."""
    file_no, offsets, lengths = ref_layout(refs, seed)
    urls = [CONTAINER + FILE_NAME.format(f) for f in file_no.tolist()]
    steps = refs // CELLS
    coords = np.stack(np.unravel_index(np.arange(steps * CELLS), (steps, CELLS)), axis=1)
    return coords, urls, offsets, lengths


def import_refs(refs: int, checksums: bool) -> dict[str, float]:
    """Runs in its own process (clean peak RSS): build refs, time set_chunk_refs + commit.

    The URLs go in as the Python list of str they are built as, as Icechunk's side gets them:
    each side's conversion of them is inside its timer."""
    root = Path(tempfile.mkdtemp(prefix="bench-virtual-"))
    repo = Repository.create(root.as_uri(), config={"virtual_chunk_containers": {CONTAINER: {}}})
    coords, urls, offsets, lengths = virtual_refs(refs)
    table: dict[str, Any] = {
        "coord": coords,
        "virtual_path": urls,
        "offset": offsets,
        "length": lengths,
    }
    if checksums:  # one checksum per file, as the importers record them
        table["checksum"] = [f"mtime:1700000000.0:{hash(u) % 10**9}" for u in urls]
    steps = refs // CELLS
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/var", (steps, CELLS), (1, 1), "float32", dimension_names=["t", "c"])
    set_s, _ = timed(lambda: session.set_chunk_refs("/var", table))
    commit_s, _ = timed(lambda: session.commit("a million virtual refs"))
    manifest_bytes = sum(i.size for i in repo.storage.list("m/"))

    def cold() -> Any:
        fresh = Repository.open(root.as_uri())
        return fresh.readonly_session().get_chunk_ref("/var", (steps // 2, 7))

    cold_s, ref = timed(cold)
    assert ref is not None and ref.kind == "virtual"
    return {
        "set_refs_s": set_s,
        "commit_s": commit_s,
        "bytes_per_ref": manifest_bytes / refs,
        "cold_lookup_ms": cold_s * 1000,
        "peak_rss_mb": peak_rss_mb(),
    }


ICECHUNK_SCRIPT = """
import json, sys, tempfile, time
from pathlib import Path
import numpy as np, icechunk as ic, zarr
refs, CELLS, CONTAINER = int(sys.argv[1]), 1000, "file:///data/"
steps = refs // CELLS
rng = np.random.default_rng(0)
lengths = rng.integers(20_000, 40_000, steps * CELLS).astype(np.uint64)
step = np.repeat(np.arange(steps), CELLS)
file_no = step // 10
ends = np.cumsum(lengths); starts = ends - lengths
offsets = (starts - starts[np.searchsorted(file_no, file_no, side="left")]).astype(np.uint64)
urls = [f"{CONTAINER}run/day-{f}.nc" for f in file_no.tolist()]
path = tempfile.mkdtemp(prefix="bench-icechunk-virtual-")
cfg = ic.RepositoryConfig.default()
store = ic.local_filesystem_store("/data")
cfg.set_virtual_chunk_container(ic.VirtualChunkContainer(CONTAINER, store))
repo = ic.Repository.create(ic.local_filesystem_storage(path), cfg)
session = repo.writable_session("main")
root = zarr.group(session.store)
root.create_array("var", shape=(steps, CELLS), chunks=(1, 1), dtype="float32",
                  dimension_names=["t", "c"])
t0 = time.perf_counter()
session.store.set_virtual_refs_arr("var", (steps, CELLS), urls, offsets, lengths,
                                   validate_containers=False)
set_s = time.perf_counter() - t0
t0 = time.perf_counter()
session.commit("a million virtual refs")
commit_s = time.perf_counter() - t0
size = sum(p.stat().st_size for p in Path(path, "manifests").rglob("*") if p.is_file())
import resource
print(json.dumps({"set_refs_s": set_s, "commit_s": commit_s, "bytes_per_ref": size / refs,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}))
"""


def icechunk_import(refs: int) -> dict[str, Any] | None:
    if not ICECHUNK_PYTHON.exists():
        return None
    return run_json([str(ICECHUNK_PYTHON), "-c", ICECHUNK_SCRIPT, str(refs)])


def in_subprocess(refs: int, checksums: bool) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child-import", str(refs)]
    return run_json(argv + (["--checksums"] if checksums else []))


# -- coalesced reads ----------------------------------------------------------------------
class RequestCounter:
    """Counts ranged requests served by the local filesystem (one cat_file = one request)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._original = LocalFileSystem.cat_file

    def __enter__(self) -> RequestCounter:
        original, counter = self._original, self

        def counting(fs: Any, path: str, start: Any = None, end: Any = None, **kw: Any) -> Any:
            with counter._lock:
                counter.count += 1
            return original(fs, path, start=start, end=end, **kw)

        LocalFileSystem.cat_file = counting
        return self

    def __exit__(self, *exc: object) -> None:
        LocalFileSystem.cat_file = self._original


def read_adjacent(chunks: int, size: int = 4096) -> list[list[Any]]:
    import warnings

    import zarr

    directory = Path(tempfile.mkdtemp(prefix="bench-virtual-read-"))
    data_dir = directory / "data"
    data_dir.mkdir()
    blob = np.random.default_rng(0).integers(0, 255, chunks * size, dtype=np.uint8).tobytes()
    (data_dir / "adjacent.bin").write_bytes(blob)
    container = data_dir.as_uri() + "/"
    url = container + "adjacent.bin"
    repo = Repository.create(
        (directory / "repo").as_uri(),
        config={"virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", (chunks * size,), (size,), "uint8")
    session.set_chunk_refs(
        "/a",
        {
            "coord": np.arange(chunks).reshape(-1, 1),
            "virtual_path": [url] * chunks,
            "offset": np.arange(chunks) * size,
            "length": np.full(chunks, size),
        },
    )
    session.commit("adjacent chunks")
    reader = repo.readonly_session()
    refs = [reader.get_chunk_ref("/a", (i,)) for i in range(chunks)]
    requests = [VirtualRequest(url, r.offset, r.length, r.checksum) for r in refs if r]

    def read_many() -> bytes:
        return b"".join(repo.handle.virtual_reader.read_many(requests))

    def threads() -> bytes:
        with ThreadPoolExecutor(16) as pool:
            return b"".join(pool.map(lambda i: reader.get_chunk("/a", (i,)) or b"", range(chunks)))

    def through_zarr() -> bytes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bytes(np.asarray(zarr.open_array(reader.store, path="a", mode="r")[:]))

    def through_zarr_concurrent() -> bytes:
        # zarr issues at most async.concurrency gets at once (10 by default): coalescing can
        # only merge what is in flight together.
        with zarr.config.set({"async.concurrency": 1000}):
            return through_zarr()

    def read_async() -> bytes:
        import asyncio

        async def gather() -> list[bytes]:
            virtual = repo.handle.virtual_reader
            reads = [virtual.read_async(r.url, r.offset, r.length, r.checksum) for r in requests]
            return list(await asyncio.gather(*reads))

        return b"".join(asyncio.run(gather()))

    def one_at_a_time() -> bytes:
        return b"".join(reader.get_chunk("/a", (i,)) or b"" for i in range(chunks))

    rows = []
    for name, fn in [
        ("read_many (batch API)", read_many),
        ("16 threads, single reads", threads),
        ("zarr via session.store", through_zarr),
        ("zarr, async.concurrency=1000", through_zarr_concurrent),
        ("read_async x N (an async store)", read_async),
        ("one at a time", one_at_a_time),
    ]:
        with RequestCounter() as counter:
            seconds, data = timed(fn)
        assert data == blob, name
        rows.append([name, chunks, counter.count, seconds])
    return rows


def print_import(refs: int, icechunk: bool) -> None:
    """Part 1: ours with and without checksums, each in a fresh process; Icechunk if asked."""
    rows = []
    for checksums in (True, False):
        r = in_subprocess(refs, checksums)
        label = "icechunk-spark" + (" (with checksums)" if checksums else "")
        rows.append(
            [
                label,
                refs,
                r["set_refs_s"],
                r["commit_s"],
                r["bytes_per_ref"],
                r["cold_lookup_ms"],
                r["peak_rss_mb"],
            ]
        )
    if icechunk:
        r = icechunk_import(refs) or {}
        if r:
            rows.append(
                [
                    "Icechunk 2.x (no checksums)",
                    refs,
                    r["set_refs_s"],
                    r["commit_s"],
                    r["bytes_per_ref"],
                    "-",
                    r["peak_rss_mb"],
                ]
            )
    print_table(
        "Import virtual refs via the bulk path, local disk",
        [
            "system",
            "refs",
            "set refs s",
            "commit s",
            "manifest B/ref",
            "cold lookup ms",
            "peak RSS MB",
        ],
        rows,
    )


def print_virtualizarr(refs: int) -> None:
    """Part 3: each writer in a fresh process (bench/virtualizarr_side.py), ours judged
    against the goal. The tree's peak is sampled during the write and the commit, so it
    holds the dataset too: beside it are the dataset's own size (what building it added),
    the RSS before the write (interpreter, imports and dataset) and the peak above that,
    the writer's own memory; ``ru_maxrss`` is the process's peak over the whole run, which
    a 0.1 s sample cannot miss."""
    side = [str(VIRTUALIZARR_SIDE), "--refs", str(refs), "--system"]
    sides = [run_json([sys.executable, *side, "ours"])]
    if ICECHUNK_PYTHON.exists():
        sides.append(run_json([str(ICECHUNK_PYTHON), *side, "icechunk"]))
    else:
        print("bench/.venv312 is missing (make bench builds it): no Icechunk row")
    theirs = sides[1]["seconds"] if len(sides) > 1 else None
    rows = []
    for r in sides:
        ratio = r["seconds"] / theirs if theirs else None
        goal = "-"
        if r["system"] == "ours":
            peak = max(r["tree_peak_mb"], r["process_peak_mb"])
            fast = "?" if ratio is None else ("yes" if ratio <= GOAL_TIME_RATIO else "no")
            goal = f"time {fast}, memory {'yes' if peak <= GOAL_PEAK_MB else 'no'}"
        rows.append(
            [
                r["label"],
                refs,
                r["seconds"],
                "-" if ratio is None else f"{ratio:.2f}x",
                r["dataset_mb"],
                r["rss_before_mb"],
                r["tree_peak_mb"],
                r["tree_peak_mb"] - r["rss_before_mb"],
                r["process_peak_mb"],
                goal,
            ]
        )
    print_table(
        f"A VirtualiZarr dataset written + committed, local disk (MB = 10^6 bytes; goal: ours "
        f"<= {GOAL_TIME_RATIO}x Icechunk's time and <= {GOAL_PEAK_MB:,} MB peak)",
        [
            "writer",
            "refs",
            "write+commit s",
            "x Icechunk",
            "dataset MB",
            "RSS before MB",
            "tree peak MB",
            "peak above dataset MB",
            "ru_maxrss MB",
            "goal met",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--part",
        type=int,
        nargs="+",
        choices=(1, 2, 3),
        default=[1, 2],
        help="which parts to run (3, VirtualiZarr's writer, only when named)",
    )
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--icechunk", action="store_true", help="also run Icechunk (py3.12)")
    parser.add_argument("--child-import", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checksums", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_import:
        print(json.dumps(import_refs(args.child_import, args.checksums)))
        return
    if 1 in args.part:
        print_import(args.refs, args.icechunk)
    if 2 in args.part:
        print_table(
            "Read adjacent virtual chunks of one file (target: <= 10 requests for 1,000)",
            ["path", "chunks", "requests", "seconds"],
            read_adjacent(args.chunks),
        )
    if 3 in args.part:
        print_virtualizarr(args.refs)


if __name__ == "__main__":
    main()

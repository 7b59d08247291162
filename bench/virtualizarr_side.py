"""One side of bench_virtual.py part 3: a VirtualiZarr virtual dataset of N refs written into a
new repository and committed, by our ``write_virtual_dataset`` or by VirtualiZarr's own
Icechunk writer (``vds.vz.to_icechunk``); prints one JSON line.

    .venv/bin/python bench/virtualizarr_side.py --system ours --refs 100000
    bench/.venv312/bin/python bench/virtualizarr_side.py --system icechunk --refs 100000

Runs under either interpreter (Icechunk's needs bench/.venv312 with virtualizarr and psutil).
The dataset is built before the timer, as a VirtualiZarr parser would hand it over: one
variable backed by a ``ManifestArray`` over ``ChunkManifest.from_arrays`` (numpy paths,
offsets, lengths), chunks of one element on a ``(N / 1000, 1000)`` grid, one file per 10,000
chunks under a ``file://`` container of sparse files (our writer stats each file once for
its checksum, so they must exist). Timed: the write and the commit. Memory: the process
tree's RSS, sampled during them (``TreeMemory``), beside this process's lifetime peak, and
the dataset's own size (the RSS building it added).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MB, TreeMemory, peak_rss_mb, timed

CELLS = 1000  # chunks per step of the grid's first dimension
STEPS_PER_FILE = 10  # so 10 M refs point into 1,000 files
FILE_NAME = "run/day-{}.nc"


def ref_layout(refs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """File number, offset and length of each ref (uint64), in C order over the grid.

    Lengths are irregular (20-40 kB from a seeded RNG); each file's chunks lie back to back
    from offset 0, so every side of every part gets the same refs."""
    steps = refs // CELLS
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20_000, 40_000, steps * CELLS).astype(np.uint64)
    file_no = np.repeat(np.arange(steps), CELLS) // STEPS_PER_FILE
    ends = np.cumsum(lengths)
    starts = ends - lengths
    offsets = starts - starts[np.searchsorted(file_no, file_no, side="left")]
    return file_no, offsets.astype(np.uint64), lengths


def make_files(data: Path, file_no: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> None:
    """Each referenced file, sparse, as long as its last chunk's end (no byte is written)."""
    files = int(file_no[-1]) + 1
    last = np.searchsorted(file_no, np.arange(files), side="right") - 1
    for f, end in enumerate((offsets[last] + lengths[last]).tolist()):
        path = data / FILE_NAME.format(f)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            out.truncate(end)


def virtual_dataset(container: str, refs: int, data: Path) -> Any:
    """An ``xr.Dataset`` of one ManifestArray-backed variable ``var`` of ``refs`` chunks."""
    import xarray as xr
    from virtualizarr.manifests import ChunkManifest, ManifestArray
    from virtualizarr.manifests.utils import create_v3_array_metadata

    file_no, offsets, lengths = ref_layout(refs)
    make_files(data, file_no, offsets, lengths)
    grid = (refs // CELLS, CELLS)
    names = [container + FILE_NAME.format(f) for f in range(int(file_no[-1]) + 1)]
    # One string per file, gathered by file number: a list of 10 M Python str would hold
    # more memory than either writer, and stay in the heap during the timed write.
    paths = np.array(names, dtype=np.dtypes.StringDType())[file_no].reshape(grid)
    manifest = ChunkManifest.from_arrays(
        paths=paths,
        offsets=offsets.reshape(grid),
        lengths=lengths.reshape(grid),
        # The paths are absolute file:// URLs already; its check is a Python call per ref.
        validate_paths=False,
    )
    metadata = create_v3_array_metadata(grid, np.dtype("float32"), (1, 1), fill_value=np.nan)
    return xr.Dataset({"var": (("t", "c"), ManifestArray(metadata, manifest))})


def write_ours(root: Path, container: str, vds: Any) -> tuple[str, float]:
    """(label, seconds) of ``write_virtual_dataset`` + commit into a new repository."""
    from icechunk_spark import Repository
    from icechunk_spark.virtual import write_virtual_dataset

    repo = Repository.create(
        (root / "repo").as_uri(),
        config={"virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )

    def write() -> int:
        session = repo.writable_session("main")
        summary = write_virtual_dataset(session, vds)
        session.commit("a virtual dataset")
        return summary.virtual_refs

    seconds, written = timed(write)
    if written != vds["var"].size:
        raise RuntimeError(f"wrote {written} refs of {vds['var'].size}")
    return "icechunk-spark write_virtual_dataset", seconds


def write_icechunk(root: Path, container: str, vds: Any) -> tuple[str, float]:
    """(label, seconds) of VirtualiZarr's ``to_icechunk`` + commit into a new repository."""
    import icechunk as ic

    config = ic.RepositoryConfig.default()
    store = ic.local_filesystem_store(str(root / "data"))
    config.set_virtual_chunk_container(ic.VirtualChunkContainer(container, store))
    repo = ic.Repository.create(ic.local_filesystem_storage(str(root / "repo")), config)

    def write() -> None:
        session = repo.writable_session("main")
        vds.vz.to_icechunk(session.store)
        session.commit("a virtual dataset")

    seconds, _ = timed(write)
    return f"VirtualiZarr to_icechunk, Icechunk {ic.__version__}", seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["ours", "icechunk"], required=True)
    parser.add_argument("--refs", type=int, default=10_000_000)
    args = parser.parse_args()
    import psutil
    import virtualizarr  # its version for the label; importing it registers the .vz accessor

    with tempfile.TemporaryDirectory(prefix=f"bench-vz-{args.system}-") as tmp:
        root = Path(tmp)
        container = (root / "data").as_uri() + "/"
        # The dataset's own size: what building it added to the process (its numpy arrays,
        # the StringDType paths' heap included), imports done before.
        start = psutil.Process().memory_info().rss / MB
        vds = virtual_dataset(container, args.refs, root / "data")
        before = psutil.Process().memory_info().rss / MB
        write = write_ours if args.system == "ours" else write_icechunk
        with TreeMemory() as memory:
            label, seconds = write(root, container, vds)
    print(
        json.dumps(
            {
                "system": args.system,
                "label": f"{label} (virtualizarr {virtualizarr.__version__})",
                "refs": args.refs,
                "seconds": seconds,
                "dataset_mb": before - start,
                "rss_before_mb": before,
                "tree_peak_mb": memory.peaks.tree_rss,
                "process_peak_mb": peak_rss_mb(),
            }
        )
    )


if __name__ == "__main__":
    main()

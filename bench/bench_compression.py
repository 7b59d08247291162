"""The compression of our Parquet files: zstd against LZ4 by file size (docs/format.md).

    .venv/bin/python bench/bench_compression.py [--refs 100000] [--repeat 300]

Builds bench_splitting.py's repository (a big variable of ``--refs`` virtual refs, three
coordinates and fifty small arrays of ten chunks sharing one manifest), makes one small commit
(a chunk of `small7`), and encodes the files that commit wrote, through our own encoders, once
with every file zstd and once with every file LZ4 (``format.parquet.LZ4_MAX_ROWS`` set for the
run), the two alternating: the structure file, the shared manifest and the transaction log;
then manifests cut from the big variable's at growing row counts. Printed: median encoding
time (ms) and bytes of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_splitting import build, small_commit
from bench.common import print_table
from icechunk_spark import Repository
from icechunk_spark.format import parquet
from icechunk_spark.format.keys import manifest_key, structure_key, txlog_key
from icechunk_spark.format.manifest import decode_manifest, encode_manifest_rows, manifest_rows
from icechunk_spark.format.parquet import (
    read_parquet_bytes,
    row_groups_to_parquet,
    small_table_to_parquet,
)
from icechunk_spark.format.txlog import TXLOG_ROW_GROUP_SIZE

CODECS = {"zstd": 0, "lz4": 1 << 40}  # LZ4_MAX_ROWS for a run of each


def encode_times(encode: Callable[[], bytes], repeat: int) -> dict[str, tuple[float, int]]:
    """Median seconds and bytes of ``encode`` under each codec, alternating run by run."""
    times: dict[str, list[float]] = {name: [] for name in CODECS}
    sizes: dict[str, int] = {}
    saved = parquet.LZ4_MAX_ROWS
    try:
        for k in range(repeat):
            for name in list(CODECS)[:: 1 if k % 2 else -1]:
                parquet.LZ4_MAX_ROWS = CODECS[name]
                start = time.perf_counter()
                data = encode()
                times[name].append(time.perf_counter() - start)
                sizes[name] = len(data)
    finally:
        parquet.LZ4_MAX_ROWS = saved
    return {name: (statistics.median(times[name]), sizes[name]) for name in CODECS}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    url = Path(tempfile.mkdtemp(prefix="bench-compression-")).as_uri()
    build(url, args.refs)
    repo = Repository.open(url)
    small_commit(repo, 1)
    storage = repo.storage
    head = next(repo.ancestry(branch="main"))
    structure = read_parquet_bytes(storage.get(structure_key(head.structure_file)))
    txlog = read_parquet_bytes(storage.get(txlog_key(head.id)))
    nodes = {n.path: n for n in repo.readonly_session("main").list_nodes()}
    shared = nodes["/small7"].manifests[0].manifest_id
    big_id = nodes["/var"].manifests[0].manifest_id
    small_rows = manifest_rows(decode_manifest(storage.get(manifest_key(shared)), shared), True)
    big = manifest_rows(decode_manifest(storage.get(manifest_key(big_id)), big_id), True)

    cases: list[tuple[str, int, Callable[[], bytes]]] = [
        ("structure file", structure.num_rows, lambda: small_table_to_parquet(structure)),
        ("shared manifest", small_rows.num_rows, lambda: encode_manifest_rows(small_rows)),
        (
            "transaction log",
            txlog.num_rows,
            lambda: row_groups_to_parquet(
                txlog, TXLOG_ROW_GROUP_SIZE, use_dictionary=False, write_statistics=False
            ),
        ),
    ]
    for rows in (4096, 16384, 100_000):
        if rows <= big.num_rows:
            part = big.slice(0, rows)
            cases.append(("manifest of /var", rows, lambda part=part: encode_manifest_rows(part)))
    table = []
    for name, rows, encode in cases:
        got = encode_times(encode, args.repeat if rows < 10_000 else max(5, args.repeat // 30))
        (zt, zb), (lt, lb) = got["zstd"], got["lz4"]
        table.append([name, rows, zt * 1e3, lt * 1e3, zb, lb, (lb - zb) / zb * 100])
    print_table(
        f"Parquet compression of one small commit's files ({args.refs:,} refs repository)",
        ["file", "rows", "zstd ms", "lz4 ms", "zstd bytes", "lz4 bytes", "lz4 size %"],
        table,
    )


if __name__ == "__main__":
    main()

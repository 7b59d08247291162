"""An inline ref's ``length`` is its byte count, recorded by every writer and filled in by
readers of manifests that lacked it (docs/format.md, "Chunk manifests")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from icechunk_spark import Repository
from icechunk_spark.format.keys import manifest_key
from icechunk_spark.format.manifest import conform_refs, with_inline_lengths


def _refs(lengths: list[int | None]) -> pa.Table:
    return conform_refs(
        pa.table(
            {
                "array_id": pa.array([1, 1], pa.uint64()),
                "coord": [b"\0\0\0\0", b"\0\0\0\1"],
                "inline_data": [b"abc", b"hello"],
                "length": pa.array(lengths, pa.uint64()),
            }
        )
    )


def test_missing_lengths_are_filled_and_recorded_ones_kept() -> None:
    assert with_inline_lengths(_refs([None, None])).column("length").to_pylist() == [3, 5]
    assert with_inline_lengths(_refs([3, None])).column("length").to_pylist() == [3, 5]
    recorded = _refs([3, 5])
    assert with_inline_lengths(recorded) is recorded  # nothing to fill: no compute call


def test_chunks_set_one_by_one_record_their_lengths(tmp_path: Path) -> None:
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"x")
    session.set_chunk("/a", (2,), b"yyy")
    session.commit("inline chunks")
    (node,) = [n for n in repo.readonly_session("main").list_nodes() if n.path == "/a"]
    data = repo.storage.get(manifest_key(node.manifests[0].manifest_id))
    # The file itself, not a decoder that would fill the lengths in.
    stored = pq.read_table(pa.BufferReader(data), columns=["inline_data", "length"])
    assert stored.column("length").to_pylist() == [1, 3]
    assert stored.column("inline_data").to_pylist() == [b"x", b"yyy"]

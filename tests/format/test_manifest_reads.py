"""Partial manifest reads: row groups found by statistics, inline lengths, old layouts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icechunk_spark.format import manifest as manifest_format
from icechunk_spark.format.coords import encode_coord, encode_coords
from icechunk_spark.format.manifest import (
    conform_refs,
    decode_manifest,
    encode_manifest,
    refs_of_array,
)
from icechunk_spark.format.manifest_file import ManifestFile
from icechunk_spark.format.parquet import table_to_parquet


def refs_of(array_id: int, n: int, first: int = 0) -> pa.Table:
    """``n`` virtual refs of a 1-d array, coords ``first .. first + n - 1``."""
    coords = np.arange(first, first + n).reshape(-1, 1)
    return conform_refs(
        pa.table(
            {
                "array_id": pa.array(np.full(n, array_id, np.uint64)),
                "coord": encode_coords(coords),
                "virtual_path": pa.array([f"file:///data/{array_id}-{c}.nc" for c in coords[:, 0]]),
                "offset": pa.array(coords[:, 0].astype(np.uint64)),
                "length": pa.array(np.full(n, 7, np.uint64)),
            }
        )
    )


@pytest.fixture
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_format, "ROW_GROUP_SIZE", 10)


def test_each_coord_is_in_exactly_the_row_group_its_statistics_name(small_groups: None) -> None:
    # Three arrays of 25, 3 and 40 refs in groups of 10: some groups hold two or three arrays.
    refs = pa.concat_tables([refs_of(5, 25), refs_of(9, 3), refs_of(2, 40)])
    data = encode_manifest(refs)
    file = ManifestFile(data, "m/X")
    assert len(file.groups) == 7
    for array_id, n in ((5, 25), (9, 3), (2, 40)):
        for c in range(n):
            key = encode_coord((c,))
            groups = file.groups_holding(array_id, key)
            rows = refs_of_array(file.read_groups(groups), array_id)
            found = [r for r in rows.to_pylist() if r["coord"] == key]
            assert len(found) == 1, (array_id, c, groups)
            assert found[0]["virtual_path"] == f"file:///data/{array_id}-{c}.nc"
    # Statistics rule out a coord past the array's last group (it holds array 2 alone), an
    # array beyond every group's id range; array 7 lies inside the range of the group that
    # holds arrays 5 and 9, so that group cannot be ruled out.
    assert file.groups_holding(2, encode_coord((1000,))) == []
    assert file.groups_holding(11, encode_coord((0,))) == []
    assert file.groups_holding(7, encode_coord((0,))) == [6]


def test_groups_of_array_skip_other_arrays(small_groups: None) -> None:
    data = encode_manifest(pa.concat_tables([refs_of(1, 30), refs_of(2, 30), refs_of(3, 30)]))
    file = ManifestFile(data, "m/X")
    groups = file.groups_of_array(2)
    assert groups == [3, 4, 5]
    assert refs_of_array(file.read_groups(groups), 2).num_rows == 30


def test_new_manifests_are_sorted_row_groups_of_16_ki_rows_with_sort_order_declared() -> None:
    data = encode_manifest(refs_of(1, 40_000))
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        16_384,
        16_384,
        7_232,
    ]
    assert meta.row_group(0).sorting_columns == (pq.SortingColumn(0), pq.SortingColumn(1))


def test_statistics_are_written_for_the_columns_readers_prune_by_only() -> None:
    refs = refs_of(1, 30).append_column("stat_min", pa.array(np.arange(30.0)))
    meta = pq.ParquetFile(pa.BufferReader(encode_manifest(refs))).metadata
    group = meta.row_group(0)
    with_statistics = {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).is_stats_set
    }
    # The lookup's and the scan's (array_id, coord) and the numeric ones filters may prune
    # by; none of the location columns (here the URLs, and the absent inline bytes, chunk
    # ids and checksums).
    assert with_statistics == {"array_id", "coord", "offset", "length", "stat_min"}
    file = ManifestFile(encode_manifest(refs), "m/X")
    assert file.bounds("stat_min")[0].max == 29.0


def test_inline_lengths_are_recorded_and_filled_in_for_old_manifests() -> None:
    refs = conform_refs(
        pa.table(
            {
                "array_id": pa.array([1, 1], pa.uint64()),
                "coord": [encode_coord((0,)), encode_coord((1,))],
                "inline_data": [b"abc", None],
                "chunk_id": [None, "C1"],
                "offset": pa.array([None, 0], pa.uint64()),
                "length": pa.array([None, 9], pa.uint64()),
            }
        )
    )
    written = pq.read_table(pa.BufferReader(encode_manifest(refs)))
    assert written.column("length").to_pylist() == [3, 9]
    # A manifest from before: inline rows without a length, and 256 Ki-row groups.
    old = table_to_parquet(refs, row_group_size=256 * 1024)
    assert pq.read_table(pa.BufferReader(old)).column("length").to_pylist() == [None, 9]
    assert decode_manifest(old, "m/OLD").column("length").to_pylist() == [3, 9]
    assert ManifestFile(old, "m/OLD").read_groups([0]).column("length").to_pylist() == [3, 9]
    lengths_only = ManifestFile(old, "m/OLD").read_groups([0], ["length"])
    assert lengths_only.column_names == ["length"]  # asked for no inline bytes, got none


def test_a_manifest_without_statistics_is_read_whole() -> None:
    refs = pa.concat_tables([refs_of(1, 30), refs_of(2, 30)])
    data = table_to_parquet(refs, row_group_size=10, write_statistics=False)
    file = ManifestFile(data, "m/NOSTATS")
    key = encode_coord((12,))
    assert file.groups_holding(2, key) == list(range(6))  # nothing can be ruled out
    rows = refs_of_array(file.read_groups(file.groups_holding(2, key)), 2)
    assert rows.num_rows == 30


def test_the_rows_a_writer_keeps_equal_what_decoding_its_file_gives() -> None:
    # A commit keeps the table of a small manifest it wrote, so the next commit on the branch
    # does not decode its own bytes; any difference would show as a changed ref later.
    virtual = refs_of(4, 30)
    located = virtual.set_column(
        virtual.schema.get_field_index("virtual_path"),
        "virtual_path",
        virtual.column("virtual_path").dictionary_encode(),
    )
    native = conform_refs(
        pa.table(
            {
                "array_id": pa.array(np.full(3, 1, np.uint64)),
                "coord": encode_coords(np.arange(3).reshape(-1, 1)),
                "chunk_id": pa.array(["A", "B", "A"]).dictionary_encode(),
                "offset": pa.array(np.zeros(3, np.uint64)),
                "length": pa.array(np.full(3, 5, np.uint64)),
                "stat_min": pa.array([0.5, 1.0, None]),
            }
        )
    )
    inline = conform_refs(
        pa.table(
            {
                "array_id": pa.array(np.full(2, 2, np.uint64)),
                "coord": encode_coords(np.arange(2).reshape(-1, 1)),
                "inline_data": pa.array([b"ab", b"cde"]),
            }
        )
    )
    for refs in (located, native, inline, pa.concat_tables([virtual, virtual.slice(0, 0)])):
        rows = manifest_format.manifest_rows(refs, presorted=True)
        kept = manifest_format.rows_as_decoded(rows)
        data = manifest_format.encode_manifest_rows(rows)
        read = decode_manifest(data, "m/X")
        assert kept.schema == read.schema
        assert kept.equals(read)
        # The writer encodes the kept rows (contiguous, plain): the very same file.
        assert manifest_format.encode_manifest_rows(kept) == data
    # Rows in a chunk per carried slice, as a rewritten manifest's come, make that file too.
    pieces = pa.concat_tables([located.slice(0, 7), located.slice(7, 1), located.slice(8)])
    rows = manifest_format.manifest_rows(pieces, presorted=True)
    assert rows.column("coord").num_chunks == 3
    kept = manifest_format.rows_as_decoded(rows)
    assert manifest_format.encode_manifest_rows(kept) == manifest_format.encode_manifest_rows(rows)

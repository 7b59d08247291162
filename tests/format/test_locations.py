"""Location columns kept dictionary-encoded (format/locations.py): ref tables carry one string
per file and an int32 per ref, and the manifest written from them is the one plain strings
make."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icechunk_spark.format.coords import coords_view, decode_coords, encode_coords
from icechunk_spark.format.locations import (
    concat_refs,
    remap,
    same_location_types,
    with_values,
)
from icechunk_spark.format.manifest import (
    ROW_GROUP_SIZE,
    conform_refs,
    decode_manifest,
    encode_manifest,
    null_column,
)
from icechunk_spark.format.merge import merge_refs


def _refs(rows: int) -> pa.Table:
    """Virtual refs of one array over a (rows/10, 10) grid, a file per 7,000 rows, every
    13th row inline."""
    coords = np.stack([np.arange(rows) // 10, np.arange(rows) % 10], axis=1)
    virtual = np.arange(rows) % 13 != 0
    urls = [f"s3://bucket/f{i // 7000}.nc" if v else None for i, v in enumerate(virtual)]
    return conform_refs(
        pa.table(
            {
                "array_id": pa.array(np.full(rows, 3, np.uint64)),
                "coord": encode_coords(coords),
                "inline_data": pa.array([None if v else b"xy" for v in virtual], pa.binary()),
                "virtual_path": pa.array(urls, pa.string()),
                "offset": pa.array(np.arange(rows, dtype=np.uint64)),
                "length": pa.array(np.where(virtual, 9, 2).astype(np.uint64)),
                "checksum": pa.array([f"etag:{u}" if u else None for u in urls], pa.string()),
            }
        )
    )


def _encoded(table: pa.Table, *names: str) -> pa.Table:
    for name in names:
        index = table.schema.get_field_index(name)
        column = table.column(name).dictionary_encode()
        table = table.set_column(index, pa.field(name, column.type), column)
    return table


def test_conform_refs_keeps_a_dictionary_encoded_location_column_encoded() -> None:
    plain = _refs(100)
    conformed = conform_refs(_encoded(plain, "virtual_path", "checksum"))
    for name in ("virtual_path", "checksum"):
        assert pa.types.is_dictionary(conformed.column(name).type)
        assert conformed.column(name).to_pylist() == plain.column(name).to_pylist()
    assert conformed.column("chunk_id").type == pa.string()


@pytest.mark.parametrize("rows", [2 * ROW_GROUP_SIZE + 5, 100])
def test_a_manifest_is_the_same_file_whether_locations_come_encoded_or_plain(rows: int) -> None:
    # Three row groups: each must get only its own files in its dictionary page, as Parquet
    # makes it from plain strings, not the whole Arrow dictionary. One group of plain
    # columns is written in one call, encoded ones group by group: the same bytes.
    plain = _refs(rows)
    data = encode_manifest(plain, presorted=True)
    assert encode_manifest(_encoded(plain, "virtual_path", "checksum"), presorted=True) == data
    assert pq.ParquetFile(pa.BufferReader(data)).schema_arrow.field("virtual_path").type == (
        pa.string()
    )
    assert decode_manifest(data, "m").equals(plain)


def test_remap_maps_each_file_once_merging_and_dropping_entries() -> None:
    column = pa.DictionaryArray.from_arrays(
        pa.array([2, 0, None, 2, 0], pa.int32()), pa.array(["a", "unused", "b"])
    )
    # Two spellings of one file become one dictionary entry; the unused entry leaves.
    mapped = remap(column, {"a": "file:///x", "b": "file:///x"})
    assert mapped.to_pylist() == ["file:///x", "file:///x", None, "file:///x", "file:///x"]
    assert mapped.dictionary.to_pylist() == ["file:///x"]
    same = remap(column.dictionary_decode(), {"a": "A", "b": "B"})
    assert same.to_pylist() == ["B", "A", None, "B", "A"]
    sums = with_values(same, pa.array([f"sum:{v}" for v in same.dictionary.to_pylist()]))
    assert sums.to_pylist() == ["sum:B", "sum:A", None, "sum:B", "sum:A"]


def test_layers_of_both_kinds_concatenate_and_merge_encoded() -> None:
    old = _refs(30)
    new = _encoded(_refs(30).slice(10, 5), "virtual_path")
    layers = same_location_types([old, new])
    assert all(pa.types.is_dictionary(t.column("virtual_path").type) for t in layers)
    merged = merge_refs([old, new], 2)
    assert pa.types.is_dictionary(merged.column("virtual_path").type)
    assert merged.column("virtual_path").to_pylist() == old.column("virtual_path").to_pylist()


def test_concat_refs_promotes_only_tables_whose_schemas_differ() -> None:
    plain = _refs(30)
    encoded = _encoded(_refs(30).slice(10, 5), "virtual_path")
    same = concat_refs([plain.slice(0, 3), plain.slice(7, 4)])
    assert same.schema.equals(plain.schema)
    assert same.to_pylist() == plain.slice(0, 3).to_pylist() + plain.slice(7, 4).to_pylist()
    # A column all null in one table (a manifest written before the column had rows) and
    # typed in the other: promoted, as before.
    untyped = plain.slice(0, 2).set_column(
        plain.schema.get_field_index("checksum"), "checksum", pa.nulls(2)
    )
    mixed = concat_refs([untyped, plain.slice(2, 2)])
    assert mixed.column("checksum").type == pa.string()
    assert mixed.num_rows == 4
    # Dictionary against plain: the plain one is encoded first (same_location_types), and
    # the column stays a dictionary.
    both = concat_refs([plain.slice(0, 2), encoded])
    assert pa.types.is_dictionary(both.column("virtual_path").type)
    assert both.column("virtual_path").to_pylist() == (
        plain["virtual_path"].to_pylist()[:2] + plain["virtual_path"].to_pylist()[10:15]
    )


def test_a_sorted_layer_merges_without_a_copy_of_its_rows() -> None:
    layer = _encoded(_refs(1000), "virtual_path")
    merged = merge_refs([layer], 2)
    assert merged.equals(conform_refs(layer))
    # The very buffers: a take would have copied a bulk write of millions of rows.
    before = layer.column("offset").chunk(0).buffers()[1].address
    assert merged.column("offset").chunk(0).buffers()[1].address == before


def test_coords_view_reads_the_coord_bytes_in_place() -> None:
    coords = np.array([[0, 1], [70_000, 2], [5, 4_000_000_000]])
    encoded = encode_coords(coords).slice(1)
    view = coords_view(encoded, 2)
    np.testing.assert_array_equal(view, decode_coords(encoded, 2))
    assert not view.flags.writeable
    assert coords_view(encoded[:0], 2).shape == (0, 2)


def test_an_all_null_column_reads_as_pa_nulls() -> None:
    for kind in (pa.binary(), pa.string(), pa.uint64(), pa.float64()):
        for rows in (0, 1, 9, 100_003):
            column = null_column(rows, kind)
            column.validate(full=True)
            assert column.equals(pa.nulls(rows, kind))

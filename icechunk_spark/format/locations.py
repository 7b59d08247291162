"""Location columns of ref tables (``chunk_id``, ``virtual_path``, ``checksum``) kept as Arrow
dictionaries: one string per distinct file, an int32 index per ref.

Ten million virtual refs into a thousand files name a thousand URLs. As plain strings a ref
table holds every URL once per ref (~0.7 GB for the URLs, ~0.3 GB more for the checksums, and
each copy of the table again); as a dictionary it holds 40 MB of indices and the thousand
strings. Ref tables may carry these columns either way, and every operation on them (filter,
take, sort, concatenation) keeps a dictionary a dictionary. The manifest on disk is the same
either way: ``format.parquet.row_groups_to_parquet`` hands Parquet plain strings one row group
at a time, and Parquet dictionary-encodes each row group itself (docs/format.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The string columns of a ref table that may come dictionary-encoded.
LOCATION_COLUMNS = ("chunk_id", "virtual_path", "checksum")

Column: TypeAlias = pa.Array | pa.ChunkedArray


def is_dictionary(column: Column) -> bool:
    return bool(pa.types.is_dictionary(column.type))


def conform_location(column: Column, value_type: pa.DataType) -> Column:
    """``column`` cast to ``value_type``, or to a dictionary of it (int32 indices) when it
    comes dictionary-encoded: casting it to plain strings is the copy this module avoids."""
    wanted = pa.dictionary(pa.int32(), value_type) if is_dictionary(column) else value_type
    return column if column.type == wanted else column.cast(wanted)


def as_dictionary(column: Column) -> pa.DictionaryArray:
    """``column`` as one dictionary array with int32 indices: chunks combined (their
    dictionaries unified, only indices copied), a plain column encoded."""
    if isinstance(column, pa.ChunkedArray):
        # One chunk is taken as it is: combining even one copies it.
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not is_dictionary(column):
        column = column.dictionary_encode()
    encoded = column.cast(pa.dictionary(pa.int32(), column.type.value_type))
    assert isinstance(encoded, pa.DictionaryArray)
    return encoded


def remap(column: Column, mapping: Mapping[str, str]) -> pa.DictionaryArray:
    """``column`` with each value ``v`` replaced by ``mapping[v]``, dictionary-encoded.

    Each distinct value is looked up once; per ref there is one ``take`` of the int32 indices
    (none when no two values merge and none is dropped). Values no row uses leave the
    dictionary; two that map to one value become one entry, so the result's dictionary holds
    each value once.

    Raises:
        KeyError: a value some row holds is not in ``mapping``.
    """
    encoded = as_dictionary(column)
    used = pc.drop_null(pc.unique(encoded.indices)).to_numpy(zero_copy_only=False)
    old = encoded.dictionary.take(pa.array(used, pa.int32())).to_pylist()
    new = [mapping[v] for v in old]
    distinct = list(dict.fromkeys(new))
    where = {v: i for i, v in enumerate(distinct)}
    lookup = np.zeros(len(encoded.dictionary), np.int32)
    lookup[used] = [where[v] for v in new]
    values = pa.array(distinct, pa.string())
    if len(used) == len(encoded.dictionary) and np.array_equal(
        lookup, np.arange(len(lookup), dtype=np.int32)
    ):
        return pa.DictionaryArray.from_arrays(encoded.indices, values)
    # Null indices stay null through take; the bytes under them are never read.
    indices = pa.array(lookup).take(encoded.indices)
    return pa.DictionaryArray.from_arrays(indices, values)


def same_schemas(tables: Sequence[pa.Table]) -> bool:
    """Whether every table has the first one's schema (field names, types and order)."""
    return all(t.schema.equals(tables[0].schema) for t in tables[1:])


def concat_refs(tables: Sequence[pa.Table]) -> pa.Table:
    """``pa.concat_tables`` of ref tables, each location column first of one type in all
    (``same_location_types``), their types promoted only when their schemas still differ (a
    column some hold and others lack, a type another widens): a small commit's tables mostly
    share one, and promotion costs 6x a plain concatenation of its few slices (7 against
    1 us)."""
    tables = same_location_types(tables)
    if same_schemas(tables):
        return pa.concat_tables(tables)
    return pa.concat_tables(tables, promote_options="permissive")


def with_values(column: pa.DictionaryArray, values: pa.Array) -> pa.DictionaryArray:
    """A column sharing ``column``'s indices over other ``values`` (one per dictionary entry):
    the checksum of each file beside its URL costs no index of its own."""
    return pa.DictionaryArray.from_arrays(column.indices, values)


def same_location_types(tables: Sequence[pa.Table]) -> list[pa.Table]:
    """``tables`` with each location column of one type in all of them, for a concatenation:
    where some hold it dictionary-encoded and some plain, the plain ones are encoded (the
    other way round would turn millions of indices back into strings)."""
    return same_dictionary_types(tables, LOCATION_COLUMNS)


def same_dictionary_types(tables: Sequence[pa.Table], names: Sequence[str]) -> list[pa.Table]:
    """``tables`` with each column of ``names`` dictionary-encoded in all of them where any
    holds it so, and left as it is where none does: the tables concatenate."""
    out = list(tables)
    if same_schemas(out):
        return out  # one schema: each column is a dictionary in all or in none (one C call)
    for name in names:
        present = [t for t in out if name in t.column_names]
        kinds = {is_dictionary(t.column(name)) for t in present}
        if len(kinds) < 2:
            continue
        for k, table in enumerate(out):
            if name in table.column_names and not is_dictionary(table.column(name)):
                index = table.schema.get_field_index(name)
                field = table.schema.field(name)
                encoded = as_dictionary(table.column(name))
                out[k] = table.set_column(index, field.with_type(encoded.type), encoded)
    return out

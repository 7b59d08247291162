"""The ``chunks`` table read by Spark's own Parquet reader: ``read_chunks(spark, url)``.

A Python data source hands every row from a Python worker to the JVM over a socket, and
Spark gives it no column pruning: ``count()`` of ``spark.read.format("icechunk")`` moves every
column of every ref, however little the query needs (bench/bench_spark.py measures that
floor). Manifests are Parquet files, so Spark's file source can read them itself, with its
vectorized decoder, column pruning and row-group skipping. The driver plans as the data
source does (one snapshot, pinned now; the selected arrays) and turns what a row needs from
the snapshot (its array's path and grid, keyed by node id) into literal maps, so the
``chunks`` columns are plain Spark expressions over the manifest columns: no Python runs
per row, and a column no query needs is never read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ..errors import InvalidInputError
from ..format.keys import manifest_key
from ..format.manifest import STAT_FIELDS
from ..format.structure import Node
from ..storage import Storage
from ..storage.ranged import open_parquet
from . import scan
from .option_names import NATIVE_READ, check_options
from .options import read_target, repo_options
from .source import spark_schema

# The unsigned 64-bit manifest columns. Spark reads a Parquet UINT64 as decimal(20,0), but its
# vectorized reader cannot widen every encoding to a decimal (BYTE_STREAM_SPLIT, which our
# ``length`` uses, fails), nor read a dictionary-encoded one as a bigint. So each manifest is
# read with the type its encodings allow (``u64_types``), and the values cast to bigint: ids
# are 63-bit, and offsets and lengths never reach 2^63.
_U64_COLUMNS = ("array_id", "offset", "length")
_WIDE, _NARROW = DecimalType(20, 0), LongType()
_FOOTER_THREADS = 8  # footers are one small ranged read each: latency, not CPU


def manifest_schema(u64_types: Sequence[str]) -> StructType:
    """The manifest columns as Spark reads them, given explicitly: a manifest without the
    optional stat_* columns reads them as null, and no file is opened to infer a schema."""
    u64 = {
        c: _WIDE if t == "decimal" else _NARROW
        for c, t in zip(_U64_COLUMNS, u64_types, strict=True)
    }
    return StructType(
        [
            StructField("array_id", u64["array_id"]),
            StructField("coord", BinaryType()),
            StructField("inline_data", BinaryType()),
            StructField("chunk_id", StringType()),
            StructField("virtual_path", StringType()),
            StructField("offset", u64["offset"]),
            StructField("length", u64["length"]),
            *(
                StructField(f.name, DoubleType() if f.type.equals("double") else LongType())
                for f in STAT_FIELDS
            ),
        ]
    )


@dataclass(frozen=True, slots=True)
class ManifestScan:
    """One manifest to read: the arrays wanted from it, and what its footer says about it."""

    manifest_id: str
    array_ids: frozenset[int]
    only_wanted_rows: bool  # every row belongs to a wanted array: no row filter needed
    lengths_missing: bool  # written before manifests recorded inline chunk lengths
    u64_types: tuple[str, ...]  # per _U64_COLUMNS, "decimal" or "long": see manifest_schema


def read_chunks(
    spark: SparkSession,
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    **options: str,
) -> DataFrame:
    """The ``chunks`` table of the repository at ``url``, read by Spark's Parquet reader.

    Takes the options of ``spark.read.format("icechunk")`` (``branch`` / ``tag`` /
    ``snapshot`` / ``as_of``, ``arrays``; ``storage_options`` for its ``storage.<name>``
    ones) and gives the same rows and columns. ``hadoop_url`` names the repository as Spark's
    file systems reach it when that differs from ``url`` (``s3://`` becomes ``s3a://`` on its
    own); Spark must be able to read that file system (local files always; S3, GCS and Azure
    with their Hadoop connectors).

    Raises:
        InvalidInputError: bad options, or storage Spark's file sources cannot read.
    """
    check_options(options, NATIVE_READ, "read_chunks")
    storage = {f"storage.{k}": v for k, v in (storage_options or {}).items()}
    opts = {**options, **storage, "path": url}
    repo_opts = repo_options(opts)
    root = _hadoop_root(url, options.get("hadoop_url"))
    repo = repo_opts.open()
    try:
        session = read_target(opts).session(repo)
        arrays = scan.select_arrays(session.list_nodes(), options.get("arrays"))
        manifests = plan_manifests(repo.storage, arrays)
    finally:
        repo.close()
    if not manifests:
        return spark.createDataFrame([], spark_schema("chunks"))
    rows = _read_manifests(spark, root, manifests)
    file_name = F.col("_file")  # the manifest id: manifests are stored as m/<id>
    keep = _row_filter(manifests, file_name)
    if keep is not None:
        rows = rows.where(keep)
    return _chunk_columns(rows, arrays, manifests, file_name)


def _read_manifests(spark: SparkSession, root: str, manifests: Sequence[ManifestScan]) -> DataFrame:
    """One Parquet read per schema the manifests need (almost always one)."""
    by_types: dict[tuple[str, ...], list[str]] = {}
    for m in manifests:
        by_types.setdefault(m.u64_types, []).append(f"{root}/{manifest_key(m.manifest_id)}")
    frames = [
        spark.read.schema(manifest_schema(types))
        .parquet(*paths)
        .select("*", F.col("_metadata.file_name").alias("_file"))
        .withColumns({c: F.col(c).cast("bigint") for c in _U64_COLUMNS})
        for types, paths in sorted(by_types.items())
    ]
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    return rows


def plan_manifests(storage: Storage, arrays: Sequence[Node]) -> list[ManifestScan]:
    """The manifests holding refs of ``arrays``, each with its footer's facts (read in threads).

    A manifest can hold rows no array of this snapshot reads from it (a packed set whose
    other array has since moved to a new manifest); its footer's row count, against the ref
    counts the snapshot gives for it, says whether a row filter is needed.
    """
    wanted: dict[str, set[int]] = {}
    counted: dict[str, int] = {}
    for node in arrays:
        for ref in node.manifests:
            wanted.setdefault(ref.manifest_id, set()).add(node.id)
            counted[ref.manifest_id] = counted.get(ref.manifest_id, 0) + ref.ref_count

    def facts(manifest_id: str) -> ManifestScan:
        with open_parquet(storage, manifest_key(manifest_id), None) as parquet:
            metadata = parquet.metadata
        names = metadata.schema.to_arrow_schema().names
        lengths_missing = "length" not in names or any(
            _null_count(metadata, i, names.index("length")) != 0
            for i in range(metadata.num_row_groups)
        )
        return ManifestScan(
            manifest_id,
            frozenset(wanted[manifest_id]),
            metadata.num_rows == counted[manifest_id],
            lengths_missing,
            tuple(_u64_type(metadata, names, c) for c in _U64_COLUMNS),
        )

    with ThreadPoolExecutor(_FOOTER_THREADS) as pool:
        return list(pool.map(facts, sorted(wanted)))


def _u64_type(metadata: Any, names: list[str], column: str) -> str:
    """``decimal`` where any row group of the column is dictionary-encoded, else ``long``."""
    if column not in names:
        return "long"
    index = names.index(column)
    dictionary = any(
        "DICTIONARY" in encoding
        for group in range(metadata.num_row_groups)
        for encoding in metadata.row_group(group).column(index).encodings
    )
    return "decimal" if dictionary else "long"


def _null_count(metadata: Any, group: int, column: int) -> int | None:
    stats = metadata.row_group(group).column(column).statistics
    return None if stats is None or not stats.has_null_count else int(stats.null_count)


def _hadoop_root(url: str, hadoop_url: str | None) -> str:
    root = (hadoop_url or url).rstrip("/")
    scheme = root.split("://", 1)[0] if "://" in root else "file"
    if scheme == "memory":
        raise InvalidInputError(
            "Spark's file sources cannot read memory:// storage: "
            'use spark.read.format("icechunk") for it'
        )
    if scheme == "s3" and hadoop_url is None:
        return "s3a://" + root.split("://", 1)[1]  # Hadoop's S3 connector
    return root


def _row_filter(manifests: Sequence[ManifestScan], file_name: Column) -> Column | None:
    """Keep only wanted arrays' rows of manifests that hold others too (None: keep all)."""
    mixed = [m for m in manifests if not m.only_wanted_rows]
    if not mixed:
        return None
    array_id = F.col("array_id")
    keep = ~file_name.isin([m.manifest_id for m in mixed])
    for m in mixed:
        keep = keep | ((file_name == m.manifest_id) & array_id.isin(sorted(m.array_ids)))
    return keep


def _chunk_columns(
    rows: DataFrame, arrays: Sequence[Node], manifests: Sequence[ManifestScan], file_name: Column
) -> DataFrame:
    """The ``chunks`` columns, in the table's order, as expressions over manifest columns.

    Two projections: the decoded coord is named apart first (``_coord``), so the statistics'
    edge test reuses it instead of decoding again, and no output name shadows an input one.
    """
    by_id = {n.id: n for n in arrays}
    length = F.col("length")
    if any(m.lengths_missing for m in manifests):  # only then are inline bytes read at all
        length = F.coalesce(length, F.octet_length(F.col("inline_data")).cast("bigint"))
    native, virtual = F.col("chunk_id").isNotNull(), F.col("virtual_path").isNotNull()
    decoded = rows.select(
        F.col("array_id").alias("_id"),
        _decoded_coord(F.col("coord")).alias("_coord"),
        F.when(native, "native").when(virtual, "virtual").otherwise("inline").alias("_kind"),
        F.coalesce(F.col("chunk_id"), F.col("virtual_path")).alias("_location"),
        F.when(~native & ~virtual, F.lit(None)).otherwise(F.col("offset")).alias("_offset"),
        length.alias("_length"),
        file_name.alias("_manifest_id"),
        *(F.col(f.name).alias(f"_{f.name}") for f in STAT_FIELDS),
    )
    array_id, coord = F.col("_id"), F.col("_coord")
    inside = _wholly_inside(coord, array_id, by_id)
    columns = {
        "array": _by_array(array_id, {i: F.lit(n.path) for i, n in by_id.items()}),
        "coord": coord,
        **{name: F.col(f"_{name}") for name in ("kind", "location", "offset", "length")},
        "manifest_id": F.col("_manifest_id"),
        **{f.name: F.when(inside, F.col(f"_{f.name}")) for f in STAT_FIELDS},
    }
    schema = spark_schema("chunks")
    return decoded.select(*(columns[f.name].cast(f.dataType).alias(f.name) for f in schema.fields))


def _by_array(array_id: Column, values: Mapping[int, Column]) -> Column:
    """The value of each row's array: a literal when one array is read, else a map lookup."""
    if len(values) == 1:
        return next(iter(values.values()))
    pairs = chain.from_iterable((F.lit(i), v) for i, v in sorted(values.items()))
    return F.element_at(F.create_map(*pairs), array_id)


def _decoded_coord(encoded: Column) -> Column:
    """A coord's big-endian uint32 indices (format/coords.py) as ``array<bigint>``."""
    ndim = (F.octet_length(encoded) / 4).cast("int")
    return F.transform(
        F.array_repeat(F.lit(0), ndim),
        lambda _, d: F.conv(F.hex(F.substring(encoded, d * 4 + 1, 4)), 16, 10).cast("bigint"),
    )


def _wholly_inside(coord: Column, array_id: Column, arrays: Mapping[int, Node]) -> Column:
    """Whether a chunk lies wholly inside its array (statistics of edge chunks read null)."""

    def grid(attribute: str) -> Column:
        return _by_array(
            array_id,
            {
                i: F.array(*(F.lit(v).cast("bigint") for v in getattr(n.meta, attribute)))
                if n.meta is not None and getattr(n.meta, attribute)
                else F.array().cast("array<bigint>")
                for i, n in arrays.items()
            },
        )

    ends = F.zip_with(coord, grid("chunk_shape"), lambda c, size: (c + 1) * size)
    return F.forall(F.zip_with(ends, grid("shape"), lambda end, n: end <= n), lambda ok: ok)


__all__ = ["ManifestScan", "manifest_schema", "plan_manifests", "read_chunks"]

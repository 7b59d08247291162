"""One scanned NetCDF4/HDF5 file as ref rows (Arrow) plus a small summary of the file.

What a Spark executor makes of one file (``scan_file``: scan, stat, read the few values
the driver needs) and the pure step inside it (``file_rows``). Rows keep *file-local* chunk
coords; the driver places files along the concat dimension from the summaries alone (see
``placement``), so no process ever holds every file's refs.

Rows have ``ROW_SCHEMA``: a virtual chunk has ``location``, ``offset``, ``length`` and the
file's ``checksum``; a chunk the scanner copied (kerchunk inlines chunks under
``inline_threshold`` bytes, and HDF5 compact storage) has its stored bytes in
``inline_data`` instead. An unwritten chunk has no row: it reads as the fill value, as in
HDF5. The summary holds per array its ``zarr.json``, its axis along the concat dimension,
its units/calendar (inherited through CF ``bounds``, as ``combine`` does), and either its
values (arrays along the dimension small enough to copy, and always the dimension's
coordinate, whose per-file values are concatenated, converted to one set of time units) or
a digest of its values (arrays without the dimension, which must be the same in every
file); and the file's ``span``: the first and last values of the coordinate, by which the
driver orders the files (``ordering``), never by their names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..core import resolve_target
from ..errors import InvalidInputError
from ..format.paths import normalize_path
from .combine import inherited_attrs
from .importers import check_parser, fetcher, scan_with
from .materialize import read_values
from .ordering import Span, coordinate_path, span_of
from .references import ArrayRefs, ReferenceSet
from .writer import absolute_url, resolve_all

ROW_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("array", pa.string()),
        ("coord", pa.list_(pa.int64())),
        ("location", pa.string()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
        ("inline_data", pa.binary()),
        ("checksum", pa.string()),
    ]
)
# Values of an array along the dimension are carried to the driver up to this size per file:
# enough for coordinates and their bounds, never a data variable's chunks.
CARRY_MAX_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """One array of one file, as the driver needs it to place and check the file."""

    path: str
    zarr_json: str
    axis: int | None  # of the concat dimension; None: the array does not have it
    attrs: Mapping[str, Any]  # own attributes, with units/calendar inherited via CF bounds
    values: np.ndarray | None  # along the dimension and small: the file's raw values
    digest: str | None  # without the dimension: of its decoded values
    virtual_refs: int  # rows pointing into the file (the others carry inline_data)

    @property
    def doc(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.zarr_json)
        return loaded

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.doc["shape"])


@dataclass(frozen=True, slots=True)
class FileSummary:
    """What the driver learns of one file: never its refs."""

    url: str
    length: int  # along the concat dimension
    groups: Mapping[str, Mapping[str, Any]]  # group path -> attributes
    arrays: Mapping[str, ArraySummary]
    virtual_refs: int  # rows of all arrays pointing into the file
    span: Span | None  # first/last value of the dimension's coordinate (None: it has none)


def values_digest(values: np.ndarray) -> str:
    """A digest of values that does not depend on byte order or memory layout."""
    array = np.asarray(values)
    if array.dtype.kind in "biufc":
        array = array.astype(array.dtype.newbyteorder("<"))
    head = f"{array.shape}|{array.dtype.str}|".encode()
    return "sha256:" + hashlib.sha256(head + np.ascontiguousarray(array).tobytes()).hexdigest()


def file_rows(
    url: str,
    refset: ReferenceSet,
    dim: str,
    group: str,
    *,
    locations: Mapping[str, str],
    checksum: str | None,
    size: int,
    values: Mapping[str, np.ndarray],
) -> tuple[pa.Table, FileSummary]:
    """The ref rows and the summary of one file's reference set (pure: no I/O).

    ``locations`` maps the URLs of the refs to the file's canonical URL (``url``);
    ``values`` holds, per array (reference-set path), the values to carry or digest.

    Raises:
        InvalidInputError: no array has dimension ``dim``, or a ref points at another file.
    """
    base = normalize_path(group)
    inherited = inherited_attrs(refset)
    length: int | None = None
    tables, arrays, virtual = [], {}, 0
    for rel, array in sorted(refset.arrays.items()):
        path = normalize_path(f"{base}/{rel}") if rel else base
        dims = array.dimension_names or ()
        axis = dims.index(dim) if dim in dims else None
        if axis is not None and length is None:
            length = array.shape[axis]
        table = _array_rows(url, path, array, locations, checksum, size)
        pointing = table.num_rows - table.column("location").null_count
        virtual += pointing
        tables.append(table)
        own = dict(array.doc.get("attributes") or {})
        mine = values.get(rel)
        arrays[path] = ArraySummary(
            path,
            json.dumps(array.doc, sort_keys=True),
            axis,
            {**inherited.get(rel, {}), **own},
            mine if axis is not None else None,
            values_digest(mine) if axis is None and mine is not None else None,
            pointing,
        )
    if length is None:
        raise InvalidInputError(f"{url!r} has no array along the concatenation dimension {dim!r}")
    groups = {
        (normalize_path(f"{base}/{rel}") if rel else base): dict(doc.get("attributes") or {})
        for rel, doc in refset.groups.items()
    }
    rows = pa.concat_tables(tables) if tables else ROW_SCHEMA.empty_table()
    return rows, FileSummary(url, length, groups, arrays, virtual, _span(url, refset, dim, values))


def _span(
    url: str, refset: ReferenceSet, dim: str, values: Mapping[str, np.ndarray]
) -> Span | None:
    """Where the file lies along ``dim``, for the driver to order files by (``ordering``)."""
    path = coordinate_path({p: a.dimension_names for p, a in refset.arrays.items()}, dim)
    if path is None or path not in values:
        return None
    return span_of(url, values[path], refset.arrays[path].doc.get("attributes") or {})


def _array_rows(
    url: str,
    path: str,
    array: ArrayRefs,
    locations: Mapping[str, str],
    checksum: str | None,
    size: int,
) -> pa.Table:
    refs = array.refs
    n = refs.num_rows
    raw = refs.column("virtual_path").to_pylist()
    placed = [None if u is None else locations.get(u, u) for u in raw]
    others = {p for p in placed if p is not None and p != url}
    if others:
        raise InvalidInputError(
            f"{url!r}: array {path!r} has chunks in other files ({sorted(others)[0]!r}); "
            "only self-contained NetCDF4/HDF5 files can be ingested this way"
        )
    is_virtual = [p is not None for p in placed]
    # kerchunk's [url] refs (the whole file) have no length: it is the file's size.
    lengths = [
        (size if n_ is None else n_) if v else None
        for n_, v in zip(refs.column("length").to_pylist(), is_virtual, strict=True)
    ]
    return pa.table(
        {
            "file": pa.array([url] * n, pa.string()),
            "array": pa.array([path] * n, pa.string()),
            "coord": pa.array(array.coords.tolist(), pa.list_(pa.int64())),
            "location": pa.array(placed, pa.string()),
            "offset": refs.column("offset").cast(pa.int64()),
            "length": pa.array(lengths, pa.int64()),
            "inline_data": refs.column("inline_data").cast(pa.binary()),
            "checksum": pa.array([checksum if v else None for v in is_virtual], pa.string()),
        },
        schema=ROW_SCHEMA,
    )


def scan_file(
    url: str,
    dim: str,
    group: str,
    containers: Mapping[str, Mapping[str, Any]],
    *,
    storage_options: Mapping[str, Any] | None = None,
    inline_threshold: int = 500,
    parser: str = "kerchunk",
) -> tuple[pa.Table, FileSummary]:
    """Scan one file (on an executor): its ref rows with file-local coords, and its summary.
    ``parser`` reads it (``import_netcdf``'s names; ``"auto"``: the file's own format).

    Raises:
        VirtualRefRefusedError: the file (or a ref of it) lies outside ``containers``,
            checked before the file is opened.
        InvalidInputError: not a file ``parser`` reads, or none of its arrays has ``dim``.
        NotFoundError: the file does not exist.
    """
    import fsspec.core

    from ..core import file_checksum
    from .writer import container_options

    canonical = resolve_target(absolute_url(url), containers)[0]
    check_parser(parser)
    refset = scan_with(canonical, parser, storage_options, inline_threshold)
    locations = resolve_all(refset, containers, None)
    options = {**container_options(canonical, containers), **dict(storage_options or {})}
    fs, fs_path = fsspec.core.url_to_fs(canonical, **options)
    info = fs.info(fs_path)
    fetch = fetcher(containers, storage_options)
    values: dict[str, np.ndarray] = {}
    # The coordinate is read whatever its size: its first and last values order the files.
    coordinate = coordinate_path({p: a.dimension_names for p, a in refset.arrays.items()}, dim)
    for rel, array in refset.arrays.items():
        dims = array.dimension_names or ()
        itemsize = np.dtype(_numpy_dtype(array)).itemsize
        small = int(np.prod(array.shape)) * itemsize <= CARRY_MAX_BYTES
        if dim not in dims or small or rel == coordinate:
            values[rel] = read_values(array, fetch)
    return file_rows(
        canonical,
        refset,
        dim,
        group,
        locations=locations,
        checksum=file_checksum(info),
        size=int(info.get("size") or 0),
        values=values,
    )


def _numpy_dtype(array: ArrayRefs) -> np.dtype[Any]:
    from ..chunks.codec import chunk_codec

    return chunk_codec(json.dumps(array.doc).encode()).numpy_dtype


__all__ = [
    "CARRY_MAX_BYTES",
    "ROW_SCHEMA",
    "ArraySummary",
    "FileSummary",
    "file_rows",
    "scan_file",
    "values_digest",
]

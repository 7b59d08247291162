"""Virtual datasets: chunks that stay in NetCDF4/HDF5 (or any) files, referenced by byte range.

>>> from icechunk_spark import Repository                                     # doctest: +SKIP
>>> from icechunk_spark.virtual import import_netcdf                          # doctest: +SKIP
>>> repo = Repository.create("file:///repo",
...     config={"virtual_chunk_containers": {"file:///data/": {}}},
...     authorize_virtual=["file:///data/"])                                  # doctest: +SKIP
>>> session = repo.writable_session("main")                                  # doctest: +SKIP
>>> import_netcdf(session, sorted(glob("/data/tas_2022*.nc")), concat_dim="time")  # doctest: +SKIP
>>> session.commit("tas 2022 (virtual)")                                     # doctest: +SKIP
>>> xr.open_zarr(repo.readonly_session().store, consolidated=False)          # doctest: +SKIP

Front doors:

- ``import_kerchunk(session, refs, group="/")``: a kerchunk reference set, JSON (loaded, or a
  file) or Parquet (a ``refs_to_dataframe`` directory). See ``references`` for the formats
  and ``metadata`` for how v2 metadata becomes v3 ``zarr.json``.
- ``import_netcdf(session, urls, concat_dim="time", group="/")``: scan files with kerchunk's
  ``SingleHdf5ToZarr`` and concatenate them along ``concat_dim`` in the order of its
  coordinate (time), refusing overlapping times (see ``ordering``, ``combine``).
- Both return an ``ImportSummary`` and leave the commit to the caller: a whole import is
  one commit.
- ``prepare_ingest`` + ``ingest_files``: the daily update, appending only files not
  referenced yet, in one commit (see ``ingest``).
- ``open_virtual(url, parser="auto")`` + ``write_virtual_dataset(session, vds, group="/",
  append_dim=None)``: any format VirtualiZarr parses (NetCDF3, HDF5, TIFF, FITS, Zarr v2/v3,
  kerchunk), through the same container checks (see ``vds_open``, ``vds_write``).
- ``export_refs(session, "refs.json")``: the way back out, one snapshot's refs as a kerchunk
  reference set (JSON or Parquet) that fsspec's ``reference://`` reads (see ``export_refs``).

Security (seed 002's confused deputy) — where each bad ref fails:

============================================  ===========================================
ref                                           outcome
============================================  ===========================================
``file:///etc/passwd`` (not in a container)   write: ``VirtualRefRefusedError``
prefix in no container (``s3://other/x``)     write: ``VirtualRefRefusedError``
``..`` escapes, also ``%2e%2e``, ``..%2f``    write: ``VirtualRefRefusedError``
``file:///data-evil/x`` vs ``file:///data/``   write: ``VirtualRefRefusedError``
``?query``, ``#fragment``, ``\\``, controls     write: ``VirtualRefRefusedError``
container in config, not authorized by user   write: allowed; read: ``VirtualRefRefusedError``
                                              naming the prefix to pass to
                                              ``authorize_virtual``
repo config lists ``file:///``, user          read of ``file:///etc/passwd``:
authorized only ``file:///data/``             ``VirtualRefRefusedError``
symlink in a ``file://`` container leading    import (before the file is opened, so no
out of it                                     byte is inlined): ``VirtualRefRefusedError``;
                                              read: ``VirtualRefRefusedError``
``file://host/x``, decoded ``%3F``            write: ``VirtualRefRefusedError``
ref past the end of its file                  read: ``VirtualRangeError`` naming it
target changed since the ref was written      read: ``SourceChangedError``; with config
(checksum)                                    ``verify_virtual_checksums=False``: new bytes
target deleted                                read: ``NotFoundError``
============================================  ===========================================

Importers check every URL against the containers (and, for ``file://``, its real path)
before any file is opened or stat'ed.
Checksums are ``etag:<ETag>`` where the store has ETags (S3, many HTTP servers), else
``mtime:<mtime>:<size>`` (local files): a rewrite that keeps size and mtime is not detected.
"""

from ..core import CoalesceSettings, VirtualReader, VirtualRequest, file_checksum
from ..errors import SourceChangedError, VirtualRangeError, VirtualRefRefusedError
from .combine import concat_reference_sets
from .export_refs import RefsExportSummary, export_refs, kerchunk_refs
from .importers import import_kerchunk, import_netcdf, load_reference_set, scan_netcdf
from .ingest import (
    IngestPlan,
    ingest_files,
    list_files,
    open_for_files,
    plan_ingest,
    prepare_ingest,
)
from .references import ArrayRefs, ReferenceSet, parse_json_refs, parse_parquet_refs
from .vds_open import PARSERS, detect_parser, open_virtual, scan_reference_set
from .vds_write import write_virtual_dataset
from .writer import ImportSummary, write_reference_set

__all__ = [
    "PARSERS",
    "ArrayRefs",
    "CoalesceSettings",
    "ImportSummary",
    "IngestPlan",
    "ReferenceSet",
    "RefsExportSummary",
    "SourceChangedError",
    "VirtualRangeError",
    "VirtualReader",
    "VirtualRefRefusedError",
    "VirtualRequest",
    "concat_reference_sets",
    "detect_parser",
    "export_refs",
    "file_checksum",
    "import_kerchunk",
    "import_netcdf",
    "ingest_files",
    "kerchunk_refs",
    "list_files",
    "load_reference_set",
    "open_for_files",
    "open_virtual",
    "parse_json_refs",
    "parse_parquet_refs",
    "plan_ingest",
    "prepare_ingest",
    "scan_netcdf",
    "scan_reference_set",
    "write_reference_set",
    "write_virtual_dataset",
]

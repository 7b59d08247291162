"""Front doors: import kerchunk reference sets, or scan NetCDF4/HDF5 files, into a session."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..core import resolve_target
from ..errors import IcechunkSparkError, InvalidInputError, NotFoundError
from ..progress import Progress, track
from .combine import DEFAULT_MATERIALIZE_MAX_BYTES, concat_reference_sets
from .materialize import Fetch, read_values
from .metadata import UNMASKED_FILL
from .ordering import Span, coordinate_path, order_spans, span_of
from .references import ReferenceSet, parse_json_refs, parse_parquet_refs
from .vds_open import PARSERS, ParserName, detect_parser, scan_reference_set
from .writer import ImportSummary, absolute_url, container_options, resolve_all, write_reference_set

if TYPE_CHECKING:
    from ..core import Session

KerchunkRefs = Mapping[str, Any] | str | Path


def import_kerchunk(
    session: Session,
    refs: KerchunkRefs,
    group: str = "/",
    *,
    storage_options: Mapping[str, Any] | None = None,
    checksums: bool = True,
    overwrite: bool = False,
    remote_protocol: str | None = None,
) -> ImportSummary:
    """Import a kerchunk reference set under ``group`` of a writable session.

    ``refs``: a loaded JSON reference set (``{"version": 1, "refs": {...}}`` or a flat
    dict), the URL/path of a JSON file, or the URL/path of a Parquet reference directory
    (``kerchunk.df.refs_to_dataframe`` output). ``storage_options`` are used to read the
    reference set and to stat the referenced files (for checksums and whole-file sizes).
    The caller commits.

    >>> import_kerchunk(session, "refs.json", group="/era5")   # doctest: +SKIP
    >>> session.commit("import ERA5 references")               # doctest: +SKIP

    Raises:
        VirtualRefRefusedError: a reference points outside the virtual chunk containers.
        AlreadyExistsError: an imported array exists already (``overwrite=True`` replaces it).
        InvalidInputError: the reference set is malformed or uses unsupported features.
    """
    refset = load_reference_set(refs, storage_options)
    return write_reference_set(
        session,
        refset,
        group,
        storage_options=storage_options,
        checksums=checksums,
        overwrite=overwrite,
        remote_protocol=remote_protocol,
    )


def load_reference_set(
    refs: KerchunkRefs, storage_options: Mapping[str, Any] | None = None
) -> ReferenceSet:
    """Parse a kerchunk reference set given as a mapping, a JSON file, or a Parquet directory."""
    if isinstance(refs, Mapping):
        return parse_json_refs(refs)
    import fsspec.core

    url = str(refs)
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    if fs.isdir(path):
        return parse_parquet_refs(url, storage_options)
    loaded = json.loads(fs.cat_file(path))
    if not isinstance(loaded, dict):
        raise InvalidInputError(f"{url!r} is not a kerchunk JSON reference set")
    return parse_json_refs(loaded)


# What ``parser=`` takes: kerchunk's HDF5 scanner, or VirtualiZarr's parsers by name (its
# "kerchunk" parser reads reference files, which ``import_kerchunk`` imports).
IMPORT_PARSERS = ("kerchunk", "virtualizarr", "auto", *(p for p in PARSERS if p != "kerchunk"))


def check_parser(parser: str) -> None:
    """Raises ``InvalidInputError`` for a name ``import_netcdf`` does not take."""
    if parser not in IMPORT_PARSERS:
        raise InvalidInputError(
            f"parser must be one of {', '.join(IMPORT_PARSERS)}, not {parser!r}"
        )


def scan_with(
    url: str,
    parser: str,
    storage_options: Mapping[str, Any] | None = None,
    inline_threshold: int = 500,
) -> ReferenceSet:
    """One file's reference set, read by ``parser`` (see ``import_netcdf``)."""
    if parser == "kerchunk":
        refs = scan_netcdf(url, storage_options=storage_options, inline_threshold=inline_threshold)
        return parse_json_refs(refs)
    name = "hdf5" if parser == "virtualizarr" else parser
    return scan_reference_set(url, cast(ParserName, name))


def scan_netcdf(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    inline_threshold: int = 500,
) -> dict[str, Any]:
    """kerchunk's reference set of one NetCDF4/HDF5 file (``kerchunk.hdf.SingleHdf5ToZarr``).

    Chunks smaller than ``inline_threshold`` bytes are copied into the references.
    """
    from kerchunk.hdf import SingleHdf5ToZarr

    try:
        scanner = SingleHdf5ToZarr(
            url,
            storage_options=dict(storage_options or {}),
            inline_threshold=inline_threshold,
            error="raise",
        )
    except FileNotFoundError:
        raise NotFoundError(f"{url!r} does not exist") from None
    except (OSError, ValueError) as exc:  # h5py: "file signature not found"...
        raise InvalidInputError(f"{url!r} is not a NetCDF4/HDF5 file: {exc}") from exc
    try:
        refs: dict[str, Any] = scanner.translate()
        _storage_fill_values(refs, scanner._h5f)
    except IcechunkSparkError:
        raise
    except Exception as exc:  # kerchunk raises anything on what it cannot translate
        raise InvalidInputError(
            f"{url!r}: kerchunk cannot scan this NetCDF4/HDF5 file: {exc}"
        ) from exc
    finally:
        scanner.close()
    return refs


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def check_readable(url: str, parser: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Refuse a file ``parser`` cannot read (see ``import_netcdf``), before anything is made.

    Raises:
        InvalidInputError: naming the file and what it is.
        NotFoundError: the file does not exist.
    """
    check_parser(parser)
    if parser in ("kerchunk", "virtualizarr", "hdf5"):
        check_hdf5(url, storage_options)
        return
    found = detect_parser(url, storage_options)  # refuses what no parser reads (GRIB, HDF4)
    if parser != "auto" and found != parser:
        raise InvalidInputError(
            f"{url!r} looks like a {found} file, not {parser}: pass --parser auto"
        )


def check_hdf5(url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Refuse a file without the HDF5 signature (NetCDF4 files are HDF5 files).

    The signature is at byte 0, or after a user block of 512, 1024, 2048... bytes.

    Raises:
        InvalidInputError: not an HDF5 file (a NetCDF3 file, text...), naming it.
        NotFoundError: the file does not exist.
    """
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    try:
        size = int(fs.size(path))
        offset = 0
        while offset + 8 <= size:
            if bytes(fs.cat_file(path, start=offset, end=offset + 8)) == HDF5_SIGNATURE:
                return
            offset = 512 if offset == 0 else offset * 2
    except FileNotFoundError:
        raise NotFoundError(f"{url!r} does not exist") from None
    raise InvalidInputError(
        f"{url!r} is not a NetCDF4/HDF5 file (no HDF5 signature); only NetCDF4/HDF5 files "
        "can be imported (convert NetCDF3 files with nccopy -k nc4)"
    )


def _storage_fill_values(refs: dict[str, Any], h5file: Any) -> None:
    """Give NetCDF variables the fill value HDF5 returns for their unwritten chunks.

    kerchunk leaves ``fill_value`` null for NetCDF variables (so that xarray does not mask
    them), which zarr v3 would make 0. HDF5 itself answers an unwritten chunk with the
    dataset's fill value (``_FillValue``, else the NetCDF default fill of the type), and
    xarray masks only an explicit ``_FillValue``: so the value is kept, flagged
    ``UNMASKED_FILL`` so that no ``_FillValue`` attribute is added for it.
    """
    entries = refs.get("refs", refs)
    for key, text in list(entries.items()):
        if not key.endswith(".zarray"):
            continue
        zarray = json.loads(text) if isinstance(text, str | bytes) else dict(text)
        if zarray.get("fill_value") is not None:
            continue
        dataset = h5file.get(key[: -len(".zarray")].rstrip("/") or "/")
        if dataset is None or getattr(dataset, "dtype", None) is None:
            continue
        if dataset.dtype.kind not in "biuf":
            continue
        from kerchunk.utils import encode_fill_value

        zarray["fill_value"] = encode_fill_value(dataset.fillvalue, dataset.dtype)
        zarray[UNMASKED_FILL] = True
        entries[key] = json.dumps(zarray)


def import_netcdf(
    session: Session,
    urls: Sequence[str] | str,
    concat_dim: str | None = "time",
    group: str = "/",
    *,
    storage_options: Mapping[str, Any] | None = None,
    checksums: bool = True,
    overwrite: bool = False,
    inline_threshold: int = 500,
    materialize_max_bytes: int = DEFAULT_MATERIALIZE_MAX_BYTES,
    max_workers: int = 4,
    scans: Sequence[Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
    parser: str = "kerchunk",
) -> ImportSummary:
    """Scan NetCDF4/HDF5 files and import them as one virtual dataset under ``group``.

    Several files are concatenated along ``concat_dim`` in the order of its coordinate's
    values, whatever their names (see ``ordering``; files whose times overlap are refused),
    then combined (see ``combine``): data stays in the files (virtual refs), the coordinate
    of ``concat_dim`` is copied (concatenated values). Everything lands in the session:
    commit once.

    >>> import_netcdf(session, [f"file:///data/tas_2022{m:02d}.nc" for m in range(1, 13)],
    ...               concat_dim="time")                              # doctest: +SKIP
    >>> session.commit("tas 2022, virtual")                           # doctest: +SKIP

    ``scans``: the files' reference sets already made with :func:`scan_netcdf`, one per url
    (Spark executors scan in parallel, the driver combines); the files are not opened again.
    ``progress`` hears one step per file scanned.

    ``parser``: who reads the files. ``"kerchunk"`` (NetCDF4/HDF5: kerchunk's
    ``SingleHdf5ToZarr`` over h5py; chunks under ``inline_threshold`` bytes copied in), or one
    of VirtualiZarr's (the ``virtualizarr`` extra; every chunk stays a ref): ``"auto"`` (each
    file's own, by its magic bytes: a folder may mix formats), ``"hdf5"`` (also
    ``"virtualizarr"``), ``"netcdf3"``, ``"tiff"``, ``"fits"``, ``"zarr"``, ``"dmrpp"`` (see
    ``open_virtual``). Every scan then goes through the same ordering, combining and writing.

    Raises:
        VirtualRefRefusedError: a file lies outside the virtual chunk containers (checked
            before any file is opened).
        CoordinateOrderError: the files' ``concat_dim`` values overlap or do not increase.
        InvalidInputError: the files cannot be concatenated along ``concat_dim``.
    """
    files = [urls] if isinstance(urls, str) else list(urls)
    if not files:
        raise InvalidInputError("import_netcdf needs at least one file")
    containers = session.handle.config.virtual_chunk_containers
    absolute = [resolve_target(absolute_url(u), containers)[0] for u in files]  # refuse first

    check_parser(parser)

    def scan(url: str) -> ReferenceSet:
        return scan_with(url, parser, storage_options, inline_threshold)

    if scans is not None:
        if len(scans) != len(absolute):
            raise InvalidInputError(f"{len(scans)} scans given for {len(absolute)} files")
        sets = [parse_json_refs(refs) for refs in scans]
    else:
        # h5py holds a global lock, so threads mostly overlap the I/O of remote files.
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(absolute)))) as pool:
            scanned = pool.map(scan, absolute)
            sets = list(track(progress, "scanning files", scanned, len(absolute)))
    for refset in sets:
        resolve_all(refset, containers, None)  # kerchunk might name other files: refuse them
    if concat_dim is None:
        if len(sets) > 1:
            raise InvalidInputError("several files need a concat_dim to combine them along")
        combined = sets[0]
    else:
        fetch = fetcher(containers, storage_options)
        spans = _spans(sets, absolute, concat_dim, fetch, max_workers)
        order = order_spans(spans, concat_dim, names=absolute)  # by time, not by name
        combined = concat_reference_sets(
            [sets[k] for k in order],
            concat_dim,
            fetch,
            materialize_max_bytes=materialize_max_bytes,
            names=[absolute[k] for k in order],
        )
    return write_reference_set(
        session,
        combined,
        group,
        storage_options=storage_options,
        checksums=checksums,
        overwrite=overwrite,
    )


def _spans(
    sets: Sequence[ReferenceSet], names: Sequence[str], dim: str, fetch: Fetch, workers: int
) -> list[Span | None]:
    """Each file's stretch of ``dim``'s coordinate (``None``: the file has none)."""

    def span(refset: ReferenceSet, name: str) -> Span | None:
        path = coordinate_path({p: a.dimension_names for p, a in refset.arrays.items()}, dim)
        if path is None:
            return None
        array = refset.arrays[path]
        return span_of(name, read_values(array, fetch), array.doc.get("attributes") or {})

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(sets)))) as pool:
        return list(pool.map(span, sets, names))


def fetcher(
    containers: Mapping[str, Mapping[str, Any]], storage_options: Mapping[str, Any] | None
) -> Fetch:
    """Reads bytes of (already container-checked) URLs for values that get materialized."""
    import fsspec.core

    filesystems: dict[str, Any] = {}
    lock = threading.Lock()

    def fetch(url: str, offset: int, length: int | None) -> bytes:
        absolute = resolve_target(absolute_url(url), containers)[0]
        scheme = absolute.partition("://")[0]
        with lock:
            if scheme not in filesystems:
                options = {**container_options(absolute, containers), **dict(storage_options or {})}
                filesystems[scheme] = fsspec.core.url_to_fs(absolute, **options)[0]
            fs = filesystems[scheme]
        end = None if length is None else offset + length
        return bytes(fs.cat_file(absolute, start=offset, end=end))

    return fetch

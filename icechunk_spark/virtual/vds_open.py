"""``open_virtual``: any file VirtualiZarr can parse, as a virtual dataset, through one call.

The CLI and the Spark ingest job call this one function; ``parser="auto"`` picks the parser
from the file's first bytes (its magic number), else from its name:

=========  ==========================================  ==============================
parser     recognized by                               VirtualiZarr parser
=========  ==========================================  ==============================
hdf5       ``\\x89HDF\\r\\n\\x1a\\n`` (NetCDF4 too)         ``HDFParser``
netcdf3    ``CDF\\x01``, ``CDF\\x02``, ``CDF\\x05``        ``NetCDF3Parser`` (kerchunk)
tiff       ``II*\\0``, ``MM\\0*`` (and BigTIFF's ``+``)    ``virtual_tiff.VirtualTIFF``
fits       ``SIMPLE  =``                               ``FITSParser`` (astropy)
zarr       a directory with ``zarr.json``, ``.zgroup``  ``ZarrParser`` (v2 and v3)
           or ``.zarray``
kerchunk   a JSON object, or a directory whose          ``KerchunkJSONParser``,
           ``.zmetadata`` has ``record_size``           ``KerchunkParquetParser``
dmrpp      ``<?xml`` with a ``.dmrpp`` name             ``DMRPPParser``
=========  ==========================================  ==============================

GRIB (``GRIB``) and HDF4 (``\\x0e\\x03\\x13\\x01``) are recognized to be refused by name:
VirtualiZarr 2.5.1 has no parser for them.

Files are read through an obstore ``ObjectStoreRegistry`` (what VirtualiZarr 2.x parsers
take): ``file://`` URLs through a ``LocalStore``, others through ``obstore.store.from_url``
of their bucket. With ``containers`` (a repository's virtual chunk containers) the URL is
checked before any byte is read, as our importers do.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Literal
from urllib.parse import urlparse

from ..core import resolve_target
from ..errors import IcechunkSparkError, InvalidInputError, NotFoundError
from .references import ArrayRefs, ReferenceSet
from .vds_fills import V2_PARSERS, masked_docs, restore_masking, v2_fill_values
from .vds_refs import encode_attrs, is_manifest_array, require_virtualizarr, variable_refs
from .writer import absolute_url

ParserName = Literal["auto", "hdf5", "netcdf3", "tiff", "fits", "zarr", "kerchunk", "dmrpp"]
PARSERS = ("hdf5", "netcdf3", "tiff", "fits", "zarr", "kerchunk", "dmrpp")
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89HDF\r\n\x1a\n", "hdf5"),
    (b"CDF\x01", "netcdf3"),
    (b"CDF\x02", "netcdf3"),
    (b"CDF\x05", "netcdf3"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),
    (b"MM\x00+", "tiff"),
    (b"SIMPLE  =", "fits"),
)
_UNSUPPORTED = {b"GRIB": "GRIB", b"\x0e\x03\x13\x01": "HDF4"}
_EXTENSIONS = {
    ".nc": "hdf5",
    ".nc4": "hdf5",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".fits": "fits",
    ".fit": "fits",
    ".zarr": "zarr",
    ".json": "kerchunk",
    ".parq": "kerchunk",
    ".dmrpp": "dmrpp",
}


def open_virtual(
    url: str,
    parser: ParserName = "auto",
    *,
    registry: Any = None,
    containers: Mapping[str, Any] | None = None,
    parser_options: Mapping[str, Any] | None = None,
    loadable_variables: Iterable[str] | None = None,
    drop_variables: Iterable[str] | None = None,
    decode_times: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """``url`` as a VirtualiZarr virtual ``xr.Dataset`` (write it with ``write_virtual_dataset``).

    ``parser``: one of ``PARSERS``, or ``"auto"`` (see the module docstring).
    ``registry``: an ``obspec_utils`` ``ObjectStoreRegistry``; default: one for ``url``.
    ``containers``: refuse ``url`` outside them before reading it.
    ``parser_options``: keyword arguments of the VirtualiZarr parser (``group=``...).
    ``loadable_variables``: as VirtualiZarr's (default: the dimension coordinates).

    >>> vds = open_virtual("file:///data/obs_1987.nc")               # NetCDF3: auto
    ... # doctest: +SKIP

    Raises:
        InvalidInputError: virtualizarr (the extra) is missing, the format is not
            recognized or has no parser, or the parser cannot read the file.
        VirtualRefRefusedError: ``url`` lies outside ``containers``.
        NotFoundError: ``url`` does not exist.
    """
    url = absolute_url(url)
    if containers is not None:
        url = resolve_target(url, containers)[0]
    virtualizarr = require_virtualizarr()
    name = detect_parser(url, storage_options) if parser == "auto" else parser
    vz_parser = make_parser(name, url, storage_options, parser_options)
    with parser_errors(url, name):
        vds = virtualizarr.open_virtual_dataset(
            url,
            registry=registry if registry is not None else make_registry(url),
            parser=vz_parser,
            loadable_variables=None if loadable_variables is None else list(loadable_variables),
            drop_variables=drop_variables,
            decode_times=decode_times,
        )
        if name in V2_PARSERS:  # the v2 fill values VirtualiZarr's conversion stops masking
            restore_masking(vds, v2_fill_values(url, name, storage_options))
        return vds


@contextlib.contextmanager
def parser_errors(url: str, name: str) -> Iterator[None]:
    """What a VirtualiZarr parser raises, as our errors."""
    try:
        yield
    except FileNotFoundError:
        raise NotFoundError(f"{url!r} does not exist") from None
    except IcechunkSparkError:
        raise
    except Exception as exc:  # each parser raises its own kinds on what it cannot read
        raise InvalidInputError(f"{url!r}: the {name} parser cannot read it: {exc}") from exc


def make_registry(url: str) -> Any:
    """An obstore registry able to read ``url``: a ``LocalStore`` for ``file://``."""
    from obspec_utils.registry import ObjectStoreRegistry

    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        from obstore.store import LocalStore

        return ObjectStoreRegistry({"file://": LocalStore()})
    from obstore.store import from_url

    prefix = f"{parsed.scheme}://{parsed.netloc}"
    return ObjectStoreRegistry({prefix: from_url(prefix)})


def make_parser(
    name: str,
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """The VirtualiZarr parser called ``name``, configured with ``options``."""
    require_virtualizarr()
    kwargs = dict(options or {})
    if name == "tiff":
        try:
            from virtual_tiff import VirtualTIFF
        except ImportError as exc:
            raise InvalidInputError(
                f"TIFF files need virtual-tiff: pip install 'icechunk-spark[virtualizarr]' ({exc})"
            ) from exc
        kwargs.setdefault("ifd", 0)  # one image as one dataset; ifd=None: one group per image
        return VirtualTIFF(**kwargs)
    from virtualizarr import parsers

    if name == "kerchunk":
        is_dir = _is_dir(url, storage_options)
        return (parsers.KerchunkParquetParser if is_dir else parsers.KerchunkJSONParser)(**kwargs)
    classes = {
        "hdf5": parsers.HDFParser,
        "netcdf3": parsers.NetCDF3Parser,
        "fits": parsers.FITSParser,
        "zarr": parsers.ZarrParser,
        "dmrpp": parsers.DMRPPParser,
    }
    if name not in classes:
        raise InvalidInputError(f"unknown parser {name!r}; expected auto or one of {PARSERS}")
    return classes[name](**kwargs)


def detect_parser(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """The parser for ``url``: by its magic bytes, a directory's marker files, else its name.

    Raises:
        InvalidInputError: an unrecognized or unsupported format (GRIB, HDF4), naming it.
        NotFoundError: ``url`` does not exist.
    """
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    if not fs.exists(path):
        raise NotFoundError(f"{url!r} does not exist")
    if fs.isdir(path):
        return _directory_parser(fs, path, url)
    head = bytes(fs.cat_file(path, start=0, end=16))
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    for magic, label in _UNSUPPORTED.items():
        if head.startswith(magic):
            raise InvalidInputError(
                f"{url!r} is a {label} file; VirtualiZarr 2.5.1 has no {label} parser"
            )
    suffix = "." + path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if head.lstrip().startswith(b"{"):
        return "kerchunk"
    if head.lstrip().startswith(b"<") and suffix == ".dmrpp":
        return "dmrpp"
    if suffix in _EXTENSIONS and suffix not in (".json", ".dmrpp"):
        return _EXTENSIONS[suffix]
    raise InvalidInputError(
        f"{url!r}: cannot tell its format (first bytes {head[:8]!r}); pass parser= one of {PARSERS}"
    )


def _directory_parser(fs: Any, path: str, url: str) -> str:
    base = path.rstrip("/")
    if any(fs.exists(f"{base}/{marker}") for marker in ("zarr.json", ".zgroup", ".zarray")):
        return "zarr"
    if fs.exists(f"{base}/.zmetadata"):
        try:
            head = json.loads(fs.cat_file(f"{base}/.zmetadata"))
        except ValueError:
            head = {}
        if isinstance(head, dict) and "record_size" in head:
            return "kerchunk"
    raise InvalidInputError(f"{url!r} is a directory but neither a Zarr store nor kerchunk Parquet")


def _is_dir(url: str, storage_options: Mapping[str, Any] | None) -> bool:
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return bool(fs.isdir(path))


def scan_reference_set(
    url: str,
    parser: ParserName = "hdf5",
    *,
    registry: Any = None,
    parser_options: Mapping[str, Any] | None = None,
) -> ReferenceSet:
    """One file's groups and arrays, all virtual, as our ``ReferenceSet`` (what
    ``import_netcdf(parser="virtualizarr")`` combines and orders like kerchunk's scans).

    Every group of the file comes along (VirtualiZarr's data tree), no variable is loaded.

    Raises:
        InvalidInputError: as ``open_virtual``; or a variable the parser did not virtualize.
    """
    url = absolute_url(url)
    virtualizarr = require_virtualizarr()
    name = detect_parser(url) if parser == "auto" else parser
    with parser_errors(url, name):
        tree = virtualizarr.open_virtual_datatree(
            url,
            registry=registry if registry is not None else make_registry(url),
            parser=make_parser(name, url, None, parser_options),
            loadable_variables=[],
        )
    groups: dict[str, dict[str, Any]] = {}
    arrays: dict[str, ArrayRefs] = {}
    for key, node in tree.subtree_with_keys:
        rel = "" if key in (".", "/") else str(key).strip("/")
        dataset = node.to_dataset(inherit=False)
        groups[rel] = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": encode_attrs(dataset.attrs),
        }
        for var_name, variable in dataset.variables.items():
            path = f"{rel}/{var_name}" if rel else str(var_name)
            if not is_manifest_array(variable.data):
                raise InvalidInputError(f"{url!r}: the {name} parser did not virtualize {path!r}")
            arrays[path] = variable_refs(var_name, variable, path)
    if name in V2_PARSERS:  # as open_virtual: the masking the v2 -> v3 conversion drops
        roots = {p: a.doc for p, a in arrays.items() if "/" not in p}
        for path, doc in masked_docs(roots, v2_fill_values(url, name)).items():
            arrays[path] = replace(arrays[path], doc=doc)
    return ReferenceSet(groups, arrays)

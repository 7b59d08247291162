"""The command line: every command, its arguments and its help."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..virtual.importers import IMPORT_PARSERS
from . import commands as c
from . import transfer

Handler = Callable[[argparse.Namespace], Any]


def add_import_options(p: argparse.ArgumentParser) -> None:
    """How files become a virtual dataset: the same options for ``icechunk-spark import`` and
    the Spark job ``jobs/ingest_virtual.py``."""
    p.add_argument(
        "--parser",
        default="kerchunk",
        choices=IMPORT_PARSERS,
        help="who reads the files: kerchunk's NetCDF4/HDF5 scanner (default), or a VirtualiZarr "
        "parser (the virtualizarr extra): auto (each file's own, by its first bytes, so a "
        "folder may mix formats), hdf5, netcdf3, tiff, fits, zarr, dmrpp",
    )
    p.add_argument("--concat-dim", default="time", help="dimension to concatenate along")
    p.add_argument("--group", default="/", help="group holding the dataset")
    p.add_argument("--container", help="virtual chunk container (default: the files' folder)")
    p.add_argument(
        "--files-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option for reading the files (repeatable)",
    )


def count_arg(text: str) -> int:
    """``-n``: a count, never negative (``-n -1`` printed nothing and exited 0)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a count >= 0")
    return value


def days_arg(text: str) -> float:
    """``--days``: a non-negative age (``-1`` put the cut-off in the future)."""
    value = float(text)
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text} is negative (or not a number); give days >= 0")
    return value


def add_storage_options(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """A repeatable ``KEY=VALUE`` storage option (``parse_storage_options`` reads them)."""
    parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=help_text)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "url",
        help="repository URL: file:///path, s3://, gs:// or az://container/prefix, https:// "
        "(read-only)",
    )
    add_storage_options(
        common,
        "--storage-option",
        "storage option (repeatable), e.g. endpoint_url=http://127.0.0.1:9000",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    common.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr (default: when stderr is a terminal)",
    )

    parser = argparse.ArgumentParser(prog="icechunk-spark", description=__doc__)
    parser.set_defaults(json=False, debug=False, progress=None)
    sub = parser.add_subparsers(required=True, metavar="command")

    def add(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = add("init", c.cmd_init, "create a repository")
    p.add_argument(
        "--manifests", help="manifest config YAML (default: conf/manifests.yaml's defaults)"
    )
    p = add("log", c.cmd_log, "list snapshots, newest first")
    p.add_argument("ref", nargs="?", help="branch, tag or snapshot (default: --branch)")
    p.add_argument("--branch", default="main")
    p.add_argument("-n", type=count_arg, help="at most this many")
    p.add_argument(
        "--changes", action="store_true", help="list each snapshot's node changes (moves too)"
    )
    p = add("branch", c.cmd_branch, "list, create, delete or reset branches")
    p.add_argument(
        "action", nargs="?", default="list", choices=["list", "create", "delete", "reset"]
    )
    p.add_argument("name", nargs="?")
    p.add_argument("target", nargs="?", help="branch, tag or snapshot to point at")
    p = add("tag", c.cmd_tag, "list, create or delete tags")
    p.add_argument("action", nargs="?", default="list", choices=["list", "create", "delete"])
    p.add_argument("name", nargs="?")
    p.add_argument("target", nargs="?")
    p = add("ls", c.cmd_ls, "tree of groups and arrays")
    p.add_argument("path", nargs="?", default="")
    p.add_argument("--ref", help="branch, tag or snapshot (default: main)")
    p = add("show", c.cmd_show, "one array (path) or snapshot (id)")
    p.add_argument("target")
    p.add_argument("--ref")
    p = add("diff", c.cmd_diff, "what changed between two branches, tags or snapshots")
    p.add_argument("source")
    p.add_argument("target")
    p = add(
        "chunks", c.cmd_chunks, "initialized chunks per array; --plot writes a PNG of the inventory"
    )
    p.add_argument("--array")
    p.add_argument("--plot", metavar="PNG")
    p.add_argument("--ref")
    p = add(
        "sources",
        c.cmd_sources,
        "files a snapshot's virtual refs point into, with ref count and bytes per file",
    )
    p.add_argument("--ref", help="branch, tag or snapshot (default: main)")
    p = add("config", c.cmd_config, "show, validate or set the manifest config")
    p.add_argument("action", choices=["show", "validate", "set"])
    p.add_argument("file", nargs="?")
    p = add(
        "squash",
        c.cmd_squash,
        "rewrite a range of a branch's history (FROM..TO, both included) into one snapshot",
    )
    p.add_argument("from_ref", metavar="FROM", help="oldest snapshot of the range")
    p.add_argument("to_ref", metavar="TO", help="newest snapshot of the range")
    p.add_argument("--branch", default="main")
    p.add_argument("-m", "--message", required=True)
    for name, handler, help_text in (
        (
            "clone",
            transfer.cmd_clone,
            "copy the whole repository (every snapshot, branch, tag) to DEST, of any backend; "
            "run again after a kill to resume",
        ),
        (
            "export",
            transfer.cmd_export,
            "write one snapshot to DEST as plain Zarr v3 (zarr opens it without icechunk-spark)",
        ),
        (
            "export-refs",
            transfer.cmd_export_refs,
            "write one snapshot's chunk refs to DEST as a kerchunk reference set (fsspec's "
            "reference:// and xarray's engine='kerchunk' read it without icechunk-spark)",
        ),
    ):
        p = add(name, handler, help_text)
        p.add_argument("dest", help="where to: a URL or path, as for the repository")
        add_storage_options(p, "--dest-option", "storage option of DEST (repeatable)")
        if name != "export-refs":  # refs are written in one piece: nothing to parallelize
            p.add_argument("--workers", type=int, default=16, help="parallel copies (default 16)")
        if name != "clone":
            p.add_argument(
                "--ref", "--snapshot", dest="ref", help="branch, tag or snapshot (default: main)"
            )
        if name == "export-refs":
            # Not argparse choices: an unknown format is refused by export_refs, in our words.
            p.add_argument(
                "--format",
                default="kerchunk-json",
                help="kerchunk-json (one JSON file, the default) or kerchunk-parquet (a folder)",
            )
            p.add_argument(
                "--zarr-format",
                type=int,
                default=2,
                help="keys and metadata of Zarr 2 (default: what kerchunk's readers expect) or 3 "
                "(kerchunk-json only: zarr.json as stored, read by zarr >= 3 alone)",
            )
        if name == "export":
            p.add_argument(
                "--materialize", action="store_true", help="copy virtual chunks' bytes too"
            )
            p.add_argument(
                "--authorize",
                action="append",
                default=[],
                metavar="PREFIX",
                help="a virtual chunk container to read from, for --materialize (repeatable)",
            )
    p = add("status", c.cmd_status, "show the repository's status, or set it (read-only, online)")
    p.add_argument("--set", dest="availability", choices=["online", "read-only"])
    p.add_argument("--reason", default="", help="why it is read-only: writers refuse with it")
    for name, handler, help_text in (
        ("expire", c.cmd_expire, "expire old snapshots"),
        ("gc", c.cmd_gc, "delete unreachable objects"),
    ):
        p = add(name, handler, help_text)
        p.add_argument("--older-than", help="ISO date-time cut-off")
        p.add_argument(
            "--days", type=days_arg, default=7.0, help="cut-off this many days ago (default 7)"
        )
        if name == "expire":
            p.add_argument("--delete-branches", action="store_true")
            p.add_argument("--delete-tags", action="store_true")
        else:
            p.add_argument("--dry-run", action="store_true")
    p = add(
        "import",
        c.cmd_import,
        "import files (NetCDF4/HDF5, and with --parser NetCDF3, TIFF, FITS, Zarr...) as one "
        "virtual dataset, appending files not referenced yet",
    )
    p.add_argument("files", help="glob of files: a local path, file:// or s3://")
    add_import_options(p)
    p.add_argument("--branch", default="main")
    p.add_argument("-m", "--message")
    p = add(
        "rewrite-manifests",
        c.cmd_rewrite_manifests,
        "repack every manifest in one commit, under a new manifest config if given",
    )
    p.add_argument("file", nargs="?", help="manifest config YAML (default: the repository's)")
    p.add_argument("--branch", default="main")
    p.add_argument("-m", "--message", default="rewrite manifests")
    return parser

"""Commands that copy a repository elsewhere: ``clone`` (all of it), ``export`` (one
snapshot as plain Zarr v3) and ``export-refs`` (one snapshot's chunk refs, for kerchunk
readers)."""

from __future__ import annotations

import argparse
from typing import Any

from ..export import export_zarr
from ..ops.clone import clone
from ..repository import Repository
from ..storage import open_storage, parse_storage_options
from .commands import session_at
from .output import progress_bars


def destination(args: argparse.Namespace) -> Any:
    return open_storage(args.dest, **parse_storage_options(args.dest_option))


def cmd_clone(args: argparse.Namespace) -> dict[str, Any]:
    source = open_storage(args.url, **parse_storage_options(args.storage_option))
    summary = clone(source, destination(args), workers=args.workers, progress=progress_bars(args))
    data = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    text = (
        f"cloned {summary.snapshots} snapshots to {args.dest}: {summary.objects_copied} objects "
        f"({summary.bytes_copied:,} bytes) copied, {summary.objects_already_there} there already"
    )
    return {"text": text, "json": data}


def cmd_export(args: argparse.Namespace) -> dict[str, Any]:
    repo = Repository.open(
        args.url,
        storage_options=parse_storage_options(args.storage_option),
        authorize_virtual=args.authorize or None,
    )
    session = session_at(repo, args.ref)
    summary = export_zarr(
        session,
        destination(args),
        materialize=args.materialize,
        workers=args.workers,
        progress=progress_bars(args),
    )
    data = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    text = (
        f"exported snapshot {session.snapshot_id} to {args.dest}: {summary.nodes} nodes, "
        f"{summary.chunks} chunks ({summary.bytes:,} bytes, {summary.virtual_chunks} virtual)"
    )
    return {"text": text, "json": data}


def cmd_export_refs(args: argparse.Namespace) -> dict[str, Any]:
    # Imported here, as commands.py imports the virtual package: every other command starts
    # without it (68 ms of imports).
    from ..virtual.export_refs import export_refs

    repo = Repository.open(args.url, storage_options=parse_storage_options(args.storage_option))
    session = session_at(repo, args.ref)
    summary = export_refs(
        session,
        args.dest,
        format=args.format,
        zarr_format=args.zarr_format,
        storage_options=parse_storage_options(args.dest_option),
    )
    data = {"snapshot": session.snapshot_id}
    data.update({k: getattr(summary, k) for k in summary.__dataclass_fields__})
    text = (
        f"exported the refs of snapshot {session.snapshot_id} to {args.dest} ({summary.format}, "
        f"Zarr v{summary.zarr_format} keys): {summary.nodes} nodes, {summary.chunks} chunks "
        f"({summary.native_chunks} native, {summary.inline_chunks} inline, "
        f"{summary.virtual_chunks} virtual)"
    )
    return {"text": text, "json": data}

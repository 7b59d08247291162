"""The commands: each takes the parsed arguments and returns what to print."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..core import Session
from ..errors import InvalidInputError, NotFoundError
from ..format.keys import txlog_key
from ..format.paths import normalize_path
from ..format.txlog import decode_txlog
from ..repository import Repository
from ..storage import parse_storage_options
from .output import progress_bars


# -- opening ----------------------------------------------------------------------------
def open_repo(args: argparse.Namespace) -> Repository:
    return Repository.open(args.url, storage_options=parse_storage_options(args.storage_option))


def session_at(repo: Repository, ref: str | None) -> Session:
    """A read-only session at a branch, tag or snapshot id (tried in that order)."""
    if ref is None:
        return repo.readonly_session(branch="main")
    state = repo.state()
    if ref in state.branches():
        return repo.readonly_session(branch=ref)
    if ref in state.tags():
        return repo.readonly_session(tag=ref)
    if ref in state.snapshots:
        return repo.readonly_session(snapshot_id=ref)
    raise NotFoundError(f"{ref!r} is not a branch, tag or snapshot id of {repo.storage.url}")


def snapshot_of(repo: Repository, ref: str) -> str:
    return session_at(repo, ref).snapshot_id


# -- commands ---------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> dict[str, Any]:
    config = None
    if args.manifests:
        config = {"manifests": read_yaml(args.manifests)}
    repo = Repository.create(
        args.url, config=config, storage_options=parse_storage_options(args.storage_option)
    )
    tip = repo.lookup_branch("main")
    return {
        "text": f"created repository {repo.storage.url} (main at {tip})",
        "json": {"url": repo.storage.url, "snapshot": tip},
    }


def cmd_log(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    entries = []
    for n, info in enumerate(repo.ancestry(snapshot_id=snapshot_of(repo, args.ref or args.branch))):
        if args.n is not None and n >= args.n:
            break
        entries.append(
            {
                "id": info.id,
                "parent": info.parent_id,
                "time": info.written_at.isoformat(),
                "message": info.message,
                "metadata": dict(info.metadata),
            }
        )
        if args.changes:
            entries[-1]["changes"] = node_changes(repo, info.id)
    lines = []
    for e in entries:
        lines.append(f"{e['id']}  {e['time'][:19]}  {e['message']}")
        lines += [f"    {_change_line(c)}" for c in e.get("changes", ())]
    return {"text": "\n".join(lines), "json": entries}


def node_changes(repo: Repository, snapshot_id: str) -> list[dict[str, Any]]:
    """The node changes a snapshot's transaction log lists (the first snapshot has none)."""
    key = txlog_key(snapshot_id)
    try:
        log = decode_txlog(repo.storage.get(key), key)
    except NotFoundError:
        return []
    return [
        {"kind": str(c.kind), "path": c.path, **({"from": c.from_path} if c.from_path else {})}
        for c in log.nodes
    ]


_MARKS = {"new_group": "+", "new_array": "+", "delete_node": "-", "update_metadata": "~"}


def _change_line(change: dict[str, Any]) -> str:
    if change["kind"] == "move_node":
        return f"> {change['from']} -> {change['path']}"
    return f"{_MARKS.get(change['kind'], '*')} {change['path']}"


def cmd_branch(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    if args.action == "create":
        repo.create_branch(args.name, snapshot_of(repo, args.target or "main"))
    elif args.action == "delete":
        repo.delete_branch(args.name)
    elif args.action == "reset":
        if not args.target:
            raise InvalidInputError(
                "branch reset needs a target: icechunk-spark branch URL reset NAME SNAPSHOT"
            )
        repo.reset_branch(args.name, snapshot_of(repo, args.target))
    branches = repo.list_branches()
    return {
        "text": "\n".join(f"{name}  {snap}" for name, snap in sorted(branches.items())),
        "json": branches,
    }


def cmd_tag(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    if args.action == "create":
        repo.create_tag(args.name, snapshot_of(repo, args.target or "main"))
    elif args.action == "delete":
        repo.delete_tag(args.name)
    tags = repo.list_tags()
    return {
        "text": "\n".join(f"{name}  {snap}" for name, snap in sorted(tags.items())),
        "json": tags,
    }


def cmd_ls(args: argparse.Namespace) -> dict[str, Any]:
    session = session_at(open_repo(args), args.ref)
    # 'a', '/a' and '/a/' are one node path (a path without '/' printed nothing before).
    prefix = normalize_path(args.path).rstrip("/")
    rows = []
    for node in session.list_nodes():
        if prefix and not (node.path == prefix or node.path.startswith(prefix + "/")):
            continue
        row: dict[str, Any] = {"path": node.path, "type": node.type}
        if node.meta is not None:
            row |= {
                "shape": list(node.meta.shape),
                "chunks": list(node.meta.chunk_shape),
                "dtype": node.meta.data_type,
                "refs": node.ref_count,
            }
        rows.append(row)
    if prefix and not rows:
        raise NotFoundError(f"no group or array at {prefix!r}")
    return {"text": "\n".join(_tree_line(row) for row in rows), "json": rows}


def _tree_line(row: dict[str, Any]) -> str:
    """One indented line of ``ls``: groups end in ``/``, arrays show shape, chunks, dtype."""
    path = row["path"]
    indent = "  " * max(path.count("/") - 1, 0)
    if path == "/":
        return "/"
    name = path.rsplit("/", 1)[-1]
    if row["type"] == "group":
        return f"{indent}{name}/"
    return f"{indent}{name}  {tuple(row['shape'])} chunks {tuple(row['chunks'])} {row['dtype']}"


def cmd_show(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    state = repo.state()
    if args.target in state.snapshots:
        info = state.snapshots[args.target]
        data = {
            "id": info.id,
            "parent": info.parent_id,
            "time": info.written_at.isoformat(),
            "message": info.message,
            "metadata": dict(info.metadata),
        }
        return {"text": json.dumps(data, indent=2), "json": data}
    node = session_at(repo, args.ref).get_node(args.target)
    doc = json.loads(node.zarr_json)
    data = {
        "path": node.path,
        "type": node.type,
        "zarr_json": doc,
        "refs": node.ref_count,
        "manifests": [
            {"id": m.manifest_id, "set": m.set_name, "refs": m.ref_count, "extent": m.extent}
            for m in node.manifests
        ],
    }
    return {"text": json.dumps(data, indent=2, default=list), "json": data}


def cmd_diff(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    d = repo.diff(
        from_snapshot_id=snapshot_of(repo, args.source),
        to_snapshot_id=snapshot_of(repo, args.target),
    )
    data = {
        "added": list(d.nodes_added),
        "deleted": list(d.nodes_deleted),
        "updated": list(d.nodes_updated),
        "moved": dict(d.nodes_moved),
        "chunks_changed": dict(d.chunks_changed),
    }
    lines = (
        [f"+ {p}" for p in d.nodes_added]
        + [f"- {p}" for p in d.nodes_deleted]
        + [f"> {old} -> {new}" for old, new in d.nodes_moved.items()]
        + [f"~ {p}" for p in d.nodes_updated]
    )
    lines += [f"  {p}: {n} chunks changed" for p, n in sorted(d.chunks_changed.items())]
    return {"text": "\n".join(lines) or "no differences", "json": data}


def cmd_chunks(args: argparse.Namespace) -> dict[str, Any]:
    session = session_at(open_repo(args), args.ref)
    rows = {}
    for node in session.list_nodes():
        if node.meta is not None and (args.array is None or node.path == args.array):
            rows[node.path] = {"initialized": node.ref_count, "total": node.meta.metadata_chunks}
    if args.array is not None and not rows:
        raise NotFoundError(f"no array at {args.array!r}")
    if args.plot:
        if args.array is None:
            raise InvalidInputError("--plot needs --array PATH")
        from ..inventory import plot_inventory

        plot_inventory(session, args.array, args.plot)
    text = "\n".join(
        f"{p}  {r['initialized']}/{r['total']} chunks initialized" for p, r in rows.items()
    )
    return {"text": text, "json": rows}


def cmd_sources(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    rows = repo.sources(snapshot_id=snapshot_of(repo, args.ref or "main")).to_pylist()
    width = max((len(str(r["refs"])) for r in rows), default=1)
    text = "\n".join(
        f"{r['refs']:>{width}} refs {r['bytes']:>14,} bytes  {r['location']}" for r in rows
    )
    total = sum(r["bytes"] for r in rows)
    text += f"\n{len(rows)} files, {sum(r['refs'] for r in rows)} refs, {total:,} bytes"
    return {"text": text, "json": rows}


def cmd_config(args: argparse.Namespace) -> dict[str, Any]:
    from ..splitting import parse_config

    if args.action == "validate":
        if not args.file:
            raise InvalidInputError("config validate needs a YAML file")
        parse_config(Path(args.file).read_text())
        return {"text": f"{args.file}: valid", "json": {"valid": True}}
    repo = open_repo(args)
    if args.action == "set":
        if not args.file:
            raise InvalidInputError("config set needs a YAML file")
        repo.set_config({"manifests": parse_config(Path(args.file).read_text()).to_dict()})
    config = repo.config.to_dict()
    text = repo.manifest_config.to_yaml()
    return {"text": text, "json": config}


def cmd_squash(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    oldest, newest = snapshot_of(repo, args.from_ref), snapshot_of(repo, args.to_ref)
    squashed = repo.squash(args.branch, oldest, newest, args.message)
    return {"text": f"squashed into {squashed}", "json": {"snapshot_id": squashed}}


def cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    status = repo.set_status(args.availability, args.reason) if args.availability else repo.status()
    since = status.set_at.isoformat() if status.set_at else None
    text = status.availability + (f" since {since}: {status.reason}" if status.reason else "")
    return {
        "text": text,
        "json": {"availability": status.availability, "reason": status.reason, "since": since},
    }


def cmd_expire(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    expired = repo.expire_snapshots(
        cutoff(args),
        delete_expired_branches=args.delete_branches,
        delete_expired_tags=args.delete_tags,
    )
    return {"text": f"expired {len(expired)} snapshots", "json": sorted(expired)}


def cmd_gc(args: argparse.Namespace) -> dict[str, Any]:
    repo = open_repo(args)
    summary = repo.garbage_collect(cutoff(args), dry_run=args.dry_run, progress=progress_bars(args))
    data = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    verb = "would delete" if args.dry_run else "deleted"
    return {
        "text": f"{verb} {summary.objects_deleted} objects, {summary.bytes_deleted} bytes: "
        + ", ".join(f"{k}={v}" for k, v in data.items()),
        "json": data,
    }


def cmd_import(args: argparse.Namespace) -> dict[str, Any]:
    from ..virtual.ingest import ingest_files, prepare_ingest

    file_options = parse_storage_options(args.files_option)
    repo, plan = prepare_ingest(
        args.url,
        args.files,
        args.branch,
        container=args.container,
        file_options=file_options,
        storage_options=parse_storage_options(args.storage_option),
        parser=args.parser,
    )
    if not plan.new:
        tip = repo.lookup_branch(args.branch)
        data = {"snapshot": tip, "files": len(plan.files), "new_files": 0, "committed": False}
        text = f"no new files among {plan.matched}; {args.branch} stays at {tip}"
        return {"text": text, "json": data}
    snapshot = ingest_files(
        repo,
        plan,
        concat_dim=args.concat_dim,
        group=args.group,
        file_options=file_options,
        message=args.message,
        progress=progress_bars(args),
        parser=args.parser,
    )
    data = {
        "snapshot": snapshot,
        "files": len(plan.files),
        "new_files": len(plan.new),
        "committed": True,
    }
    text = f"imported {len(plan.new)} new files ({len(plan.files)} in all) as snapshot {snapshot}"
    return {"text": text, "json": data}


def cmd_rewrite_manifests(args: argparse.Namespace) -> dict[str, Any]:
    from ..splitting import parse_config

    repo = open_repo(args)
    config = parse_config(Path(args.file).read_text()) if args.file else repo.manifest_config
    snapshot = repo.rewrite_manifests(
        config, args.message, args.branch, progress=progress_bars(args)
    )
    manifests = repo.manifests(snapshot)
    data = {"snapshot": snapshot, "manifests": len(manifests)}
    return {"text": f"rewrote {len(manifests)} manifests as snapshot {snapshot}", "json": data}


def cutoff(args: argparse.Namespace) -> datetime:
    if args.older_than:
        when = datetime.fromisoformat(args.older_than)
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.now(tz=UTC) - timedelta(days=args.days)


def read_yaml(path: str) -> Any:
    import yaml

    return yaml.safe_load(Path(path).read_text())

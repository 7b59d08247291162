"""The ``icechunk-spark`` command: look at and maintain repositories from a terminal.

Every command takes the repository URL first. ``--json`` prints machine-readable output;
errors print one line and exit non-zero (``--debug`` shows the traceback). Long operations
(``gc``, ``import``, ``rewrite-manifests``) draw progress bars on stderr when it is a terminal
(``--progress`` / ``--no-progress`` to choose).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .core import Session
from .errors import IcechunkSparkError, InvalidInputError, NotFoundError
from .exit import exit_process
from .format.paths import normalize_path
from .progress import SILENT, Progress
from .repository import Repository
from .storage import parse_storage_options

Handler = Callable[[argparse.Namespace], Any]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
    except (IcechunkSparkError, OSError, ValueError) as exc:
        if args.debug:
            raise
        print(f"icechunk-spark: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    _emit(result, args.json)
    return 0


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _emit(result: Any, as_json: bool) -> None:
    if result is None:
        return
    if as_json:
        print(
            json.dumps(
                result.get("json", result) if isinstance(result, dict) else result,
                default=str,
                indent=2,
            )
        )
    elif isinstance(result, dict) and "text" in result:
        print(result["text"])
    else:
        print(result)


# -- opening ----------------------------------------------------------------------------
def _open(args: argparse.Namespace) -> Repository:
    return Repository.open(args.url, storage_options=parse_storage_options(args.storage_option))


def _session(repo: Repository, ref: str | None) -> Session:
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


def _snapshot_of(repo: Repository, ref: str) -> str:
    return _session(repo, ref).snapshot_id


class _Bars:
    """Draws each stage of a long operation as a tqdm bar on stderr (stdout stays parseable)."""

    def __init__(self) -> None:
        self._bar: tqdm[Any] | None = None

    def begin(self, stage: str, total: int | None) -> None:
        if total != 0:  # a stage with nothing to do (say, no new snapshot) is not worth a bar
            # shutil falls back to 80x24 where a terminal reports a size of 0 (tqdm would then
            # draw nothing at all).
            size = shutil.get_terminal_size()
            self._bar = tqdm(
                total=total, desc=stage, file=sys.stderr, ncols=size.columns, nrows=size.lines
            )

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _progress(args: argparse.Namespace) -> Progress:
    wanted = args.progress if args.progress is not None else sys.stderr.isatty()
    return _Bars() if wanted else SILENT


# -- commands ---------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> dict[str, Any]:
    config = None
    if args.manifests:
        config = {"manifests": _read_yaml(args.manifests)}
    repo = Repository.create(
        args.url, config=config, storage_options=parse_storage_options(args.storage_option)
    )
    tip = repo.lookup_branch("main")
    return {
        "text": f"created repository {repo.storage.url} (main at {tip})",
        "json": {"url": repo.storage.url, "snapshot": tip},
    }


def cmd_log(args: argparse.Namespace) -> dict[str, Any]:
    repo = _open(args)
    entries = []
    for n, info in enumerate(
        repo.ancestry(snapshot_id=_snapshot_of(repo, args.ref or args.branch))
    ):
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
    text = "\n".join(f"{e['id']}  {e['time'][:19]}  {e['message']}" for e in entries)
    return {"text": text, "json": entries}


def cmd_branch(args: argparse.Namespace) -> dict[str, Any]:
    repo = _open(args)
    if args.action == "create":
        repo.create_branch(args.name, _snapshot_of(repo, args.target or "main"))
    elif args.action == "delete":
        repo.delete_branch(args.name)
    elif args.action == "reset":
        if not args.target:
            raise InvalidInputError(
                "branch reset needs a target: icechunk-spark branch URL reset NAME SNAPSHOT"
            )
        repo.reset_branch(args.name, _snapshot_of(repo, args.target))
    branches = repo.list_branches()
    return {
        "text": "\n".join(f"{name}  {snap}" for name, snap in sorted(branches.items())),
        "json": branches,
    }


def cmd_tag(args: argparse.Namespace) -> dict[str, Any]:
    repo = _open(args)
    if args.action == "create":
        repo.create_tag(args.name, _snapshot_of(repo, args.target or "main"))
    elif args.action == "delete":
        repo.delete_tag(args.name)
    tags = repo.list_tags()
    return {
        "text": "\n".join(f"{name}  {snap}" for name, snap in sorted(tags.items())),
        "json": tags,
    }


def cmd_ls(args: argparse.Namespace) -> dict[str, Any]:
    session = _session(_open(args), args.ref)
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
    repo = _open(args)
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
    node = _session(repo, args.ref).get_node(args.target)
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
    repo = _open(args)
    d = repo.diff(
        from_snapshot_id=_snapshot_of(repo, args.source),
        to_snapshot_id=_snapshot_of(repo, args.target),
    )
    data = {
        "added": list(d.nodes_added),
        "deleted": list(d.nodes_deleted),
        "updated": list(d.nodes_updated),
        "chunks_changed": dict(d.chunks_changed),
    }
    lines = (
        [f"+ {p}" for p in d.nodes_added]
        + [f"- {p}" for p in d.nodes_deleted]
        + [f"~ {p}" for p in d.nodes_updated]
    )
    lines += [f"  {p}: {n} chunks changed" for p, n in sorted(d.chunks_changed.items())]
    return {"text": "\n".join(lines) or "no differences", "json": data}


def cmd_chunks(args: argparse.Namespace) -> dict[str, Any]:
    session = _session(_open(args), args.ref)
    rows = {}
    for node in session.list_nodes():
        if node.meta is not None and (args.array is None or node.path == args.array):
            rows[node.path] = {"initialized": node.ref_count, "total": node.meta.metadata_chunks}
    if args.array is not None and not rows:
        raise NotFoundError(f"no array at {args.array!r}")
    if args.plot:
        if args.array is None:
            raise InvalidInputError("--plot needs --array PATH")
        from .inventory import plot_inventory

        plot_inventory(session, args.array, args.plot)
    text = "\n".join(
        f"{p}  {r['initialized']}/{r['total']} chunks initialized" for p, r in rows.items()
    )
    return {"text": text, "json": rows}


def cmd_config(args: argparse.Namespace) -> dict[str, Any]:
    from .splitting import parse_config

    if args.action == "validate":
        if not args.file:
            raise InvalidInputError("config validate needs a YAML file")
        parse_config(Path(args.file).read_text())
        return {"text": f"{args.file}: valid", "json": {"valid": True}}
    repo = _open(args)
    if args.action == "set":
        if not args.file:
            raise InvalidInputError("config set needs a YAML file")
        repo.set_config({"manifests": parse_config(Path(args.file).read_text()).to_dict()})
    config = repo.config.to_dict()
    text = repo.manifest_config.to_yaml()
    return {"text": text, "json": config}


def cmd_expire(args: argparse.Namespace) -> dict[str, Any]:
    repo = _open(args)
    expired = repo.expire_snapshots(
        _cutoff(args),
        delete_expired_branches=args.delete_branches,
        delete_expired_tags=args.delete_tags,
    )
    return {"text": f"expired {len(expired)} snapshots", "json": sorted(expired)}


def cmd_gc(args: argparse.Namespace) -> dict[str, Any]:
    repo = _open(args)
    summary = repo.garbage_collect(_cutoff(args), dry_run=args.dry_run, progress=_progress(args))
    data = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    verb = "would delete" if args.dry_run else "deleted"
    return {
        "text": f"{verb} {summary.objects_deleted} objects, {summary.bytes_deleted} bytes: "
        + ", ".join(f"{k}={v}" for k, v in data.items()),
        "json": data,
    }


def cmd_import(args: argparse.Namespace) -> dict[str, Any]:
    from .virtual.ingest import ingest_files, prepare_ingest

    file_options = parse_storage_options(args.files_option)
    repo, plan = prepare_ingest(
        args.url,
        args.files,
        args.branch,
        container=args.container,
        file_options=file_options,
        storage_options=parse_storage_options(args.storage_option),
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
        progress=_progress(args),
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
    from .splitting import parse_config

    repo = _open(args)
    config = parse_config(Path(args.file).read_text()) if args.file else repo.manifest_config
    snapshot = repo.rewrite_manifests(config, args.message, args.branch, progress=_progress(args))
    manifests = repo.manifests(snapshot)
    data = {"snapshot": snapshot, "manifests": len(manifests)}
    return {"text": f"rewrote {len(manifests)} manifests as snapshot {snapshot}", "json": data}


def _cutoff(args: argparse.Namespace) -> datetime:
    if args.older_than:
        when = datetime.fromisoformat(args.older_than)
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.now(tz=UTC) - timedelta(days=args.days)


def _count(text: str) -> int:
    """``-n``: a count, never negative (``-n -1`` printed nothing and exited 0)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a count >= 0")
    return value


def _days(text: str) -> float:
    """``--days``: a non-negative age (``-1`` put the cut-off in the future)."""
    value = float(text)
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text} is negative (or not a number); give days >= 0")
    return value


def _read_yaml(path: str) -> Any:
    import yaml

    return yaml.safe_load(Path(path).read_text())


# -- parser -----------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "url",
        help="repository URL: file:///path, s3://, gs:// or az://container/prefix, https:// "
        "(read-only)",
    )
    common.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option (repeatable), e.g. endpoint_url=http://127.0.0.1:9000",
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

    p = add("init", cmd_init, "create a repository")
    p.add_argument(
        "--manifests", help="manifest config YAML (default: conf/manifests.yaml's defaults)"
    )
    p = add("log", cmd_log, "list snapshots, newest first")
    p.add_argument("ref", nargs="?", help="branch, tag or snapshot (default: --branch)")
    p.add_argument("--branch", default="main")
    p.add_argument("-n", type=_count, help="at most this many")
    p = add("branch", cmd_branch, "list, create, delete or reset branches")
    p.add_argument(
        "action", nargs="?", default="list", choices=["list", "create", "delete", "reset"]
    )
    p.add_argument("name", nargs="?")
    p.add_argument("target", nargs="?", help="branch, tag or snapshot to point at")
    p = add("tag", cmd_tag, "list, create or delete tags")
    p.add_argument("action", nargs="?", default="list", choices=["list", "create", "delete"])
    p.add_argument("name", nargs="?")
    p.add_argument("target", nargs="?")
    p = add("ls", cmd_ls, "tree of groups and arrays")
    p.add_argument("path", nargs="?", default="")
    p.add_argument("--ref", help="branch, tag or snapshot (default: main)")
    p = add("show", cmd_show, "one array (path) or snapshot (id)")
    p.add_argument("target")
    p.add_argument("--ref")
    p = add("diff", cmd_diff, "what changed between two branches, tags or snapshots")
    p.add_argument("source")
    p.add_argument("target")
    p = add(
        "chunks", cmd_chunks, "initialized chunks per array; --plot writes a PNG of the inventory"
    )
    p.add_argument("--array")
    p.add_argument("--plot", metavar="PNG")
    p.add_argument("--ref")
    p = add("config", cmd_config, "show, validate or set the manifest config")
    p.add_argument("action", choices=["show", "validate", "set"])
    p.add_argument("file", nargs="?")
    for name, handler, help_text in (
        ("expire", cmd_expire, "expire old snapshots"),
        ("gc", cmd_gc, "delete unreachable objects"),
    ):
        p = add(name, handler, help_text)
        p.add_argument("--older-than", help="ISO date-time cut-off")
        p.add_argument(
            "--days", type=_days, default=7.0, help="cut-off this many days ago (default 7)"
        )
        if name == "expire":
            p.add_argument("--delete-branches", action="store_true")
            p.add_argument("--delete-tags", action="store_true")
        else:
            p.add_argument("--dry-run", action="store_true")
    p = add(
        "import",
        cmd_import,
        "import NetCDF4/HDF5 files as one virtual dataset, appending files not referenced yet",
    )
    p.add_argument("files", help="glob of files: a local path, file:// or s3://")
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
    p.add_argument("--branch", default="main")
    p.add_argument("-m", "--message")
    p = add(
        "rewrite-manifests",
        cmd_rewrite_manifests,
        "repack every manifest in one commit, under a new manifest config if given",
    )
    p.add_argument("file", nargs="?", help="manifest config YAML (default: the repository's)")
    p.add_argument("--branch", default="main")
    p.add_argument("-m", "--message", default="rewrite manifests")
    return parser


def run() -> None:
    """The ``icechunk-spark`` console script: ``main``, then a clean exit (see ``exit``)."""
    exit_process(main())


if __name__ == "__main__":
    run()

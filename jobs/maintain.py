"""Maintain a repository: expire old snapshots, collect garbage, optionally repack manifests.

    spark-submit jobs/maintain.py --repo file:///tmp/cube --keep-last 5 \
        [--manifests conf/manifests.yaml]

Needs no Spark executors (it is metadata work on the driver), but runs under spark-submit like
every job so one scheduler can run them all.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from icechunk_spark.errors import InvalidInputError
from icechunk_spark.exit import exit_process
from icechunk_spark.ops.gc import garbage_collect
from icechunk_spark.ops.history import expire_state, utc_ms
from icechunk_spark.repository import Repository
from icechunk_spark.spark.jobs import base_parser, run, storage_options
from icechunk_spark.splitting import parse_config


def expiry_cutoff(
    repo: Repository, branch: str, keep_last: int | None, keep_days: float | None
) -> datetime:
    """Snapshots before this are expired: older than ``keep_days``, or beyond the last N."""
    if keep_last is not None:
        if keep_last < 1:
            raise InvalidInputError("--keep-last must be at least 1")
        history = list(repo.ancestry(branch=branch))
        if len(history) <= keep_last:
            return datetime.fromtimestamp(0, tz=UTC)
        return history[keep_last - 1].written_at
    return datetime.now(tz=UTC) - timedelta(days=keep_days if keep_days is not None else 7)


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--keep-last", type=int, help="keep the last N snapshots of --branch")
    parser.add_argument(
        "--keep-days", type=float, help="keep snapshots newer than this (default 7)"
    )
    parser.add_argument(
        "--gc-days",
        type=float,
        default=7.0,
        help="only delete objects older than this many days (default 7, as the CLI): longer "
        "than any write takes, so in-flight writes never lose their chunk files",
    )
    parser.add_argument(
        "--manifests", help="repack every manifest under this manifest config (YAML)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would be done; write nothing"
    )
    args = parser.parse_args()

    def body() -> tuple[Repository, str | None]:
        repo = Repository.open(args.repo, storage_options=storage_options(args.storage_option))
        if args.gc_days < 0:
            raise InvalidInputError("--gc-days must be >= 0")
        if args.manifests:
            config = parse_config(Path(args.manifests).read_text())  # checked even on a dry run
            if args.dry_run:
                # A repack writes; what it would make unreachable cannot be counted here.
                print(
                    f"maintain: would repack manifests under {args.manifests} "
                    "(not counted in the gc figures below)"
                )
            else:
                snapshot = repo.rewrite_manifests(config, "repack manifests", args.branch)
                count = len(repo.manifests(snapshot))
                print(f"maintain: repacked manifests into snapshot {snapshot} ({count} manifests)")
        cutoff = expiry_cutoff(repo, args.branch, args.keep_last, args.keep_days)
        gc_cutoff = datetime.now(tz=UTC) - timedelta(days=args.gc_days)
        if args.dry_run:
            limit_ms = utc_ms(cutoff, "cutoff")
            expired = expire_state(repo.state(), limit_ms)[1]
            print(
                f"maintain: would expire {len(expired)} snapshots older than {cutoff.isoformat()}"
            )
            # GC runs after the expiry: count what it would delete once those are unlisted.
            summary = garbage_collect(
                repo.handle, gc_cutoff, dry_run=True, as_if=lambda s: expire_state(s, limit_ms)[0]
            )
        else:
            expired = repo.expire_snapshots(cutoff)
            print(f"maintain: expired {len(expired)} snapshots older than {cutoff.isoformat()}")
            summary = repo.garbage_collect(gc_cutoff)
        verb = "would delete" if args.dry_run else "deleted"
        print(
            f"maintain: gc {verb} {summary.objects_deleted} objects "
            f"({summary.bytes_deleted} bytes): chunks={summary.chunks_deleted} "
            f"manifests={summary.manifests_deleted} structures={summary.structures_deleted} "
            f"transaction_logs={summary.transaction_logs_deleted}"
        )
        return repo, repo.lookup_branch(args.branch)

    return run("maintain", body)


if __name__ == "__main__":
    exit_process(main())

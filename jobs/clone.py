"""Clone a whole repository (every snapshot, branch and tag) to other storage, copying on
Spark executors: for repositories too big for one machine's `icechunk-spark clone`.

    spark-submit jobs/clone.py --repo s3://bucket/cube --dest gs://other/cube \
        [--storage-option KEY=VALUE ...] [--dest-option KEY=VALUE ...]

The driver lists both sides and verifies every object by size before it writes the
destination's state file, so a killed job leaves no repository there: run it again and it
copies only what is missing (ops/clone.py).
"""

from __future__ import annotations

from icechunk_spark.exit import exit_process
from icechunk_spark.ops.clone import clone
from icechunk_spark.repository import Repository
from icechunk_spark.spark.clone import spark_copier
from icechunk_spark.spark.jobs import base_parser, run, spark_session, storage_options
from icechunk_spark.storage import open_storage


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--dest", required=True, help="where to clone to (any backend's URL)")
    parser.add_argument(
        "--dest-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option for the destination (repeatable)",
    )
    args = parser.parse_args()

    def body() -> tuple[Repository, str | None]:
        src_options = storage_options(args.storage_option)
        dst_options = storage_options(args.dest_option)
        spark = spark_session("clone", args)
        copier = spark_copier(spark, (args.repo, src_options), (args.dest, dst_options))
        summary = clone(
            open_storage(args.repo, **src_options),
            open_storage(args.dest, **dst_options),
            copier=copier,
        )
        print(
            f"clone: copied {summary.objects_copied} objects ({summary.bytes_copied} bytes), "
            f"{summary.objects_already_there} there already, {summary.snapshots} snapshots"
        )
        repo = Repository.open(args.dest, storage_options=dst_options)
        return repo, repo.lookup_branch(args.branch)

    return run("clone", body)


if __name__ == "__main__":
    exit_process(main())

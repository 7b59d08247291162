"""The ``icechunk-spark`` command: look at and maintain repositories from a terminal.

Every command takes the repository URL first. ``--json`` prints machine-readable output;
errors print one line and exit non-zero (``--debug`` shows the traceback). Long operations
(``gc``, ``import``, ``rewrite-manifests``) draw progress bars on stderr when it is a terminal
(``--progress`` / ``--no-progress`` to choose).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..errors import IcechunkSparkError
from ..exit import exit_process
from .output import emit, one_line
from .parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
    except (IcechunkSparkError, OSError, ValueError) as exc:
        if args.debug:
            raise
        print(f"icechunk-spark: error: {one_line(exc)}", file=sys.stderr)
        return 1
    emit(result, args.json)
    return 0


def run() -> None:
    """The ``icechunk-spark`` console script: ``main``, then a clean exit (see ``exit``)."""
    exit_process(main())


__all__ = ["main", "run"]

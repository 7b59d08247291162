"""What the command prints: results (text or ``--json``), one-line errors, progress bars."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from tqdm import tqdm

from ..progress import SILENT, Progress


def one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def emit(result: Any, as_json: bool) -> None:
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


class Bars:
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


def progress_bars(args: argparse.Namespace) -> Progress:
    wanted = args.progress if args.progress is not None else sys.stderr.isatty()
    return Bars() if wanted else SILENT

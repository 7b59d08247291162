"""Ending a command-line process without C++ teardown.

At interpreter exit, native libraries' static destructors run while their worker threads (Arrow's
thread pools, used by every Parquet read) may still be winding down; now and then one of them
aborts the process with "terminate called without an active exception" (exit code 134), turning
a command that succeeded into a failure. Seen in about 1 run in 15 of the CLI and the jobs on a
busy machine. A command's work is complete and durable when its ``main`` returns (every write
goes through the storage layer, which finishes it before returning), so the process can end
right there, skipping that teardown.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``code`` at once."""
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe or stream: nothing more can be said anyway.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)

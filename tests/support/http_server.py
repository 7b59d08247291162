"""A folder served over HTTP on 127.0.0.1 with Python's own ``http.server``.

``SimpleHTTPRequestHandler`` answers whole files only (until Python 3.14); web servers that
publish datasets answer ``Range`` requests with 206, so ``RangeHandler`` does too. Serving
without ranges (``ranges=False``) checks that a server ignoring ``Range`` is still read right.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class RangeHandler(QuietHandler):
    """Answers ``Range: bytes=a-b`` (one range) with 206 Partial Content."""

    def do_GET(self) -> None:
        wanted = _RANGE.match(self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if wanted is None or not path.is_file():
            super().do_GET()
            return
        data = path.read_bytes()
        start = int(wanted.group(1))
        end = int(wanted.group(2)) if wanted.group(2) else len(data) - 1
        if start >= len(data):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        part = data[start : min(end, len(data) - 1) + 1]
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(part)))
        modified = self.date_time_string(int(os.stat(path).st_mtime))
        self.send_header("Last-Modified", modified)
        self.end_headers()
        self.wfile.write(part)


@contextmanager
def serve_folder(folder: Path, ranges: bool = True) -> Iterator[str]:
    """Serve ``folder`` at ``http://127.0.0.1:<port>`` until the block ends."""
    handler = functools.partial(RangeHandler if ranges else QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

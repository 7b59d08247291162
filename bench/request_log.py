"""A recording HTTP proxy in front of an S3 endpoint, for counting a commit's requests.

    python bench/request_log.py LISTEN_PORT UPSTREAM_URL

Forwards every request to UPSTREAM_URL unchanged (path, query, headers, body; the Host
header is kept, so SigV4 signatures stay valid) and records when each began and ended. A
``GET /__log__`` returns the records as JSON and clears them. It runs in a process of its
own, so recording costs neither side of a comparison any of its CPU.

``sequential_rounds`` turns the records into the figure that matters on object storage: the
longest chain of requests each of which began only after the one before it ended (the round
trips a client waited for one after another; requests overlapping in time count once).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOG: list[dict[str, Any]] = []
LOCK = threading.Lock()


class Forward(BaseHTTPRequestHandler):
    upstream: urllib.parse.SplitResult
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect

    def _forward(self) -> None:
        if self.path == "/__log__":
            with LOCK:
                body = json.dumps(LOG).encode()
                LOG.clear()
            self._reply(200, [("Content-Type", "application/json")], body)
            return
        start = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port)
        connection.request(self.command, self.path, body=body, headers=dict(self.headers))
        response = connection.getresponse()
        data = response.read()
        headers = [(k, v) for k, v in response.getheaders() if k.lower() != "transfer-encoding"]
        connection.close()
        self._reply(response.status, headers, data)
        with LOCK:
            LOG.append(
                {
                    "method": self.command,
                    "path": urllib.parse.urlsplit(self.path).path,
                    "status": response.status,
                    "start": start,
                    "end": time.perf_counter(),
                }
            )

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status)
        for key, value in headers:
            # A HEAD's Content-Length is the object's size, which clients read: keep it.
            if key.lower() != "content-length" or self.command == "HEAD":
                self.send_header(key, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def sequential_rounds(records: Sequence[dict[str, Any]]) -> int:
    """The longest chain of requests, each beginning after the previous one ended.

    Taking the earliest-ending request that begins after the chain's last one is optimal
    (the classic interval-scheduling argument), so one pass over the records sorted by end
    gives the longest chain.
    """
    rounds, last_end = 0, float("-inf")
    for record in sorted(records, key=lambda r: r["end"]):
        if record["start"] >= last_end:
            rounds += 1
            last_end = record["end"]
    return rounds


def main() -> None:
    port, upstream = int(sys.argv[1]), urllib.parse.urlsplit(sys.argv[2])
    Forward.upstream = upstream
    server = ThreadingHTTPServer(("127.0.0.1", port), Forward)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

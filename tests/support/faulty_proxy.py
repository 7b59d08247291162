"""An HTTP proxy on 127.0.0.1 in front of the moto server that injects S3 faults.

Real S3 sometimes throttles, and sometimes applies a request whose answer never arrives (the
connection drops, or a 500 comes back after the write). A client that retries the write then
sees the effect of its own first attempt, e.g. a 412 for its own ``If-None-Match: *`` PUT. This
proxy makes those cases happen on purpose, per request, from a seed:

* ``slowdown``: answer 503 ``SlowDown`` without forwarding (nothing is applied);
* ``drop``: forward (the request is applied), then close the connection without answering;
* ``error``: forward (applied), then answer 500 ``InternalError`` instead of the real answer.

Which requests may be faulted is configured by ``FaultRule``s: the first rule whose method and
key pattern match gives the probability. botocore and s3fs retry 5xx answers and dropped
connections themselves (botocore's legacy mode up to 5 attempts, s3fs's ``_error_wrapper`` on
top), so a fault is invisible to our code unless the retry sees the first attempt's effect.

    with FaultyProxy(upstream, seed=7, rules=[STATE_FILE_PUTS]) as proxy:
        storage_options = {..., "endpoint_url": proxy.url}
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

FAULT_KINDS = ("slowdown", "drop", "error")
# Hop-by-hop headers (and Expect, which the proxy answers itself) are not forwarded.
_NOT_FORWARDED = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Fault requests with ``method`` whose path (without the query) matches ``path``."""

    method: str
    path: str  # a regular expression, searched in the request path
    rate: float
    kinds: tuple[str, ...] = FAULT_KINDS
    max_faults: int | None = None  # stop faulting after this many (None: no limit)

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and re.search(self.path, path) is not None


# State-file creations (``t/<generation>``): the compare-and-swap that must stay truthful.
STATE_FILE_PUTS = FaultRule("PUT", r"/t/\d+$", 0.25)


def background_faults(rate: float) -> FaultRule:
    """Every other request, at a lower rate."""
    return FaultRule("*", r".", rate)


@dataclass(frozen=True, slots=True)
class Injected:
    method: str
    path: str
    kind: str


class FaultyProxy:
    """A threaded proxy; ``url`` is its endpoint, ``injected`` lists the faults it made."""

    def __init__(self, upstream: str, seed: int, rules: Sequence[FaultRule]) -> None:
        parsed = urlsplit(upstream)
        assert parsed.hostname == "127.0.0.1" and parsed.port is not None
        self.upstream = (parsed.hostname, parsed.port)
        self.rules = tuple(rules)
        self.injected: list[Injected] = []
        self._made: Counter[FaultRule] = Counter()
        self.requests: Counter[str] = Counter()
        # One sequence per rule: the n-th request a rule matches always gets the n-th draw, so
        # how many of the first requests are faulted does not depend on other traffic.
        self._random = [_sequence(seed, i) for i in range(len(self.rules))]
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def choose(self, method: str, path: str) -> str | None:
        """The fault for this request, or ``None``: one seeded draw per matching request."""
        index = next((i for i, r in enumerate(self.rules) if r.matches(method, path)), None)
        with self._lock:
            self.requests[method] += 1
            if index is None:
                return None
            rule, rng = self.rules[index], self._random[index]
            draw, pick = rng.random(), rng.randrange(len(rule.kinds))
            spent = rule.max_faults is not None and self._made[rule] >= rule.max_faults
            if draw >= rule.rate or spent:
                return None
            kind = rule.kinds[pick]
            self._made[rule] += 1
            self.injected.append(Injected(method, path, kind))
            return kind

    @staticmethod
    def planned(seed: int, rules: Sequence[FaultRule], index: int, requests: int) -> int:
        """How many of the first ``requests`` that rule ``index`` matches it faults."""
        rule, rng, made = rules[index], _sequence(seed, index), 0
        for _ in range(requests):
            draw, _pick = rng.random(), rng.randrange(len(rule.kinds))
            made += draw < rule.rate and (rule.max_faults is None or made < rule.max_faults)
        return made

    def counts(self, path: str | None = None) -> Counter[str]:
        """Faults injected by kind (only on paths matching ``path`` if given)."""
        with self._lock:
            return Counter(f.kind for f in self.injected if path is None or re.search(path, f.path))

    def forward(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.getheaders(), data
        finally:
            conn.close()


def _sequence(seed: int, rule_index: int) -> random.Random:
    return random.Random(f"{seed}/{rule_index}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and Expect: 100-continue answered for us

    def do_GET(self) -> None:
        self._proxy()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the test reports the figures it needs

    def _proxy(self) -> None:
        proxy: FaultyProxy = self.server.proxy  # type: ignore[attr-defined]
        body = self._read_body()
        path = urlsplit(self.path).path
        fault = proxy.choose(self.command, path)
        if fault == "slowdown":
            self._answer_error(503, "SlowDown", "Please reduce your request rate.")
            return
        headers = [
            (k, v)
            for k, v in self.headers.items()
            if k.lower() not in _NOT_FORWARDED and k.lower() != "content-length"
        ]
        status, reply_headers, data = proxy.forward(self.command, self.path, headers, body)
        if fault == "drop":
            # Applied upstream; the client hears nothing but a closed connection.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "error":
            self._answer_error(500, "InternalError", "We encountered an internal error.")
            return
        self.send_response(status)
        for name, value in reply_headers:
            lowered = name.lower()
            # A HEAD answer's length is the object's: keep it. Otherwise it is the body read.
            if lowered not in _NOT_FORWARDED and (lowered != "content-length" or not data):
                self.send_header(name, value)
        if data:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer_error(self, status: int, code: str, message: str) -> None:
        data = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

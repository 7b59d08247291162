"""moto's S3 server on 127.0.0.1, serving one request at a time.

moto checks conditional-write preconditions and then writes without a lock, so two racing
``If-None-Match: *`` PUTs could both succeed against a threaded server. Real S3 decides such
races atomically; serialising requests gives us the same guarantee. Run as a script:
``python -m tests.support.moto_server PORT``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


class OneAtATime:
    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            # Drain the body inside the lock, so the whole request is one atomic step.
            return [b"".join(self._app(environ, start_response))]


def main() -> None:
    port = int(sys.argv[1])
    app = OneAtATime(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

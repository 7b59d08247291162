"""Ports of the servers the tests start, and their readiness: a server is started once its own
process listens on its port (``tests/support/ports.py``), not once something answers there."""

from __future__ import annotations

import os
import random
import socket
import sys
from pathlib import Path

import pytest

from tests.support.ports import ephemeral_range, listens, server_port
from tests.support.spark_servers import JavaServer, start_java, wait_until_listening

# Binds argv[1] and listens, or, when the port is taken, says so and lingers a second before
# exiting, as a JVM's shutdown hook does.
SERVER = """
import socket, sys, time
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as error:
    print("BindException:", error, flush=True)
    time.sleep(1)
    sys.exit(1)
s.listen()
print("listening", flush=True)
time.sleep(60)
"""

# The same server, run by a child of a process that leads its own group (spark-submit's
# scripts run the JVM so).
PARENT = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]])
"""


def _start(tmp_path: Path, port: int, *, child: bool = False) -> JavaServer:
    command = [sys.executable, "-c", SERVER, str(port)]
    if child:
        command = [sys.executable, "-c", PARENT, SERVER, str(port)]
    return start_java("a test server", command, os.environ, tmp_path / "server.log")


def test_server_ports_are_outside_the_kernels_ephemeral_range() -> None:
    low, high = ephemeral_range()
    for seed in range(50):
        port = server_port(random.Random(seed))
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free


def test_a_server_whose_port_was_taken_is_not_taken_for_started(tmp_path: Path) -> None:
    # What CI met: another process listens on the server's port, so the port accepts, while
    # the server failed to bind it and is exiting.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = _start(tmp_path, port)
        try:
            with pytest.raises(RuntimeError, match="BindException"):
                wait_until_listening(server, port)
        finally:
            server.stop()


def test_a_listening_server_is_started(tmp_path: Path) -> None:
    port = server_port()
    server = _start(tmp_path, port)
    try:
        wait_until_listening(server, port)
        assert listens(server.process.pid, port)
        assert not listens(os.getpid(), port)  # the test process does not
    finally:
        server.stop()
    assert not listens(server.process.pid, port)


def test_a_server_listening_from_a_child_of_its_group_is_started(tmp_path: Path) -> None:
    port = server_port()
    server = _start(tmp_path, port, child=True)
    try:
        wait_until_listening(server, port)
    finally:
        server.stop()

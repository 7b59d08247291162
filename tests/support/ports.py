"""Ports for the servers the tests start on 127.0.0.1, and whether a server really listens.

A port found free by binding port 0 is one the kernel hands out: its ephemeral range, from which
it also picks the port of every socket bound to 0 later, any process's. A server given such a
port binds it seconds later (a JVM) and can find it taken. CI saw it: a Spark Connect server
failed to bind its port, which the kernel had given another socket meanwhile (most likely the
Spark driver's, waiting for a Python worker: a streaming test's worker "failed to connect
back" that minute); the port still accepted, so the server was taken for started, and each
Connect test hung for its 300 s timeout. So servers get a port below
the ephemeral range, which the kernel never assigns, and they are ready once *their* process
listens on it, not once something does.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

# Ports below this are left alone: well-known and registered services live there.
LOWEST = 10_000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports assigned by a bind to port 0 (inclusive)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def server_port(rng: random.Random | None = None) -> int:
    """A port of 127.0.0.1 that is free now and outside the ephemeral range.

    Random, so that test processes started at once seldom try the same one; free now, so a
    fixed-port service found there is skipped. Falls back to an ephemeral port only when the
    kernel's range leaves no room (a range starting at ``LOWEST`` or lower and ending at 65535).
    """
    rng = rng or random.Random()
    low, high = ephemeral_range()
    spans = [(LOWEST, low - 1), (high + 1, 65535)]
    candidates = [span for span in spans if span[1] - span[0] >= 1000]
    for _ in range(100):
        if not candidates:
            break
        first, last = rng.choice(candidates)
        port = rng.randint(first, last)
        if _bindable(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid``, or a process of the group it leads, listens on TCP ``port``.

    A server started in a session of its own (a JVM through ``spark-submit``) may listen
    from a child; those share its process group. Read from ``/proc`` (Linux); elsewhere it
    can only say whether the port accepts, as before.
    """
    if not Path("/proc/net/tcp").exists():
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", port)) == 0
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    return any(_holds_socket(p, inodes) for p in _group(pid))


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(inode)
    return found


def _group(pid: int) -> list[int]:
    """``pid`` and every process whose process group is ``pid``."""
    members = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid and _process_group(int(entry)) == pid:
            members.append(int(entry))
    return members


def _process_group(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # gone meanwhile
    # After the command name (in parentheses, which may hold spaces): state, ppid, pgrp.
    return int(stat.rsplit(")", 1)[1].split()[2])


def _holds_socket(pid: int, inodes: set[str]) -> bool:
    folder = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(folder)
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"{folder}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False

"""Spark as users deploy it, started from the installed pyspark on 127.0.0.1: a Spark Connect
server, and a standalone cluster of one master and one worker.

Each server is a JVM in a process group of its own, logging to a file; ``stop()`` ends the
group (the server and whatever it started: Python workers, executors) and waits for it.
Readiness is polled (the server's own process listening on its port, a worker the master
lists as alive), never slept on; ports come from ``ports.server_port``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .ports import listens, server_port

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
# A JVM's start on the shared 2-core machine takes 5-30 s; this bounds a broken start.
START_TIMEOUT = 180.0


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark (``bin/``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class JavaServer:
    """One started JVM (with its process group) and the file it logs to."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode} while starting:\n" + self.tail()
            )

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it if it has not gone in 30 s."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        # Children that outlived the JVM (an executor, a Python worker) share its group.
        _signal_group(self.process.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def start_java(name: str, command: list[str], env: Mapping[str, str], log: Path) -> JavaServer:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, ended as one by stop()
        )
    return JavaServer(name, process, log)


def wait_until(server: JavaServer, ready: Callable[[], bool], what: str) -> None:
    """Poll ``ready`` until it holds; fail with the server's log if it exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        server.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{server.name}: {what} not within {START_TIMEOUT:.0f} s:\n" + server.tail()
            )
        time.sleep(0.2)


def wait_until_listening(server: JavaServer, port: int) -> None:
    """Until ``server``'s own process listens on ``port``: a port that accepts may be another
    process's (``ports.py``)."""
    wait_until(server, lambda: listens(server.process.pid, port), f"listening on port {port}")


@dataclass
class ConnectServer:
    server: JavaServer
    port: int

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop()


def start_connect_server(
    env: Mapping[str, str], log: Path, conf: Mapping[str, str], memory: str = "768m"
) -> ConnectServer:
    """A Spark Connect server (local mode) on a free port of 127.0.0.1, once it accepts.

    The connect jar ships in pyspark's ``jars/``, so the server class is on the classpath.
    Python workers run ``env["PYSPARK_PYTHON"]`` with ``env["PYTHONPATH"]``.
    """
    port = server_port()
    command = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER]
    command += ["--master", "local[2]", "--driver-memory", memory]
    settings = {
        **conf,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    server = start_java("Spark Connect server", [*command, "spark-internal"], env, log)
    try:
        wait_until_listening(server, port)
    except BaseException:
        server.stop()
        raise
    return ConnectServer(server, port)


@dataclass
class StandaloneCluster:
    master: JavaServer
    worker: JavaServer
    port: int
    ui_port: int
    work_dir: Path

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its web UI's JSON view)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):
            # ValueError: an HTML page instead of JSON, seen in CI in the second the master's
            # log says it became ALIVE (leader elected). Not ready yet, like a closed port.
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        try:
            self.worker.stop()  # first: it ends its executors
        finally:
            self.master.stop()


def start_standalone_cluster(
    env: Mapping[str, str], tmp: Path, cores: int = 1, memory: str = "1g"
) -> StandaloneCluster:
    """One master and one worker (``cores``, ``memory`` for executors), both on 127.0.0.1,
    returned once the master lists the worker as alive. Daemons get a 256 MB heap; the worker's
    executors and their Python workers run in ``tmp/work``.
    """
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = {**env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
    port, ui_port = server_port(), server_port()
    master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)]
    master = start_java(
        "Spark master", [spark_class, MASTER, *master_args], env, tmp / "master.log"
    )
    work_dir, log = tmp / "work", tmp / "worker.log"
    try:
        wait_until_listening(master, port)
        worker_args = [f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", str(cores)]
        worker_args += ["--memory", memory, "--work-dir", str(work_dir)]
        worker_args += ["--webui-port", str(server_port())]
        worker = start_java("Spark worker", [spark_class, WORKER, *worker_args], env, log)
    except BaseException:
        master.stop()
        raise
    cluster = StandaloneCluster(master, worker, port, ui_port, work_dir)
    try:
        wait_until(worker, lambda: cluster.alive_workers() >= 1, "registration with the master")
    except BaseException:
        cluster.stop()
        raise
    return cluster

"""Fixtures shared by every test: storage backends (memory, local, S3 on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
S3_BUCKET = "icechunk-test"
S3_CREDENTIALS = {"key": "testing", "secret": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server in a subprocess on 127.0.0.1, one request at a time."""
    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.moto_server", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.strip() == b"ready", "moto server did not start"
    endpoint = f"http://127.0.0.1:{port}"
    _wait_for(endpoint)
    import s3fs

    fs = s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True, **S3_CREDENTIALS
    )
    fs.mkdir(S3_BUCKET)
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)
    proc.stdout.close()


def _wait_for(endpoint: str) -> None:
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def s3_options(endpoint: str) -> dict[str, Any]:
    return {**S3_CREDENTIALS, "endpoint_url": endpoint}


class Backend:
    """How to reach a fresh, empty repository location on one backend."""

    def __init__(self, name: str, url: str, options: dict[str, Any]) -> None:
        self.name = name
        self.url = url
        self.options = options

    def __repr__(self) -> str:
        return f"<Backend {self.name} {self.url}>"


@pytest.fixture(params=["memory", "local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A fresh repository location on every backend: the behaviour suite runs on all three."""
    name = request.param
    if name == "memory":
        return Backend(name, f"memory://{uuid.uuid4().hex}", {})
    if name == "local":
        return Backend(name, (tmp_path / "repo").as_uri(), {})
    endpoint = request.getfixturevalue("s3_endpoint")
    return Backend(name, f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", s3_options(endpoint))


@pytest.fixture
def process_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Like ``backend`` but only backends that several processes can share (local, S3)."""
    name = getattr(request, "param", "local")
    if name == "local":
        return Backend(name, (tmp_path / "repo").as_uri(), {})
    endpoint = request.getfixturevalue("s3_endpoint")
    return Backend(name, f"s3://{S3_BUCKET}/{uuid.uuid4().hex}", s3_options(endpoint))

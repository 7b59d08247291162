"""Fixtures shared by every test: storage backends (memory, local, and S3, GCS and Azure
emulators on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from icechunk_spark.storage import open_storage
from tests.support.ports import server_port

ROOT = Path(__file__).resolve().parent.parent
S3_BUCKET = "icechunk-test"
S3_CREDENTIALS = {"key": "testing", "secret": "testing"}
GCS_BUCKET = "icechunk-test"
AZURE_CONTAINER = "icechunk-test"

# CI runs the same examples every time (a red build is a bug, never bad luck) and enough of them
# to matter; developers keep Hypothesis' random exploration. Tests that set their own
# ``settings(...)`` inherit the loaded profile for everything they do not set. The profile must
# be loaded here, before test modules build their settings. Neither has a deadline: an example's
# time is not what a test here checks, and the first example of a run (cold imports) took 386 ms
# against the default 200 on a slow machine phase.
settings.register_profile("ci", derandomize=True, database=None, max_examples=200, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in a subprocess on a free port of 127.0.0.1: (process, endpoint). It
    says ``ready`` once it has bound the port itself (``tests/support/ports.py``)."""
    port = server_port()
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
    return proc, endpoint


def _stop_moto(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server in a subprocess on 127.0.0.1, one request at a time."""
    proc, endpoint = _start_moto()
    _s3_client(endpoint).create_bucket(Bucket=S3_BUCKET)
    yield endpoint
    _stop_moto(proc)


def new_s3_bucket(endpoint: str) -> str:
    """A new, empty bucket on the moto server at ``endpoint``.

    A repository of its own bucket per test: moto lists a prefix by scanning every key of the
    bucket (moto/s3/models.py ``list_objects``), so in one shared bucket each listing grew
    with everything the run had written before (6.7 ms empty, 34 ms at 10,000 keys).
    """
    bucket = f"test-{uuid.uuid4().hex}"
    _s3_client(endpoint).create_bucket(Bucket=bucket)
    return bucket


def _s3_client(endpoint: str) -> Any:
    """One boto3 client per moto server, kept: making one costs more than a request."""
    client = _s3_clients.get(endpoint)
    if client is None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=S3_CREDENTIALS["key"],
            aws_secret_access_key=S3_CREDENTIALS["secret"],
            region_name="us-east-1",
        )
        _s3_clients[endpoint] = client
    return client


_s3_clients: dict[str, Any] = {}


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """fake-gcs-server on 127.0.0.1 (in memory), with the bucket ``GCS_BUCKET``."""
    from tests.support import emulators

    if emulators.fake_gcs_binary() is None:
        pytest.skip("fake-gcs-server is not installed: run `make install`")
    server = emulators.start_fake_gcs()
    open_storage(f"gs://{GCS_BUCKET}", **gcs_options(server.endpoint)).fs.mkdir(GCS_BUCKET)
    yield server.endpoint
    server.stop()


def gcs_options(endpoint: str) -> dict[str, Any]:
    # token="anon": no credential lookup at all (gcsfs would otherwise ask gcloud and the
    # metadata server); the emulator accepts anonymous requests.
    return {"endpoint_url": endpoint, "token": "anon", "project": "test"}


@pytest.fixture(scope="session")
def azure_endpoint() -> Iterator[str]:
    """Azurite's blob service on 127.0.0.1 (in memory), with the container ``AZURE_CONTAINER``.

    Skips, saying why, where Node.js or Azurite is missing.
    """
    from tests.support import emulators

    reason = emulators.azurite_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = emulators.start_azurite()
    storage = open_storage(f"az://{AZURE_CONTAINER}", **azure_options(server.endpoint))
    storage.fs.mkdir(AZURE_CONTAINER)
    yield server.endpoint
    server.stop()


def azure_options(endpoint: str) -> dict[str, Any]:
    from tests.support.emulators import azurite_connection_string

    return {"connection_string": azurite_connection_string(endpoint)}


@dataclass(frozen=True)
class AuthS3:
    """A moto server that checks credentials: one IAM user allowed on ``bucket`` only."""

    endpoint: str
    key: str
    secret: str
    bucket: str
    forbidden_bucket: str  # exists, but the user's policy does not cover it

    def options(self, **changes: str) -> dict[str, Any]:
        return {"key": self.key, "secret": self.secret, "endpoint_url": self.endpoint} | changes


@pytest.fixture(scope="session")
def s3_auth() -> Iterator[AuthS3]:
    """A second moto server (its own process) that enforces IAM, unlike ``s3_endpoint``.

    moto accepts any credentials until told otherwise: the user, key, policy and buckets are
    made first, then ``/moto-api/reset-auth`` with 0 makes every later request authenticate.
    """
    import json
    import urllib.request

    import boto3

    proc, endpoint = _start_moto()
    admin = {
        "endpoint_url": endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "region_name": "us-east-1",
    }
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    for bucket in ("auth-allowed", "auth-forbidden"):
        s3.create_bucket(Bucket=bucket)
    iam.create_user(UserName="writer")
    created = iam.create_access_key(UserName="writer")["AccessKey"]
    allowed = ["arn:aws:s3:::auth-allowed", "arn:aws:s3:::auth-allowed/*"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": allowed}],
    }
    iam.put_user_policy(
        UserName="writer", PolicyName="own-bucket", PolicyDocument=json.dumps(policy)
    )
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},  # moto reads the raw body as the count
    )
    urllib.request.urlopen(request, timeout=10).close()
    yield AuthS3(
        endpoint,
        created["AccessKeyId"],
        created["SecretAccessKey"],
        "auth-allowed",
        "auth-forbidden",
    )
    _stop_moto(proc)


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


def _make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if name == "memory":
        return Backend(name, f"memory://{uuid.uuid4().hex}", {})
    if name == "local":
        return Backend(name, (tmp_path / "repo").as_uri(), {})
    fresh = uuid.uuid4().hex
    if name == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        return Backend(name, f"s3://{new_s3_bucket(endpoint)}/{fresh}", s3_options(endpoint))
    if name == "gcs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        return Backend(name, f"gs://{GCS_BUCKET}/{fresh}", gcs_options(endpoint))
    if name == "azure":
        endpoint = request.getfixturevalue("azure_endpoint")
        return Backend(name, f"az://{AZURE_CONTAINER}/{fresh}", azure_options(endpoint))
    raise ValueError(f"unknown backend {name!r}")


# The behaviour suite on the GCS and Azure emulators: the modules below by default (the
# repository protocol, history and GC, conflicts, corrupt files, zarr and xarray through the
# store: about 40 s on both), everything with ICECHUNK_EMULATOR_SUITE=full (about 2 minutes
# more, mostly zarr's store conformance suite, which tests our store adapter, not the storage).
EMULATOR_BACKENDS = ("gcs", "azure")
# Every guarantee runs on every backend by default (the GC fence, lost responses, commit-once,
# staged refs, fork merge...): 144 cases, 48 s in one process on a busy machine. The rest of the
# behaviour suite runs there in the subset above (ICECHUNK_EMULATOR_SUITE=full: all of it).
EMULATOR_TRUST = "tests/trust/"
EMULATOR_SUBSET = frozenset(
    {
        "tests/test_repository.py",
        "tests/test_corrupt_files.py",
        "tests/test_progress.py",
        "tests/trust/test_tree_conflicts.py",
        "tests/trust/test_expiry_and_rebase.py",
        "tests/zarr_store/test_store_behaviour.py",
        "tests/zarr_store/test_xarray.py",
    }
)


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("ICECHUNK_EMULATOR_SUITE") == "full":
        return "behaviour suite on gcs/azure: full"
    return "behaviour suite on gcs/azure: subset (ICECHUNK_EMULATOR_SUITE=full for all of it)"


# tryfirst: pytest-xdist's own hook (xdist/remote.py) turns xdist_group marks into the node-id
# suffix that --dist loadgroup schedules by, and this conftest registers after it: marks added
# later grouped nothing, and each worker started a JVM of its own.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _group_spark_tests(items)
    _keep_emulator_subset(config, items)


# Session fixtures that start a JVM: under ``pytest -n 2 --dist loadgroup`` the tests using one
# share a worker, so each starts once per run (one local SparkSession, one Connect server, one
# cluster). Tests that start their own Spark (spark-submit, notebooks) go to either worker.
_ONE_PER_RUN = {"spark": "spark", "connect_server": "connect", "spark_cluster": "cluster"}


def _group_spark_tests(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        group = next((g for fixture, g in _ONE_PER_RUN.items() if fixture in used), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _keep_emulator_subset(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("ICECHUNK_EMULATOR_SUITE") == "full":
        return
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        module = item.nodeid.split("::", 1)[0]
        on_emulator = params.get("backend") in EMULATOR_BACKENDS
        subset = module in EMULATOR_SUBSET or module.startswith(EMULATOR_TRUST)
        (dropped if on_emulator and not subset else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=["memory", "local", "s3", *EMULATOR_BACKENDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A fresh repository location on every backend: the behaviour suite runs on all five."""
    return _make_backend(request.param, request, tmp_path)


@pytest.fixture
def process_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Like ``backend`` but only backends that several processes can share (not memory)."""
    return _make_backend(getattr(request, "param", "local"), request, tmp_path)


@pytest.fixture
def closed_endpoint() -> Iterator[str]:
    """An endpoint on 127.0.0.1 where nothing listens, so connections are refused.

    The port stays bound (not listening) during the test, so no other process can take it.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An endpoint on 127.0.0.1 that accepts connections and never answers.

    The kernel completes the handshake for a listening socket, nobody ever reads.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def html_endpoint(tmp_path: Path) -> Iterator[str]:
    """A plain web server on 127.0.0.1 (Python's http.server): HTTP, HTML, but not S3."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    site = tmp_path / "site"
    site.mkdir()
    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()

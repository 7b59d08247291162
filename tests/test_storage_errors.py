"""Storage mistakes a user makes: one clear error of our own, naming the URL and what to check.

Every case runs against a real server on 127.0.0.1: moto (one that checks credentials, one
that does not), a port where nothing listens, a plain web server, a server that never answers.
The secret passed in never appears in a message.
"""

from __future__ import annotations

import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from icechunk_spark import Repository
from icechunk_spark.errors import (
    StorageCredentialsError,
    StorageError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from icechunk_spark.storage import open_storage
from tests.conftest import S3_BUCKET

SECRET = "s3cr3t-Never-Printed-0123456789"


@dataclass(frozen=True)
class Case:
    url: str
    options: dict[str, Any]
    error: type[StorageError]
    says: tuple[str, ...]  # phrases the one sentence must hold
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset


def _no_credentials_env(home: Path) -> dict[str, str | None]:
    # Nothing for botocore to find: no variables, no files, and no instance metadata lookup
    # (which would leave 127.0.0.1).
    return {
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,
        "AWS_DEFAULT_PROFILE": None,
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": None,
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": None,
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-credentials"),
        "AWS_CONFIG_FILE": str(home / "no-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def make_case(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Case:
    """The case called ``name``, starting only the servers it needs."""
    if name == "no credentials":
        endpoint = request.getfixturevalue("s3_endpoint")
        return Case(
            f"s3://{S3_BUCKET}/creds",
            {"endpoint_url": endpoint},
            StorageCredentialsError,
            ("no S3 credentials", "AWS_ACCESS_KEY_ID"),
            _no_credentials_env(tmp_path),
        )
    if name in ("unknown access key", "wrong secret", "access denied"):
        auth = request.getfixturevalue("s3_auth")
        # Reads start with a HEAD, whose 403 has no body to tell the three apart: its
        # sentence names key, secret and permissions; other requests' name the one at fault.
        if name == "unknown access key":
            options = auth.options(key="AKIAUNKNOWN000000000", secret=SECRET)
            says: tuple[str, ...] = ("key", "check the storage option")
            bucket = auth.bucket
        elif name == "wrong secret":
            options, bucket = auth.options(secret=SECRET), auth.bucket
            says = ("secret", "check the storage option")
        else:
            options, says, bucket = auth.options(), ("access denied",), auth.forbidden_bucket
        return Case(f"s3://{bucket}/repo", options, StorageCredentialsError, says)
    if name == "missing bucket":
        endpoint = request.getfixturevalue("s3_endpoint")
        return Case(
            "s3://no-such-bucket/repo",
            {"key": "testing", "secret": SECRET, "endpoint_url": endpoint},
            StorageNotFoundError,
            ("bucket 'no-such-bucket' does not exist", "check the bucket name"),
        )
    if name == "nothing listening":
        endpoint = request.getfixturevalue("closed_endpoint")
        return Case(
            f"s3://{S3_BUCKET}/repo",
            {"key": "testing", "secret": SECRET, "endpoint_url": endpoint},
            StorageUnreachableError,
            (f"cannot connect to {endpoint}", "check the endpoint_url"),
        )
    if name == "not an S3 endpoint":
        endpoint = request.getfixturevalue("html_endpoint")
        return Case(
            f"s3://{S3_BUCKET}/repo",
            {"key": "testing", "secret": SECRET, "endpoint_url": endpoint},
            StorageUnreachableError,
            (endpoint, "not an S3 server", "check the endpoint_url"),
        )
    raise AssertionError(name)


CASES = [
    "no credentials",
    "unknown access key",
    "wrong secret",
    "access denied",
    "missing bucket",
    "nothing listening",
    "not an S3 endpoint",
]


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    made = make_case(request.param, request, tmp_path)
    for key, value in made.env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    return made


def assert_one_clear_sentence(message: str, case: Case) -> None:
    assert case.url in message, message
    for phrase in case.says:
        assert phrase in message, (phrase, message)
    assert "\n" not in message and "Traceback" not in message
    assert SECRET not in message


def _messages(exc: BaseException) -> str:
    """Every message of the exception and its causes, as a user with --debug would see."""
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize("operation", ["open", "create"])
def test_the_api_raises_one_of_our_errors(case: Case, operation: str) -> None:
    with pytest.raises(case.error) as info:
        if operation == "open":
            Repository.open(case.url, storage_options=case.options)
        else:
            Repository.create(case.url, storage_options=case.options)
    assert_one_clear_sentence(str(info.value), case)
    assert SECRET not in _messages(info.value)


def test_listing_raises_the_same_error(case: Case) -> None:
    storage = open_storage(case.url, **case.options)
    with pytest.raises(case.error) as info:
        list(storage.list("t/"))
    assert_one_clear_sentence(str(info.value), case)


def test_the_cli_prints_one_line_and_exits_1(case: Case) -> None:
    import os

    env = dict(os.environ)
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    options = [f"--storage-option={k}={v}" for k, v in case.options.items()]
    proc = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "log", case.url, *options],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("icechunk-spark: error: ") and proc.stderr.count("\n") == 1
    assert_one_clear_sentence(proc.stderr.strip(), case)


def test_a_server_that_never_answers_times_out_with_one_of_our_errors(
    silent_endpoint: str,
) -> None:
    options = {
        "key": "testing",
        "secret": SECRET,
        "endpoint_url": silent_endpoint,
        "config_kwargs": {"read_timeout": 1, "retries": {"total_max_attempts": 1}},
    }
    url = f"s3://{S3_BUCKET}/repo"
    with pytest.raises(StorageUnreachableError) as info:
        Repository.open(url, storage_options=options)
    message = str(info.value)
    assert url in message and f"{silent_endpoint} did not answer" in message
    assert "read_timeout" in message and SECRET not in _messages(info.value)


def test_an_endpoint_without_a_scheme_is_refused_before_any_request() -> None:
    from icechunk_spark.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="http:// or https://"):
        open_storage(f"s3://{S3_BUCKET}/repo", endpoint_url="127.0.0.1:9000")


def test_our_retry_loop_does_not_retry_a_refused_connection() -> None:
    from icechunk_spark.retry import Backoff
    from icechunk_spark.storage.base import with_retries

    calls = []

    def refuse() -> None:
        calls.append(1)
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        with_retries(refuse, "reading 'x'", backoff=Backoff(0, 0))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("code", "status", "error", "says"),
    [
        ("PermanentRedirect", 301, StorageUnreachableError, "set the region storage option"),
        ("AuthorizationHeaderMalformed", 400, StorageUnreachableError, "another region"),
        ("ExpiredToken", 400, StorageCredentialsError, "refresh the credentials"),
        ("AllAccessDisabled", 403, StorageCredentialsError, "access denied"),
    ],
)
def test_error_codes_moto_cannot_produce_are_classified_too(
    code: str, status: int, error: type[StorageError], says: str
) -> None:
    # Real S3 answers these (a bucket in another region, an expired session token); moto does
    # not, so the botocore error S3 would give is built here and classified directly.
    from botocore.exceptions import ClientError

    from icechunk_spark.storage.s3_errors import Where, classify

    response: Any = {
        "Error": {"Code": code, "Message": "from the server"},
        "ResponseMetadata": {
            "HTTPStatusCode": status,
            "HTTPHeaders": {"content-type": "application/xml"},
        },
    }
    exc = OSError("translated by s3fs")
    exc.__cause__ = ClientError(response, "GetObject")
    found = classify(exc, Where("s3://b/p", None, "reading 'icechunk.json'"))
    assert isinstance(found, error) and "s3://b/p" in str(found) and says in str(found)


def test_the_cli_reports_a_timeout_in_one_line_with_a_read_timeout_option(
    silent_endpoint: str,
) -> None:
    url = f"s3://{S3_BUCKET}/repo"
    options = {"key": "testing", "secret": SECRET, "endpoint_url": silent_endpoint}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "icechunk_spark.cli",
            "log",
            url,
            *[f"--storage-option={k}={v}" for k, v in options.items()],
            # One attempt a layer: the same error after ~5 s, not ~20 s, of CI.
            "--storage-option=config_kwargs="
            '{"read_timeout": 1, "retries": {"total_max_attempts": 1}}',
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"icechunk-spark: error: {silent_endpoint} did not answer")
    assert url in proc.stderr and SECRET not in proc.stderr


def test_storage_options_written_as_json_objects_become_dicts() -> None:
    from icechunk_spark.errors import InvalidInputError
    from icechunk_spark.storage import parse_storage_options

    parsed = parse_storage_options(['config_kwargs={"read_timeout": 5}', "key=123", "anon=true"])
    assert parsed == {"config_kwargs": {"read_timeout": 5}, "key": "123", "anon": "true"}
    with pytest.raises(InvalidInputError, match="not one") as info:
        parse_storage_options([f'client_kwargs={{"aws_secret_access_key": "{SECRET}"'])
    assert SECRET not in str(info.value)


@pytest.fixture
def through_a_file(tmp_path: Path) -> str:
    """A local repository URL whose parent is a file, not a folder."""
    (tmp_path / "file").write_text("in the way")
    return (tmp_path / "file" / "repo").as_uri()


@pytest.mark.parametrize("operation", ["open", "create"])
def test_a_local_path_through_a_file_is_one_of_our_errors(
    through_a_file: str, operation: str
) -> None:
    with pytest.raises(StorageNotFoundError) as info:
        if operation == "open":
            Repository.open(through_a_file)
        else:
            Repository.create(through_a_file)
    message = str(info.value)
    assert (
        through_a_file in message and "is not a folder" in message and "check the path" in message
    )


def test_the_cli_reports_a_local_path_through_a_file_in_one_line(through_a_file: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", "init", through_a_file],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("icechunk-spark: error: ") and through_a_file in proc.stderr

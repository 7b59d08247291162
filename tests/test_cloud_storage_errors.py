"""GCS and Azure: URLs, the CLI with ``--storage-option``, and storage mistakes as one clear
error of our own, against the emulators on 127.0.0.1 (fake-gcs-server, Azurite)."""

from __future__ import annotations

import subprocess
import sys
import time
import traceback
import uuid
from typing import Any

import pytest

from icechunk_spark import Repository
from icechunk_spark.errors import (
    InvalidInputError,
    NotFoundError,
    StorageCredentialsError,
    StorageNotFoundError,
    StorageUnreachableError,
)
from icechunk_spark.storage import open_storage
from tests.conftest import (
    AZURE_CONTAINER,
    GCS_BUCKET,
    azure_options,
    gcs_options,
)
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY

WRONG_KEY = "V3JvbmdLZXktTmV2ZXItUHJpbnRlZC0wMTIzNDU2Nzg5MDEyMzQ1Njc4OQ=="  # valid base64


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _cli_options(options: dict[str, Any]) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in options.items()]


@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_the_cli_reads_a_repository_given_storage_options(
    name: str, request: pytest.FixtureRequest
) -> None:
    if name == "gcs":
        url = f"gs://{GCS_BUCKET}/{uuid.uuid4().hex}"
        options = gcs_options(request.getfixturevalue("gcs_endpoint"))
    else:
        url = f"az://{AZURE_CONTAINER}/{uuid.uuid4().hex}"
        options = azure_options(request.getfixturevalue("azure_endpoint"))
    repo = Repository.create(url, storage_options=options)
    session = repo.writable_session("main")
    session.create_group("/")
    snapshot = session.commit("from the cli test")
    done = _cli("log", url, *_cli_options(options))
    assert done.returncode == 0, done.stderr
    assert snapshot in done.stdout and "from the cli test" in done.stdout


def test_a_missing_gcs_bucket_is_named(gcs_endpoint: str) -> None:
    # GCS answers 404 for a missing object and a missing bucket alike; listing tells them
    # apart (an existing bucket lists nothing under a prefix), as S3 and Azure say outright.
    url = "gs://no-such-bucket/repo"
    options = gcs_options(gcs_endpoint)
    says = "bucket 'no-such-bucket' does not exist"
    with pytest.raises(StorageNotFoundError, match=says):
        Repository.create(url, storage_options=options)
    with pytest.raises(StorageNotFoundError, match=says):
        Repository.open(url, storage_options=options)
    with pytest.raises(StorageNotFoundError, match=says):
        list(open_storage(url, **options).list("t/"))
    done = _cli("log", url, *_cli_options(options))
    assert done.returncode == 1
    assert done.stderr.startswith("icechunk-spark: error: ") and done.stderr.count("\n") == 1
    assert says in done.stderr


def test_an_empty_gcs_prefix_lists_nothing_and_holds_no_repository(gcs_endpoint: str) -> None:
    url = f"gs://{GCS_BUCKET}/{uuid.uuid4().hex}"
    options = gcs_options(gcs_endpoint)
    assert list(open_storage(url, **options).list("t/")) == []
    with pytest.raises(NotFoundError, match="no repository"):
        Repository.open(url, storage_options=options)


def test_a_missing_azure_container_is_named(azure_endpoint: str) -> None:
    url = "az://no-such-container/repo"
    options = azure_options(azure_endpoint)
    with pytest.raises(StorageNotFoundError, match="container 'no-such-container' does not"):
        Repository.create(url, storage_options=options)
    with pytest.raises(StorageNotFoundError, match="container 'no-such-container' does not"):
        Repository.open(url, storage_options=options)
    done = _cli("log", url, *_cli_options(options))
    assert done.returncode == 1
    assert done.stderr.startswith("icechunk-spark: error: ") and done.stderr.count("\n") == 1


def test_a_wrong_azure_key_is_a_credentials_error_that_never_shows_the_key(
    azure_endpoint: str,
) -> None:
    # Azurite checks the Shared Key signature of every request, as Azure does (it answers 403
    # AuthorizationFailure where Azure says AuthenticationFailed: both are credential errors).
    wrong = azure_options(azure_endpoint)["connection_string"].replace(AZURITE_KEY, WRONG_KEY)
    for attempt in (
        lambda: Repository.create(
            f"az://{AZURE_CONTAINER}/{uuid.uuid4().hex}",
            storage_options={"connection_string": wrong},
        ),
        lambda: Repository.open(
            f"az://{AZURE_CONTAINER}/x", storage_options={"connection_string": wrong}
        ),
    ):
        with pytest.raises(StorageCredentialsError, match="credentials") as info:
            attempt()
        shown = "".join(traceback.format_exception(info.value))
        assert WRONG_KEY not in str(info.value) and WRONG_KEY[:20] not in shown


def test_azure_url_forms() -> None:
    options = {"account_key": AZURITE_KEY}  # no request is made: only the URLs are parsed
    storage = open_storage(f"abfss://data@{AZURITE_ACCOUNT}.dfs.core.windows.net/a/b", **options)
    assert storage.url == "abfss://data/a/b"
    assert storage.fs.account_name == AZURITE_ACCOUNT  # type: ignore[attr-defined]
    assert open_storage("az://data/p", account_name="acct", **options).url == "az://data/p"
    with pytest.raises(InvalidInputError, match="names no container"):
        open_storage("az:///p", account_name="acct", **options)


def test_an_azure_url_without_any_account_says_what_to_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("CONNECTION_STRING", "ACCOUNT_NAME", "ACCOUNT_KEY", "SAS_TOKEN"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)
    with pytest.raises(InvalidInputError, match="no Azure storage account given"):
        open_storage("az://data/p", anon=True)


def test_gcs_url_and_endpoint_checks() -> None:
    with pytest.raises(InvalidInputError, match="names no bucket"):
        open_storage("gs:///p", token="anon")
    with pytest.raises(InvalidInputError, match="must start with http:// or https://"):
        open_storage("gs://b/p", token="anon", endpoint_url="127.0.0.1:4443")


def test_a_wrong_azure_endpoint_is_reported_within_seconds(closed_endpoint: str) -> None:
    # Nothing listens there. The SDK's own backoff (15 s, 18 s, 24 s) is cut to about 2 s and
    # 4 s, like the S3 client's; no key or SAS appears in the message.
    options = {"connection_string": azure_options(closed_endpoint)["connection_string"]}
    started = time.monotonic()
    with pytest.raises(StorageUnreachableError, match="cannot connect") as info:
        Repository.open(f"az://{AZURE_CONTAINER}/x", storage_options=options)
    assert time.monotonic() - started < 20
    assert AZURITE_KEY not in str(info.value)


@pytest.mark.parametrize(
    ("url", "library", "extra"), [("gs://b/p", "gcsfs", "gcs"), ("az://c/p", "adlfs", "azure")]
)
def test_a_missing_client_library_names_the_extra_to_install(
    url: str, library: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # as if it were not installed
    with pytest.raises(InvalidInputError, match=rf"pip install 'icechunk-spark\[{extra}\]'"):
        open_storage(url)

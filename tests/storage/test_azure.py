"""The storage conformance suite on Azure Blob Storage: Azurite on 127.0.0.1."""

from __future__ import annotations

from tests.conftest import AZURE_CONTAINER, azure_options
from tests.storage.cloud import Cloud, CloudStorageTests


class TestAzureStorage(CloudStorageTests):
    # The Azure SDK retries a throttled (503) request after about 2 s.
    cloud = Cloud(
        "az",
        AZURE_CONTAINER,
        "azure_endpoint",
        azure_options,
        ("PUT", "GET", "HEAD", "DELETE", "POST"),
    )

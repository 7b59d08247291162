"""Google Cloud Storage through gcsfs.

Put-if-absent is an upload with ``ifGenerationMatch=0`` ("only if no live object has this
name"): the server decides the winner, so two writers racing for one generation can never both
succeed. A lost race is HTTP 412, which gcsfs turns into ``FileExistsError`` (in
``gcsfs.retry.validate_response``, by status code and only for 412), so the outcome is
recognised by the status, never by message text.

Credentials are gcsfs's own: the ``token`` storage option (a service-account JSON file, a
credentials object, ``"google_default"``, ``"cloud"`` or ``"anon"``), else
``GOOGLE_APPLICATION_CREDENTIALS`` and the gcloud defaults. Nothing is stored in the repository.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import StorageError
from .endpoints import check_endpoint
from .gcs_errors import Where, classify
from .objectstore import ObjectStorage


class GCSStorage(ObjectStorage):
    # Listings report ``updated`` in RFC 3339 with milliseconds.
    mtime_resolution_ms = 1
    mtime_key = "mtime"
    create_exclusive: ClassVar[Mapping[str, Any]] = {"mode": "create"}  # ifGenerationMatch=0
    delete_batch = 100  # a GCS batch request holds at most 100 calls
    gone_on_delete = (FileNotFoundError,)
    # Listing an existing bucket answers 200, with no items when nothing has the prefix:
    # a 404 there says the bucket is missing (reads answer 404 for both).
    empty_listing_404 = False

    def __init__(self, bucket_and_prefix: str, **options: Any) -> None:
        # The plain JSON-API client, not the ``gcsfs.GCSFileSystem`` that gcsfs exports by
        # default: that one first asks the Storage Control gRPC service whether a bucket is
        # zonal, which an emulator or a private endpoint never answers (a minute's timeout per
        # bucket). Zonal buckets are not a target of this backend.
        from gcsfs.core import GCSFileSystem

        self._locate(bucket_and_prefix, "gs", options)
        self.endpoint: str | None = options.get("endpoint_url") or None
        check_endpoint(self.endpoint, "endpoint_url", "http://127.0.0.1:4443")
        # No instance or listing caches: a repository must always see the newest objects.
        self.fs = GCSFileSystem(skip_instance_cache=True, use_listings_cache=False, **options)

    def _lost_race(self, key: str, exc: Exception) -> bool:
        return isinstance(exc, FileExistsError)  # HTTP 412: a live object has this name

    def _range_unsatisfiable(self, exc: Exception) -> bool:
        from gcsfs.retry import HttpError

        return isinstance(exc, HttpError) and exc.code == 416

    def _classify(self, exc: Exception, describe: str) -> StorageError | None:
        if isinstance(exc, FileNotFoundError):
            # gcsfs's every 404: an object when one was asked for, else the bucket.
            return None
        return classify(exc, Where(self.url, self.endpoint, describe))

    def _missing_location(self, describe: str) -> StorageError | None:
        return Where(self.url, self.endpoint, describe).bucket_missing()

"""xarray's own Zarr backend tests (``ZarrBase``, from the installed xarray's ``tests``) against
``session.store``, beside zarr's ``MemoryStore`` in the same run (about 45 s for both).

Before forks and the node-name rule, three passed on ``MemoryStore`` and failed here:
``test_pickle`` and ``test_pickle_dataarray`` (a dataset opened from a writable session did
not pickle) and ``test_roundtrip_None_variable`` (the name ``__values__`` was refused). The
few things xarray's own (uninstalled) root conftest does for the suite are done here: its
fixtures, the Zarr v3 skips, and its warning policy for zarr's spec warnings.
"""

from __future__ import annotations

import contextlib
import gc
import uuid
from collections.abc import Iterator

import pytest
import xarray as xr
import zarr
from xarray.tests.conftest import time_unit, use_dask  # noqa: F401  (fixtures its tests take)
from xarray.tests.test_backends import ZarrBase

from icechunk_spark import Repository
from icechunk_spark.zarr_store import IcechunkStore

# Importing xarray.tests turns on xarray's warning for unclosed files for the whole process;
# keep it to this module's tests (``_warn_for_unclosed_files``), not every test after it.
xr.set_options(warn_for_unclosed_files=False)

# xarray's suite runs with only xarray's own warnings as errors; zarr's warnings about data
# types and consolidated metadata without a v3 spec are expected there.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore::zarr.errors.UnstableSpecificationWarning",
        "ignore:Consolidated metadata is currently not part:UserWarning",
    ),
    # One unit under ``--dist loadgroup``: a worker runs these tests one after another, so no
    # other module's test (and its garbage) comes between them (``_no_garbage_from_before``).
    pytest.mark.xdist_group("xarray_backend_suite"),
]


@pytest.fixture
def default_zarr_format() -> Iterator[None]:
    """xarray's fixture runs Zarr formats 2 and 3; repositories hold Zarr v3 only."""
    with zarr.config.set(default_zarr_format=3):
        yield


@pytest.fixture(scope="module", autouse=True)
def _no_garbage_from_before() -> None:
    """Collected once, with the warning off: a file another test left open (in this worker,
    earlier) would otherwise warn from its __del__ in whichever test here the collector
    happened to run, and fail that one. Once per module, not per test: a collection here
    costs ~0.1 s, 37 s over the module's tests."""
    gc.collect()


@pytest.fixture(autouse=True)
def _warn_for_unclosed_files() -> Iterator[None]:
    with xr.set_options(warn_for_unclosed_files=True):
        yield


@pytest.fixture(autouse=True)
def _skip_if_param(request: pytest.FixtureRequest) -> None:
    """xarray's own conftest skips tests marked ``skip_if_param(default_zarr_format=3, ...)``
    when running Zarr v3, as here; its conftest is not installed, so this does it."""
    for marker in request.node.iter_markers(name="skip_if_param"):
        params = {k: v for k, v in marker.kwargs.items() if k not in ("reason", "condition")}
        if marker.kwargs.get("condition", True) and params == {"default_zarr_format": 3}:
            pytest.skip(marker.kwargs["reason"])


class TestZarrMemoryStoreReference(ZarrBase):
    @contextlib.contextmanager
    def create_zarr_target(self) -> Iterator[zarr.storage.MemoryStore]:
        yield zarr.storage.MemoryStore({}, read_only=False)


class TestIcechunkSessionStore(ZarrBase):
    @contextlib.contextmanager
    def create_zarr_target(self) -> Iterator[IcechunkStore]:
        repo = Repository.create(f"memory://{uuid.uuid4().hex}")
        yield repo.writable_session().store

"""Run ``async def`` tests (zarr's ``StoreTests`` has many) without an asyncio pytest plugin."""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    wanted = inspect.signature(pyfuncitem.obj).parameters
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in wanted}))
    return True


def pytest_configure(config: pytest.Config) -> None:
    # xarray's own backend tests (test_xarray_backend_suite.py) carry markers of xarray's test
    # configuration; registered here so --strict-markers accepts them. They mark nothing we
    # treat differently: a test marked flaky there must pass here all the same.
    for marker in ("flaky", "network", "asyncio", "skip_if_param", "skip_with_dask_array"):
        config.addinivalue_line("markers", f"{marker}: a marker of xarray's own test suite")

"""Fixtures for virtual-ref tests: real NetCDF4 files written with netCDF4, repositories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from icechunk_spark import Repository

from .netcdf_data import MonthlyFiles, write_monthly_files

# zarr warns whenever it loads a numcodecs.* codec (HDF5's zlib and shuffle): expected here.
NUMCODECS_WARNING = "ignore:Numcodecs codecs are not in the Zarr"


@pytest.fixture(scope="session")
def monthly(tmp_path_factory: pytest.TempPathFactory) -> MonthlyFiles:
    """12 NetCDF4 files of 2022, one month each: tas and pr (zlib, chunked), time/lat/lon."""
    return write_monthly_files(tmp_path_factory.mktemp("netcdf"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh directory to act as a virtual chunk container."""
    path = tmp_path / "data"
    path.mkdir()
    return path


RepoFactory = Callable[..., Repository]


@pytest.fixture
def make_repo(tmp_path: Path) -> Iterator[RepoFactory]:
    """``make_repo(containers, authorize=None, **config)``: a local repository."""
    made: list[Repository] = []

    def factory(
        containers: list[str],
        authorize: list[str] | dict[str, dict[str, Any]] | None = None,
        **config: Any,
    ) -> Repository:
        url = (tmp_path / f"repo{len(made)}").as_uri()
        repo = Repository.create(
            url,
            config={"virtual_chunk_containers": {c: {} for c in containers}, **config},
            authorize_virtual=containers if authorize is None else authorize,
        )
        made.append(repo)
        return repo

    yield factory
    for repo in made:
        repo.close()
        repo.handle.virtual_reader.close()

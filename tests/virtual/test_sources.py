"""The sources of a virtual dataset (icechunk#1194): every file its refs point into, with ref
counts and bytes, checked against the chunks HDF5 itself says each file stores and against
point lookups of every chunk; as of any snapshot, and from the command line."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import h5py
import numpy as np
import pytest

from icechunk_spark import Repository
from icechunk_spark.virtual import import_netcdf

from .conftest import RepoFactory
from .netcdf_data import MonthlyFiles


def stored_chunks(path: Path) -> tuple[int, int]:
    """(chunks, bytes) HDF5 stores for the file's chunked data variables, as h5py reads them."""
    count = size = 0
    with h5py.File(path, "r") as f:
        for name in ("tas", "pr"):
            dataset = f[name]
            for i in range(dataset.id.get_num_chunks()):
                count += 1
                size += dataset.id.get_chunk_info(i).size
    return count, size


def looked_up(repo: Repository, snapshot_id: str) -> dict[str, tuple[int, int, list[str]]]:
    """The same answer from point lookups of every chunk of every array (another code path)."""
    session = repo.readonly_session(snapshot_id=snapshot_id)
    refs: Counter[str] = Counter()
    size: Counter[str] = Counter()
    arrays: dict[str, set[str]] = defaultdict(set)
    for node in session.list_nodes():
        if node.meta is None:
            continue
        grid = [-(-s // c) for s, c in zip(node.meta.shape, node.meta.chunk_shape, strict=True)]
        for coord in itertools.product(*map(range, grid)):
            ref = session.get_chunk_ref(node.path, coord)
            if ref is not None and ref.kind == "virtual":
                assert ref.virtual_path is not None
                refs[ref.virtual_path] += 1
                size[ref.virtual_path] += ref.length
                arrays[ref.virtual_path].add(node.path)
    return {loc: (refs[loc], size[loc], sorted(arrays[loc])) for loc in refs}


@pytest.fixture
def imported(monthly: MonthlyFiles, make_repo: RepoFactory) -> tuple[Repository, list[str]]:
    """Six months, then the year: two snapshots of one virtual dataset."""
    repo = make_repo([monthly.container])
    snapshots = []
    for months, overwrite in ((monthly.urls[:6], False), (monthly.urls, True)):
        session = repo.writable_session("main")
        import_netcdf(session, months, concat_dim="time", overwrite=overwrite)
        snapshots.append(session.commit(f"{len(months)} months"))
    return repo, snapshots


def test_sources_are_the_files_with_the_chunks_hdf5_stores(
    monthly: MonthlyFiles, imported: tuple[Repository, list[str]]
) -> None:
    repo, _ = imported
    table = repo.sources()
    rows = {r["location"]: r for r in table.to_pylist()}
    assert list(rows) == sorted(monthly.urls)  # every file, once, sorted
    for path, url in zip(monthly.paths, monthly.urls, strict=True):
        assert (rows[url]["refs"], rows[url]["bytes"]) == stored_chunks(path)
        assert rows[url]["arrays"] == ["/pr", "/tas"]
    assert table.schema.names == ["location", "refs", "bytes", "arrays"]


def test_sources_equal_point_lookups_at_every_snapshot(
    monthly: MonthlyFiles, imported: tuple[Repository, list[str]]
) -> None:
    repo, (six, twelve) = imported
    for snapshot_id, files in ((six, 6), (twelve, 12)):
        got = {
            r["location"]: (r["refs"], r["bytes"], r["arrays"])
            for r in repo.sources(snapshot_id=snapshot_id).to_pylist()
        }
        assert got == looked_up(repo, snapshot_id)
        assert sorted(got) == sorted(monthly.urls[:files])
    repo.create_tag("first-half", six)
    assert len(repo.sources(tag="first-half")) == 6


def test_a_repository_without_virtual_refs_has_no_sources(make_repo: RepoFactory) -> None:
    repo = make_repo([])
    session = repo.writable_session("main")
    session.create_array("/x", (4,), (2,), "float64")
    session.set_chunk_values("/x", (0,), np.arange(2.0))
    session.set_chunk("/x", (1,), b"\0" * 4000)  # a native chunk file: ours, not a source
    session.commit("native only")
    table = repo.sources()
    assert table.num_rows == 0 and table.schema.names == ["location", "refs", "bytes", "arrays"]


def test_the_sources_command_prints_them_and_their_json(
    imported: tuple[Repository, list[str]],
) -> None:
    repo, (six, _) = imported

    def cli(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "icechunk_spark.cli", "sources", repo.storage.url, *args],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert json.loads(cli("--json")) == repo.sources().to_pylist()
    text = cli("--ref", six)
    totals = repo.sources(snapshot_id=six).to_pylist()
    assert text.splitlines()[-1] == (
        f"6 files, {sum(r['refs'] for r in totals)} refs, {sum(r['bytes'] for r in totals):,} bytes"
    )

"""Helpers for the Spark tests: repositories, expected tables, stored-object listings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from icechunk_spark import Repository
from icechunk_spark.format.coords import decode_coords
from icechunk_spark.format.manifest import STAT_FIELDS

CHUNK_COLUMNS = ["array", "coord", "kind", "location", "offset", "length", "manifest_id"]
STAT_COLUMNS = [f.name for f in STAT_FIELDS]


def new_repo(url: str, **kwargs: Any) -> Repository:
    """A repository with a root group (so concurrent jobs do not both create it)."""
    repo = Repository.create(url, **kwargs)
    session = repo.writable_session("main")
    session.create_group("/")
    session.commit("root group")
    return repo


def expected_chunk_rows(repo: Repository, snapshot_id: str | None = None) -> list[tuple]:
    """The ``chunks`` table as the Python API sees it, one tuple per ref."""
    session = (
        repo.readonly_session(snapshot_id=snapshot_id) if snapshot_id else repo.readonly_session()
    )
    rows = []
    for node in session.list_nodes():
        if node.type != "array":
            continue
        assert node.meta is not None
        view = repo.handle.snapshot_view(session.snapshot_id)
        # Statistics as the core reports them (chunk_stats: edge chunks read as null).
        table = session.chunk_stats(node.path)
        stats = {
            tuple(row["coord"]): tuple(row[c] for c in STAT_COLUMNS) for row in table.to_pylist()
        }
        for manifest in node.manifests:
            refs = view.ref_index(node, manifest).table
            coords = decode_coords(refs.column("coord"), node.meta.ndim)
            for i, coord in enumerate(coords):
                row = _ref_row(node.path, coord, refs, i, manifest.manifest_id)
                rows.append((*row, *stats[tuple(int(c) for c in coord)]))
    return rows


def _ref_row(path: str, coord: np.ndarray, refs: pa.Table, i: int, manifest_id: str) -> tuple:
    inline = refs.column("inline_data")[i].as_py()
    chunk_id = refs.column("chunk_id")[i].as_py()
    if inline is not None:
        return (path, [int(c) for c in coord], "inline", None, None, len(inline), manifest_id)
    kind = "native" if chunk_id is not None else "virtual"
    location = chunk_id if chunk_id is not None else refs.column("virtual_path")[i].as_py()
    return (
        path,
        [int(c) for c in coord],
        kind,
        location,
        refs.column("offset")[i].as_py(),
        refs.column("length")[i].as_py(),
        manifest_id,
    )


def keys(repo: Repository, prefix: str) -> set[str]:
    return {info.key for info in repo.storage.list(prefix)}


def referenced_chunk_objects(repo: Repository) -> set[str]:
    """Every ``c/<id>`` a snapshot on any branch references."""
    out = set()
    for snapshot in repo.state().snapshots:
        session = repo.readonly_session(snapshot_id=snapshot)
        for node in session.list_nodes():
            if node.type == "array":
                ids = session.chunk_refs(node.path).column("chunk_id").drop_null()
                out |= {f"c/{i}" for i in ids.to_pylist()}
    return out


def chunk_grid_rows(
    values: np.ndarray, chunks: tuple[int, ...], path: str
) -> Iterable[tuple[str, list[int], bytes]]:
    """(array, coord, raw C-order bytes) for every chunk of ``values`` (edges zero-padded)."""
    grid = [-(-s // c) for s, c in zip(values.shape, chunks, strict=True)]
    for coord in np.ndindex(*grid):
        block = np.zeros(chunks, dtype=values.dtype)
        region = tuple(
            slice(i * c, min((i + 1) * c, s))
            for i, c, s in zip(coord, chunks, values.shape, strict=True)
        )
        piece = values[region]
        block[tuple(slice(0, n) for n in piece.shape)] = piece
        yield path, [int(i) for i in coord], block.tobytes()

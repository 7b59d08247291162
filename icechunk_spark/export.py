"""Export: one snapshot written out as a plain Zarr v3 store (icechunk#1034).

The result is what zarr-python itself would have written: each node's ``zarr.json`` (exact
bytes) and each chunk's encoded bytes under the key its array's chunk key encoding gives, so
zarr, xarray or any Zarr v3 reader opens it with no icechunk-spark installed. Virtual chunks
live in someone else's files; they are copied only when asked (``materialize``), else the
export is refused before anything is written. Groups a snapshot leaves implicit (a parent
never created) get a plain group document, as zarr needs one to open the hierarchy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .core import Session, raise_if_collected
from .errors import AlreadyExistsError, InvalidInputError, NotFoundError
from .format.structure import Node
from .progress import Progress, track
from .storage import Storage
from .zarr_keys import chunk_keys, node_dir

IMPLICIT_GROUP = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export wrote: nodes, chunks and their bytes, and how many chunks were virtual."""

    nodes: int
    chunks: int
    bytes: int
    virtual_chunks: int


def export_zarr(
    session: Session,
    destination: Storage,
    *,
    materialize: bool = False,
    workers: int = 16,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write ``session``'s snapshot to ``destination`` as plain Zarr v3.

    Raises:
        InvalidInputError: the snapshot has virtual chunks and ``materialize`` is not set
            (nothing is written then).
        AlreadyExistsError: ``destination`` holds a Zarr store (a root ``zarr.json``) already.
        NotFoundError: a chunk is gone, e.g. the snapshot expired and garbage collection
            deleted its files during the export; ``destination`` then holds no ``zarr.json``.
    """
    nodes = session.list_nodes()
    arrays = [n for n in nodes if n.type == "array"]
    virtual = sum(_virtual_count(session, n) for n in arrays)
    if virtual and not materialize:
        raise InvalidInputError(
            f"snapshot {session.snapshot_id} has {virtual} virtual chunks, which point into "
            "other files: pass materialize=True (--materialize) to copy their bytes into the "
            "export, or export a snapshot without them"
        )
    if destination.exists("zarr.json"):
        raise AlreadyExistsError(f"{destination.url} holds a Zarr store already: export elsewhere")
    documents = {node_dir(n.path) + "zarr.json": n.zarr_json for n in nodes}
    for path in implicit_groups(nodes):
        documents.setdefault(node_dir(path) + "zarr.json", IMPLICIT_GROUP)
    chunks = [(key, node, coord) for node in arrays for key, coord in chunk_keys(session, node)]

    def write_chunk(item: tuple[str, Node, tuple[int, ...]]) -> int:
        key, node, coord = item
        ref = session.get_chunk_ref(node.path, coord)
        assert ref is not None  # listed by chunk_keys
        data = session.read_ref(ref)
        destination.put(key, data)
        return len(data)

    with ThreadPoolExecutor(max(workers, 1), thread_name_prefix="export") as pool:
        written = track(progress, "writing chunks", pool.map(write_chunk, chunks), len(chunks))
        try:
            total = sum(written)
        except NotFoundError as missing:
            advice = (
                f"{destination.url} holds some of its chunks but no zarr.json, so no Zarr "
                "reader opens it; export a snapshot still in the history there"
            )
            storage, read = session.handle.storage, [session.snapshot_id]
            raise_if_collected(storage, read, missing, "during the export", advice)
            raise
    # Metadata last: a reader that finds the root document finds every chunk it names.
    for key in sorted(documents, key=lambda k: -k.count("/")):
        destination.put(key, documents[key])
    return ExportSummary(len(documents), len(chunks), total, virtual)


def _virtual_count(session: Session, node: Node) -> int:
    refs = session.chunk_refs(node.path)
    return len(refs) - refs.column("virtual_path").null_count if len(refs) else 0


def implicit_groups(nodes: list[Node]) -> Iterator[str]:
    """Every ancestor path of a node, the root included (zarr opens from the root)."""
    yield "/"
    for node in nodes:
        parts = node.path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            yield "/" + "/".join(parts[:i])


__all__ = ["IMPLICIT_GROUP", "ExportSummary", "export_zarr", "implicit_groups"]

"""Writing manifests: one array's refs alone, or the packed manifests of a set plan.

Every manifest is a new immutable object; the structure file names it only once it is
written. A manifest's rows are sorted by array then coord, so writers hand over refs that are
sorted already (``CoordRefs.merge`` output) and the encoder does not sort millions again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import pyarrow as pa

from ..format.ids import new_object_id
from ..format.keys import manifest_key
from ..format.manifest import conform_refs, encode_manifest, with_array_id
from ..format.structure import ManifestRef
from ..pools import bounded_map
from ..progress import Progress, track
from ..splitting import PlannedManifest
from ..storage import Storage
from .coord_refs import CoordRefs


def write_refs_manifest(
    storage: Storage, node_id: int, refs: CoordRefs, set_name: str
) -> ManifestRef:
    """Write one manifest holding ``refs`` of one array (sorted by coord, one row a coord);
    returns the structure's ref to it."""
    table = with_array_id(conform_refs(refs.table), node_id)
    manifest_id = new_object_id()
    storage.put(manifest_key(manifest_id), encode_manifest(table, presorted=True))
    return ManifestRef(manifest_id, refs.extent(), refs.num_rows, set_name)


def write_packed_manifests(
    storage: Storage,
    pool: Executor,
    planned: Sequence[PlannedManifest],
    refs_for: Callable[[int], CoordRefs],
    limit: int | None,
    written: list[str],
    progress: Progress | None,
) -> dict[int, list[ManifestRef]]:
    """Write the planned manifests, each array's refs (``refs_for``, sorted by coord) in it;
    at most ``limit`` at a time. Returns each array's new manifest refs; adds the keys written
    to ``written``."""

    def write_one(manifest: PlannedManifest) -> list[tuple[int, ManifestRef]]:
        manifest_id = new_object_id()
        tables, out = [], []
        for node_id in sorted(manifest.array_ids):
            refs = refs_for(node_id)
            if refs.num_rows == 0:
                continue
            tables.append(with_array_id(refs.table, node_id))
            ref = ManifestRef(manifest_id, refs.extent(), refs.num_rows, manifest.set_name)
            out.append((node_id, ref))
        if tables:
            # Arrays in id order, each sorted by coord (merge_refs): already the manifest order.
            data = encode_manifest(
                pa.concat_tables(tables, promote_options="permissive"), presorted=True
            )
            storage.put(manifest_key(manifest_id), data)
            written.append(manifest_key(manifest_id))
        return out

    result: dict[int, list[ManifestRef]] = {}
    done = bounded_map(pool, write_one, planned, limit)
    for pairs in track(progress, "writing manifests", done, len(planned)):
        for node_id, ref in pairs:
            result.setdefault(node_id, []).append(ref)
    return result

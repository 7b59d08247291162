"""Writing manifests: one array's refs alone, or the packed manifests of a set plan.

Every manifest is a new immutable object; the structure file names it only once it is
written. A manifest's rows are sorted by array then coord, so writers hand over refs that are
sorted already (``CoordRefs.merge`` output) and the encoder does not sort millions again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, wait

import pyarrow as pa

from ..format.ids import new_object_id
from ..format.keys import manifest_key
from ..format.locations import concat_refs
from ..format.manifest import (
    array_row_spans,
    conform_refs,
    encode_manifest_rows,
    manifest_rows,
    rows_as_decoded,
    with_array_id,
)
from ..format.merge import SPLICE_MAX_ROWS
from ..format.structure import Extent, ManifestRef
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
    ref, data = encode_refs_manifest(node_id, refs, set_name)
    storage.put(manifest_key(ref.manifest_id), data)
    return ref


def encode_refs_manifest(node_id: int, refs: CoordRefs, set_name: str) -> tuple[ManifestRef, bytes]:
    """``write_refs_manifest`` without the write: the structure's ref and the bytes to put."""
    ref, rows = refs_manifest_rows(node_id, refs, set_name)
    return ref, encode_manifest_rows(rows)


def refs_manifest_rows(
    node_id: int, refs: CoordRefs, set_name: str
) -> tuple[ManifestRef, pa.Table]:
    """``encode_refs_manifest`` before the encoding: the structure's ref and the manifest's
    rows (``manifest_rows`` output)."""
    table = with_array_id(conform_refs(refs.table), node_id)
    rows = manifest_rows(table, presorted=True)
    return ManifestRef(new_object_id(), refs.extent(), refs.num_rows, set_name), rows


def write_packed_manifests(
    storage: Storage,
    pool: Executor,
    planned: Sequence[PlannedManifest],
    refs_for: Callable[[int], CoordRefs],
    limit: int | None,
    written: list[str],
    progress: Progress | None,
    carried: Carried | None = None,
    deferred: DeferredPuts | None = None,
    few_changed: Callable[[Sequence[int]], bool] | None = None,
) -> dict[int, Sequence[ManifestRef]]:
    """Write the planned manifests, each array's refs (``refs_for``, sorted by coord) in it;
    at most ``limit`` at a time. Returns each array's new manifest refs (equal ones are one
    object, see ``write_one``); adds the keys written to ``written``. Arrays in ``carried``
    keep their rows of their one old manifest, taken in bulk (a change to one of 5,760 small
    arrays sharing a manifest rewrites that manifest, but must not rebuild 5,759 arrays' refs
    one by one). Small manifests go to ``deferred``, to be written with the structure file in
    one round; a bigger one is kept decoded there too when ``few_changed`` says of its arrays
    that it is a committed manifest rewritten for a few changed rows (the next commit to
    them would read it back whole)."""

    def write_one(manifest: PlannedManifest) -> list[tuple[int, tuple[ManifestRef]]]:
        manifest_id, set_name = new_object_id(), manifest.set_name
        # Carried arrays with equal extents and counts share one ref tuple: 5,759 one-chunk
        # arrays carried into a new manifest get one, not 5,759 refs and tuples that outlive
        # the commit in its snapshot's nodes (each commit's survivors bring the interpreter's
        # next full collection nearer, 70-90 ms on a heap of that size).
        shared: dict[tuple[Extent, int], tuple[ManifestRef]] = {}
        ids = sorted(manifest.array_ids)
        spans = carried.spans(ids) if carried else {}
        # Arrays in id order, each sorted by coord: the manifest order. Carried arrays side by
        # side in an old manifest are one slice of it, so the parts need no sort (a change to
        # one of 50 arrays sharing a manifest: two slices and that array's rows).
        parts = ManifestParts()
        out = []
        for node_id in ids:
            carried_here = spans.get(node_id)
            if carried_here is not None:
                table, start, stop, old = carried_here
                parts.carry(table, start, stop)
                same = (old.extent, old.ref_count)
                ref = shared.get(same)
                if ref is None:
                    ref = shared[same] = (ManifestRef(manifest_id, *same, set_name),)
            else:
                refs = refs_for(node_id)
                if refs.num_rows == 0:
                    continue
                parts.add(with_array_id(refs.table, node_id))
                ref = (ManifestRef(manifest_id, refs.extent(), refs.num_rows, set_name),)
            out.append((node_id, ref))
        tables = parts.tables()
        if tables:
            table = concat_refs(tables)
            rows = manifest_rows(table, presorted=True)
            key = manifest_key(manifest_id)

            def keep() -> bool:
                return few_changed is not None and few_changed(ids)

            if deferred is None or not deferred.take_manifest(manifest_id, key, rows, keep):
                storage.put(key, encode_manifest_rows(rows))
                if deferred is not None and keep():
                    deferred.remember(manifest_id, rows)
            written.append(key)
        return out

    result: dict[int, Sequence[ManifestRef]] = {}
    done = bounded_map(pool, write_one, planned, limit)
    for pairs in track(progress, "writing manifests", done, len(planned)):
        for node_id, refs in pairs:
            held = result.get(node_id)
            result[node_id] = refs if held is None else (*held, *refs)
    return result


# A manifest up to this many rows is kept decoded for the next commit: a small commit's, not
# a big import's (its decoded strings would stay in the cache, tens of MB a manifest).
REMEMBERED_ROWS = 1 << 16


def rewritten_for_a_few(committed: bool, changed_rows: int) -> bool:
    """Whether a bigger manifest is kept decoded for the next commit too: one holding
    committed refs (``committed``) with at most as many changed rows as a merge splices in.
    The next commit to it would read it back whole (0.3 s at 1 M refs,
    bench/bench_big_array_commit.py). A manifest of new refs only (an import) is not kept: it
    replaces nothing held decoded, and its rows would sit in the cache unasked."""
    return committed and changed_rows <= SPLICE_MAX_ROWS


class DeferredPuts:
    """Small objects of a build, held until the last of them is ready (``start``), then all
    encoded and written on the pool together and awaited together before the state file swap.

    A small commit writes a manifest, then the structure file and transaction log that name
    it; nothing needs the manifest written before the swap, so all of them are in flight at
    once (one round trip, the latency that counts on object storage). They start together,
    not each as its table is ready: an encoder and a put on the pool take the interpreter's
    lock for their Python steps, and started while the calling thread builds the structure
    table they took turns on it with that thread, whose time is what a commit waits for
    (bench/pair_variants.py). Held until the structure is ready, a small commit took 4-7 %
    less time, and one of 5,760 arrays 6 % (pair_small_commits.py). ``budget`` (rows) bounds
    the tables held; bigger manifests are written as they come. A small manifest's rows are
    kept as decoding reads them: the next commit on the branch rewrites it, and would
    otherwise read back and decode what this one had in hand.
    """

    def __init__(self, storage: Storage, pool: Executor, budget: int) -> None:
        self._storage = storage
        self._pool = pool
        self._budget = budget
        self._lock = threading.Lock()
        self._held: list[tuple[str, Callable[[], bytes]]] = []
        self._writes: list[Future[None]] = []
        self.tables: dict[str, pa.Table] = {}  # manifest id -> rows as decoding reads them

    def take_manifest(
        self, manifest_id: str, key: str, rows: pa.Table, keep: Callable[[], bool]
    ) -> bool:
        """Hold ``rows`` (``manifest_rows`` output), to be encoded and written as ``key``;
        ``False`` (nothing done) when they do not fit the budget. Kept decoded (``tables``)
        when small, or when ``keep()``."""
        with self._lock:
            if rows.num_rows > self._budget:
                return False
            self._budget -= rows.num_rows
        if rows.num_rows <= REMEMBERED_ROWS or keep():
            # The same file from the kept rows, contiguous: the encoder walks a chunk per
            # carried slice otherwise (507 rows in 7 chunks: 279 against 250 us).
            rows = self.remember(manifest_id, rows)
        self.put(key, lambda: encode_manifest_rows(rows))
        return True

    def remember(self, manifest_id: str, rows: pa.Table) -> pa.Table:
        """Keep ``rows`` (``manifest_rows`` output) as decoding reads them; returns them so."""
        decoded = rows_as_decoded(rows)
        with self._lock:
            self.tables[manifest_id] = decoded
        return decoded

    def put(self, key: str, encode: Callable[[], bytes]) -> None:
        """Hold ``key``, to be written with the bytes ``encode`` makes."""
        with self._lock:
            self._held.append((key, encode))

    def start(self) -> None:
        """Encode and write every object held, on the pool."""
        with self._lock:
            held, self._held = self._held, []
        writes = [self._pool.submit(self._write, key, encode) for key, encode in held]
        with self._lock:
            self._writes.extend(writes)

    def _write(self, key: str, encode: Callable[[], bytes]) -> None:
        self._storage.put(key, encode())

    def wait(self) -> None:
        """Returns when every object is written (those still held are started first); raises
        the first failure once all have ended (so no write is still in flight when the caller
        cleans up)."""
        self.start()
        with self._lock:
            writes = list(self._writes)
        wait(writes)
        for write in writes:
            write.result()


class Carried:
    """Unchanged arrays whose refs all sit in one old manifest: their rows are slices of it
    (found by binary search on its sorted ``array_id``), their manifest refs copied with the
    new manifest's id."""

    def __init__(
        self, refs: Mapping[int, ManifestRef], manifest_table: Callable[[str], pa.Table]
    ) -> None:
        self._refs = refs
        self._table = manifest_table

    def __bool__(self) -> bool:
        return bool(self._refs)

    def spans(self, node_ids: Sequence[int]) -> dict[int, tuple[pa.Table, int, int, ManifestRef]]:
        """Where the carried arrays among ``node_ids`` sit in their old manifests (the table,
        first row, row after the last), beside their refs to those. Plain tuples: a change to
        one of 5,760 arrays sharing a manifest asks for 5,759."""
        by_source: dict[str, list[int]] = {}
        for node_id in node_ids:
            old = self._refs.get(node_id)
            if old is not None:
                by_source.setdefault(old.manifest_id, []).append(node_id)
        out = {}
        for source, ids in by_source.items():
            table = self._table(source)
            refs = self._refs
            for node_id, (start, stop) in zip(ids, array_row_spans(table, ids), strict=True):
                out[node_id] = (table, start, stop, refs[node_id])
        return out


class ManifestParts:
    """The tables a manifest is cut from, in order: fresh tables, and slices of old manifests,
    rows carried side by side joined into one slice (5,759 carried arrays: one or two)."""

    def __init__(self) -> None:
        self._parts: list[pa.Table] = []
        self._run: tuple[pa.Table, int, int] | None = None  # rows [start, stop) of a table

    def carry(self, table: pa.Table, start: int, stop: int) -> None:
        """Rows ``[start, stop)`` of ``table``; they continue the last ones if they follow
        them in the same table."""
        run = self._run
        if run is not None and run[0] is table and run[2] == start:
            self._run = (table, run[1], stop)
        else:
            self._close_run()
            self._run = (table, start, stop)

    def add(self, fresh: pa.Table) -> None:
        self._close_run()
        self._parts.append(fresh)

    def tables(self) -> list[pa.Table]:
        self._close_run()
        return self._parts

    def _close_run(self) -> None:
        if self._run is not None:
            table, start, stop = self._run
            self._parts.append(table.slice(start, stop - start))
            self._run = None

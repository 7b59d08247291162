"""Refs staged in files (the Spark write path) commit like refs in memory, and conflict truthfully.

A staged write lists no coords in its transaction log (it may hold 100 M), only the range it
wrote. Without that range a concurrent writer would rebase over it silently and overwrite its
chunks, or be overwritten: each test here is one of those lost updates, which must be a
conflict instead (or resolved the way ``on_conflict`` asks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import count

import numpy as np
import pyarrow as pa
import pytest

from icechunk_spark import ConflictError, Repository
from icechunk_spark.core.staged import STAGED_SCHEMA, StagedRefs, read_staged, write_staged
from icechunk_spark.core.staged_writes import PieceTask, write_piece_task
from icechunk_spark.errors import CHUNK_CONFLICT, RANGE_CONFLICT, RepeatedCoordError
from icechunk_spark.format.coords import encode_coord
from icechunk_spark.format.structure import ManifestRef
from tests.support.helpers import create_repo

CONFIG = {
    "inline_chunk_threshold_bytes": 64,
    "manifests": {
        "chunk-manifests": {
            "sets": [
                {"coordinates": {"max-manifest-size": 50, "cardinality": 1}},
                {"default": {"max-manifest-size": 100}},
            ],
            "rules": [{"path": ".*/(time|lat)", "target": "coordinates"}],
        }
    },
}
_keys = count()


def stage(repo: Repository, path: str, chunks: dict[tuple[int, ...], bytes]) -> StagedRefs:
    """Write ``chunks`` (inline) as a staged file, in row groups of 16, and describe it."""
    coords = np.array(list(chunks), dtype=np.int64)
    n = len(chunks)
    columns = {f.name: pa.nulls(n, f.type) for f in STAGED_SCHEMA}
    columns |= {
        "array": pa.array([path] * n, pa.string()),
        "coord": pa.array([encode_coord(c) for c in chunks], pa.binary()),
        "inline_data": pa.array(list(chunks.values()), pa.binary()),
    }
    full = pa.table(columns, schema=STAGED_SCHEMA)
    file = write_staged(repo.storage, f"staging/test/{next(_keys):04d}.parquet", full, 16)
    return StagedRefs(
        path,
        len(chunks),
        tuple(int(i) for i in coords.min(axis=0)),
        tuple(int(i) for i in coords.max(axis=0)),
        tuple(np.unique(coords[:, d]) for d in range(coords.shape[1])),
        (file,),
    )


def value(i: int, j: int = 0) -> bytes:
    return f"{i:03d}-{j:03d}".encode()


def datacube(n_time: int = 100) -> dict[str, dict[tuple[int, ...], bytes]]:
    return {
        "/time": {(i,): value(i) for i in range(10)},
        "/lat": {(i,): value(i) for i in range(5)},
        "/big": {(i, j): value(i, j) for i in range(n_time) for j in range(3)},
    }


def make_arrays(session) -> None:
    session.create_group("/")
    session.create_array("/time", shape=(10,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/lat", shape=(5,), chunk_shape=(1,), dtype="uint8")
    session.create_array("/big", shape=(1000, 3), chunk_shape=(1, 1), dtype="uint8")


def layout(repo: Repository) -> list[tuple[object, ...]]:
    """Sets, arrays per manifest, ref counts and each array's manifest extents."""
    manifests = sorted((m.set_name, m.arrays, m.refs) for m in repo.manifests())
    nodes = repo.readonly_session().list_nodes()
    extents = sorted((n.path, tuple(m.extent for m in n.manifests)) for n in nodes)
    return [*manifests, *extents]


def big_column(repo: Repository, *steps: int) -> list[bytes | None]:
    """The committed chunks ``(step, 0)`` of ``/big``."""
    read = repo.readonly_session()
    return [read.get_chunk("/big", (i, 0)) for i in steps]


@pytest.fixture
def repo(backend) -> Repository:
    repo = create_repo(backend, config=CONFIG)
    session = repo.writable_session()
    make_arrays(session)
    session.commit("arrays")
    return repo


def test_staged_refs_give_the_layout_of_refs_in_memory(backend, repo):
    url = backend.url.rstrip("/") + "-memory"
    other = Repository.create(url, storage_options=backend.options, config=CONFIG)
    session = other.writable_session()
    make_arrays(session)
    session.commit("arrays")
    for name, target in (("staged", repo), ("memory", other)):
        session = target.writable_session()
        for path, chunks in datacube().items():
            if name == "staged":
                session.add_staged_refs(path, stage(target, path, chunks))
            else:
                for coord, data in chunks.items():
                    session.set_chunk(path, coord, data)
        session.commit(name)
    assert layout(repo) == layout(other)
    sets = {m.set_name: m.arrays for m in repo.manifests()}
    assert sets["coordinates"] == ("/lat", "/time")  # packed together, not one per array
    read = repo.readonly_session()
    for path, chunks in datacube().items():
        assert {c: read.get_chunk(path, c) for c in chunks} == chunks


def test_appending_staged_refs_rewrites_only_the_pieces_it_touches(repo):
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", datacube(99)["/big"]))
    session.commit("first 99 steps")
    before = {m.extent: m.manifest_id for m in repo.readonly_session().get_node("/big").manifests}
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", {(99, j): b"x" for j in range(3)}))
    session.commit("one more step")
    after = {m.extent: m.manifest_id for m in repo.readonly_session().get_node("/big").manifests}
    # Pieces of 33 steps: the third piece (66..99) gains step 99, so only it is rewritten.
    assert set(before) == {((0, 33), (0, 3)), ((33, 66), (0, 3)), ((66, 99), (0, 3))}
    assert set(after) == {
        ((0, 33), (0, 3)),
        ((33, 66), (0, 3)),
        ((66, 99), (0, 3)),
        ((99, 100), (0, 3)),
    }
    assert after[((0, 33), (0, 3))] == before[((0, 33), (0, 3))]
    assert after[((33, 66), (0, 3))] == before[((33, 66), (0, 3))]


def test_a_piece_task_reads_only_its_row_groups(repo):
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", datacube()["/big"]))
    tasks: list[PieceTask] = []

    def runner(todo: Sequence[PieceTask]) -> Iterable[ManifestRef | None]:
        tasks.extend(todo)
        return [write_piece_task(repo.storage, t) for t in todo]

    session.commit("staged", piece_runner=runner)
    assert [t.span for t in tasks] == [(0, 33), (33, 66), (66, 99), (99, 132)]
    for task in tasks:  # 300 rows in row groups of 16: a piece of 99 rows spans 7 or 8
        (file,) = task.staged.files
        groups = file.groups_between(*task.staged.key_range(task.axis, task.span))
        assert 1 <= len(groups) <= 8, (task.span, groups)


def _write_chunk(repo: Repository, path: str, coord: tuple[int, ...], data: bytes) -> str:
    session = repo.writable_session()
    session.set_chunk(path, coord, data)
    return session.commit(f"chunk {coord}")


def test_a_chunk_committed_inside_our_staged_range_is_a_conflict(repo):
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"ours" for i in range(10)}))
    _write_chunk(repo, "/big", (3, 0), b"theirs")
    with pytest.raises(ConflictError) as info:
        session.commit("staged")
    (conflict,) = info.value.conflicts
    assert (conflict.kind, conflict.coords) == (CHUNK_CONFLICT, ((3, 0),))


@pytest.mark.parametrize(("policy", "expected"), [("ours", b"ours"), ("theirs", b"theirs")])
def test_on_conflict_resolves_a_chunk_inside_our_staged_range(repo, policy, expected):
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"ours" for i in range(10)}))
    _write_chunk(repo, "/big", (3, 0), b"theirs")
    _write_chunk(repo, "/big", (50, 1), b"elsewhere")
    session.commit("staged", on_conflict=policy)
    read = repo.readonly_session()
    assert read.get_chunk("/big", (3, 0)) == expected
    assert read.get_chunk("/big", (4, 0)) == b"ours"
    assert read.get_chunk("/big", (50, 1)) == b"elsewhere"


def test_a_chunk_write_rebasing_over_a_staged_commit_is_a_conflict(repo):
    """The lost update: without the range in the log, this commit would overwrite silently."""
    writer = repo.writable_session()
    writer.set_chunk("/big", (3, 0), b"late")
    bulk = repo.writable_session()
    bulk.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"bulk" for i in range(10)}))
    bulk.commit("bulk")
    with pytest.raises(ConflictError) as info:
        writer.commit("late")
    assert [c.kind for c in info.value.conflicts] == [RANGE_CONFLICT]
    assert "on_conflict='ours'" in str(info.value)
    assert repo.readonly_session().get_chunk("/big", (3, 0)) == b"bulk"


def test_theirs_cannot_resolve_a_range_it_does_not_know(repo):
    writer = repo.writable_session()
    writer.set_chunk("/big", (3, 0), b"late")
    bulk = repo.writable_session()
    bulk.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"bulk" for i in range(10)}))
    bulk.commit("bulk")
    tip = repo.lookup_branch("main")
    with pytest.raises(ConflictError):
        writer.commit("late", on_conflict="theirs")
    assert repo.lookup_branch("main") == tip


def test_overlapping_staged_writes_conflict_and_ours_keeps_the_later(repo):
    first = repo.writable_session()
    first.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"first" for i in range(10)}))
    second = repo.writable_session()
    second.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"second" for i in range(5, 15)}))
    first.commit("first")
    with pytest.raises(ConflictError) as info:
        second.commit("second")
    assert [c.kind for c in info.value.conflicts] == [RANGE_CONFLICT]
    second.commit("second", on_conflict="ours")
    assert big_column(repo, 0, 4, 5, 14) == [b"first", b"first", b"second", b"second"]


def test_disjoint_staged_appends_both_land(repo):
    first = repo.writable_session()
    first.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"a" for i in range(10)}))
    second = repo.writable_session()
    second.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"b" for i in range(10, 20)}))
    first.commit("first")
    second.commit("second")  # rebases: the ranges do not overlap
    read = repo.readonly_session()
    assert [read.get_chunk("/big", (i, 0)) for i in (0, 9, 10, 19)] == [b"a", b"a", b"b", b"b"]


def test_a_failed_piece_leaves_the_branch_where_it_was(repo):
    tip = repo.lookup_branch("main")
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", datacube()["/big"]))

    def runner(todo: Sequence[PieceTask]) -> Iterable[ManifestRef | None]:
        yield write_piece_task(repo.storage, todo[0])
        raise OSError("executor lost")

    with pytest.raises(OSError, match="executor lost"):
        session.commit("staged", piece_runner=runner)
    assert repo.lookup_branch("main") == tip
    assert repo.readonly_session().get_chunk("/big", (0, 0)) is None


def one_write(repo: Repository, path: str, *tasks: dict[tuple[int, ...], bytes]) -> StagedRefs:
    """The staged files of one write whose tasks ran side by side: one file per task."""
    files = [stage(repo, path, chunks) for chunks in tasks]
    coords = np.array([c for chunks in tasks for c in chunks], dtype=np.int64)
    return replace(
        files[0],
        count=len(coords),
        lo=tuple(int(i) for i in coords.min(axis=0)),
        hi=tuple(int(i) for i in coords.max(axis=0)),
        indices=tuple(np.unique(coords[:, d]) for d in range(coords.shape[1])),
        files=tuple(f for part in files for f in part.files),
    )


@pytest.mark.parametrize(
    ("path", "n"),
    [("/big", 100), ("/time", 10)],  # pieces of a split array; an array of a packed set
)
def test_a_coord_staged_twice_in_one_write_is_refused(repo, path, n):
    """Two tasks of one write gave the same coord: no order says which wins, so neither may.

    Before, the file that happened to sort last won, and the writer was told all went well.
    """
    tip = repo.lookup_branch("main")
    chunks = datacube()[path]
    coords = list(chunks)[:n]
    twice = coords[3]
    first = {c: b"task one" for c in coords[: n // 2]} | {twice: b"task one"}
    second = {c: b"task two" for c in coords[n // 2 :]} | {twice: b"task two"}
    session = repo.writable_session()
    session.add_staged_refs(path, one_write(repo, path, first, second))
    with pytest.raises(
        RepeatedCoordError, match=re.escape(f"row for array '{path}' at coord {twice}:")
    ):
        session.commit("ambiguous")
    assert repo.lookup_branch("main") == tip
    assert repo.readonly_session().get_chunk(path, twice) is None


def test_two_stagings_in_one_session_keep_their_order(repo):
    """Unlike the files of one write, two writes staged into a session do have an order."""
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"earlier" for i in range(120)}))
    session.add_staged_refs("/big", stage(repo, "/big", {(i, 0): b"later" for i in range(60, 70)}))
    session.commit("two stagings")
    assert big_column(repo, 59, 60, 69, 70) == [b"earlier", b"later", b"later", b"earlier"]


def test_staged_refs_are_read_back_before_commit(repo):
    session = repo.writable_session()
    session.add_staged_refs("/big", stage(repo, "/big", {(7, 2): b"seven"}))
    assert session.get_chunk("/big", (7, 2)) == b"seven"
    assert session.chunk_refs("/big").num_rows == 1
    with pytest.raises(Exception, match="staged refs"):
        session.set_chunk("/big", (0, 0), b"mixed")


def test_no_staged_row_group_holds_two_arrays(repo):
    """A row group from (/a, its last coords) to (/b, its first) would be read by every piece
    of /b below that: with a staged file per task, every piece read a group of every file
    (the billion-ref run spent 12 s a piece on it). Four files, each holding ten rows of both
    arrays, as tasks of a Spark job over interleaved rows write them."""
    files = []
    for f in range(4):
        rows = {
            path: [(i, j) for i in range(10 * f, 10 * f + 10) for j in range(2)]
            for path in ("/a", "/b")
        }
        n = sum(len(c) for c in rows.values())
        columns = {f_.name: pa.nulls(n, f_.type) for f_ in STAGED_SCHEMA}
        columns |= {
            "array": pa.array([p for p, cs in rows.items() for _ in cs], pa.string()),
            "coord": pa.array([encode_coord(c) for cs in rows.values() for c in cs], pa.binary()),
            "inline_data": pa.array([b"x"] * n, pa.binary()),
        }
        table = pa.table(columns, schema=STAGED_SCHEMA)
        files.append(
            write_staged(repo.storage, f"staging/test/{next(_keys):04d}.parquet", table, 16)
        )
    for file in files:
        assert all(g.first[0] == g.last[0] for g in file.groups), file.groups
        assert sum(g.rows for g in file.groups) == 40
    staged = StagedRefs("/b", 80, (0, 0), (39, 1), (np.arange(40), np.arange(2)), tuple(files))
    for piece in range(4):  # rows [10 p, 10 p + 10) of /b are all in file p
        low, high = staged.key_range(0, (10 * piece, 10 * piece + 10))
        reading = [i for i, f in enumerate(files) if f.groups_between(low, high)]
        assert reading == [piece]
    (table,) = read_staged(repo.storage, staged, 0, (20, 30))
    assert table.num_rows == 20  # rows 20-29 of /b, two chunks each

"""Forked-and-merged equals serial: any split of chunk writes over forks commits the same data
as writing them in one session, and forks that share a chunk are refused naming exactly the
shared chunks."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from icechunk_spark import ForkConflictError, Repository

ARRAYS = {"/grid": ((6, 6), (2, 2)), "/line": ((8,), (1,))}
COORDS = [("/grid", (i, j)) for i in range(3) for j in range(3)] + [
    ("/line", (i,)) for i in range(8)
]

# A write: (array, coord) and bytes to store, or None to delete the chunk.
writes = st.lists(
    st.tuples(st.sampled_from(COORDS), st.one_of(st.none(), st.binary(min_size=1, max_size=24))),
    max_size=20,
)


def _repo() -> Repository:
    repo = Repository.create(
        f"memory://{uuid.uuid4().hex}", config={"inline_chunk_threshold_bytes": 8}
    )
    session = repo.writable_session()
    for path, (shape, chunks) in ARRAYS.items():
        session.create_array(path, shape=shape, chunk_shape=chunks, dtype="uint8")
    session.set_chunk("/grid", (0, 0), b"committed before")
    session.set_chunk("/line", (3,), b"committed")
    session.commit("arrays")
    return repo


def _apply(target, items) -> None:
    for (path, coord), data in items:
        if data is None:
            target.delete_chunk(path, coord)
        else:
            target.set_chunk(path, coord, data)


def _commit(session) -> None:
    if session.has_uncommitted_changes():  # nothing drawn: nothing to commit on either side
        session.commit("writes")


def _contents(repo: Repository) -> dict[tuple[str, tuple[int, ...]], bytes | None]:
    reader = repo.readonly_session()
    return {(p, c): reader.get_chunk(p, c) for p, c in COORDS}


@settings(max_examples=60, deadline=None)
@given(before=writes, after=writes, forks=st.integers(1, 4), data=st.data())
def test_disjoint_forks_merged_commit_what_one_session_would(before, after, forks, data):
    # Each chunk goes to one fork (all its writes, in order): forks never share a chunk.
    owner = {c: data.draw(st.integers(0, forks - 1)) for c in {c for c, _ in after}}

    serial = _repo()
    session = serial.writable_session()
    _apply(session, before + after)
    _commit(session)

    forked = _repo()
    session = forked.writable_session()
    _apply(session, before)
    children = [session.fork() for _ in range(forks)]
    for i, child in enumerate(children):
        _apply(child, [w for w in after if owner[w[0]] == i])
    session.merge(*children)
    _commit(session)

    assert _contents(forked) == _contents(serial)


@settings(max_examples=40, deadline=None)
@given(first=writes, second=writes)
def test_forks_sharing_chunks_are_refused_naming_exactly_those(first, second):
    repo = _repo()
    session = repo.writable_session()
    one, two = session.fork(), session.fork()
    _apply(one, first)
    _apply(two, second)
    shared = {c for c, _ in first} & {c for c, _ in second}
    if not shared:
        session.merge(one, two)
        return
    try:
        session.merge(one, two)
    except ForkConflictError as exc:
        assert set(exc.chunks) == shared
    else:
        raise AssertionError(f"forks sharing {shared} were merged")
    assert not session.has_uncommitted_changes()

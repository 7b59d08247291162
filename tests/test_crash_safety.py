"""A writer killed with SIGKILL at each step of the commit protocol loses nothing committed."""

from __future__ import annotations

import multiprocessing

import pytest

from icechunk_spark import Repository
from tests.support import workers
from tests.support.helpers import create_repo, open_repo

# (key prefix at which the writer dies, whether the doomed commit is visible afterwards)
STEPS = [
    pytest.param("m/", False, id="after-chunk-files"),
    pytest.param("s/", False, id="after-manifests"),
    pytest.param("t/", False, id="after-structure-file"),
    pytest.param("icechunk.json", True, id="after-generation-file"),
]


@pytest.mark.slow
@pytest.mark.parametrize("process_backend", ["local", "s3"], indirect=True)
@pytest.mark.parametrize(("die_at", "visible"), STEPS)
def test_killed_writer_leaves_a_consistent_repository(process_backend, die_at, visible):
    repo = create_repo(process_backend, config={"inline_chunk_threshold_bytes": 8})
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"old")
    before = session.commit("before")

    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(
        target=workers.commit_and_die_at,
        args=(process_backend.url, process_backend.options, die_at),
    )
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == -9, "the writer must have been killed mid-commit"

    reopened = open_repo(process_backend)
    tip = reopened.lookup_branch("main")
    reader = reopened.readonly_session()
    if visible:
        assert tip != before
        assert reader.get_chunk("/a", (0,)) == b"new" * 100
        assert reader.get_chunk("/a", (1,)) == b"n"
    else:
        assert tip == before
        assert reader.get_chunk("/a", (0,)) == b"old"
        assert reader.get_chunk("/a", (1,)) is None

    session = reopened.writable_session()
    session.set_chunk("/a", (3,), b"after")
    after = session.commit("after the crash")
    assert (
        Repository.open(process_backend.url, storage_options=process_backend.options).lookup_branch(
            "main"
        )
        == after
    )
    assert reopened.readonly_session().get_chunk("/a", (3,)) == b"after"

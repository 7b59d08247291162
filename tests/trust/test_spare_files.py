"""Files made ahead of the next writes (local disk: spare temporary files, ``storage.spares``,
made behind each commit) are temporary files that another process's GC may sweep at any
moment: a sweep between two commits, or while a commit writes, never fails a commit or costs
a snapshot."""

from __future__ import annotations

import pytest

from icechunk_spark import Repository
from icechunk_spark.storage import open_storage
from tests.support.faults import FaultyStorage, run_held
from tests.support.helpers import cutoff_after_writes, hints_written
from tests.test_history import read_all
from tests.trust.conftest import create


@pytest.fixture
def repo(faulty: FaultyStorage) -> Repository:
    # Chunks inline: the only files GC may take are temporary ones.
    repo = create(faulty, config={"inline_chunk_threshold_bytes": 64})
    session = repo.writable_session()
    session.create_array("/a", shape=(8,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"zero")
    session.commit("create /a")
    hints_written(repo)  # and what is made behind the commit with its hint
    return repo


def _another_process(backend) -> Repository:
    """The repository through a storage of its own, as a maintenance process opens it."""
    return Repository.open(open_storage(backend.url, **backend.options))


def _everything_reads(backend, repo: Repository) -> dict[tuple[int, ...], bytes]:
    fresh = Repository.open(repo.storage)
    contents = read_all(backend, sorted(fresh.state().snapshots))  # every listed snapshot
    return contents[fresh.lookup_branch("main")]["/a"][1]


def test_gc_between_two_commits_sweeps_the_spares(faulty, repo, backend):
    maintenance = _another_process(backend)
    made_ahead = {info.key for info in maintenance.storage.list_temporary()}
    if backend.name == "local":
        assert made_ahead, "no spare file was made behind the commit"
    summary = maintenance.garbage_collect(cutoff_after_writes(backend))
    assert summary.temporary_files_deleted == len(made_ahead)

    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"one")
    session.commit("after the sweep")
    assert _everything_reads(backend, repo) == {(0,): b"zero", (1,): b"one"}


def _commit_held_while_gc_sweeps(faulty, repo, backend, hold, cutoff=None) -> None:
    """A commit of chunk 1, held at ``hold`` (method, key prefix) while another process
    collects garbage with ``cutoff`` (default: after everything written by then); it lands
    and every listed snapshot reads."""
    session = repo.writable_session()
    session.set_chunk("/a", (1,), b"one")
    maintenance = _another_process(backend)

    def collect() -> None:
        maintenance.garbage_collect(cutoff or cutoff_after_writes(backend))

    outcome = run_held(faulty, *hold, lambda: session.commit("during GC"), collect)
    assert isinstance(outcome, str), outcome
    assert Repository.open(faulty.inner).lookup_branch("main") == outcome
    assert _everything_reads(backend, repo) == {(0,): b"zero", (1,): b"one"}


def test_gc_sweeps_the_spares_while_a_commit_writes(faulty, repo, backend):
    # Held where it writes its structure file, whose spare the sweep takes; the cut-off is
    # after the spares, before the commit's objects.
    cutoff = cutoff_after_writes(backend)
    _commit_held_while_gc_sweeps(faulty, repo, backend, ("put", "s/"), cutoff)


def test_gc_sweeps_the_state_files_spare_before_the_commit_prepares_it(faulty, repo, backend):
    # Held where it prepares its state file in the spare of t/, which the sweep takes.
    cutoff = cutoff_after_writes(backend)
    _commit_held_while_gc_sweeps(faulty, repo, backend, ("prepare_put_if_absent", "t/"), cutoff)


def test_gc_sweeps_the_prepared_state_file_before_its_link(faulty, repo, backend):
    # Held at the compare-and-swap, its state file prepared (on local disk: written into a
    # spare made long before); GC's cut-off is after that write, so the sweep takes it (the
    # link fails, and the read-back settles it), and GC's fence takes the very generation.
    _commit_held_while_gc_sweeps(faulty, repo, backend, ("put_if_absent", "t/"))

"""Configuration changes go through the same compare-and-swap as commits: none is lost."""

from __future__ import annotations

import threading

import pytest

from icechunk_spark import Repository, StorageError
from icechunk_spark.core.config import RepositoryConfig
from tests.trust.conftest import create


def _stored(repo: Repository) -> RepositoryConfig:
    return RepositoryConfig.from_dict(repo.state().config)


def _race(faulty, first, second) -> None:
    """Run ``first`` until it is about to publish, run ``second`` whole, then let ``first`` go."""
    reached, release = faulty.hold("put_if_absent", "t/")
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            first()
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run_first)
    thread.start()
    assert reached.wait(30)
    second()
    release.set()
    thread.join(30)
    assert not errors, errors


def test_concurrent_set_config_keeps_both_changes(faulty):
    repo = create(faulty)
    other = Repository.open(faulty.inner)
    _race(
        faulty,
        lambda: repo.set_config({"inline_chunk_threshold_bytes": 7}),
        lambda: other.set_config({"chunk_statistics": ["/x"]}),
    )
    stored = _stored(repo)
    assert stored.inline_chunk_threshold_bytes == 7
    assert list(stored.chunk_statistics) == ["/x"]


def test_concurrent_container_additions_keep_both(faulty, tmp_path):
    repo = create(faulty)
    other = Repository.open(faulty.inner)
    one, two = (tmp_path / "one").as_uri() + "/", (tmp_path / "two").as_uri() + "/"
    _race(
        faulty,
        lambda: repo.set_virtual_chunk_container(one, {}),
        lambda: other.set_virtual_chunk_container(two, {}),
    )
    assert set(_stored(repo).virtual_chunk_containers) == {one, two}


ONE_SET = {
    "chunk-manifests": {
        "sets": [{"all": {"max-manifest-size": 1000}}],
        "rules": [{"path": ".*", "target": "all"}],
    }
}


def _repo_with_data(faulty) -> Repository:
    repo = create(faulty)
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"\x01")
    session.commit("data")
    return repo


def test_rewrite_manifests_is_one_commit(faulty):
    repo = _repo_with_data(faulty)
    before = repo.state().generation
    repo.rewrite_manifests(ONE_SET, "repack")
    assert repo.state().generation == before + 1
    assert _stored(repo).manifests is not None
    assert {m.set_name for m in repo.manifests()} == {"all"}


def test_failed_rewrite_manifests_changes_nothing(faulty):
    repo = _repo_with_data(faulty)
    state = repo.state()
    faulty.fail("put", "m/", times=100)
    with pytest.raises(StorageError):
        repo.rewrite_manifests(ONE_SET, "repack")
    faulty.heal()
    assert repo.state().generation == state.generation
    assert _stored(repo).manifests == RepositoryConfig.from_dict(state.config).manifests

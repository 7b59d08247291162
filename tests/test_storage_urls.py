"""Local repository URLs: spaces and non-ASCII survive a round trip; a host is refused."""

from __future__ import annotations

import pytest

from icechunk_spark import InvalidInputError, Repository


def test_a_path_with_spaces_reopens_by_its_own_url(tmp_path):
    folder = tmp_path / "a b" / "données"
    repo = Repository.create(str(folder))
    assert "%20" in repo.storage.url  # stored as a proper file URL
    for url in (repo.storage.url, str(folder), f"file://{folder}"):
        assert Repository.open(url).lookup_branch("main") == repo.lookup_branch("main")
    assert sorted(p.name for p in folder.iterdir()) == ["icechunk.json", "s", "t"]


def test_localhost_is_the_local_machine(tmp_path):
    repo = Repository.create(f"file://localhost{tmp_path}")
    assert Repository.open(tmp_path.as_uri()).lookup_branch("main") == repo.lookup_branch("main")


def test_a_host_in_a_file_url_is_refused():
    # Before: file://data/repo silently meant /repo (the host dropped).
    with pytest.raises(InvalidInputError, match="names a host"):
        Repository.create("file://data/repo")

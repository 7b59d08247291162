"""New arrays' documents are checked by zarr: a refused one every time, an accepted one once
while it is recent (thousands of arrays made alike share one document)."""

from __future__ import annotations

import pytest

from icechunk_spark import Repository
from icechunk_spark.core import node_docs
from icechunk_spark.errors import InvalidInputError


@pytest.fixture
def zarr_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths whose documents reached zarr's parser (the real one, counted)."""
    checked: list[str] = []
    check = node_docs._validate_array_doc

    def counted(path, doc):  # type: ignore[no-untyped-def]
        checked.append(path)
        check(path, doc)

    monkeypatch.setattr(node_docs, "_validate_array_doc", counted)
    monkeypatch.setattr(node_docs, "_RECENTLY_VALID", node_docs._RecentlyValid())
    return checked


def test_arrays_made_alike_are_checked_once_and_others_each(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    for i in range(5):
        session.create_array(f"/a{i}", (10,), (5,), "float32")
    session.create_array("/other", (10,), (2,), "float32")
    session.create_array("/again", (10,), (5,), "float32")
    assert zarr_checks == ["/a0", "/other"]
    assert session.get_node("/a4").zarr_json == session.get_node("/a0").zarr_json


def test_a_refused_document_is_refused_every_time(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    for path in ("/x", "/y"):
        with pytest.raises(InvalidInputError, match=f"array '{path}': invalid Zarr v3 metadata"):
            session.create_array(path, (10,), (5,), "no-such-dtype")
    assert zarr_checks == ["/x", "/y"]
    assert session.find_node("/x") is None and session.find_node("/y") is None


def test_a_fill_value_json_cannot_hold_is_refused_by_zarr_first(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    with pytest.raises(InvalidInputError, match="invalid Zarr v3 metadata"):
        session.create_array("/a", (10,), (5,), "float32", fill_value=object())
    assert zarr_checks == ["/a"]


def test_only_the_latest_documents_are_kept() -> None:
    recent = node_docs._RecentlyValid()
    for i in range(recent.SIZE + 1):
        recent.add(f"doc {i}")
    assert "doc 0" not in recent and f"doc {recent.SIZE}" in recent
    assert "doc 1" in recent  # asked for: the newest now, so doc 2 goes first
    recent.add("one more")
    assert "doc 1" in recent and "doc 2" not in recent

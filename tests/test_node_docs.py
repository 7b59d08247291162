"""New arrays' documents are checked by zarr: a refused one every time, an accepted one once
while it is recent (thousands of arrays made alike share one document)."""

from __future__ import annotations

import json

import pytest

from icechunk_spark import Repository
from icechunk_spark.core import node_docs
from icechunk_spark.errors import InvalidInputError


@pytest.fixture
def zarr_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The documents (as JSON text) that reached zarr's parser (the real one, counted)."""
    checked: list[str] = []
    parse = node_docs._zarr_parse

    def counted(doc):  # type: ignore[no-untyped-def]
        checked.append(json.dumps(doc, default=repr))
        parse(doc)

    monkeypatch.setattr(node_docs, "_zarr_parse", counted)
    node_docs._zarr_accepts.cache_clear()
    yield checked
    node_docs._zarr_accepts.cache_clear()


def doc_of(session, path: str) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(json.loads(session.get_node(path).zarr_json))


def test_arrays_made_alike_are_checked_once_and_others_each(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    for i in range(5):
        session.create_array(f"/a{i}", (10,), (5,), "float32")
    session.create_array("/other", (10,), (2,), "float32")
    session.create_array("/again", (10,), (5,), "float32")
    assert zarr_checks == [doc_of(session, "/a0"), doc_of(session, "/other")]
    assert session.get_node("/a4").zarr_json == session.get_node("/a0").zarr_json


def test_a_refused_document_is_refused_every_time(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    for path in ("/x", "/y"):
        with pytest.raises(InvalidInputError, match=f"array '{path}': invalid Zarr v3 metadata"):
            session.create_array(path, (10,), (5,), "no-such-dtype")
    assert len(zarr_checks) == 2 and zarr_checks[0] == zarr_checks[1]
    assert '"data_type": "no-such-dtype"' in zarr_checks[0]
    assert session.find_node("/x") is None and session.find_node("/y") is None


def test_a_fill_value_json_cannot_hold_is_refused_by_zarr_first(tmp_path, zarr_checks) -> None:
    session = Repository.create(tmp_path.as_uri()).writable_session()
    with pytest.raises(InvalidInputError, match="array '/a': invalid Zarr v3 metadata"):
        session.create_array("/a", (10,), (5,), "float32", fill_value=object())
    assert len(zarr_checks) == 1 and '"fill_value": "<object object' in zarr_checks[0]


def test_only_the_latest_documents_are_kept(tmp_path, zarr_checks) -> None:
    # Documents told apart by their chunk shape; 64 are kept, the least recently used goes.
    session = Repository.create(tmp_path.as_uri()).writable_session()

    def make(chunk: int) -> int:
        """Create an array of that chunk shape; how many parses zarr made for it."""
        before = len(zarr_checks)
        session.create_array(f"/c{chunk}_{len(session.list_nodes())}", (100,), (chunk,), "uint8")
        return len(zarr_checks) - before

    assert [make(c) for c in range(1, 65)] == [1] * 64
    assert make(2) == 0  # asked for: the newest now, so the document of chunk 1 goes first
    assert make(65) == 1
    assert (make(2), make(1)) == (0, 1)

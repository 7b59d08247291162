"""Node names: every name zarr-python accepts round-trips; the refusals say why.

zarr's own validation is the reference: a name it accepts in its ``MemoryStore`` must work
here too, written by zarr through ``session.store``, committed, and read back.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

from icechunk_spark import InvalidInputError, Repository

# Names the Zarr v3 spec reserves ("__" prefix) or finds odd, all accepted by zarr-python.
ACCEPTED = [
    "__values__",  # xarray's name for an unnamed variable (Dataset({None: ...}))
    "__xarray_dataarray_variable__",
    "__x",
    "...",
    "a.b",
    " spaced ",
    "ü-ñ",
    ".zattrs",
    "zarr.json",
    "c",
]


def _repo() -> Repository:
    return Repository.create(f"memory://{uuid.uuid4().hex}")


def _write(store: object, name: str) -> None:
    group = zarr.open_group(store, mode="a", zarr_format=3)
    array = group.create_array(name, shape=(3,), dtype="int16", fill_value=0)
    array[:] = np.array([1, 2, 3], dtype="int16")


@pytest.mark.parametrize("name", ACCEPTED)
def test_names_zarr_accepts_round_trip(name: str) -> None:
    reference = MemoryStore()
    _write(reference, name)  # zarr accepts it

    repo = _repo()
    session = repo.writable_session()
    _write(session.store, name)
    session.commit(f"an array named {name!r}")

    store = repo.readonly_session().store
    array = zarr.open_array(store, path=name, mode="r")
    assert array[:].tolist() == [1, 2, 3]
    assert repo.readonly_session().get_node(f"/{name}").type == "array"
    assert zarr.open_array(reference, path=name, mode="r")[:].tolist() == [1, 2, 3]


def test_reserved_names_work_through_the_session_api() -> None:
    session = _repo().writable_session()
    session.create_group("/__group__")
    session.create_array("/__group__/__array__", shape=(2,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/__group__/__array__", (1,), b"\x07")
    session.commit("reserved names")
    assert [n.path for n in session.list_nodes()] == ["/__group__", "/__group__/__array__"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/a/./b", "would name another node"),
        ("/a/../b", "would name another node"),
        ("/\udc80", "not valid Unicode"),
    ],
)
def test_only_what_the_format_cannot_hold_is_refused_saying_why(path: str, reason: str) -> None:
    session = _repo().writable_session()
    with pytest.raises(InvalidInputError, match=reason):
        session.create_group(path)


def test_zarr_refuses_the_dot_segments_too() -> None:
    for name in (".", ".."):
        with pytest.raises(ValueError, match=r"'\.' or '\.\.'"):
            _write(MemoryStore(), name)

"""The read path of one chunk key raises nothing on the way: zarr probes keys all the time
(every ancestor path of a chunk key is looked up while resolving it), so a lookup that finds
nothing answers ``None`` instead of raising and catching an exception (issue 27, "one read
path"). The tracer sees every exception raised in our modules, caught or not."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype

from tests.support.helpers import create_repo

PACKAGE_DIR = "icechunk_spark"
# The generator protocol, not errors: closing a generator early raises GeneratorExit in it.
PROTOCOL = (GeneratorExit, StopIteration)


def exceptions_raised_in_our_code(call: Callable[[], Any]) -> list[str]:
    raised: dict[int, str] = {}

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        ours = PACKAGE_DIR in frame.f_code.co_filename
        if event == "exception" and ours and not isinstance(arg[1], PROTOCOL):
            raised[id(arg[1])] = f"{type(arg[1]).__name__} in {frame.f_code.co_name}"
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return sorted(raised.values())


def test_reading_a_chunk_and_a_missing_key_raises_nothing_inside(backend) -> None:
    repo = create_repo(backend)
    session = repo.writable_session()
    array = zarr.create_array(
        session.store, name="grp/temp", shape=(8, 8), chunks=(4, 4), dtype="f8"
    )
    array[:] = np.arange(64.0).reshape(8, 8)
    session.commit("data")
    store = repo.readonly_session("main").store
    prototype = default_buffer_prototype()
    store.get_sync("grp/temp/c/1/0", prototype=prototype)  # warm the manifest cache

    def reads() -> None:
        assert store.get_sync("grp/temp/c/1/0", prototype=prototype) is not None
        assert store.get_sync("grp/temp/c/9/9", prototype=prototype) is None  # outside
        assert store.get_sync("grp/nothing/zarr.json", prototype=prototype) is None
        assert store.get_sync("grp/./zarr.json", prototype=prototype) is None  # not a key

    assert exceptions_raised_in_our_code(reads) == []

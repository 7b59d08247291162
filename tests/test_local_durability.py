"""Local storage makes every name durable before a state file can name it.

A file's fsync makes its bytes durable, not its name: the name is an entry of its folder, which
needs an fsync of its own (and a new folder is an entry of its parent). Without them a power loss
can keep a state file and lose the manifest or chunk it names. The test records the real
system calls of a real commit on the real file system (the storage is not mocked) and checks
their order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from icechunk_spark import Repository
from tests.support.helpers import hints_written


@dataclass(frozen=True)
class Event:
    what: str  # "fsync start", "fsync done" or "named"
    path: str
    source: str = ""  # for "named": the temporary file the name was linked or moved from


class Recorder:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[Event] = []
        real_fsync, real_link, real_replace, real_mkdir = os.fsync, os.link, os.replace, os.mkdir

        def fsync(fd: int) -> None:
            path = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
            self.events.append(Event("fsync start", path))
            real_fsync(fd)
            self.events.append(Event("fsync done", path))

        def named(real, src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
            real(src, dst, *args, **kwargs)
            self.events.append(Event("named", os.path.realpath(dst), os.path.realpath(src)))

        def mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            real_mkdir(path, *args, **kwargs)
            self.events.append(Event("named", os.path.realpath(path)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "link", lambda s, d, *a, **k: named(real_link, s, d, *a, **k))
        monkeypatch.setattr(os, "replace", lambda s, d, *a, **k: named(real_replace, s, d, *a, **k))
        monkeypatch.setattr(os, "mkdir", mkdir)

    def index(self, what: str, path: str, after: int = -1) -> int | None:
        """The first event ``what`` on ``path`` after index ``after``, or None."""
        for i in range(after + 1, len(self.events)):
            if self.events[i].what == what and self.events[i].path == path:
                return i
        return None


def test_commit_makes_names_durable_before_the_state_file_names_them(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    repo = Repository.create(root.as_uri(), config={"inline_chunk_threshold_bytes": 8})
    recorder = Recorder(monkeypatch)
    session = repo.writable_session()
    session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
    session.set_chunk("/a", (0,), b"a chunk file, not inline")
    session.commit("first chunk")
    hints_written(repo)  # the hint follows the commit on the I/O threads
    monkeypatch.undo()

    events = recorder.events
    named = [(i, e) for i, e in enumerate(events) if e.what == "named"]
    real_root = os.path.realpath(root)
    (state_index, state), *_ = [
        (i, e) for i, e in named if Path(e.path).parent.name == "t" and e.path.startswith(real_root)
    ]
    kinds = {Path(e.path).relative_to(real_root).parts[0] for _, e in named}
    assert {"c", "m", "s", "x", "t"} <= kinds, f"the commit wrote fewer kinds of file: {kinds}"
    # The hint is best effort (storage.put_best_effort): a crash may leave it old, empty or
    # missing, and readers take such a hint as missing (tests/trust/test_stale_hint.py).
    hint = os.path.join(real_root, "icechunk.json")
    assert any(e.path == hint for _, e in named), "the commit did not write the hint"
    for i, event in named:
        if event.path == hint:
            continue
        if event.source:  # the bytes were fsync'ed under the temporary name before publishing
            assert recorder.index("fsync done", event.source) is not None, event
            assert recorder.index("fsync done", event.source) < i, event
        folder = str(Path(event.path).parent)
        start = recorder.index("fsync start", folder, after=i)
        assert start is not None, f"{event.path}: its folder was never fsync'ed after naming it"
        if i < state_index:
            done = recorder.index("fsync done", folder, after=start)
            assert done is not None and done < state_index, (
                f"{event.path} was not durable before state file {state.path} named it"
            )

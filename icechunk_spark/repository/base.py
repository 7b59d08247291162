"""What every group of ``Repository``'s verbs stands on: one open handle and its state."""

from __future__ import annotations

from ..core import RepoHandle
from ..format.state import State
from ..storage import Storage


class HandleOwner:
    """Owns one ``RepoHandle``; the verbs' rooms (refs, history) subclass this."""

    _handle: RepoHandle

    @property
    def handle(self) -> RepoHandle:
        """The engine's view of this repository (core/handle.py): sessions, commits and the
        maintenance verbs work with it."""
        return self._handle

    @property
    def storage(self) -> Storage:
        """Where the repository's objects live."""
        return self._handle.storage

    def state(self) -> State:
        """The latest committed state (read fresh every call)."""
        return self._handle.state()

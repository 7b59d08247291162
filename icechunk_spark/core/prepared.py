"""A commit's next state file, prepared while the build's last objects are written.

The commit point is creating state file ``t/<g+1>`` (put-if-absent). Its bytes depend only on
the state read to swap and on the snapshot built, both known before the build's last objects
are durable, so the commit makes them then and gives storage a head start
(``Storage.prepare_put_if_absent``): a local file system writes and syncs the temporary file
beside those objects, and the compare-and-swap is then one link. What is prepared is used only
if the commit publishes on that very state (read once, the same object) for that very
snapshot, after every check it makes anyway; anything else drops it. Preparing publishes
nothing: a commit that stops after it leaves the repository as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..format.keys import state_key
from ..format.state import State
from ..storage import Storage
from .refs import state_file_bytes


@dataclass(frozen=True, slots=True)
class _Prepared:
    state: State  # the state read to swap
    snapshot_id: str  # the snapshot built
    proposed: State  # the state that publishes it
    data: bytes  # the state file of ``proposed``


class PreparedState:
    """At most one prepared state file of one commit."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._prepared: _Prepared | None = None

    def prepare(self, state: State, snapshot_id: str, proposed: State) -> None:
        """Make ``proposed``'s state file (replacing any prepared before), to publish
        ``snapshot_id`` on ``state``; storage may write it ahead."""
        self.drop()
        data = state_file_bytes(proposed)
        self._storage.prepare_put_if_absent(state_key(proposed.generation), data)
        self._prepared = _Prepared(state, snapshot_id, proposed, data)

    def take(self, state: State, snapshot_id: str) -> tuple[State, bytes] | None:
        """The state and bytes prepared on ``state`` for ``snapshot_id``; else ``None``, and
        what was prepared is dropped."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.state is state and prepared.snapshot_id == snapshot_id:
            return prepared.proposed, prepared.data
        self._drop(prepared)
        return None

    def drop(self) -> None:
        """Forget what was prepared, and let storage remove what it wrote ahead."""
        prepared, self._prepared = self._prepared, None
        self._drop(prepared)

    def _drop(self, prepared: _Prepared | None) -> None:
        if prepared is not None:
            key = state_key(prepared.proposed.generation)
            self._storage.drop_prepared(key, prepared.data)

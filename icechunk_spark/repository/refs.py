"""Branches, tags and the repository's status: pure changes of the state (``core/branches.py``)
published with compare-and-swap."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..core import branches, check_ref_name, update_state
from ..errors import InvalidInputError
from ..format.state import AVAILABILITIES, Availability, RepoStatus, State
from .base import HandleOwner


class RefVerbs(HandleOwner):
    """``Repository``'s verbs over branches, tags and the repository's status."""

    # -- status -----------------------------------------------------------------------------
    def status(self) -> RepoStatus:
        """Whether writers may change the repository (``online``) or not (``read-only``), why,
        and since when."""
        return self.state().status

    def set_status(self, availability: Availability, reason: str = "") -> RepoStatus:
        """Make the repository ``read-only`` (for an archive, a migration) or ``online`` again.

        While read-only, every writer refuses with ``RepositoryReadOnlyError`` naming
        ``reason``: commits (a session opened before included), branch and tag changes, config
        changes, expiry and garbage collection. Reading is unaffected. The status is part of the
        state, so it is set by the same compare-and-swap as a commit: a commit racing it either
        lands first or is refused.

        Raises:
            InvalidInputError: an unknown availability, or ``read-only`` without a reason.
        """
        if availability not in AVAILABILITIES:
            raise InvalidInputError(
                f"unknown status {availability!r}; give one of {', '.join(AVAILABILITIES)}"
            )
        if availability == "read-only" and not reason.strip():
            raise InvalidInputError(
                "a read-only status needs a reason: writers refuse with it, so say why and "
                "whom to ask (e.g. 'archived 2026-11; ask data-team')"
            )
        status = RepoStatus(availability, reason.strip(), int(time.time() * 1000))
        published = update_state(
            self.storage, lambda state: state.next(status=status), sets_status=True
        )
        return published.status

    def list_branches(self) -> dict[str, str]:
        """``{branch name: tip snapshot id}``."""
        return self.state().branches()

    def lookup_branch(self, name: str) -> str:
        """The tip of a branch. Raises ``NotFoundError``."""
        return self.state().branch(name).snapshot_id

    def create_branch(self, name: str, snapshot_id: str) -> None:
        """Create branch ``name`` at ``snapshot_id``.

        Raises:
            AlreadyExistsError: a branch or tag of that name exists.
            NotFoundError: no such snapshot.
            InvalidInputError: the name is not allowed.
        """
        check_ref_name(name)
        self._change_state(branches.with_new_branch, name, snapshot_id)

    def reset_branch(self, name: str, snapshot_id: str) -> None:
        """Point ``name`` at ``snapshot_id`` (any snapshot, not just an ancestor).

        Raises:
            NotFoundError: no such branch or snapshot.
        """
        self._change_state(branches.with_branch_reset, name, snapshot_id)

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name`` (its snapshots stay until expired).

        Raises:
            NotFoundError: no such branch.
            InvalidInputError: ``name`` is the default branch.
        """
        self._change_state(branches.without_branch, name)

    def list_tags(self) -> dict[str, str]:
        """``{tag name: snapshot id}``."""
        return self.state().tags()

    def lookup_tag(self, name: str) -> str:
        """The snapshot a tag points at. Raises ``NotFoundError``."""
        return self.state().tag(name).snapshot_id

    def create_tag(self, name: str, snapshot_id: str) -> None:
        """Tag ``snapshot_id`` as ``name``; tags are immutable.

        Raises:
            AlreadyExistsError: a branch or tag of that name exists.
            NotFoundError: no such snapshot.
            InvalidInputError: the name is not allowed.
        """
        check_ref_name(name)
        self._change_state(branches.with_new_tag, name, snapshot_id)

    def delete_tag(self, name: str) -> None:
        """Delete tag ``name``. Raises ``NotFoundError``."""
        self._change_state(branches.without_tag, name)

    def _change_state(self, change: Callable[..., State], *args: str) -> None:
        update_state(self.storage, lambda state: change(state, *args))

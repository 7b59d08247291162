"""Branches and tags: pure changes of the state (``core/branches.py``) published with
compare-and-swap."""

from __future__ import annotations

from collections.abc import Callable

from ..core import branches, check_ref_name, update_state
from ..format.state import State
from .base import HandleOwner


class RefVerbs(HandleOwner):
    """``Repository``'s verbs over branches and tags."""

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

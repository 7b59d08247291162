"""Branches, tags and walks through history, as pure changes of a ``State``.

Each ``with_*``/``without_*`` function takes the latest state and returns the next one, or
raises to refuse; ``Repository`` applies them with compare-and-swap (``refs.update_state``),
which calls them again after a lost race, so they must stay pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from ..errors import AlreadyExistsError, InvalidInputError, NotFoundError
from ..format.state import Ref, SnapshotInfo, State

DEFAULT_BRANCH = "main"


def check_ref_name(name: str) -> None:
    """Raises ``InvalidInputError`` for a name no branch or tag may have."""
    if not name or "/" in name or name.strip() != name:
        raise InvalidInputError(f"invalid branch or tag name {name!r}")


def with_new_branch(state: State, name: str, snapshot_id: str) -> State:
    state.snapshot(snapshot_id)
    if name in state.refs:
        raise AlreadyExistsError(f"a {state.refs[name].type} named {name!r} exists already")
    return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "branch")})


def with_branch_reset(state: State, name: str, snapshot_id: str) -> State:
    state.branch(name)
    state.snapshot(snapshot_id)
    return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "branch")})


def without_branch(state: State, name: str) -> State:
    if name == DEFAULT_BRANCH:
        raise InvalidInputError(f"the {DEFAULT_BRANCH!r} branch cannot be deleted")
    state.branch(name)
    return state.next(refs={k: v for k, v in state.refs.items() if k != name})


def with_new_tag(state: State, name: str, snapshot_id: str) -> State:
    state.snapshot(snapshot_id)
    if name in state.refs:
        raise AlreadyExistsError(
            f"a {state.refs[name].type} named {name!r} exists already; tags are immutable"
        )
    return state.next(refs={**state.refs, name: Ref(name, snapshot_id, "tag")})


def without_tag(state: State, name: str) -> State:
    state.tag(name)
    return state.next(refs={k: v for k, v in state.refs.items() if k != name})


def walk(state: State, start: str) -> Iterator[SnapshotInfo]:
    """Snapshots from ``start`` back along first parents, newest first, while listed."""
    cursor: str | None = start
    while cursor is not None:
        info = state.snapshots.get(cursor)
        if info is None:
            return  # history beyond here was expired
        yield info
        cursor = info.parent_id


def snapshot_as_of(state: State, tip: str, as_of: datetime | str) -> str:
    """The newest snapshot at or before ``as_of`` on the way down from ``tip``.

    ``as_of``: a ``datetime`` or an ISO 8601 string; without a time zone it is UTC.

    Raises:
        InvalidInputError: ``as_of`` is not a time.
        NotFoundError: no listed snapshot is that old.
    """
    if isinstance(as_of, str):
        try:
            as_of = datetime.fromisoformat(as_of)
        except ValueError:
            raise InvalidInputError(
                f"as_of={as_of!r} is not an ISO 8601 date or time; pass a datetime or "
                "a string like '2024-05-01' or '2024-05-01T12:00:00+00:00'"
            ) from None
    if not isinstance(as_of, datetime):
        raise InvalidInputError(f"as_of must be a datetime or an ISO 8601 string, not {as_of!r}")
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=UTC)
    limit = int(as_of.timestamp() * 1000)
    for info in walk(state, tip):
        if info.timestamp_ms <= limit:
            return info.id
    raise NotFoundError(f"no snapshot at or before {as_of.isoformat()} on that branch")

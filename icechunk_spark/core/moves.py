"""Moving a group or an array to another path: metadata only.

A node keeps its id when it moves, and manifests hold refs by node id, so no chunk and no
manifest is touched: the moved node (and every node below a moved group) is recorded in the
change set as an update at its new path plus where it came from (``ChangeSet.moved``); chunk
changes, staged refs and statistics are keyed by id and follow it. The commit's transaction log
says ``move_node`` (with ``from``), which is how a concurrent writer's rebase, ``diff`` and the
change feed see it (``core/conflicts.py``, ``ops/history.py``, ``ops/feed.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import AlreadyExistsError, InvalidInputError, NotFoundError
from ..format.structure import Node, make_node
from .changes import ChangeSet
from .snapshot import SnapshotView


def check_move(nodes: Mapping[str, Node], src: str, dst: str) -> list[Node]:
    """The nodes a move of ``src`` to ``dst`` (normalized paths) carries, ``src`` first.

    Raises:
        InvalidInputError: moving the root, into itself, or under an array.
        NotFoundError: nothing at ``src``, or no group to hold ``dst``.
        AlreadyExistsError: a node is at ``dst`` already.
    """
    if src == "/" or dst == "/":
        raise InvalidInputError("the root group cannot be moved, nor anything moved onto it")
    if src not in nodes:
        raise NotFoundError(f"cannot move {src!r}: no group or array there")
    if dst in nodes:
        raise AlreadyExistsError(f"cannot move {src!r} to {dst!r}: a {nodes[dst].type} is there")
    if dst.startswith(src + "/"):
        raise InvalidInputError(f"cannot move {src!r} into itself ({dst!r})")
    parent = dst.rsplit("/", 1)[0] or "/"
    holder = nodes.get(parent)
    if holder is None and parent != "/":
        raise NotFoundError(f"cannot move {src!r} to {dst!r}: create the group {parent!r} first")
    if holder is not None and holder.type != "group":
        raise InvalidInputError(f"cannot move {src!r} to {dst!r}: {parent!r} is an array")
    below = src + "/"
    return [nodes[src], *(n for p, n in sorted(nodes.items()) if p.startswith(below))]


def record_move(
    changes: ChangeSet, base: SnapshotView, carried: list[Node], src: str, dst: str
) -> None:
    """Record the move of ``carried`` (from ``check_move``) in ``changes``."""
    for node in carried:
        new_path = dst + node.path[len(src) :]
        if node.path in changes.created:  # new in this session: it is simply created there
            changes.created.pop(node.path)
            changes.created[new_path] = make_node(node.id, new_path, node.zarr_json)
            continue
        committed = base.committed(node)
        assert committed is not None  # not created in this session, so the base has it
        changes.moved.pop(node.path, None)
        updated = changes.updated.pop(node.path, None)
        doc = node.zarr_json if updated is None else updated.zarr_json
        if new_path == committed.path and doc == committed.zarr_json:
            continue  # moved back where it was, unchanged: no change at all
        changes.updated[new_path] = make_node(node.id, new_path, doc, committed.manifests)
        if new_path != committed.path:
            changes.moved[new_path] = committed.path

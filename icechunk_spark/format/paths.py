"""Node paths: the canonical form of a group or array path (``/a/b``), checked once here.

Every name zarr-python accepts is accepted (its own ``normalize_path`` is the reference),
including names the Zarr v3 spec reserves, such as xarray's ``__values__`` for an unnamed
variable and ``__xarray_dataarray_variable__``. Refused is only what our format cannot hold:

* ``.`` and ``..``: paths are stored absolute and compared as strings, so a segment that
  means "here" or "the parent" would give one node two paths (zarr refuses them too);
* names that are not valid Unicode text (lone surrogates): paths are stored as UTF-8 strings
  in the structure file and transaction logs.

Empty segments collapse (``a//b`` is ``/a/b``), as in zarr.
"""

from __future__ import annotations

from ..errors import InvalidInputError


def normalize_path(path: str) -> str:
    """``'a/b'``, ``'/a/b/'`` -> ``'/a/b'``; ``''`` and ``'/'`` -> ``'/'``.

    Raises:
        InvalidInputError: a ``.`` or ``..`` segment, or text that is not valid Unicode.
    """
    problem = path_problem(path)
    if problem is not None:
        raise InvalidInputError(problem)
    parts = [p for p in path.split("/") if p]
    return "/" + "/".join(parts)


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a node, or ``None`` when it can."""
    for part in path.split("/"):
        if part in (".", ".."):
            return (
                f"invalid node path {path!r}: segment {part!r} is not allowed, because it "
                "would name another node (paths are stored absolute; zarr refuses it too)"
            )
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return (
            f"invalid node path {path!r}: it is not valid Unicode text, and the repository "
            "stores paths as UTF-8"
        )
    return None

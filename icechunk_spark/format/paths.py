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
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if part in (".", ".."):
            raise InvalidInputError(
                f"invalid node path {path!r}: segment {part!r} is not allowed, because it "
                "would name another node (paths are stored absolute; zarr refuses it too)"
            )
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"invalid node path {path!r}: it is not valid Unicode text, and the repository "
            "stores paths as UTF-8"
        ) from None
    return "/" + "/".join(parts)

"""Node paths: the canonical form of a group or array path (``/a/b``), checked once here."""

from __future__ import annotations

from ..errors import InvalidInputError

XARRAY_UNNAMED = "__xarray_dataarray_variable__"


def normalize_path(path: str) -> str:
    """``'a/b'``, ``'/a/b/'`` -> ``'/a/b'``; ``''`` and ``'/'`` -> ``'/'``."""
    parts = [p for p in path.split("/") if p]
    for part in parts:
        # The v3 spec reserves '__' names; xarray's name for an unnamed DataArray is one
        # that zarr itself accepts, so it is let through.
        reserved = part.startswith("__") and part != XARRAY_UNNAMED
        if part in (".", "..") or reserved:
            raise InvalidInputError(f"invalid node path {path!r}: segment {part!r} is not allowed")
    return "/" + "/".join(parts)

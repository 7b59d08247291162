"""Object ids: 96 random bits printed in Crockford's base32 (URL-safe, case-insensitive)."""

from __future__ import annotations

import base64
import secrets

_ID_BYTES = 12  # 96 bits: collisions are negligible across every object a repository will hold
_B32_TO_CROCKFORD = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)


def new_object_id() -> str:
    """A fresh random id for a chunk, manifest, structure, attribute or transaction file."""
    raw = base64.b32encode(secrets.token_bytes(_ID_BYTES)).decode("ascii")
    return raw.rstrip("=").translate(_B32_TO_CROCKFORD)


def new_node_id() -> int:
    """A random 63-bit node id; stable for the node's life so manifests can be shared."""
    return secrets.randbits(63)

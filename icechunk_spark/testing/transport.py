"""Transport faults for the retry checks of ``StorageTests``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..storage.base import Storage


@dataclass(frozen=True, slots=True)
class TransientFaults:
    """A handle on the tested location whose transport fails some requests transiently.

    ``storage`` reaches the same objects as the tested storage, through a transport that fails
    requests the way a network does for a moment (a throttling answer, a reset connection)
    *before* they take effect. ``injected()`` says how many failures it has caused so far, so
    the test knows the retries were really exercised.
    """

    storage: Storage
    injected: Callable[[], int]

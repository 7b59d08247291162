"""One backoff for every retry loop: storage requests, compare-and-swap races and rebases.

Full jitter (a random wait in ``[0, min(cap, base * 2**attempt))``) spreads writers that lost
the same race, so each gets a turn instead of colliding again in lock-step.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Jittered exponential backoff: attempt ``n`` waits up to ``min(cap_s, base_s * 2**n)``."""

    base_s: float
    cap_s: float

    def delay(self, attempt: int) -> float:
        """A random wait for retry number ``attempt`` (0-based), in seconds."""
        # The exponent is bounded so a long loop never builds huge floats.
        return random.random() * min(self.cap_s, self.base_s * 2.0 ** min(attempt, 16))

    def sleep(self, attempt: int) -> None:
        time.sleep(self.delay(attempt))


# Requests that failed transiently: the client library has retried already, so wait longer.
STORAGE_BACKOFF = Backoff(base_s=0.1, cap_s=2.0)
# A lost compare-and-swap on the state file: the winner's state is readable at once.
CAS_BACKOFF = Backoff(base_s=0.005, cap_s=0.5)
# A commit that rebased onto a moved branch: many writers on one branch take turns.
REBASE_BACKOFF = Backoff(base_s=0.01, cap_s=1.0)

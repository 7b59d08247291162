"""``StorageTests``: the behaviour every ``Storage`` backend must show, as a pytest base class.

Like zarr's ``zarr.testing.store.StoreTests``: subclass it in a test module, provide a fixture
that opens a fresh, empty location, and every check below runs against your backend::

    import pytest
    from icechunk_spark.testing import StorageTests

    class TestMyStorage(StorageTests):
        @pytest.fixture
        def storage(self, tmp_path):
            store = MyStorage(tmp_path / "repo")
            yield store
            store.close()

What is checked (each a test method): round trips of empty, binary and large objects;
``NotFoundError`` for missing objects, ranged reads included; ranged reads at the start, middle
and end, and clipped to the object like ``data[start:end]`` (a range past the end gives the
bytes that exist, possibly none; an empty range gives ``b""``); ``put`` replaces; put-if-absent
creates once and never changes what exists, exactly one winner per key when threads and
processes race for it; listing by string prefix (``c/`` never matches ``cx/``, nothing outside
the location), with sizes and modification times; deletes of present, missing and many keys;
``exists`` for objects only; ``get_many`` order; no temporary files left by writes; keys of
the shapes the format uses; a reopened handle (see ``opener``) reaches the same objects; and
retries as ``storage/base.py`` defines them: every operation but put-if-absent may be repeated
after a lost answer, transient errors (``ConnectionError``, ``TimeoutError``) are retried, a
refused connection is not, and retries end in a ``StorageError``.

Hooks a subclass may set or override:

* ``shared_across_processes = False`` when another process cannot reach the same objects (an
  in-process store): the cross-process race is skipped, saying so.
* ``opener(storage)``: a picklable zero-argument callable that opens the same location again.
  By default the storage pickles itself (repositories are pickled to worker processes too).
* the ``transient_faults`` fixture, for backends with a network transport: a handle whose
  transport fails requests transiently, to check they are retried (skipped by default).
* ``clock_slack_ms``: how far a listing's ``modified_ms`` may be from this machine's clock.

pytest rewrites asserts only in test modules, so every assert here carries its own message.
"""

from __future__ import annotations

from .listing_checks import ListingChecks
from .object_checks import ObjectChecks
from .retry_checks import RetryChecks
from .transport import TransientFaults

__all__ = ["StorageTests", "TransientFaults"]


class StorageTests(ObjectChecks, ListingChecks, RetryChecks):
    """The conformance suite for ``Storage`` backends: subclass it and provide ``storage``."""

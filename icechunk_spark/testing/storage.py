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
after a lost answer; and, through a handle whose transport fails (the fault fixtures below),
transient failures are retried, a refused connection is not, and retries end in a
``StorageError``.

Hooks a subclass may set or override:

* ``shared_across_processes = False`` when another process cannot reach the same objects (an
  in-process store): the cross-process race is skipped, saying so.
* ``opener(storage)``: a picklable zero-argument callable that opens the same location again.
  By default the storage pickles itself (repositories are pickled to worker processes too).
* the fault fixtures ``transient_faults``, ``refused_connection`` and ``failing_transport``:
  ``TransportFaults`` handles on the location whose transport fails some requests once, refuses
  every connection, or fails every request (each check skips, saying so, without its fixture).
  A backend with a network transport provides what it can (our S3, GCS and Azure runs put a
  fault-injecting proxy in front of the server for ``transient_faults``); a backend without
  one mixes in ``SimulatedTransport`` (``class TestMine(SimulatedTransport, StorageTests)``),
  which provides all three through ``FlakyTransport``.
* ``clock_slack_ms``: how far a listing's ``modified_ms`` may be from this machine's clock.

pytest rewrites asserts only in test modules, so every assert here carries its own message.
"""

from __future__ import annotations

from .listing_checks import ListingChecks
from .object_checks import ObjectChecks
from .retry_checks import RetryChecks

__all__ = ["StorageTests"]


class StorageTests(ObjectChecks, ListingChecks, RetryChecks):
    """The conformance suite for ``Storage`` backends: subclass it and provide ``storage``."""

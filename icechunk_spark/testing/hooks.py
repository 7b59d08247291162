"""What a ``StorageTests`` subclass provides: the location under test and optional handles.

The checks are split over modules by what they check (objects, listings, retries); each is a
mixin of ``StorageHooks``, and ``StorageTests`` joins them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest

from ..storage.base import Storage
from .transport import TransportFaults

Opener = Callable[[], Storage]


class StorageHooks:
    """The hooks every check may use; ``StorageTests`` documents them."""

    #: Whether another process opening ``opener(storage)`` reaches the same objects.
    shared_across_processes: ClassVar[bool] = True
    #: Tolerated distance between a listing's ``modified_ms`` and this machine's clock, on top
    #: of ``storage.mtime_resolution_ms``: a server's clock is not ours, and file systems stamp
    #: files with a coarse clock that may lag ``time.time()`` by a tick.
    clock_slack_ms: ClassVar[int] = 5_000
    race_threads: ClassVar[int] = 8
    race_processes: ClassVar[int] = 4
    race_keys: ClassVar[int] = 4  # keys every racer tries to create, one after the other
    delete_many: ClassVar[int] = 120  # objects written, then deleted in one call

    # -- hooks ------------------------------------------------------------------------------
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        """A fresh, empty location of the backend under test (override it; close on teardown)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define a `storage` fixture that yields a fresh, empty "
            "Storage of the backend under test"
        )
        yield  # pragma: no cover - makes this a generator, like the overrides

    def opener(self, storage: Storage) -> Opener:
        """A picklable zero-argument callable that opens ``storage``'s location again.

        Used to reach the same objects from another handle and from other processes. The
        default pickles the storage itself; override it for a storage that does not pickle,
        e.g. ``functools.partial(open_storage, url, **options)``.
        """
        return functools.partial(_same_storage, storage)

    # The retry checks' handles (see ``TransportFaults``). A backend without a transport of
    # its own mixes in ``SimulatedTransport``, which provides all three.
    @pytest.fixture
    def transient_faults(self, storage: Storage) -> TransportFaults:
        """A handle whose transport fails some requests once, transiently."""
        pytest.skip(f"{type(self).__name__} declares no transport faults to inject")

    @pytest.fixture
    def refused_connection(self, storage: Storage) -> TransportFaults:
        """A handle whose transport is refused every connection."""
        pytest.skip(f"{type(self).__name__} declares no refusing transport")

    @pytest.fixture
    def failing_transport(self, storage: Storage) -> TransportFaults:
        """A handle whose transport fails every request transiently (a timeout)."""
        pytest.skip(f"{type(self).__name__} declares no transport that always fails")


def _same_storage(storage: Storage) -> Storage:
    return storage

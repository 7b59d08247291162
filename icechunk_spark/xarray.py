"""xarray datasets into a session, on any Dask scheduler, as one commit.

``to_repository(ds, session, ...)`` takes the arguments of ``Dataset.to_zarr`` that make
sense for a session (``mode``, ``append_dim``, ``region``, ``encoding``, ``group``,
``safe_chunks``, ``write_empty_chunks``) and writes:

* the metadata and every in-memory (eager) variable directly into ``session``;
* every Dask-backed variable from the Dask scheduler's workers, one fork of ``session`` per
  Dask block (``Session.fork``): each task writes its block through its fork and returns it,
  and ``session.merge`` brings all the forks in.

So ``session.commit(...)`` afterwards publishes everything at once, whether the graph ran on
threads, in processes, or on a ``dask.distributed`` cluster. Plain ``ds.to_zarr(session.store)``
works on threads; on processes its workers' writes could never come back, so the session
refuses to commit then (see ``core/forks.py``) and points here.

>>> session = repo.writable_session("main")                       # doctest: +SKIP
>>> to_repository(ds.chunk({"time": 24}), session, mode="w")       # doctest: +SKIP
>>> session.commit("write the cube")                               # doctest: +SKIP

A VirtualiZarr virtual dataset (ManifestArray-backed variables) is handed to
``icechunk_spark.virtual.write_virtual_dataset``: its refs are written as refs, never read.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import xarray as xr
import zarr
from xarray.backends.common import ArrayWriter

from .core import ForkSession
from .errors import InvalidInputError, ReadOnlyError
from .virtual.vds_refs import is_virtual_dataset

if TYPE_CHECKING:
    from .core import Session

Region = Mapping[str, slice | Literal["auto"]] | Literal["auto"] | None
WriteMode = Literal["w", "w-", "a", "a-", "r+"]

__all__ = ["to_repository"]


def to_repository(
    dataset: xr.Dataset,
    session: Session,
    *,
    group: str | None = None,
    mode: WriteMode | None = None,
    append_dim: Hashable | None = None,
    region: Region = None,
    encoding: Mapping[Any, Any] | None = None,
    safe_chunks: bool = True,
    write_empty_chunks: bool | None = None,
    scheduler: Any = None,
) -> None:
    """Write ``dataset`` into ``session``; Dask-backed variables through forks, merged.

    Nothing is committed: call ``session.commit`` afterwards (one commit for everything).

    Args:
        dataset: the dataset; variables may be NumPy- or Dask-backed.
        session: a writable session.
        group, mode, append_dim, region, encoding, safe_chunks, write_empty_chunks: as for
            ``Dataset.to_zarr`` (the store is always Zarr v3 and never consolidated).
        scheduler: the Dask scheduler to compute with (``"threads"``, ``"processes"``, a
            ``distributed.Client``); default: Dask's current one.

    Raises:
        ReadOnlyError: ``session`` is read-only or has committed.
        ForkConflictError: two Dask blocks wrote the same Zarr chunk (with
            ``safe_chunks=False`` and Dask chunks that do not line up with Zarr's); nothing
            of the Dask-backed variables was merged.
        ForkError: a ``memory://`` repository with a scheduler that runs other processes.
        ValueError: whatever ``Dataset.to_zarr`` refuses (modes, regions, encodings).
        VirtualRefRefusedError: a virtual dataset's ref outside the virtual chunk containers.
    """
    if session.read_only:
        raise ReadOnlyError(
            "to_repository needs a writable session, not a read-only one: "
            "repo.writable_session(branch)"
        )
    if is_virtual_dataset(dataset):
        _write_virtual(dataset, session, group, mode, append_dim, region, encoding)
        return
    lazy = _write_metadata_and_eager(
        dataset,
        session,
        group=group,
        mode=mode,
        append_dim=append_dim,
        region=region,
        encoding=encoding,
        safe_chunks=safe_chunks,
        write_empty_chunks=write_empty_chunks,
    )
    if lazy:
        forks = _compute_writes(session, lazy, write_empty_chunks, scheduler)
        session.merge(*forks)


def _write_virtual(
    dataset: xr.Dataset,
    session: Session,
    group: str | None,
    mode: WriteMode | None,
    append_dim: Hashable | None,
    region: Region,
    encoding: Mapping[Any, Any] | None,
) -> None:
    """A virtual dataset: its refs through ``write_virtual_dataset``, where ``to_zarr``'s
    arguments mean something for refs (a region or an encoding would re-encode data)."""
    from .virtual.vds_write import write_virtual_dataset

    if region is not None or encoding:
        raise InvalidInputError(
            "a virtual dataset is written as its refs: region= and encoding= do not apply"
        )
    if mode == "r+":
        raise InvalidInputError("mode='r+' overwrites regions; a virtual dataset has none")
    write_virtual_dataset(
        session,
        dataset,
        group or "/",
        None if append_dim is None else str(append_dim),
        overwrite=mode in ("w", "a"),
    )


@dataclass(frozen=True, slots=True)
class _LazyWrite:
    """A Dask-backed variable to write: its (encoded) data, its array's key path, and the
    region of the array it fills (one slice per dimension)."""

    source: Any  # a dask.array.Array
    path: str
    region: tuple[slice, ...]


class _Writes(ArrayWriter):
    """xarray's ``ArrayWriter`` that writes eager data at once and keeps Dask-backed data."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.lazy: list[_LazyWrite] = []

    def add(self, source: Any, target: zarr.Array[Any], region: Any = None) -> None:
        if not _is_dask(source):
            super().add(source, target, region)  # type: ignore[no-untyped-call]
            return
        ndim = len(source.shape)
        full = tuple(region) if region else (slice(None),) * ndim
        self.lazy.append(_LazyWrite(source, target.path, full))


def _is_dask(data: Any) -> bool:
    if not hasattr(data, "__dask_graph__"):
        if hasattr(data, "chunks") and not isinstance(data, np.ndarray):
            raise InvalidInputError(
                f"to_repository writes NumPy- or Dask-backed data, not {type(data).__name__}"
            )
        return False
    return True


def _write_metadata_and_eager(
    dataset: xr.Dataset, session: Session, **to_zarr: Any
) -> list[_LazyWrite]:
    """What ``Dataset.to_zarr(compute=False)`` does, keeping the Dask writes for us."""
    from xarray.backends.writers import (  # xarray's own to_zarr steps
        _validate_dataset_names,
        dump_to_store,
        get_writable_zarr_store,
    )

    encoding = dict(to_zarr.pop("encoding") or {})
    _validate_dataset_names(dataset)
    for variable in dataset.variables.values():
        if variable.size == 0:  # as to_zarr does: Dask cannot store zero-length chunks
            variable.load()
    store = get_writable_zarr_store(session.store, consolidated=False, zarr_format=3, **to_zarr)
    writes = _Writes()
    try:
        dataset = store._validate_and_autodetect_region(dataset)
        store._validate_encoding(encoding)
        dump_to_store(dataset, store, writes, encoding=encoding)  # type: ignore[no-untyped-call]
    finally:
        store.close()
    return writes.lazy


def _compute_writes(
    session: Session, writes: Sequence[_LazyWrite], write_empty: bool | None, scheduler: Any
) -> list[ForkSession]:
    """Run one task per Dask block, each writing through a fork of its own; the forks."""
    from dask.base import compute
    from dask.delayed import delayed

    tasks: list[Any] = []
    name = f"icechunk-write-{uuid.uuid4().hex}"
    for write in writes:
        blocks = write.source.to_delayed()
        for index, selection in _block_selections(write):
            # Keys named here: Dask never hashes (pickles) the forks to name the tasks.
            key = f"{name}-{len(tasks)}"
            task = delayed(_write_block, pure=False)(
                blocks[index], session.fork(), write.path, selection, write_empty, dask_key_name=key
            )
            tasks.append(task)
    kwargs = {} if scheduler is None else {"scheduler": scheduler}
    return list(compute(*tasks, **kwargs))  # type: ignore[no-untyped-call]


def _block_selections(
    write: _LazyWrite,
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Each Dask block's index and the part of the Zarr array it fills."""
    chunks = write.source.chunks
    starts = [np.cumsum((0, *c))[:-1] for c in chunks]
    for index in np.ndindex(*(len(c) for c in chunks)):
        yield (
            index,
            tuple(
                slice(
                    (region.start or 0) + int(starts[d][i]),
                    (region.start or 0) + int(starts[d][i]) + chunks[d][i],
                )
                for d, (i, region) in enumerate(zip(index, write.region, strict=True))
            ),
        )


def _write_block(
    block: np.ndarray,
    fork: ForkSession,
    path: str,
    selection: tuple[slice, ...],
    write_empty: bool | None,
) -> ForkSession:
    """In a Dask worker: write one block through ``fork``'s store; return the fork."""
    config = {} if write_empty is None else {"array.write_empty_chunks": write_empty}
    with zarr.config.set(config):
        array = zarr.open_array(fork.store, path=path, mode="r+", zarr_format=3)
        array[selection] = block
    return fork

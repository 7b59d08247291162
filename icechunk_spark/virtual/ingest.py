"""Keep one virtual dataset in step with a growing collection of files (the daily update).

A run lists the files, keeps the ones the branch does not reference yet, and rebuilds the
dataset from every file (old and new) in one commit: a file is never ingested twice, and a
run with nothing new commits nothing. Used by ``icechunk-spark import`` (threads scan the
files). ``jobs/ingest_virtual.py`` appends instead of rebuilding (``spark.virtual_ingest``)
and reads and writes the same record of files, so both work on one repository.

>>> repo, plan = prepare_ingest("file:///repo", "/data/tas_*.nc")           # doctest: +SKIP
>>> ingest_files(repo, plan, concat_dim="time") if plan.new else None      # doctest: +SKIP

Which files a branch holds: those its virtual refs point into, plus those listed under
``UNREFERENCED_SOURCES`` in the metadata of the newest ingest commit of its ancestry. That
list holds the imported files no virtual ref points into (every chunk small enough to be
inlined, or copied because it was materialized): without it such files would look new on
every run and be dropped once they leave the glob. Only those files are listed, so the
commit metadata stays small however many files a dataset grows to.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import resolve_target
from ..errors import InvalidInputError
from .importers import check_readable, import_netcdf

if TYPE_CHECKING:
    from ..core import Session
    from ..progress import Progress
    from ..repository import Repository


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """Which files a run imports: all of them, sorted, and which of them are new.

    ``matched``: how many files the glob matched this time.
    """

    branch: str
    files: tuple[str, ...]
    new: tuple[str, ...]
    matched: int


def as_url(path: str) -> str:
    """A URL for a local path (``file://``, absolute, not percent-encoded: the form refs
    keep, see ``containers``); URLs stay as they are."""
    return path if "://" in path else f"file://{Path(path).absolute()}"


def list_files(pattern: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The URLs a glob (local path, ``file://`` or any fsspec URL) matches, sorted.

    Raises:
        InvalidInputError: nothing matches.
    """
    import fsspec.core

    if "://" in pattern and not pattern.startswith("file://"):
        fs, _ = fsspec.core.url_to_fs(pattern, **dict(storage_options or {}))
        protocol = pattern.split("://", 1)[0]
        found = [f"{protocol}://{p}" for p in sorted(fs.glob(pattern))]
    else:
        found = [as_url(p) for p in sorted(glob.glob(pattern.removeprefix("file://")))]
    if not found:
        raise InvalidInputError(f"no files match {pattern!r}")
    return found


def open_for_files(
    url: str,
    container: str,
    file_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Repository:
    """Open (or create) the repository with ``container`` allowed and authorized for reading.

    An existing repository that lacks the container gets it added to its config.
    """
    from ..core import RepositoryConfig
    from ..repository import Repository

    options = dict(file_options or {})
    repo = Repository.open_or_create(
        url,
        config={"virtual_chunk_containers": {container: options}},
        storage_options=storage_options,
        authorize_virtual={container: options},
    )
    # Check the stored config, not repo.config: opening with a config only overrides it for
    # this handle, and later readers must find the container in the repository itself.
    stored = RepositoryConfig.from_dict(repo.state().config).virtual_chunk_containers
    if container not in stored:
        repo.set_virtual_chunk_container(container, options)
    return repo


def folder_of(files: Sequence[str]) -> str:
    """The default container: the folder of the first file, with its trailing slash."""
    return files[0].rsplit("/", 1)[0] + "/"


UNREFERENCED_SOURCES = "unreferenced_source_files"


def referenced_files(session: Session) -> set[str]:
    """Every file the session's virtual refs point into."""
    files: set[str] = set()
    for node in session.list_nodes():
        if node.type == "array":
            paths = session.chunk_refs(node.path).column("virtual_path").drop_null().unique()
            files.update(paths.to_pylist())
    return files


def recorded_files(repo: Repository, branch: str = "main") -> set[str]:
    """The imported files without virtual refs, as the newest ingest commit recorded them."""
    for info in repo.ancestry(branch=branch):
        listed = (info.metadata or {}).get(UNREFERENCED_SOURCES)
        if isinstance(listed, list):
            return {str(f) for f in listed}
    return set()


def plan_ingest(repo: Repository, found: Sequence[str], branch: str = "main") -> IngestPlan:
    """The files to import on ``branch``: those it holds already (see module) plus ``found``.

    Raises:
        VirtualRefRefusedError: a file lies outside the containers (also through a symlink).
    """
    known = referenced_files(repo.readonly_session(branch=branch)) | recorded_files(repo, branch)
    containers = repo.config.virtual_chunk_containers
    # Checked before anyone (Spark executors too) opens a file (symlinks, '..'), and in the
    # spelling refs keep, so that a file found again is known.
    canonical = {resolve_target(url, containers)[0] for url in found}
    files = tuple(sorted(known | canonical))
    return IngestPlan(branch, files, tuple(f for f in files if f not in known), len(found))


def prepare_ingest(
    url: str,
    pattern: str,
    branch: str = "main",
    *,
    container: str | None = None,
    file_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    parser: str = "kerchunk",
) -> tuple[Repository, IngestPlan]:
    """List the files ``pattern`` matches, open the repository for them, and plan the run.

    ``container`` defaults to the folder of the first file. A repository that does not
    exist yet is created only once every file is known to be inside the container and of a
    format ``parser`` reads (see ``import_netcdf``), so a refused first import leaves nothing
    behind.

    Raises:
        InvalidInputError: nothing matches ``pattern``, or a file is not of a format
            ``parser`` reads.
        VirtualRefRefusedError: a file lies outside the container (also via a symlink).
    """
    repo, found = open_for_pattern(url, pattern, container, file_options, storage_options, parser)
    return repo, plan_ingest(repo, found, branch)


def open_for_pattern(
    url: str,
    pattern: str,
    container: str | None = None,
    file_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    parser: str = "kerchunk",
) -> tuple[Repository, list[str]]:
    """List the files ``pattern`` matches and open the repository for them (as
    ``prepare_ingest``, without deciding which files are new).

    Raises:
        InvalidInputError: nothing matches ``pattern``, or a file is not of a format
            ``parser`` reads.
        VirtualRefRefusedError: a file lies outside the container (also via a symlink).
    """
    from ..repository import Repository

    found = list_files(pattern, file_options)
    container = container or folder_of(found)
    if not Repository.exists(url, storage_options):
        # Refuse what cannot be imported before the repository is created, not after.
        for file in found:
            check_readable(resolve_target(file, [container])[0], parser, file_options)
    return open_for_files(url, container, file_options, storage_options), found


def ingest_files(
    repo: Repository,
    plan: IngestPlan,
    *,
    concat_dim: str = "time",
    group: str = "/",
    file_options: Mapping[str, Any] | None = None,
    scans: Sequence[Mapping[str, Any]] | None = None,
    message: str | None = None,
    progress: Progress | None = None,
    parser: str = "kerchunk",
) -> str:
    """Rebuild the dataset under ``group`` from ``plan.files`` and commit; returns the snapshot.

    ``scans``: the files' reference sets, already scanned (by Spark executors); otherwise the
    files are scanned here, in threads, by ``parser`` (see ``import_netcdf``).

    Raises:
        InvalidInputError: the plan has no new file, or the files do not concatenate.
        VirtualRefRefusedError: a file lies outside the repository's virtual chunk containers.
    """
    if not plan.new:
        raise InvalidInputError("nothing to ingest: every file is referenced already")
    session = repo.writable_session(plan.branch)
    import_netcdf(
        session,
        list(plan.files),
        concat_dim,
        group,
        storage_options=file_options,
        overwrite=True,
        scans=scans,
        progress=progress,
        parser=parser,
    )
    text = message or f"ingest {len(plan.new)} new files ({len(plan.files)} in all)"
    unreferenced = sorted(set(plan.files) - referenced_files(session))
    metadata = {"files": len(plan.files), UNREFERENCED_SOURCES: unreferenced}
    return session.commit(text, metadata, progress=progress)


__all__ = [
    "UNREFERENCED_SOURCES",
    "IngestPlan",
    "as_url",
    "folder_of",
    "ingest_files",
    "list_files",
    "open_for_files",
    "open_for_pattern",
    "plan_ingest",
    "prepare_ingest",
    "recorded_files",
    "referenced_files",
]

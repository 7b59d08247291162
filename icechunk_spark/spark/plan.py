"""The write plan: everything executors need to validate, encode and stage rows, made once.

The driver builds a :class:`WritePlan` before any task runs (``DataSource.writer`` or the
driver API), from the branch tip at that moment. It is a frozen, picklable value: executors
check rows against the arrays' grids and the repository's virtual containers without opening
the repository, and the commit later starts from the same base snapshot, so a concurrent
commit that touched the same chunks is a conflict instead of a silent overwrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core import ensure_writable
from ..errors import InvalidInputError
from ..format.ids import new_object_id
from ..format.keys import STAGING_PREFIX
from ..format.paths import normalize_path
from ..format.structure import ArrayMeta, parse_array_meta, parse_zarr_json
from ..repository import Repository
from .options import RepoOptions, get, get_bool, get_int, parse_value, repo_options
from .row_schema import RowKind, row_kind

Mode = Literal["append", "overwrite"]
# Where rows land along ``append_dim``: at their coords as given, or counted from the array's
# end (coord 0 is the first chunk after the data already there), like xarray's appends.
Placement = Literal["absolute", "after_end"]
PLACEMENTS: tuple[Placement, ...] = ("absolute", "after_end")
WRITE_ID_KEY = "icechunk_spark.write_id"
DEFAULT_STAGE_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class ArrayTarget:
    """An array a job may write: its ``zarr.json``, whether it exists, the axis that grows."""

    path: str
    zarr_json: bytes
    exists: bool
    grow_axis: int | None
    meta: ArrayMeta
    # Set by the ``shapes`` option: the array ends with exactly this shape (``zarr_json`` and
    # ``meta`` have it already), and rows must fall inside its grid.
    final_shape: tuple[int, ...] | None = None

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return self.meta.grid_shape

    def end_chunk(self) -> int:
        """The first chunk index past the array's end along the append axis.

        Raises:
            InvalidInputError: the array ends inside a chunk: appending whole chunks after it
                would leave a gap of fill values, so we refuse rather than guess.
        """
        assert self.grow_axis is not None
        axis = self.grow_axis
        length, chunk = self.meta.shape[axis], self.meta.chunk_shape[axis]
        if length % chunk:
            raise InvalidInputError(
                f"option placement=after_end: array {self.path!r} has length {length} along "
                f"axis {axis}, not a whole number of its chunks ({chunk}); rows can only be "
                "appended after a whole chunk"
            )
        return length // chunk


@dataclass(frozen=True, slots=True)
class WritePlan:
    """One write job: where, what shape of rows, which arrays, and how to commit."""

    repo: RepoOptions
    branch: str
    base_snapshot: str
    write_id: str
    mode: Mode
    rows: RowKind
    arrays: Mapping[str, ArrayTarget]
    message: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    on_conflict: str = "fail"
    placement: Placement = "absolute"
    pack_chunks: bool = False
    inline_threshold: int = 0
    containers: tuple[str, ...] = ()
    stage_rows: int = DEFAULT_STAGE_ROWS
    # Groups to create when missing: path -> attributes (a virtual dataset's root attributes).
    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Nodes the write replaces: deleted (with what is below them) before arrays are made
    # ready, so a dataset written over drops the arrays it no longer has.
    replaced: tuple[str, ...] = ()
    # The state generation the plan was made from: every object the write creates is younger,
    # which tells the commit whether a garbage collection since could have deleted them.
    base_generation: int = -1
    # What names the commit so that it lands once (a stream: query and batch ids); empty:
    # the write id.
    once_marks: Mapping[str, Any] = field(default_factory=dict)

    @property
    def once(self) -> dict[str, Any]:
        """The commit's once-marks: a retry or replay of it commits nothing."""
        return dict(self.once_marks) or {WRITE_ID_KEY: self.write_id}

    @property
    def staging_prefix(self) -> str:
        """Where this write's tasks stage ref files and chunk journals."""
        return f"{STAGING_PREFIX}{self.write_id}/"

    @property
    def journal_prefix(self) -> str:
        """Chunk journals: ``<attempt>-<n>`` objects listing chunk object ids, one a line."""
        return f"{self.staging_prefix}journal/"

    def target(self, path: str) -> ArrayTarget | None:
        return self.arrays.get(path)


def make_plan(
    options: Mapping[str, str],
    columns: Sequence[str],
    overwrite: bool,
    *,
    base_snapshot: str | None = None,
    repo: Repository | None = None,
) -> WritePlan:
    """Build the plan from data source options (all strings) and the DataFrame's columns.

    The plan starts from the branch tip, or from ``base_snapshot`` when given (a streaming
    commit plans from the snapshot its tasks started from); ``repo``: the repository the
    caller opened already (by default opened here).

    Raises:
        InvalidInputError: missing or malformed options, or rows of an unknown shape.
        NotFoundError: the repository, branch or base snapshot does not exist.
        RepositoryReadOnlyError: the repository's status is read-only.
    """
    repo_opts = repo_options(options)
    kind = row_kind(columns)
    branch = get(options, "branch") or "main"
    on_conflict = get(options, "on_conflict") or "fail"
    if on_conflict not in ("fail", "ours", "theirs"):
        raise InvalidInputError(f"option on_conflict={on_conflict!r}: use fail, ours or theirs")
    placement = get(options, "placement") or "absolute"
    if placement not in PLACEMENTS:
        raise InvalidInputError(f"option placement={placement!r}: use {' or '.join(PLACEMENTS)}")
    metadata = parse_value(get(options, "metadata") or "{}")
    if not isinstance(metadata, dict):
        raise InvalidInputError("option metadata must be a JSON object")
    with repo_opts.opened(repo) as opened:
        state = opened.state()
        ensure_writable(state, opened.storage.url)  # before any task writes a chunk
        base = base_snapshot or state.branch(branch).snapshot_id
        session = opened.readonly_session(snapshot_id=base)
        existing = {n.path: n.zarr_json for n in session.list_nodes() if n.type == "array"}
        config = opened.config
    declared = declared_arrays(get(options, "arrays"))
    shapes = declared_shapes(get(options, "shapes"))
    append_dim = get(options, "append_dim")
    arrays: dict[str, ArrayTarget] = {}
    unknown = sorted(set(shapes) - set(existing) - set(declared))
    if unknown:
        raise InvalidInputError(
            f"option shapes names {unknown}, which neither exist nor are declared in 'arrays'"
        )
    for path, zarr_json in {**existing, **declared}.items():
        # An existing array keeps its metadata: a declaration only creates missing arrays
        # (so a job can be re-run as is), but must not contradict the array that is there.
        if path in existing and path in declared:
            _check_declaration(path, existing[path], declared[path])
        doc_bytes = existing.get(path, zarr_json)
        doc = parse_zarr_json(doc_bytes, path)
        meta = parse_array_meta(doc, path)
        if path in shapes:
            arrays[path] = _sized(path, doc, meta, shapes[path], path in existing)
            continue
        arrays[path] = ArrayTarget(
            path, doc_bytes, path in existing, grow_axis(meta, append_dim), meta
        )
    _check_append_dim(arrays, append_dim)
    if placement == "after_end":
        _check_after_end(arrays, append_dim, overwrite)
    return WritePlan(
        repo=repo_opts,
        branch=branch,
        base_snapshot=base,
        write_id=new_object_id(),
        mode="overwrite" if overwrite else "append",
        rows=kind,
        arrays=arrays,
        message=get(options, "message") or f"Spark write ({kind} refs)",
        metadata=metadata,
        on_conflict=on_conflict,
        placement=placement,
        pack_chunks=get_bool(options, "pack_chunks"),
        inline_threshold=config.inline_chunk_threshold_bytes,
        containers=tuple(config.virtual_chunk_containers),
        stage_rows=get_int(options, "stage_rows", DEFAULT_STAGE_ROWS),
        base_generation=state.generation,
        groups=declared_groups(get(options, "groups")),
    )


def _check_append_dim(arrays: Mapping[str, ArrayTarget], append_dim: str | None) -> None:
    """A misspelled ``append_dim`` grows nothing, and rows past an array's end then look like
    rows outside its grid: name the option instead."""
    # An array the ``shapes`` option sizes does not grow, but may have the dimension.
    if (
        not append_dim
        or not arrays
        or any(grow_axis(t.meta, append_dim) is not None for t in arrays.values())
    ):
        return
    dims = ", ".join(
        f"{path!r}: {tuple(t.meta.dimension_names or range(t.meta.ndim))}"
        for path, t in sorted(arrays.items())
    )
    raise InvalidInputError(
        f"option append_dim={append_dim!r} is no dimension of any array (a dimension name or "
        f"an axis index); the arrays' dimensions: {dims}"
    )


def _check_after_end(
    arrays: Mapping[str, ArrayTarget], append_dim: str | None, overwrite: bool
) -> None:
    if overwrite:
        raise InvalidInputError("option placement=after_end appends; it cannot overwrite")
    if not append_dim:
        raise InvalidInputError("option placement=after_end needs option append_dim")
    for target in arrays.values():
        if target.grow_axis is not None:
            target.end_chunk()  # refuse an array ending inside a chunk before any task runs


def declared_arrays(text: str | Mapping[str, Any] | None) -> dict[str, bytes]:
    """The ``arrays`` option: ``{path: zarr.json dict}`` -> normalized path -> zarr.json bytes.

    Missing keys get Zarr's defaults (``chunk_shape`` is accepted for ``chunk_grid``), so
    ``{"/t": {"shape": [10], "chunk_shape": [5], "data_type": "float32"}}`` is enough.
    """
    if text is None or text == "":
        return {}
    parsed = parse_value(text) if isinstance(text, str) else dict(text)
    if not isinstance(parsed, dict):
        raise InvalidInputError("option arrays must be a JSON object {path: zarr.json metadata}")
    out = {}
    for raw_path, doc in parsed.items():
        path = normalize_path(str(raw_path))
        if not isinstance(doc, dict):
            raise InvalidInputError(f"option arrays: the metadata of {path!r} must be an object")
        full = array_document(doc)
        parse_array_meta(full, path)  # fail on the driver, before any task runs
        out[path] = json.dumps(full).encode()
    return out


def declared_groups(text: str | Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The ``groups`` option: ``{path: attributes}`` of groups to create when missing."""
    if text is None or text == "":
        return {}
    parsed = parse_value(text) if isinstance(text, str) else dict(text)
    if not isinstance(parsed, dict) or not all(isinstance(a, dict) for a in parsed.values()):
        raise InvalidInputError("option groups must be a JSON object {path: {attributes}}")
    return {normalize_path(str(p)): dict(a) for p, a in parsed.items()}


def declared_shapes(text: str | Mapping[str, Any] | None) -> dict[str, tuple[int, ...]]:
    """The ``shapes`` option: ``{path: [n, ...]}`` -> normalized path -> shape."""
    if text is None or text == "":
        return {}
    parsed = parse_value(text) if isinstance(text, str) else dict(text)
    if not isinstance(parsed, dict):
        raise InvalidInputError("option shapes must be a JSON object {path: [n, ...]}")
    out = {}
    for raw_path, shape in parsed.items():
        path = normalize_path(str(raw_path))
        if not isinstance(shape, list | tuple) or not all(
            isinstance(n, int) and n >= 0 for n in shape
        ):
            raise InvalidInputError(f"option shapes: {path!r} needs a list of sizes >= 0")
        out[path] = tuple(int(n) for n in shape)
    return out


def _sized(
    path: str, doc: dict[str, Any], meta: ArrayMeta, shape: tuple[int, ...], exists: bool
) -> ArrayTarget:
    """The target of an array the ``shapes`` option sizes exactly.

    ``append_dim`` grows an array to whole chunks; an append whose length is not a whole
    number of chunks (a month of days in chunks of 10) gives the exact shape instead.
    Shapes only grow existing arrays: shrinking one would drop chunks without saying so.
    """
    if len(shape) != meta.ndim:
        raise InvalidInputError(
            f"option shapes gives {path!r} {len(shape)} dimensions; it has {meta.ndim}"
        )
    if exists and any(n < m for n, m in zip(shape, meta.shape, strict=True)):
        raise InvalidInputError(
            f"option shapes would shrink {path!r} from {meta.shape} to {shape}; shapes only "
            "grow arrays (overwrite the array to make it smaller)"
        )
    sized = {**doc, "shape": list(shape)}
    zarr_json = json.dumps(sized).encode()
    return ArrayTarget(
        path, zarr_json, exists, None, parse_array_meta(sized, path), final_shape=shape
    )


_MUST_MATCH = ("data_type", "chunk_grid", "codecs", "fill_value", "chunk_key_encoding")


def _check_declaration(path: str, existing: bytes, declared: bytes) -> None:
    old, new = json.loads(existing), json.loads(declared)
    differ = [k for k in _MUST_MATCH if old.get(k) != new.get(k)]
    if differ:
        raise InvalidInputError(
            f"option arrays declares {path!r} with other {', '.join(differ)} than the array "
            "already in the repository; leave it out of the declaration or use another path"
        )


def array_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A complete Zarr v3 array document from a partial one."""
    full: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
    }
    full.update({k: v for k, v in doc.items() if k != "chunk_shape"})
    if "chunk_shape" in doc and "chunk_grid" not in doc:
        full["chunk_grid"] = {
            "name": "regular",
            "configuration": {"chunk_shape": [int(c) for c in doc["chunk_shape"]]},
        }
    return full


def grow_axis(meta: ArrayMeta, append_dim: str | None) -> int | None:
    """The axis ``append_dim`` names in this array (a dimension name or an index), if any."""
    if append_dim is None or append_dim == "":
        return None
    if append_dim.lstrip("-").isdigit():
        axis = int(append_dim)
        return axis if 0 <= axis < meta.ndim else None
    names = meta.dimension_names or ()
    return names.index(append_dim) if append_dim in names else None


def options_from_kwargs(url: str, **kwargs: Any) -> dict[str, str]:
    """Driver-API keyword arguments as the string options the data source takes."""
    options: dict[str, str] = {"path": url}
    storage_options = kwargs.pop("storage_options", None) or {}
    for key, value in storage_options.items():
        options[f"storage.{key}"] = value if isinstance(value, str) else json.dumps(value)
    for key, value in kwargs.items():
        if value is None:
            continue
        if isinstance(value, bool):
            options[key] = "true" if value else "false"
        elif isinstance(value, Mapping | list | tuple):
            options[key] = json.dumps(value)
        else:
            options[key] = str(value)
    return options


__all__ = [
    "PLACEMENTS",
    "WRITE_ID_KEY",
    "ArrayTarget",
    "Placement",
    "WritePlan",
    "array_document",
    "declared_arrays",
    "declared_groups",
    "declared_shapes",
    "grow_axis",
    "make_plan",
    "options_from_kwargs",
]

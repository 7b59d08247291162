"""``write_virtual_dataset``: a VirtualiZarr virtual dataset into a session, as virtual refs.

What VirtualiZarr's own Icechunk writer (``virtualizarr/writers/icechunk.py``) does, over our
write path (``writer.py``), in this order:

1. every check before any write: each ref's URL against the repository's virtual chunk
   containers (``VirtualRefRefusedError``, nothing written), each referenced file stat'ed once
   (its checksum goes into the refs, so reads notice a changed file), existing arrays
   (``AlreadyExistsError`` without ``overwrite``), and for ``append_dim`` each appended
   array's compatibility with the stored one;
2. the loadable (numpy-backed) variables, usually the dimension coordinates VirtualiZarr
   loads by default, through xarray's ``to_zarr`` on ``session.store``: real chunks, stored
   inline or as chunk files by the repository's inline threshold; ``append_dim`` appends
   them the way ``to_zarr`` does (their encoding, CF time units included, is the stored one);
3. the virtual variables: one array each (the ManifestArray's metadata, the variable's
   attributes raw: packing and ``_FillValue`` as the source has them), its refs set in one
   bulk call from the manifest's numpy arrays (``vds_refs``);
4. the group's attributes, with ``coordinates`` naming the dataset's coordinates (xarray
   reads a group-level ``coordinates`` attribute back as coordinate names).

``append_dim`` grows each virtual array along the dimension and sets the new refs after the
existing chunks. It refuses (``InvalidInputError``, before any write) what would read back
wrong: another dtype, codecs, chunk shape, fill value or dimensions; another length along any
other dimension; a stored length that is not a whole number of chunks (the new refs would
land on the wrong rows: VirtualiZarr floors that division silently); and decoding attributes
that differ (``scale_factor``, ``add_offset``, ``_FillValue``, ``missing_value``,
``_Unsigned``, ``units``, ``calendar``, for a CF bounds variable those of the variable naming
it): raw refs cannot be re-encoded, ``import_netcdf`` materializes such arrays instead.
Variables without ``append_dim`` are replaced, as ``to_zarr(append_dim=...)`` does.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import AlreadyExistsError, InvalidInputError, ReadOnlyError
from ..format.paths import normalize_path
from .references import ArrayRefs, ReferenceSet
from .vds_refs import encode_attrs, shifted, split_variables, variable_refs
from .writer import (
    ImportSummary,
    create_array,
    ref_targets,
    write_array_refs,
    write_groups,
)

if TYPE_CHECKING:
    import xarray as xr

    from ..core import Session

# Attributes that change how xarray decodes stored values: an append must keep them.
DECODING = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")
LABELS = ("units", "calendar")
_BOUNDS_LINKS = ("bounds", "climatology")
# What must be equal between a stored array and refs appended to it.
SAME_FOR_APPEND = ("data_type", "codecs", "chunk_grid", "fill_value", "dimension_names")


@dataclass(frozen=True, slots=True)
class _Append:
    """An appended array: its path, its grown document and its refs after the stored ones."""

    path: str
    doc: Mapping[str, Any]
    refs: ArrayRefs


def write_virtual_dataset(
    session: Session,
    vds: xr.Dataset,
    group: str = "/",
    append_dim: str | None = None,
    *,
    overwrite: bool = False,
    checksums: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    max_workers: int = 8,
) -> ImportSummary:
    """Write a VirtualiZarr virtual dataset under ``group`` of a writable session.

    ``vds``: what ``open_virtual`` (or ``virtualizarr.open_virtual_dataset``) returns:
    ManifestArray-backed variables become virtual refs, numpy-backed ones real chunks.
    ``append_dim``: append along this existing dimension instead of creating the arrays.
    The caller commits. Loaded variables are counted in ``arrays``, not in ``inline_refs``.

    >>> vds = open_virtual("file:///data/tas_2023.nc")                     # doctest: +SKIP
    >>> write_virtual_dataset(session, vds, append_dim="time")            # doctest: +SKIP
    >>> session.commit("tas 2023 appended (virtual)")                      # doctest: +SKIP

    Raises:
        VirtualRefRefusedError: a ref points outside the virtual chunk containers (nothing
            is written).
        AlreadyExistsError: an array exists at a target path (pass ``overwrite=True``).
        InvalidInputError: ``append_dim`` is not a dimension of ``vds``, or an appended
            array does not match the stored one (see the module docstring).
        NotFoundError: a referenced file does not exist.
        ReadOnlyError: the session is read-only.
    """
    if session.read_only:
        raise ReadOnlyError("write_virtual_dataset needs a writable session")
    if append_dim is not None and append_dim not in vds.dims:
        raise InvalidInputError(
            f"append_dim {append_dim!r} is not a dimension of the dataset ({list(vds.dims)})"
        )
    base = normalize_path(group)
    virtual, loadable = split_variables(vds)
    refset = ReferenceSet({}, {n: variable_refs(n, v, n) for n, v in virtual.items()})
    targets = ref_targets(  # refuses refs outside the containers before anything is written
        session,
        refset,
        storage_options=storage_options,
        checksums=checksums,
        max_workers=max_workers,
    )
    appends: dict[str, _Append] = {}
    for name, array in refset.arrays.items():
        path = _join(base, name)
        if append_dim is not None and append_dim in virtual[name].dims:
            appends[name] = _plan_append(session, vds, path, name, array, append_dim, base)
        elif not overwrite and append_dim is None and session.find_node(path) is not None:
            raise AlreadyExistsError(f"{path!r} exists already (pass overwrite=True)")
    if append_dim is None and not overwrite:
        for name in loadable:
            if session.find_node(_join(base, name)) is not None:
                raise AlreadyExistsError(f"{_join(base, name)!r} exists already")
    if loadable:
        _write_loadable(session, vds, list(virtual), base, append_dim)
    groups = write_groups(session, ReferenceSet({"": _group_doc(vds)}), base)
    refs = 0
    for name, array in sorted(refset.arrays.items()):
        path = _join(base, name)
        if name in appends:
            plan = appends[name]
            session.set_node_metadata(path, json.dumps(plan.doc).encode())
            refs += write_array_refs(session, path, plan.refs, targets, checksums)[0]
        else:
            create_array(session, path, array, overwrite=True)
            refs += write_array_refs(session, path, array, targets, checksums)[0]
    arrays = tuple(sorted(_join(base, str(n)) for n in vds.variables))
    return ImportSummary(arrays, tuple(groups), refs, 0, targets.files)


def _join(base: str, name: str) -> str:
    return normalize_path(f"{base}/{name}")


def _group_doc(vds: xr.Dataset) -> dict[str, Any]:
    attributes = encode_attrs(vds.attrs)
    if vds.coords:  # as VirtualiZarr's writer: xarray reads these back as coordinates
        attributes["coordinates"] = " ".join(str(c) for c in vds.coords)
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def _write_loadable(
    session: Session, vds: xr.Dataset, virtual: list[str], base: str, append_dim: str | None
) -> None:
    """The numpy-backed variables through xarray, as VirtualiZarr's writer does."""
    loadable = vds.drop_vars(virtual)
    loadable.attrs = {}  # the group's attributes are written once, after the arrays
    group = None if base == "/" else base.lstrip("/")
    mode: Literal["a"] | None = "a" if append_dim is None else None  # None: xarray's "a"
    loadable.to_zarr(
        session.store,
        group=group,
        zarr_format=3,
        consolidated=False,
        mode=mode,
        append_dim=append_dim,
    )


def _plan_append(
    session: Session,
    vds: xr.Dataset,
    path: str,
    name: str,
    array: ArrayRefs,
    dim: str,
    base: str,
) -> _Append:
    """The grown document and shifted refs of one appended array, or a refusal."""
    node = session.find_node(path)
    if node is None or node.type != "array":
        raise InvalidInputError(
            f"cannot append {name!r} along {dim!r}: {path!r} holds no array yet "
            "(write the first dataset without append_dim)"
        )
    stored = json.loads(node.zarr_json)
    new = dict(array.doc)
    for key in SAME_FOR_APPEND:
        if _canonical(stored.get(key)) != _canonical(new.get(key)):
            raise InvalidInputError(
                f"cannot append {name!r}: its {key} {new.get(key)!r} differs from the stored "
                f"{stored.get(key)!r}"
            )
    axis = list(new["dimension_names"]).index(dim)
    old_shape, add_shape = list(stored["shape"]), list(new["shape"])
    others = [d for d in range(len(old_shape)) if d != axis]
    if any(old_shape[d] != add_shape[d] for d in others):
        raise InvalidInputError(
            f"cannot append {name!r} along {dim!r}: shape {tuple(add_shape)} does not match "
            f"the stored {tuple(old_shape)} on the other dimensions"
        )
    chunk = int(stored["chunk_grid"]["configuration"]["chunk_shape"][axis])
    if old_shape[axis] % chunk:
        raise InvalidInputError(
            f"cannot append {name!r} along {dim!r}: the stored length {old_shape[axis]} is not "
            f"a whole number of chunks of {chunk}, so appended refs cannot line up"
        )
    _check_decoding(session, vds, name, stored, new, base)
    grown = dict(stored)  # the stored attributes stay: the first dataset's, as combine keeps
    grown["shape"] = [*old_shape[:axis], old_shape[axis] + add_shape[axis], *old_shape[axis + 1 :]]
    return _Append(path, grown, shifted(array, {axis: old_shape[axis] // chunk}))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _check_decoding(
    session: Session,
    vds: xr.Dataset,
    name: str,
    stored: Mapping[str, Any],
    new: Mapping[str, Any],
    base: str,
) -> None:
    """Refuse an append whose raw values would decode differently from the stored ones."""
    ours = _decoding(new.get("attributes") or {}, _linked_labels(vds, name))
    theirs = _decoding(stored.get("attributes") or {}, _stored_linked_labels(session, base, name))
    for key in (*DECODING, *LABELS):
        if ours.get(key) != theirs.get(key):
            raise InvalidInputError(
                f"cannot append {name!r}: its {key} {ours.get(key)!r} differs from the stored "
                f"{theirs.get(key)!r}; raw refs cannot be re-encoded (import the files "
                "together with import_netcdf, which materializes such arrays, or re-encode)"
            )


def _decoding(attrs: Mapping[str, Any], inherited: Mapping[str, Any]) -> dict[str, Any]:
    return {**inherited, **{k: attrs[k] for k in (*DECODING, *LABELS) if k in attrs}}


def _linked_labels(vds: xr.Dataset, name: str) -> dict[str, Any]:
    """units/calendar of the variable whose CF ``bounds``/``climatology`` names ``name``
    (a loaded time variable keeps them in its encoding)."""
    for other in vds.variables.values():
        if any(other.attrs.get(link) == name for link in _BOUNDS_LINKS) or any(
            other.encoding.get(link) == name for link in _BOUNDS_LINKS
        ):
            merged = {**other.encoding, **other.attrs}
            return {k: merged[k] for k in LABELS if k in merged}
    return {}


def _stored_linked_labels(session: Session, base: str, name: Hashable) -> dict[str, Any]:
    group = session.find_node(base)
    for node in session.list_nodes():
        parent = node.path.rsplit("/", 1)[0] or "/"
        if node.type != "array" or group is None or parent != group.path:
            continue
        attrs = json.loads(node.zarr_json).get("attributes") or {}
        if any(attrs.get(link) == name for link in _BOUNDS_LINKS):
            return {k: attrs[k] for k in LABELS if k in attrs}
    return {}

"""Reading the ``chunk-manifests`` section: YAML text or a mapping in, a validated
``ManifestConfig`` out, or a ``ConfigError`` naming the YAML path of the offending value."""

from __future__ import annotations

import graphlib
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from icechunk_spark.errors import ConfigError

from .config import (
    DEFAULT_CARDINALITY,
    DEFAULT_MAX_MANIFEST_SIZE,
    DEFAULT_SET,
    ROOT_KEY,
    ManifestConfig,
    ManifestSet,
    Preload,
    Range,
    Rule,
    overflow_order,
)

_SET_KEYS = frozenset(
    {
        "max-manifest-size",
        "arrays-per-manifest",
        "max-arrays-per-manifest",  # the seed's default config spells it this way
        "overflow-to",
        "cardinality",
        "split-along",
        "chunks-per-split",
    }
)
_RULE_KEYS = frozenset({"target", "path", "metadata-chunks", "initialized-chunks"})
_PRELOAD_KEYS = frozenset({"max-manifest-size", "max-manifests", "arrays"})
_SECTION_KEYS = frozenset({"sets", "rules", "preload"})


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_config(data: str | bytes | Mapping[str, Any]) -> ManifestConfig:
    """Parse and validate a ``chunk-manifests`` configuration.

    ``data`` is YAML text or an already-parsed mapping whose only top-level key is
    ``chunk-manifests``. Missing pieces: no ``sets`` means only ``default``; no ``rules`` sends
    everything to ``default``; no ``preload`` preloads nothing; a missing ``default`` set is
    appended with ``max-manifest-size: 1000000``.

    Example::

        >>> parse_config({"chunk-manifests": {}}).sets[0].max_manifest_size
        1000000

    Raises:
        ConfigError: the text is not YAML or a value is invalid; the message names its YAML path.
    """
    section = _section(_load(data))
    sets = _parse_sets(section.get("sets"), f"{ROOT_KEY}.sets")
    names = {s.name for s in sets}
    rules = _parse_rules(section.get("rules"), f"{ROOT_KEY}.rules", names)
    preload = _parse_preload(section.get("preload"), f"{ROOT_KEY}.preload")
    return ManifestConfig(sets=sets, rules=rules, preload=preload)


@cache
def default_config() -> ManifestConfig:
    """The built-in configuration (seed 000's defaults), from ``default_manifests.yaml``.

    Example::

        >>> [s.name for s in default_config().sets]
        ['coordinates', 'default']
    """
    # The file beside this module when the package is unpacked (importlib.resources' first use
    # costs ~1 ms of a cold process's first lookup); resources for zipped installs.
    beside = Path(__file__).with_name("default_manifests.yaml")
    if beside.is_file():
        text = beside.read_text("utf-8")
    else:
        text = (
            resources.files("icechunk_spark.splitting")
            .joinpath("default_manifests.yaml")
            .read_text("utf-8")
        )
    return parse_config(text)


def _error(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {problem}")


# libyaml's safe loader when PyYAML has it: parsing the default config in pure Python takes
# ~10 ms, half the budget of a cold process's first chunk lookup (bench/bench_lookup.py).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(data: str | bytes | Mapping[str, Any]) -> object:
    if isinstance(data, Mapping):
        return data
    if not isinstance(data, (str, bytes)):
        raise _error(ROOT_KEY, f"expected YAML text or a mapping, got {type(data).__name__}")
    try:
        return yaml.load(data, Loader=_YAML_LOADER)  # a safe loader, C or Python
    except yaml.YAMLError as exc:
        raise _error(ROOT_KEY, f"not valid YAML: {exc}") from exc


def _section(document: object) -> Mapping[str, Any]:
    if not isinstance(document, Mapping) or ROOT_KEY not in document:
        raise _error(ROOT_KEY, f"missing; the configuration must be a mapping with key {ROOT_KEY}")
    _reject_unknown(document, frozenset({ROOT_KEY}), "<top level>")
    section = document[ROOT_KEY]
    if section is None:  # `chunk-manifests:` with nothing under it
        return {}
    section = _mapping(section, ROOT_KEY)
    _reject_unknown(section, _SECTION_KEYS, ROOT_KEY)
    return section


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _error(where, f"expected a mapping, got {_describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise _error(where, f"keys must be strings, got {key!r}")
    return value


def _sequence(value: object, where: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _error(where, f"expected a list, got {_describe(value)}")
    return list(value)


def _reject_unknown(body: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in body if k not in allowed)
    if unknown:
        path = unknown[0] if where == "<top level>" else f"{where}.{unknown[0]}"
        raise _error(path, f"unknown key; allowed keys are {', '.join(sorted(allowed))}")


def _describe(value: object) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _is_int(value: object) -> bool:
    # YAML reads `yes` as True, and bool is an int subclass: never accept it as a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(body: Mapping[str, Any], key: str, where: str) -> int | None:
    """``body[key]`` as an int >= 1, or ``None`` when absent or null."""
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise _error(f"{where}.{key}", f"expected an integer >= 1 or null, got {_describe(value)}")
    return int(value)


def _pattern(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _error(where, f"expected a regular expression string, got {_describe(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise _error(where, f"invalid regular expression {value!r}: {exc}") from exc
    return value


def _range(value: object, where: str) -> Range | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _error(where, f"expected a range [min, max] (null for open), got {_describe(value)}")
    for bound in value:
        if bound is not None and (not _is_int(bound) or bound < 0):
            raise _error(where, f"range bounds must be integers >= 0 or null, got {bound!r}")
    low, high = value
    if low is not None and high is not None and low > high:
        raise _error(where, f"range minimum {low} is greater than maximum {high}")
    return (low, high)


# -- sets --------------------------------------------------------------------------------------


def _parse_sets(value: object, where: str) -> tuple[ManifestSet, ...]:
    parsed: list[ManifestSet] = []
    seen: set[str] = set()
    for index, entry in enumerate(_sequence(value, where)):
        manifest_set = _parse_set(entry, f"{where}[{index}]")
        if manifest_set.name in seen:
            raise _error(f"{where}[{index}].{manifest_set.name}", "duplicate set name")
        seen.add(manifest_set.name)
        parsed.append(manifest_set)
    if DEFAULT_SET not in seen:
        parsed.append(ManifestSet(DEFAULT_SET, DEFAULT_MAX_MANIFEST_SIZE, None, None, None))
    sets = tuple(parsed)
    _check_overflow_targets(sets, where)
    _check_no_overflow_loop(sets, where)
    return sets


def _parse_set(entry: object, where: str) -> ManifestSet:
    if not isinstance(entry, Mapping) or len(entry) != 1:
        raise _error(
            where,
            "each set is a one-key mapping `- <name>: {settings}`; "
            "check that the settings are indented under the name",
        )
    ((name, body),) = entry.items()
    if not isinstance(name, str) or not name:
        raise _error(where, f"set name must be a non-empty string, got {name!r}")
    where = f"{where}.{name}"
    settings = {} if body is None else _mapping(body, where)
    _reject_unknown(settings, _SET_KEYS, where)
    max_size, per_manifest = _set_limits(name, settings, where)
    split_along, chunks_per_split = _set_split(settings, where)
    return ManifestSet(
        name=name,
        max_manifest_size=max_size,
        arrays_per_manifest=per_manifest,
        overflow_to=_set_overflow(name, settings, where),
        cardinality=_set_cardinality(name, settings, where),
        split_along=split_along,
        chunks_per_split=chunks_per_split,
    )


def _set_limits(
    name: str, settings: Mapping[str, Any], where: str
) -> tuple[int | None, int | None]:
    if "arrays-per-manifest" in settings and "max-arrays-per-manifest" in settings:
        raise _error(
            f"{where}.max-arrays-per-manifest",
            "is an alias of arrays-per-manifest; give only one of them",
        )
    max_size = _positive_int(settings, "max-manifest-size", where)
    alias = (
        "arrays-per-manifest" if "arrays-per-manifest" in settings else "max-arrays-per-manifest"
    )
    per_manifest = _positive_int(settings, alias, where)
    if max_size is not None and per_manifest is not None:
        raise _error(where, "max-manifest-size and arrays-per-manifest are mutually exclusive")
    if max_size is None and per_manifest is None:
        if name != DEFAULT_SET:
            raise _error(where, "set exactly one of max-manifest-size or arrays-per-manifest")
        max_size = DEFAULT_MAX_MANIFEST_SIZE
    return max_size, per_manifest


def _set_overflow(name: str, settings: Mapping[str, Any], where: str) -> str | None:
    value = settings.get("overflow-to")
    if name == DEFAULT_SET:
        if value is not None:
            raise _error(f"{where}.overflow-to", "the default set cannot overflow; remove this key")
        return None
    if value is None:
        return DEFAULT_SET
    if not isinstance(value, str):
        raise _error(f"{where}.overflow-to", f"expected a set name, got {_describe(value)}")
    return value


def _set_cardinality(name: str, settings: Mapping[str, Any], where: str) -> int | None:
    cardinality = _positive_int(settings, "cardinality", where)
    if name == DEFAULT_SET:
        if cardinality is not None:
            raise _error(f"{where}.cardinality", "the default set is always unlimited; use null")
        return None
    if "cardinality" not in settings:
        return DEFAULT_CARDINALITY
    return cardinality


def _set_split(settings: Mapping[str, Any], where: str) -> tuple[str | int | None, int | None]:
    split_along = settings.get("split-along")
    valid_name = isinstance(split_along, str) and split_along != ""
    valid_index = isinstance(split_along, int) and _is_int(split_along) and split_along >= 0
    if split_along is not None and not (valid_name or valid_index):
        raise _error(
            f"{where}.split-along",
            f"expected a dimension name or an index >= 0, got {_describe(split_along)}",
        )
    chunks_per_split = _positive_int(settings, "chunks-per-split", where)
    if chunks_per_split is not None and split_along is None:
        raise _error(f"{where}.chunks-per-split", "needs split-along (the dimension to split)")
    return split_along, chunks_per_split


def _check_overflow_targets(sets: Sequence[ManifestSet], where: str) -> None:
    names = {s.name for s in sets}
    for index, manifest_set in enumerate(sets):
        target = manifest_set.overflow_to
        if target is not None and target not in names:
            raise _error(
                f"{where}[{index}].{manifest_set.name}.overflow-to",
                f"names {target!r}, which is not a set; sets are: {', '.join(sorted(names))}",
            )


def _check_no_overflow_loop(sets: Sequence[ManifestSet], where: str) -> None:
    try:
        overflow_order(sets)
    except graphlib.CycleError as exc:
        cycle: list[str] = list(exc.args[1][:-1])  # graphlib repeats the first node at the end
        index, first = next((i, s) for i, s in enumerate(sets) if s.name in cycle)
        start = cycle.index(first.name)
        chain = " -> ".join([*cycle[start:], *cycle[:start], first.name])
        raise _error(
            f"{where}[{index}].{first.name}.overflow-to",
            f"overflow-to forms a loop ({chain}); overflow chains must end at {DEFAULT_SET}",
        ) from exc


# -- rules -------------------------------------------------------------------------------------


def _parse_rules(value: object, where: str, set_names: set[str]) -> tuple[Rule, ...]:
    return tuple(
        _parse_rule(entry, f"{where}[{index}]", set_names)
        for index, entry in enumerate(_sequence(value, where))
    )


def _parse_rule(entry: object, where: str, set_names: set[str]) -> Rule:
    body = _mapping(entry, where)
    _reject_unknown(body, _RULE_KEYS, where)
    target = body.get("target")
    if not isinstance(target, str):
        raise _error(f"{where}.target", f"required: the name of a set, got {_describe(target)}")
    if target not in set_names:
        known = ", ".join(sorted(set_names))
        raise _error(f"{where}.target", f"names {target!r}, which is not a set; sets are: {known}")
    path = body.get("path")
    return Rule(
        target=target,
        path=None if path is None else _pattern(path, f"{where}.path"),
        metadata_chunks=_range(body.get("metadata-chunks"), f"{where}.metadata-chunks"),
        initialized_chunks=_range(body.get("initialized-chunks"), f"{where}.initialized-chunks"),
    )


# -- preload -----------------------------------------------------------------------------------


def _parse_preload(value: object, where: str) -> Preload:
    body = {} if value is None else _mapping(value, where)
    _reject_unknown(body, _PRELOAD_KEYS, where)
    return Preload(
        max_manifest_size=_positive_int(body, "max-manifest-size", where),
        max_manifests=_positive_int(body, "max-manifests", where),
        arrays=_preload_arrays(body.get("arrays"), f"{where}.arrays"),
    )


def _preload_arrays(value: object, where: str) -> tuple[str, ...]:
    patterns: list[str] = []
    for index, entry in enumerate(_sequence(value, where)):
        body = _mapping(entry, f"{where}[{index}]")
        _reject_unknown(body, frozenset({"path"}), f"{where}[{index}]")
        patterns.append(_pattern(body.get("path"), f"{where}[{index}].path"))
    return tuple(patterns)


__all__ = [
    "DEFAULT_MAX_MANIFEST_SIZE",
    "DEFAULT_SET",
    "ManifestConfig",
    "ManifestSet",
    "Preload",
    "Rule",
    "default_config",
    "parse_config",
]

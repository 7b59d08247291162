"""Manifest-set configuration: the values of the ``chunk-manifests`` section (``parse.py``
reads and validates it) and their YAML form.

The schema is the one of seed 000 ("Multiple Manifests per Snapshot"); ``conf/manifests.yaml``
documents every key. ``parse_config`` (``parse.py``) is the only way in: it validates the whole
section before returning, and every problem raises
:class:`~icechunk_spark.errors.ConfigError` whose message starts with the YAML path of the
offending value, e.g. ``chunk-manifests.sets[1].coord2.overflow-to``.

Example::

    >>> from icechunk_spark.splitting import parse_config
    >>> cfg = parse_config('''
    ... chunk-manifests:
    ...   sets:
    ...     - coords: {max-manifest-size: 10000, cardinality: 1}
    ...   rules:
    ...     - {path: '.*/time', target: coords}
    ... ''')
    >>> [s.name for s in cfg.sets]
    ['coords', 'default']
    >>> cfg.set("coords").overflow_to
    'default'
    >>> cfg.rules[0].matches("/ocean/time", metadata_chunks=3, initialized_chunks=3)
    True
"""

from __future__ import annotations

import graphlib
import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from icechunk_spark.errors import ConfigError

ROOT_KEY = "chunk-manifests"
DEFAULT_SET = "default"
DEFAULT_MAX_MANIFEST_SIZE = 1_000_000
# The seed's example says a set without a `cardinality` key has cardinality 1 (`null` is unlimited).
DEFAULT_CARDINALITY = 1

Range = tuple[int | None, int | None]


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManifestSet:
    """A named group of manifests with a size (or arrays-per-manifest) limit.

    Exactly one of ``max_manifest_size`` and ``arrays_per_manifest`` is set. ``overflow_to`` is
    ``None`` only for the ``default`` set; ``cardinality`` ``None`` means unlimited.
    ``split_along``/``chunks_per_split`` are accepted for the future split of one array over
    several manifests; the current planner never splits an array.
    """

    name: str
    max_manifest_size: int | None
    arrays_per_manifest: int | None
    overflow_to: str | None
    cardinality: int | None
    split_along: str | int | None = None
    chunks_per_split: int | None = None


def _in_range(value: int, bounds: Range | None) -> bool:
    if bounds is None:
        return True
    low, high = bounds
    return (low is None or value >= low) and (high is None or value <= high)


@dataclass(frozen=True, slots=True)
class Rule:
    """Send arrays matching every given condition to the set ``target``.

    ``path`` is a regex that must match the whole absolute array path (``re.fullmatch``), so
    ``.*/time`` matches ``/time`` and ``/a/b/time``. Ranges are inclusive; ``None`` is open.
    """

    target: str
    path: str | None
    metadata_chunks: Range | None
    initialized_chunks: Range | None
    _regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Compiled once: rules run for every array of every flush.
        object.__setattr__(self, "_regex", None if self.path is None else re.compile(self.path))

    def matches(self, path: str, metadata_chunks: int, initialized_chunks: int) -> bool:
        """Whether an array with this path and these chunk counts satisfies all conditions."""
        return (
            (self._regex is None or self._regex.fullmatch(path) is not None)
            and _in_range(metadata_chunks, self.metadata_chunks)
            and _in_range(initialized_chunks, self.initialized_chunks)
        )


@dataclass(frozen=True, slots=True)
class Preload:
    """Which manifests a session fetches in the background when it starts.

    ``arrays`` are path regexes (full match); ``None`` limits are unlimited.
    """

    max_manifest_size: int | None
    max_manifests: int | None
    arrays: tuple[str, ...]
    _regexes: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regexes", tuple(re.compile(p) for p in self.arrays))

    def selects(self, path: str) -> bool:
        """Whether the manifests of the array at ``path`` should be preloaded."""
        return any(regex.fullmatch(path) is not None for regex in self._regexes)


@dataclass(frozen=True, slots=True)
class ManifestConfig:
    """A validated ``chunk-manifests`` configuration; build it with :func:`parse_config`."""

    sets: tuple[ManifestSet, ...]
    rules: tuple[Rule, ...]
    preload: Preload

    def set(self, name: str) -> ManifestSet:
        """The set called ``name``.

        Raises:
            ConfigError: no set has that name.
        """
        for manifest_set in self.sets:
            if manifest_set.name == name:
                return manifest_set
        known = ", ".join(s.name for s in self.sets)
        raise ConfigError(f"{ROOT_KEY}.sets: no manifest set named {name!r}; sets are: {known}")

    def processing_order(self) -> tuple[str, ...]:
        """Set names in topological order of ``overflow-to``, ties broken by config order."""
        return overflow_order(self.sets)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data in canonical spelling; ``parse_config`` reads it back."""
        return {
            ROOT_KEY: {
                "sets": [{s.name: _set_to_dict(s)} for s in self.sets],
                "rules": [_rule_to_dict(r) for r in self.rules],
                "preload": {
                    "max-manifest-size": self.preload.max_manifest_size,
                    "max-manifests": self.preload.max_manifests,
                    "arrays": [{"path": p} for p in self.preload.arrays],
                },
            }
        }

    def to_yaml(self) -> str:
        """The configuration as YAML text; ``parse_config`` reads it back."""
        return yaml.dump(self.to_dict(), Dumper=_Dumper, sort_keys=False)


def _set_to_dict(manifest_set: ManifestSet) -> dict[str, Any]:
    # Every key is written, even nulls: an absent `cardinality` would read back as 1.
    body: dict[str, Any] = {
        "max-manifest-size": manifest_set.max_manifest_size,
        "arrays-per-manifest": manifest_set.arrays_per_manifest,
        "overflow-to": manifest_set.overflow_to,
        "cardinality": manifest_set.cardinality,
    }
    if manifest_set.split_along is not None:
        body["split-along"] = manifest_set.split_along
    if manifest_set.chunks_per_split is not None:
        body["chunks-per-split"] = manifest_set.chunks_per_split
    return body


def _rule_to_dict(rule: Rule) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if rule.path is not None:
        body["path"] = rule.path
    if rule.metadata_chunks is not None:
        body["metadata-chunks"] = list(rule.metadata_chunks)
    if rule.initialized_chunks is not None:
        body["initialized-chunks"] = list(rule.initialized_chunks)
    body["target"] = rule.target
    return body


class _Dumper(yaml.SafeDumper):
    """Writes short scalar lists (ranges) in flow style, `[0, 5000]`, as people write them."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(not isinstance(item, (list, dict)) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def overflow_order(sets: Sequence[ManifestSet]) -> tuple[str, ...]:
    """Kahn's algorithm over ``overflow-to`` edges, always taking the earliest-declared ready set.

    Raises ``graphlib.CycleError`` on an overflow loop.
    """
    position = {s.name: i for i, s in enumerate(sets)}
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for manifest_set in sets:
        sorter.add(manifest_set.name)
        if manifest_set.overflow_to is not None:
            sorter.add(manifest_set.overflow_to, manifest_set.name)
    sorter.prepare()
    # graphlib hands out ready nodes in batches; one heap keyed by position gives the tie-break.
    ready: list[tuple[int, str]] = []
    order: list[str] = []
    while sorter.is_active():
        for name in sorter.get_ready():
            heapq.heappush(ready, (position.get(name, len(position)), name))
        _, name = heapq.heappop(ready)
        order.append(name)
        sorter.done(name)
    return tuple(order)

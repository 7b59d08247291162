"""Repository configuration: stored in the state file, overridable on every open."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import ConfigError

DEFAULT_INLINE_CHUNK_THRESHOLD = 512


@dataclass(frozen=True, slots=True)
class RepositoryConfig:
    """Settings that shape how a repository is written.

    ``inline_chunk_threshold_bytes``: chunks this small are stored inside manifests, not as
    files. ``manifests``: the ``chunk-manifests`` document (see ``conf/manifests.yaml``);
    ``None`` means the default configuration. ``virtual_chunk_containers``: URL prefixes that
    virtual refs may point into, each with fsspec storage options.
    ``verify_virtual_checksums``: compare a virtual ref's recorded checksum with its target's
    on read (``False`` reads the current bytes). ``chunk_statistics``: regexes (full match on
    the array path) of arrays whose written chunks get min/max/NaN/fill statistics.
    """

    inline_chunk_threshold_bytes: int = DEFAULT_INLINE_CHUNK_THRESHOLD
    manifests: Mapping[str, Any] | None = None
    virtual_chunk_containers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_concurrent_writes: int = 16
    verify_virtual_checksums: bool = True
    chunk_statistics: Sequence[str] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RepositoryConfig:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown repository config keys {unknown}; known keys: {sorted(known)}"
            )
        config = cls(**data)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        return {
            "inline_chunk_threshold_bytes": self.inline_chunk_threshold_bytes,
            "manifests": None if self.manifests is None else dict(self.manifests),
            "virtual_chunk_containers": {
                k: dict(v) for k, v in self.virtual_chunk_containers.items()
            },
            "max_concurrent_writes": self.max_concurrent_writes,
            "verify_virtual_checksums": self.verify_virtual_checksums,
            "chunk_statistics": list(self.chunk_statistics),
        }

    def merged(self, override: RepositoryConfig | Mapping[str, Any] | None) -> RepositoryConfig:
        """This config with the keys set in ``override`` replaced."""
        if override is None:
            return self
        if isinstance(override, RepositoryConfig):
            return override
        base = self.to_dict()
        base.update(override)
        return RepositoryConfig.from_dict(base)

    def validate(self) -> None:
        if (
            not isinstance(self.inline_chunk_threshold_bytes, int)
            or self.inline_chunk_threshold_bytes < 0
        ):
            raise ConfigError("config.inline_chunk_threshold_bytes must be an integer >= 0")
        if not isinstance(self.max_concurrent_writes, int) or self.max_concurrent_writes < 1:
            raise ConfigError("config.max_concurrent_writes must be an integer >= 1")
        if not isinstance(self.verify_virtual_checksums, bool):
            raise ConfigError("config.verify_virtual_checksums must be true or false")
        if isinstance(self.chunk_statistics, str):
            raise ConfigError("config.chunk_statistics must be a list of regexes, not a string")
        for i, pattern in enumerate(self.chunk_statistics):
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ConfigError(f"config.chunk_statistics[{i}] is not a regex: {exc}") from exc
        if self.manifests is not None:
            from ..splitting import parse_config

            parse_config(self.manifests)

    def with_manifests(self, manifests: Mapping[str, Any]) -> RepositoryConfig:
        return replace(self, manifests=manifests)

    def with_container(self, prefix: str, options: Mapping[str, Any]) -> RepositoryConfig:
        """This config with the virtual chunk container ``prefix`` added (or its options set)."""
        containers = {**self.virtual_chunk_containers, prefix: dict(options)}
        return replace(self, virtual_chunk_containers=containers)

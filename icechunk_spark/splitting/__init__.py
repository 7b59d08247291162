"""Manifest splitting (seed 000): manifest-set configuration, rules, closure and packing plan.

Pure Python over counts; the core calls :func:`plan_manifests` at flush time and writes the
manifests the plan lists. See ``conf/manifests.yaml`` for the configuration keys.
"""

from icechunk_spark.splitting.config import (
    DEFAULT_MAX_MANIFEST_SIZE,
    DEFAULT_SET,
    ManifestConfig,
    ManifestSet,
    Preload,
    Rule,
)
from icechunk_spark.splitting.packing import (
    ArrayStats,
    ExistingManifest,
    Plan,
    PlannedManifest,
    assign_set,
    closure,
    plan_manifests,
)
from icechunk_spark.splitting.parse import default_config, parse_config
from icechunk_spark.splitting.split import SplitSpec, split_spec

__all__ = [
    "DEFAULT_MAX_MANIFEST_SIZE",
    "DEFAULT_SET",
    "ArrayStats",
    "ExistingManifest",
    "ManifestConfig",
    "ManifestSet",
    "Plan",
    "PlannedManifest",
    "Preload",
    "Rule",
    "SplitSpec",
    "assign_set",
    "closure",
    "default_config",
    "parse_config",
    "plan_manifests",
    "split_spec",
]

"""Parsing and validation of the ``chunk-manifests`` configuration (seed 000)."""

from __future__ import annotations

import copy
import doctest
import pickle
from pathlib import Path
from typing import Any

import pytest

from icechunk_spark.errors import ConfigError, InvalidInputError
from icechunk_spark.splitting import (
    DEFAULT_MAX_MANIFEST_SIZE,
    ManifestConfig,
    ManifestSet,
    Preload,
    Rule,
    default_config,
    parse_config,
)
from icechunk_spark.splitting import config as config_module
from icechunk_spark.splitting import packing as packing_module

REPO_ROOT = Path(__file__).resolve().parents[2]

SEED_EXAMPLE = (Path(__file__).parent / "seed_example.yaml").read_text("utf-8")


def base() -> dict[str, Any]:
    """A valid configuration (as parsed YAML) for the invalid cases to break one piece of."""
    return {
        "chunk-manifests": {
            "sets": [
                {"coord1": {"max-manifest-size": 100, "overflow-to": "coord2", "cardinality": 2}},
                {"coord2": {"max-manifest-size": 200}},
                {"default": {"max-manifest-size": 1000}},
            ],
            "rules": [
                {"path": ".*/time", "metadata-chunks": [0, 50], "target": "coord1"},
                {"metadata-chunks": [0, 10], "target": "coord2"},
            ],
            "preload": {"max-manifest-size": 50, "max-manifests": 1, "arrays": [{"path": ".*"}]},
        }
    }


def section(data: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = data["chunk-manifests"]
    return result


def set_body(data: dict[str, Any], index: int) -> dict[str, Any]:
    ((body,),) = [section(data)["sets"][index].values()]
    result: dict[str, Any] = body
    return result


def rule(data: dict[str, Any], index: int) -> dict[str, Any]:
    result: dict[str, Any] = section(data)["rules"][index]
    return result


def preload(data: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = section(data)["preload"]
    return result


def broken(mutate: Any) -> dict[str, Any]:
    data = copy.deepcopy(base())
    mutate(data)
    return data


# (id, mutation of base(), YAML path the message must name)
INVALID: list[tuple[str, Any, str]] = [
    # document shape
    ("not-a-mapping", lambda d: d.clear() or d.update({"chunk-manifests": [1]}), "chunk-manifests"),
    ("unknown-top-level-key", lambda d: d.update({"storage": {}}), "storage"),
    ("unknown-section-key", lambda d: section(d).update({"set": []}), "chunk-manifests.set"),
    ("sets-not-a-list", lambda d: section(d).update({"sets": {"a": 1}}), "chunk-manifests.sets"),
    # sets
    (
        "set-entry-with-two-keys",
        lambda d: section(d)["sets"][1].update({"max-manifest-size": 3}),
        "chunk-manifests.sets[1]",
    ),
    (
        "set-name-not-a-string",
        lambda d: section(d)["sets"].insert(0, {7: {"max-manifest-size": 3}}),
        "chunk-manifests.sets[0]",
    ),
    (
        "set-body-not-a-mapping",
        lambda d: section(d)["sets"].__setitem__(1, {"coord2": 5}),
        "chunk-manifests.sets[1].coord2",
    ),
    (
        "unknown-set-key",
        lambda d: set_body(d, 1).update({"max-size": 3}),
        "chunk-manifests.sets[1].coord2.max-size",
    ),
    (
        "duplicate-set-name",
        lambda d: section(d)["sets"].insert(2, {"coord1": {"max-manifest-size": 3}}),
        "chunk-manifests.sets[2].coord1",
    ),
    (
        "max-manifest-size-zero",
        lambda d: set_body(d, 0).update({"max-manifest-size": 0}),
        "chunk-manifests.sets[0].coord1.max-manifest-size",
    ),
    (
        "max-manifest-size-string",
        lambda d: set_body(d, 0).update({"max-manifest-size": "10k"}),
        "chunk-manifests.sets[0].coord1.max-manifest-size",
    ),
    (
        "max-manifest-size-bool",
        lambda d: set_body(d, 0).update({"max-manifest-size": True}),
        "chunk-manifests.sets[0].coord1.max-manifest-size",
    ),
    (
        "max-manifest-size-float",
        lambda d: set_body(d, 0).update({"max-manifest-size": 10.5}),
        "chunk-manifests.sets[0].coord1.max-manifest-size",
    ),
    (
        "both-size-and-arrays-per-manifest",
        lambda d: set_body(d, 1).update({"arrays-per-manifest": 2}),
        "chunk-manifests.sets[1].coord2",
    ),
    (
        "neither-size-nor-arrays-per-manifest",
        lambda d: set_body(d, 1).pop("max-manifest-size"),
        "chunk-manifests.sets[1].coord2",
    ),
    (
        "arrays-per-manifest-and-its-alias",
        lambda d: set_body(d, 1).update(
            {"max-manifest-size": None, "arrays-per-manifest": 2, "max-arrays-per-manifest": 2}
        ),
        "chunk-manifests.sets[1].coord2.max-arrays-per-manifest",
    ),
    (
        "arrays-per-manifest-zero",
        lambda d: set_body(d, 1).update({"max-manifest-size": None, "arrays-per-manifest": 0}),
        "chunk-manifests.sets[1].coord2.arrays-per-manifest",
    ),
    (
        "overflow-to-unknown-set",
        lambda d: set_body(d, 1).update({"overflow-to": "coord3"}),
        "chunk-manifests.sets[1].coord2.overflow-to",
    ),
    (
        "overflow-to-not-a-string",
        lambda d: set_body(d, 1).update({"overflow-to": 3}),
        "chunk-manifests.sets[1].coord2.overflow-to",
    ),
    (
        "overflow-loop",
        lambda d: set_body(d, 1).update({"overflow-to": "coord1"}),
        "chunk-manifests.sets[0].coord1.overflow-to",
    ),
    (
        "overflow-to-itself",
        lambda d: set_body(d, 1).update({"overflow-to": "coord2"}),
        "chunk-manifests.sets[1].coord2.overflow-to",
    ),
    (
        "cardinality-zero",
        lambda d: set_body(d, 0).update({"cardinality": 0}),
        "chunk-manifests.sets[0].coord1.cardinality",
    ),
    (
        "default-with-cardinality",
        lambda d: set_body(d, 2).update({"cardinality": 3}),
        "chunk-manifests.sets[2].default.cardinality",
    ),
    (
        "default-with-overflow-to",
        lambda d: set_body(d, 2).update({"overflow-to": "coord1"}),
        "chunk-manifests.sets[2].default.overflow-to",
    ),
    (
        "split-along-negative",
        lambda d: set_body(d, 0).update({"split-along": -1}),
        "chunk-manifests.sets[0].coord1.split-along",
    ),
    (
        "split-along-list",
        lambda d: set_body(d, 0).update({"split-along": ["time"]}),
        "chunk-manifests.sets[0].coord1.split-along",
    ),
    (
        "chunks-per-split-zero",
        lambda d: set_body(d, 0).update({"split-along": "time", "chunks-per-split": 0}),
        "chunk-manifests.sets[0].coord1.chunks-per-split",
    ),
    (
        "chunks-per-split-without-split-along",
        lambda d: set_body(d, 0).update({"chunks-per-split": 10}),
        "chunk-manifests.sets[0].coord1.chunks-per-split",
    ),
    # rules
    ("rules-not-a-list", lambda d: section(d).update({"rules": "x"}), "chunk-manifests.rules"),
    (
        "rule-not-a-mapping",
        lambda d: section(d)["rules"].append("coord1"),
        "chunk-manifests.rules[2]",
    ),
    (
        "unknown-rule-key",
        lambda d: rule(d, 1).update({"chunks": [0, 1]}),
        "chunk-manifests.rules[1].chunks",
    ),
    ("rule-without-target", lambda d: rule(d, 0).pop("target"), "chunk-manifests.rules[0].target"),
    (
        "rule-target-unknown",
        lambda d: rule(d, 0).update({"target": "coords"}),
        "chunk-manifests.rules[0].target",
    ),
    (
        "rule-path-bad-regex",
        lambda d: rule(d, 0).update({"path": ".*/(time"}),
        "chunk-manifests.rules[0].path",
    ),
    (
        "rule-path-not-a-string",
        lambda d: rule(d, 0).update({"path": 3}),
        "chunk-manifests.rules[0].path",
    ),
    (
        "range-not-a-list",
        lambda d: rule(d, 1).update({"metadata-chunks": 10}),
        "chunk-manifests.rules[1].metadata-chunks",
    ),
    (
        "range-wrong-length",
        lambda d: rule(d, 1).update({"metadata-chunks": [0, 1, 2]}),
        "chunk-manifests.rules[1].metadata-chunks",
    ),
    (
        "range-bound-not-int",
        lambda d: rule(d, 1).update({"metadata-chunks": [0, "many"]}),
        "chunk-manifests.rules[1].metadata-chunks",
    ),
    (
        "range-bound-negative",
        lambda d: rule(d, 1).update({"metadata-chunks": [-1, 5]}),
        "chunk-manifests.rules[1].metadata-chunks",
    ),
    (
        "range-min-above-max",
        lambda d: rule(d, 1).update({"metadata-chunks": [10, 5]}),
        "chunk-manifests.rules[1].metadata-chunks",
    ),
    (
        "initialized-chunks-range-invalid",
        lambda d: rule(d, 1).update({"initialized-chunks": [5, 1]}),
        "chunk-manifests.rules[1].initialized-chunks",
    ),
    # preload
    (
        "preload-not-a-mapping",
        lambda d: section(d).update({"preload": [1]}),
        "chunk-manifests.preload",
    ),
    (
        "unknown-preload-key",
        lambda d: preload(d).update({"max-size": 1}),
        "chunk-manifests.preload.max-size",
    ),
    (
        "preload-max-manifests-zero",
        lambda d: preload(d).update({"max-manifests": 0}),
        "chunk-manifests.preload.max-manifests",
    ),
    (
        "preload-max-manifest-size-string",
        lambda d: preload(d).update({"max-manifest-size": "big"}),
        "chunk-manifests.preload.max-manifest-size",
    ),
    (
        "preload-arrays-not-a-list",
        lambda d: preload(d).update({"arrays": ".*"}),
        "chunk-manifests.preload.arrays",
    ),
    (
        "preload-array-entry-not-a-mapping",
        lambda d: preload(d)["arrays"].append(".*/time"),
        "chunk-manifests.preload.arrays[1]",
    ),
    (
        "preload-array-unknown-key",
        lambda d: preload(d)["arrays"].append({"regex": ".*"}),
        "chunk-manifests.preload.arrays[1].regex",
    ),
    (
        "preload-array-without-path",
        lambda d: preload(d)["arrays"].append({}),
        "chunk-manifests.preload.arrays[1].path",
    ),
    (
        "preload-array-bad-regex",
        lambda d: preload(d)["arrays"].append({"path": "[a-"}),
        "chunk-manifests.preload.arrays[1].path",
    ),
]


def test_base_is_valid() -> None:
    config = parse_config(base())
    assert [s.name for s in config.sets] == ["coord1", "coord2", "default"]


@pytest.mark.parametrize(
    ("mutate", "where"), [(m, w) for _, m, w in INVALID], ids=[i for i, _, _ in INVALID]
)
def test_invalid_config_names_yaml_path(mutate: Any, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(broken(mutate))
    assert str(info.value).startswith(f"{where}: ")


def test_config_error_is_an_invalid_input_error() -> None:
    assert issubclass(ConfigError, InvalidInputError)
    assert issubclass(ConfigError, ValueError)


def test_invalid_yaml_text() -> None:
    with pytest.raises(ConfigError, match=r"^chunk-manifests: not valid YAML"):
        parse_config("chunk-manifests: [")


def test_missing_root_key() -> None:
    with pytest.raises(ConfigError, match=r"^chunk-manifests: missing"):
        parse_config("sets: []")


def test_empty_document() -> None:
    with pytest.raises(ConfigError, match=r"^chunk-manifests: missing"):
        parse_config("")


def test_wrong_input_type() -> None:
    with pytest.raises(ConfigError, match=r"^chunk-manifests: expected YAML text or a mapping"):
        parse_config(42)  # type: ignore[arg-type]


def test_settings_not_indented_under_the_set_name() -> None:
    text = """
chunk-manifests:
  sets:
    - coord1:
      max-manifest-size: 3
"""
    with pytest.raises(ConfigError, match=r"indented under the name") as info:
        parse_config(text)
    assert str(info.value).startswith("chunk-manifests.sets[0]: ")


def test_overflow_loop_message_shows_the_chain() -> None:
    data = broken(lambda d: set_body(d, 1).update({"overflow-to": "coord1"}))
    with pytest.raises(ConfigError, match=r"coord1 -> coord2 -> coord1"):
        parse_config(data)


# --- what valid configurations mean -----------------------------------------------------------


def test_default_set_added_when_missing() -> None:
    config = parse_config({"chunk-manifests": {"sets": [{"a": {"max-manifest-size": 5}}]}})
    assert config.sets[-1] == ManifestSet("default", DEFAULT_MAX_MANIFEST_SIZE, None, None, None)


def test_empty_section_means_only_default() -> None:
    config = parse_config("chunk-manifests:")
    assert config.sets == (ManifestSet("default", 1_000_000, None, None, None),)
    assert config.rules == ()
    assert config.preload == Preload(None, None, ())


def test_default_set_without_settings_gets_default_size() -> None:
    config = parse_config("chunk-manifests: {sets: [{default: null}]}")
    assert config.set("default").max_manifest_size == 1_000_000


def test_default_set_may_pack_by_arrays_per_manifest() -> None:
    config = parse_config("chunk-manifests: {sets: [{default: {arrays-per-manifest: 4}}]}")
    default = config.set("default")
    assert (default.max_manifest_size, default.arrays_per_manifest) == (None, 4)


def test_overflow_to_defaults_to_default_set() -> None:
    config = parse_config(base())
    assert config.set("coord2").overflow_to == "default"
    assert config.set("default").overflow_to is None


def test_cardinality_defaults_to_one_and_null_is_unlimited() -> None:
    # The seed: "cardinality: 1 # by default"; "cardinality = null means unlimited".
    data = broken(lambda d: set_body(d, 0).update({"cardinality": None}))
    config = parse_config(data)
    assert config.set("coord1").cardinality is None
    assert config.set("coord2").cardinality == 1
    assert config.set("default").cardinality is None


def test_max_arrays_per_manifest_alias() -> None:
    data = broken(
        lambda d: set_body(d, 1).update({"max-manifest-size": None, "max-arrays-per-manifest": 3})
    )
    assert parse_config(data).set("coord2").arrays_per_manifest == 3


def test_split_settings_accepted() -> None:
    data = broken(lambda d: set_body(d, 0).update({"split-along": "time", "chunks-per-split": 8}))
    coord1 = parse_config(data).set("coord1")
    assert (coord1.split_along, coord1.chunks_per_split) == ("time", 8)
    data = broken(lambda d: set_body(d, 0).update({"split-along": 0}))
    assert parse_config(data).set("coord1").split_along == 0


def test_initialized_chunks_rule_condition() -> None:
    data = broken(lambda d: rule(d, 1).update({"initialized-chunks": [1, None]}))
    parsed = parse_config(data).rules[1]
    assert parsed.initialized_chunks == (1, None)
    assert parsed.matches("/x", metadata_chunks=5, initialized_chunks=1)
    assert not parsed.matches("/x", metadata_chunks=5, initialized_chunks=0)


def test_rule_ranges_are_inclusive_and_open_ended() -> None:
    closed = Rule("default", None, (0, 5000), None)
    assert closed.matches("/a", 0, 0) and closed.matches("/a", 5000, 0)
    assert not closed.matches("/a", 5001, 0)
    open_high = Rule("default", None, (2_000_000, None), None)
    assert open_high.matches("/a", 10**12, 0) and not open_high.matches("/a", 1_999_999, 0)


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/time", True), ("/a/b/time", True), ("/time2", False), ("/a/time/x", False)],
)
def test_rule_path_is_a_full_match_on_the_absolute_path(path: str, expected: bool) -> None:
    assert Rule("default", ".*/time", None, None).matches(path, 1, 1) is expected


def test_rule_without_conditions_matches_everything() -> None:
    assert Rule("default", None, None, None).matches("/anything", 10**9, 0)


def test_preload_selects_by_path() -> None:
    selected = default_config().preload
    assert selected.selects("/time") and selected.selects("/ocean/latitude")
    assert not selected.selects("/temperature")


def test_set_lookup_unknown_name() -> None:
    with pytest.raises(ConfigError, match=r"no manifest set named 'nope'"):
        default_config().set("nope")


def test_processing_order_is_topological_with_config_order_ties() -> None:
    config = parse_config(
        """
chunk-manifests:
  sets:
    - late: {max-manifest-size: 1, overflow-to: middle}
    - middle: {max-manifest-size: 1}
    - early: {max-manifest-size: 1, overflow-to: late}
"""
    )
    assert config.processing_order() == ("early", "late", "middle", "default")


# --- defaults and round trips -------------------------------------------------------------------


def test_default_config_is_the_seeds() -> None:
    config = default_config()
    assert config.sets == (
        ManifestSet("coordinates", 50_000, None, "default", 1),
        ManifestSet("default", 1_000_000, None, None, None),
    )
    assert config.rules == (Rule("coordinates", ".*", (0, 5000), None),)
    assert config.preload == Preload(50_000, 1, (".*/time", ".*/latitude", ".*/longitude"))


def test_documented_conf_file_equals_the_bundled_default() -> None:
    text = (REPO_ROOT / "conf" / "manifests.yaml").read_text("utf-8")
    assert parse_config(text) == default_config()


def test_seed_example_parses() -> None:
    config = parse_config(SEED_EXAMPLE)
    assert config.set("coord1") == ManifestSet("coord1", 10_000, None, "coord2", 2)
    assert config.set("coord2") == ManifestSet("coord2", 10_000, None, "default", 1)
    assert config.set("big-array") == ManifestSet("big-array", None, 1, "default", None)
    assert config.set("default") == ManifestSet("default", 1_000_000, None, None, None)
    assert [r.target for r in config.rules] == ["coord1", "coord2", "big-array"]


def test_bytes_input() -> None:
    assert parse_config(SEED_EXAMPLE.encode()) == parse_config(SEED_EXAMPLE)


@pytest.mark.parametrize("text", [SEED_EXAMPLE, None], ids=["seed-example", "default"])
def test_to_dict_and_to_yaml_round_trip(text: str | None) -> None:
    config = default_config() if text is None else parse_config(text)
    assert parse_config(config.to_dict()) == config
    assert parse_config(config.to_yaml()) == config


def test_round_trip_keeps_split_settings() -> None:
    data = broken(lambda d: set_body(d, 0).update({"split-along": "time", "chunks-per-split": 8}))
    config = parse_config(data)
    assert parse_config(config.to_yaml()) == config


def test_to_yaml_writes_ranges_in_flow_style() -> None:
    assert "metadata-chunks: [0, 5000]" in default_config().to_yaml()


def test_config_pickles() -> None:
    # Spark ships the config to Python workers.
    config = parse_config(SEED_EXAMPLE)
    restored = pickle.loads(pickle.dumps(config))
    assert restored == config
    assert restored.rules[0].matches("/a/time", 3, 3)
    assert restored.preload.selects("/x/latitude")


def test_values_are_frozen() -> None:
    config = default_config()
    with pytest.raises(AttributeError):
        config.sets = ()  # type: ignore[misc]


def test_manifest_config_constructed_directly() -> None:
    config = ManifestConfig(
        sets=(ManifestSet("default", 10, None, None, None),),
        rules=(),
        preload=Preload(None, None, ()),
    )
    assert parse_config(config.to_dict()) == config


@pytest.mark.parametrize("module", [config_module, packing_module], ids=["config", "packing"])
def test_docstring_examples(module: Any) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0

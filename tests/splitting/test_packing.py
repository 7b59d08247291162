"""Closure, rules and the packing plan, on the examples of seed 000 and a few of our own."""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from icechunk_spark.errors import ConfigError
from icechunk_spark.splitting import (
    ArrayStats,
    ExistingManifest,
    ManifestConfig,
    ManifestSet,
    Plan,
    PlannedManifest,
    Preload,
    Rule,
    assign_set,
    closure,
    default_config,
    parse_config,
    plan_manifests,
)

SEED_EXAMPLE = parse_config((Path(__file__).parent / "seed_example.yaml").read_text("utf-8"))

# The seed's closure example: manifest 1 has a, b; manifest 2 has a, b, c; manifest 3 has c.
A, B, C, D = 1, 2, 3, 4
SEED_MANIFESTS = [
    ExistingManifest("m1", "default", frozenset({A, B})),
    ExistingManifest("m2", "default", frozenset({A, B, C})),
    ExistingManifest("m3", "default", frozenset({C})),
]


def stats(array_id: int, path: str, chunks: int, initialized: int | None = None) -> ArrayStats:
    return ArrayStats(array_id, path, chunks, chunks if initialized is None else initialized)


def by_id(*arrays: ArrayStats) -> dict[int, ArrayStats]:
    return {a.array_id: a for a in arrays}


def contents(plan: Plan) -> list[tuple[str, tuple[int, ...]]]:
    return [(m.set_name, m.array_ids) for m in plan.new_manifests]


def fresh_plan(arrays: dict[int, ArrayStats], config: ManifestConfig) -> Plan:
    """The plan of a first commit: every array created."""
    return plan_manifests(arrays, [], arrays, config, created=frozenset(arrays))


def chain_config(cardinality1: int | None = 2) -> ManifestConfig:
    """coord1 -> coord2 -> default, as in the seed's example but with small numbers."""
    return parse_config(
        {
            "chunk-manifests": {
                "sets": [
                    {
                        "coord1": {
                            "max-manifest-size": 10,
                            "overflow-to": "coord2",
                            "cardinality": cardinality1,
                        }
                    },
                    {"coord2": {"max-manifest-size": 20}},
                    {"default": {"max-manifest-size": 100}},
                ],
                "rules": [{"path": "/c/.*", "target": "coord1"}],
            }
        }
    )


# --- closure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("modified", [{A}, {A, B}, {A, B, C}, {C}], ids=["a", "a-b", "a-b-c", "c"])
def test_closure_seed_examples(modified: set[int]) -> None:
    assert closure(modified, SEED_MANIFESTS) == {A, B, C}


def test_closure_of_nothing_is_empty() -> None:
    assert closure(set(), SEED_MANIFESTS) == frozenset()


def test_closure_stops_at_unrelated_manifests() -> None:
    manifests = [*SEED_MANIFESTS, ExistingManifest("m4", "default", frozenset({D}))]
    assert closure({A}, manifests) == {A, B, C}
    assert closure({D}, manifests) == {D}


def test_closure_of_an_array_in_no_manifest_is_itself() -> None:
    assert closure({99}, SEED_MANIFESTS) == {99}


def test_created_array_is_its_own_closure() -> None:
    assert closure({D}, SEED_MANIFESTS, created=frozenset({D})) == {D}
    assert closure({A, D}, SEED_MANIFESTS, created=frozenset({D})) == {A, B, C, D}


def test_recreated_id_still_listed_by_a_manifest_is_closed_over() -> None:
    # Delete + create of the same id (the seed's TODO): the old manifest must be rewritten.
    assert closure({A}, SEED_MANIFESTS, created=frozenset({A})) == {A, B, C}


def test_closure_accepts_any_iterable() -> None:
    assert closure(iter([C]), SEED_MANIFESTS) == {A, B, C}


# --- rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (stats(1, "/time", 100), "coord1"),
        (stats(2, "/ocean/latitude", 500), "coord1"),
        (stats(3, "/ocean/latitude", 501), "default"),  # too big for coord1, too big for coord2
        (stats(4, "/ocean/depth", 200), "coord2"),
        (stats(5, "/ocean/time", 150), "coord1"),  # first matching rule wins over coord2
        (stats(6, "/temp", 2_000_000, 0), "big-array"),  # metadata chunks, not initialized ones
        (stats(7, "/temp", 1_999_999), "default"),
    ],
)
def test_assign_set_seed_example(array: ArrayStats, expected: str) -> None:
    assert assign_set(array, SEED_EXAMPLE) == expected


def test_assign_set_by_initialized_chunks() -> None:
    config = parse_config(
        """
chunk-manifests:
  sets: [{sparse: {max-manifest-size: 100}}]
  rules: [{initialized-chunks: [0, 10], metadata-chunks: [1000, null], target: sparse}]
"""
    )
    assert assign_set(stats(1, "/a", 5000, 3), config) == "sparse"
    assert assign_set(stats(1, "/a", 5000, 11), config) == "default"


def test_assign_set_with_no_rules_is_default() -> None:
    config = parse_config("chunk-manifests: {}")
    assert assign_set(stats(1, "/a", 1), config) == "default"


# --- packing: the default configuration ---------------------------------------------------------


def test_default_config_packs_coordinates_together() -> None:
    arrays = by_id(
        stats(1, "/time", 365),
        stats(2, "/latitude", 10),
        stats(3, "/longitude", 20),
        stats(4, "/temperature", 365 * 200),  # > 5000 metadata chunks: no rule
        stats(5, "/pressure", 365 * 200),
    )
    plan = fresh_plan(arrays, default_config())
    assert contents(plan) == [("coordinates", (1, 2, 3)), ("default", (4, 5))]
    assert plan.kept_manifest_ids == ()
    assert plan.closure == {1, 2, 3, 4, 5}


def test_default_config_coordinates_overflow_by_cardinality() -> None:
    # 5000 chunks each: ten fit the 50000 limit, the eleventh needs a second manifest, but
    # coordinates has cardinality 1, so the smaller bin overflows to default.
    arrays = by_id(*(stats(i, f"/c{i:02}", 5000) for i in range(11)))
    plan = fresh_plan(arrays, default_config())
    assert contents(plan) == [("coordinates", tuple(range(10))), ("default", (10,))]


def test_default_config_oversized_array_gets_its_own_manifest() -> None:
    arrays = by_id(stats(1, "/huge", 3_000_000), stats(2, "/big", 600_000), stats(3, "/b", 500_000))
    plan = fresh_plan(arrays, default_config())
    # 600k + 500k > 1M: two bins; 3M alone beyond the limit.
    assert contents(plan) == [("default", (1,)), ("default", (2,)), ("default", (3,))]


def test_bins_use_initialized_chunks_not_metadata_chunks() -> None:
    # Two sparse arrays whose grids are big but hold few refs share one default manifest.
    arrays = by_id(stats(1, "/a", 900_000, 10), stats(2, "/b", 900_000, 10))
    assert contents(fresh_plan(arrays, default_config())) == [("default", (1, 2))]


def test_array_without_initialized_chunks_gets_no_manifest() -> None:
    arrays = by_id(stats(1, "/time", 10), stats(2, "/empty", 10, 0))
    plan = fresh_plan(arrays, default_config())
    assert contents(plan) == [("coordinates", (1,))]
    assert plan.closure == {1, 2}


# --- packing: the seed's example configuration -------------------------------------------------


def test_seed_example_config_plan() -> None:
    arrays = by_id(
        stats(1, "/time", 400),
        stats(2, "/latitude", 300),
        stats(3, "/longitude", 300),
        stats(4, "/station", 150),  # coord2
        stats(5, "/level", 50),  # coord2
        stats(6, "/radiance", 3_000_000),  # big-array
        stats(7, "/reflectance", 2_500_000),  # big-array
        stats(8, "/temperature", 800_000),  # default
        stats(9, "/humidity", 150_000),  # default
    )
    plan = fresh_plan(arrays, SEED_EXAMPLE)
    assert contents(plan) == [
        ("coord1", (1, 2, 3)),
        ("coord2", (4, 5)),
        ("big-array", (6,)),
        ("big-array", (7,)),
        ("default", (8, 9)),
    ]


# --- packing: overflow and cardinality ----------------------------------------------------------


def test_overflow_chain_coord1_to_coord2_to_default() -> None:
    arrays = by_id(
        stats(1, "/c/small", 4),  # fits coord1 (10)
        stats(2, "/c/medium", 15),  # too big for coord1, fits coord2 (20)
        stats(3, "/c/large", 25),  # too big for both: default
    )
    plan = fresh_plan(arrays, chain_config())
    assert contents(plan) == [("coord1", (1,)), ("coord2", (2,)), ("default", (3,))]


def test_overflowed_arrays_are_packed_with_the_targets_own() -> None:
    arrays = by_id(stats(1, "/c/medium", 15), stats(2, "/other", 5))
    config = parse_config(
        {
            "chunk-manifests": {
                "sets": [
                    {"coord1": {"max-manifest-size": 10, "overflow-to": "coord2"}},
                    {"coord2": {"max-manifest-size": 20}},
                ],
                "rules": [
                    {"path": "/c/.*", "target": "coord1"},
                    {"target": "coord2"},
                ],
            }
        }
    )
    assert contents(fresh_plan(arrays, config)) == [("coord2", (1, 2))]


def test_cardinality_overflow_keeps_the_largest_bins() -> None:
    # Four arrays of 6 into bins of 10: four bins. coord1 keeps two (cardinality 2); the two
    # others overflow to coord2, where they share one bin of 20.
    arrays = by_id(
        stats(1, "/c/a", 6), stats(2, "/c/b", 7), stats(3, "/c/c", 6), stats(4, "/c/d", 8)
    )
    plan = fresh_plan(arrays, chain_config(cardinality1=2))
    assert contents(plan) == [("coord1", (2,)), ("coord1", (4,)), ("coord2", (1, 3))]


def test_unlimited_cardinality() -> None:
    arrays = by_id(*(stats(i, f"/c/{i}", 6) for i in range(5)))
    plan = fresh_plan(arrays, chain_config(cardinality1=None))
    assert [s for s, _ in contents(plan)] == ["coord1"] * 5


def test_first_fit_decreasing() -> None:
    config = parse_config("chunk-manifests: {sets: [{default: {max-manifest-size: 10}}]}")
    arrays = by_id(*(stats(i, f"/a{i}", size) for i, size in enumerate([2, 3, 4, 5, 6])))
    # 6 -> bin0, 5 -> bin1, 4 -> bin0 (full), 3 -> bin1, 2 -> bin1 (full)
    assert contents(fresh_plan(arrays, config)) == [("default", (0, 1, 3)), ("default", (2, 4))]


@pytest.mark.parametrize("seed", range(40))
def test_first_fit_decreasing_equals_the_textbook_walk(seed: int) -> None:
    # Biggest first (ties by path), each into the first bin with room: walked here the plain
    # way, beside the plan's packing (which skips the walk when everything fits one bin).
    rng = random.Random(seed)
    limit = rng.choice([1, 2, 5, 10, 40, 1000])
    sizes = [rng.randint(1, min(limit, 12)) for _ in range(rng.randint(1, 30))]
    arrays = by_id(*(stats(i, f"/a{rng.randint(0, 9)}/{i}", n) for i, n in enumerate(sizes)))
    bins: list[list[int]] = []
    room: list[int] = []
    for a in sorted(arrays.values(), key=lambda a: (-a.initialized_chunks, a.path, a.array_id)):
        free = [k for k, r in enumerate(room) if r >= a.initialized_chunks]
        if not free:
            bins.append([])
            room.append(limit)
        k = free[0] if free else len(bins) - 1
        bins[k].append(a.array_id)
        room[k] -= a.initialized_chunks
    config = parse_config(
        f"chunk-manifests: {{sets: [{{default: {{max-manifest-size: {limit}}}}}]}}"
    )
    expected = sorted(("default", tuple(sorted(b))) for b in bins)
    assert contents(fresh_plan(arrays, config)) == expected


@pytest.mark.parametrize(("sizes", "bins"), [([4, 3, 3], 1), ([4, 3, 4], 2), ([10], 1)])
def test_arrays_filling_a_manifest_exactly_share_it_and_one_more_chunk_does_not(
    sizes: list[int], bins: int
) -> None:
    config = parse_config("chunk-manifests: {sets: [{default: {max-manifest-size: 10}}]}")
    arrays = by_id(*(stats(i, f"/a{i}", n) for i, n in enumerate(sizes)))
    assert len(contents(fresh_plan(arrays, config))) == bins


def test_equal_sizes_break_ties_by_path() -> None:
    config = parse_config("chunk-manifests: {sets: [{default: {max-manifest-size: 10}}]}")
    arrays = by_id(stats(1, "/b", 4), stats(2, "/a", 4), stats(3, "/c", 4))
    # /a and /b fill bin 0 first (8); /c does not fit (12 > 10).
    assert contents(fresh_plan(arrays, config)) == [("default", (1, 2)), ("default", (3,))]


@pytest.mark.parametrize(
    ("per_manifest", "expected"),
    [
        (1, [(1,), (2,), (3,), (4,), (5,), (6,), (7,)]),
        (2, [(1, 7), (2, 6), (3, 5), (4,)]),
        (3, [(1, 2, 7), (3, 4, 6), (5,)]),
    ],
)
def test_arrays_per_manifest_pairs_biggest_with_smallest(
    per_manifest: int, expected: list[tuple[int, ...]]
) -> None:
    config = parse_config(
        f"chunk-manifests: {{sets: [{{default: {{arrays-per-manifest: {per_manifest}}}}}]}}"
    )
    # Array i has 8 - i chunks: 1 is the biggest, 7 the smallest.
    arrays = by_id(*(stats(i, f"/a{i}", 8 - i) for i in range(1, 8)))
    assert contents(fresh_plan(arrays, config)) == [("default", ids) for ids in expected]


def test_arrays_per_manifest_set_with_cardinality_overflows() -> None:
    config = parse_config(
        """
chunk-manifests:
  sets:
    - pairs: {arrays-per-manifest: 2, cardinality: 1}
  rules: [{target: pairs}]
"""
    )
    arrays = by_id(stats(1, "/a", 5), stats(2, "/b", 1), stats(3, "/c", 3))
    # Bins (a, b) = 6 and (c) = 3; the bigger stays.
    assert contents(fresh_plan(arrays, config)) == [("pairs", (1, 2)), ("default", (3,))]


# --- packing against a parent snapshot ----------------------------------------------------------


def parent() -> tuple[dict[int, ArrayStats], list[ExistingManifest]]:
    arrays = by_id(
        stats(1, "/time", 10),
        stats(2, "/lat", 10),
        stats(3, "/temp", 90_000),
        stats(4, "/salt", 90_000),
        stats(5, "/wind", 900_000),
    )
    manifests = [
        ExistingManifest("coords", "coordinates", frozenset({1, 2})),
        ExistingManifest("ts", "default", frozenset({3, 4})),
        ExistingManifest("wind", "default", frozenset({5})),
    ]
    return arrays, manifests


def test_unmodified_manifests_are_kept() -> None:
    arrays, manifests = parent()
    arrays[3] = stats(3, "/temp", 95_000)
    plan = plan_manifests(arrays, manifests, {3}, default_config())
    assert contents(plan) == [("default", (3, 4))]
    assert plan.kept_manifest_ids == ("coords", "wind")
    assert plan.closure == {3, 4}


def test_nothing_modified_keeps_everything() -> None:
    arrays, manifests = parent()
    plan = plan_manifests(arrays, manifests, [], default_config())
    assert plan.new_manifests == ()
    assert plan.kept_manifest_ids == ("coords", "ts", "wind")


def test_deleted_array_is_dropped_from_its_rewritten_manifest() -> None:
    arrays, manifests = parent()
    del arrays[4]
    plan = plan_manifests(arrays, manifests, {4}, default_config())
    assert contents(plan) == [("default", (3,))]
    assert plan.kept_manifest_ids == ("coords", "wind")
    assert plan.closure == {3, 4}


def test_deleting_the_only_array_of_a_manifest_drops_the_manifest() -> None:
    arrays, manifests = parent()
    del arrays[5]
    plan = plan_manifests(arrays, manifests, {5}, default_config())
    assert plan.new_manifests == ()
    assert plan.kept_manifest_ids == ("coords", "ts")


def test_array_emptied_of_chunks_leaves_its_manifest() -> None:
    arrays, manifests = parent()
    arrays[2] = stats(2, "/lat", 10, 0)
    plan = plan_manifests(arrays, manifests, {2}, default_config())
    assert contents(plan) == [("coordinates", (1,))]


def test_created_array_joins_the_plan_without_touching_others() -> None:
    arrays, manifests = parent()
    arrays[6] = stats(6, "/rain", 200_000)
    plan = plan_manifests(arrays, manifests, {6}, default_config(), created=frozenset({6}))
    assert contents(plan) == [("default", (6,))]
    assert plan.kept_manifest_ids == ("coords", "ts", "wind")
    assert plan.closure == {6}


def test_array_with_refs_but_no_manifest_is_packed_even_if_not_listed_modified() -> None:
    arrays, manifests = parent()
    arrays[6] = stats(6, "/rain", 200_000)
    plan = plan_manifests(arrays, manifests, [], default_config())
    assert contents(plan) == [("default", (6,))]
    assert 6 in plan.closure


def test_kept_manifests_use_up_cardinality() -> None:
    # `coords` is kept, and coordinates has cardinality 1: a new small array cannot open a second
    # coordinates manifest, so it overflows to default.
    arrays, manifests = parent()
    arrays[6] = stats(6, "/depth", 30)
    plan = plan_manifests(arrays, manifests, {6}, default_config(), created=frozenset({6}))
    assert contents(plan) == [("default", (6,))]
    assert "coords" in plan.kept_manifest_ids


def test_touching_a_coordinate_repacks_all_coordinates() -> None:
    arrays, manifests = parent()
    arrays[6] = stats(6, "/depth", 30)
    plan = plan_manifests(arrays, manifests, {1, 6}, default_config(), created=frozenset({6}))
    assert contents(plan) == [("coordinates", (1, 2, 6))]
    assert plan.kept_manifest_ids == ("ts", "wind")


def test_recreated_array_rewrites_its_old_manifest() -> None:
    arrays, manifests = parent()
    arrays[4] = stats(4, "/salt", 10)  # deleted and created again under the same id
    plan = plan_manifests(arrays, manifests, {4}, default_config(), created=frozenset({4}))
    # Now small, /salt wants coordinates, but the kept `coords` manifest holds its only slot.
    assert contents(plan) == [("default", (3, 4))]
    assert plan.kept_manifest_ids == ("coords", "wind")
    assert plan.closure == {3, 4}


# --- determinism and odd configs ----------------------------------------------------------------


def test_plan_does_not_depend_on_input_order() -> None:
    arrays = [stats(i, f"/v{i % 7}/{i}", (i * 7919) % 30_000) for i in range(60)]
    manifests = [
        ExistingManifest(f"m{i}", "default", frozenset(range(i * 10, i * 10 + 10)))
        for i in range(6)
    ]
    expected = plan_manifests(by_id(*arrays), manifests, {3, 25}, default_config())
    rng = random.Random(0)
    for _ in range(5):
        rng.shuffle(arrays)
        modified: Iterable[int] = rng.sample([3, 25], 2)
        again = plan_manifests(by_id(*arrays), manifests, modified, default_config())
        assert again == expected


def test_manifests_ordered_by_set_then_content() -> None:
    config = parse_config(
        """
chunk-manifests:
  sets:
    - later: {max-manifest-size: 5}
    - first: {max-manifest-size: 5, overflow-to: later, cardinality: null}
  rules:
    - {path: /f/.*, target: first}
    - {target: later}
"""
    )
    arrays = by_id(stats(9, "/f/x", 5), stats(1, "/f/y", 5), stats(5, "/l/z", 5))
    plan = fresh_plan(arrays, config)
    assert plan.new_manifests == (
        PlannedManifest("later", (5,)),
        PlannedManifest("first", (1,)),
        PlannedManifest("first", (9,)),
    )


def test_hand_built_config_with_unknown_target_is_a_config_error() -> None:
    config = ManifestConfig(
        sets=(ManifestSet("default", 10, None, None, None),),
        rules=(Rule("missing", None, None, None),),
        preload=Preload(None, None, ()),
    )
    with pytest.raises(ConfigError, match="no manifest set named 'missing'"):
        fresh_plan(by_id(stats(1, "/a", 1)), config)

"""Hypothesis properties of the packing plan over random configs, snapshots and modifications."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from icechunk_spark.splitting import (
    ArrayStats,
    ExistingManifest,
    ManifestConfig,
    Plan,
    assign_set,
    closure,
    parse_config,
    plan_manifests,
)

MAX_ID = 20  # ids 0..MAX_ID-1; ids absent from a snapshot's arrays stand for deleted arrays
PATHS = st.sampled_from([".*", ".*/time", "/g0/.*", "/g1/v[0-9]", None])


@st.composite
def configs(draw: st.DrawFn) -> ManifestConfig:
    """Valid configs: sets overflow only to later sets (no loops), declared in any order."""
    names = [f"s{i}" for i in range(draw(st.integers(0, 3)))]
    sets = [
        {name: draw(set_settings(overflow=st.sampled_from([*names[i + 1 :], "default"])))}
        for i, name in enumerate(names)
    ]
    sets.append({"default": draw(set_settings(overflow=None))})
    rules = draw(st.lists(rule(st.sampled_from([*names, "default"])), max_size=4))
    data = {"chunk-manifests": {"sets": draw(st.permutations(sets)), "rules": rules}}
    return parse_config(data)


def set_settings(overflow: st.SearchStrategy[str] | None) -> st.SearchStrategy[dict[str, Any]]:
    limit = st.one_of(
        st.fixed_dictionaries({"max-manifest-size": st.integers(1, 60)}),
        st.fixed_dictionaries({"arrays-per-manifest": st.integers(1, 4)}),
    )
    if overflow is None:  # the default set
        return limit
    extra = st.fixed_dictionaries(
        {"overflow-to": overflow, "cardinality": st.none() | st.integers(1, 3)}
    )
    return st.builds(lambda a, b: {**a, **b}, limit, extra)


def rule(targets: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    bound = st.none() | st.integers(0, 100)
    bounds = st.tuples(bound, bound).map(
        lambda b: list(b) if None in b or b[0] <= b[1] else [b[1], b[0]]  # type: ignore[operator]
    )
    return st.fixed_dictionaries(
        {"target": targets},
        optional={"path": PATHS, "metadata-chunks": bounds, "initialized-chunks": bounds},
    )


def array_stats(ids: Sequence[int]) -> st.SearchStrategy[dict[int, ArrayStats]]:
    def one(array_id: int) -> st.SearchStrategy[ArrayStats]:
        path = f"/g{array_id % 3}/{'time' if array_id % 5 == 0 else f'v{array_id}'}"
        return st.builds(
            ArrayStats, st.just(array_id), st.just(path), st.integers(0, 100), st.integers(0, 80)
        )

    return st.fixed_dictionaries({i: one(i) for i in ids})


@st.composite
def snapshots(draw: st.DrawFn) -> dict[int, ArrayStats]:
    ids = draw(st.lists(st.integers(0, MAX_ID - 1), unique=True, max_size=MAX_ID))
    return draw(array_stats(sorted(ids)))


@st.composite
def parent_manifests(draw: st.DrawFn, config: ManifestConfig) -> list[ExistingManifest]:
    """Arbitrary membership: arrays may sit in several manifests, deleted ids may linger."""
    set_names = st.sampled_from([*(s.name for s in config.sets), "retired-set"])
    members = st.frozensets(st.integers(0, MAX_ID - 1), min_size=1, max_size=6)
    groups = draw(st.lists(st.tuples(set_names, members), max_size=8))
    return [ExistingManifest(f"m{i}", name, ids) for i, (name, ids) in enumerate(groups)]


def as_parent(plan: Plan, prefix: str) -> list[ExistingManifest]:
    return [
        ExistingManifest(f"{prefix}{i}", m.set_name, frozenset(m.array_ids))
        for i, m in enumerate(plan.new_manifests)
    ]


# --- the invariants -----------------------------------------------------------------------------


def check_placement(
    arrays: dict[int, ArrayStats], existing: list[ExistingManifest], plan: Plan
) -> None:
    """Every array with refs is in exactly one new manifest (closure) or kept ones (others)."""
    placed = Counter(i for m in plan.new_manifests for i in m.array_ids)
    kept = {m.manifest_id: m for m in existing if m.manifest_id in plan.kept_manifest_ids}
    in_kept = {i for m in kept.values() for i in m.array_ids}
    for array_id, stats in arrays.items():
        if stats.initialized_chunks == 0:
            assert placed[array_id] == 0
        elif array_id in plan.closure:
            assert placed[array_id] == 1 and array_id not in in_kept
        else:
            assert placed[array_id] == 0 and array_id in in_kept
    assert set(placed) <= set(arrays)  # deleted arrays are never written
    assert all(m.array_ids for m in plan.new_manifests)
    assert all(list(m.array_ids) == sorted(m.array_ids) for m in plan.new_manifests)


def check_kept(existing: list[ExistingManifest], modified: set[int], plan: Plan) -> None:
    """Kept manifests are exactly those holding no closure array, and the closure is closed."""
    assert plan.closure >= closure(modified, existing)
    expected = tuple(m.manifest_id for m in existing if not (m.array_ids & plan.closure))
    assert plan.kept_manifest_ids == expected
    assert closure(plan.closure, existing) == plan.closure


def check_limits(arrays: dict[int, ArrayStats], config: ManifestConfig, plan: Plan) -> None:
    """No bin exceeds its limit, except a lone oversized array in a set with nowhere to go."""
    for manifest in plan.new_manifests:
        manifest_set = config.set(manifest.set_name)
        if manifest_set.arrays_per_manifest is not None:
            assert len(manifest.array_ids) <= manifest_set.arrays_per_manifest
            continue
        assert manifest_set.max_manifest_size is not None
        size = sum(arrays[i].initialized_chunks for i in manifest.array_ids)
        lone_in_default = manifest_set.overflow_to is None and len(manifest.array_ids) == 1
        assert size <= manifest_set.max_manifest_size or lone_in_default


def check_cardinality(existing: list[ExistingManifest], config: ManifestConfig, plan: Plan) -> None:
    """New manifests of a set never exceed its cardinality minus its kept manifests."""
    new = Counter(m.set_name for m in plan.new_manifests)
    kept = Counter(m.set_name for m in existing if m.manifest_id in plan.kept_manifest_ids)
    for manifest_set in config.sets:
        if manifest_set.cardinality is not None:
            assert new[manifest_set.name] <= max(
                0, manifest_set.cardinality - kept[manifest_set.name]
            )


def check_sets_follow_rules(
    arrays: dict[int, ArrayStats], config: ManifestConfig, plan: Plan
) -> None:
    """An array lands in the set its rules chose or one down that set's overflow chain."""
    for manifest in plan.new_manifests:
        for array_id in manifest.array_ids:
            allowed: list[str] = []
            name: str | None = assign_set(arrays[array_id], config)
            while name is not None:
                allowed.append(name)
                name = config.set(name).overflow_to
            assert manifest.set_name in allowed


def check_all(
    arrays: dict[int, ArrayStats],
    existing: list[ExistingManifest],
    modified: set[int],
    config: ManifestConfig,
    plan: Plan,
) -> None:
    check_placement(arrays, existing, plan)
    check_kept(existing, modified, plan)
    check_limits(arrays, config, plan)
    check_cardinality(existing, config, plan)
    check_sets_follow_rules(arrays, config, plan)


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_plan_invariants_over_arbitrary_parents(data: st.DataObject) -> None:
    config = data.draw(configs())
    arrays = data.draw(snapshots())
    existing = data.draw(parent_manifests(config))
    modified = data.draw(st.sets(st.integers(0, MAX_ID - 1), max_size=6))
    created = (
        data.draw(st.frozensets(st.sampled_from(sorted(modified)))) if modified else frozenset()
    )
    plan = plan_manifests(arrays, existing, modified, config, created)
    check_all(arrays, existing, modified, config, plan)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_two_commits_keep_cardinality_for_the_whole_snapshot(data: st.DataObject) -> None:
    config = data.draw(configs())
    first = data.draw(snapshots())
    first_plan = plan_manifests(first, [], first, config, created=frozenset(first))
    check_all(first, [], set(first), config, first_plan)
    existing = as_parent(first_plan, "p")

    # Second commit: some arrays rewritten with new counts, some deleted, some created.
    second = dict(first)
    changed = data.draw(
        array_stats(
            data.draw(st.lists(st.sampled_from(sorted(first)), unique=True)) if first else []
        )
    )
    second.update(changed)
    deleted = data.draw(st.sets(st.sampled_from(sorted(first)))) if first else set()
    for array_id in deleted:
        second.pop(array_id)
    new_ids = sorted(set(range(MAX_ID)) - set(first))
    created = data.draw(
        array_stats(data.draw(st.lists(st.sampled_from(new_ids), unique=True)) if new_ids else [])
    )
    second.update(created)
    modified = set(changed) | deleted | set(created)
    plan = plan_manifests(second, existing, modified, config, created=frozenset(created))
    check_all(second, existing, modified, config, plan)

    totals = Counter(m.set_name for m in plan.new_manifests)
    totals.update(m.set_name for m in existing if m.manifest_id in plan.kept_manifest_ids)
    for manifest_set in config.sets:
        if manifest_set.cardinality is not None:
            assert totals[manifest_set.name] <= manifest_set.cardinality


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_plan_is_deterministic(data: st.DataObject) -> None:
    config = data.draw(configs())
    arrays = data.draw(snapshots())
    existing = data.draw(parent_manifests(config))
    modified = data.draw(st.lists(st.integers(0, MAX_ID - 1), max_size=6))
    plan = plan_manifests(arrays, existing, modified, config)
    shuffled = data.draw(st.permutations(list(arrays.items())))
    again = plan_manifests(dict(shuffled), existing, list(reversed(modified)), config)
    assert again == plan


@settings(max_examples=100, deadline=None)
@given(config=configs())
def test_config_round_trips(config: ManifestConfig) -> None:
    assert parse_config(config.to_dict()) == config
    assert parse_config(config.to_yaml()) == config

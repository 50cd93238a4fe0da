"""Tests for the fairness test oracles (tests/fairness_oracles.py): seed 001's
worked examples, independent reference implementations (the seed's literal
"rounds" max-min, a naive DRF scan) and property tests. The allocator and
simulator tests trust these functions, so they are tested as code."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairness_oracles
from fairness_oracles import (
    DRFAllocation,
    VectorSchedulable,
    compute_fair_share_vectors,
    dominant_share,
    drf,
    max_min_fair,
    weighted_max_min_fair,
)
from mesoslike.fairness import compute_fair_shares

pytestmark = pytest.mark.timeout(60)

MODULE_PATH = Path(fairness_oracles.__file__)
SEED_DRF_CAPACITY = {"cpus": 9, "mem": 18}
SEED_DRF_DEMANDS = {"A": {"cpus": 1, "mem": 4}, "B": {"cpus": 3, "mem": 1}}

modest = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------ reference oracles


def max_min_by_rounds(
    capacity: float, demands: dict[str, float], weights: dict[str, float] | None = None
) -> dict[str, float]:
    """Seed 001's first description, literally: split among the unsatisfied in
    proportion to weight, take back every excess, repeat with what came back."""
    weights = weights or {user: 1.0 for user in demands}
    allocation = {user: 0.0 for user in demands}
    unsatisfied = {user for user, demand in demands.items() if demand > 0}
    available = capacity
    while unsatisfied and available > 0:
        weight_sum = sum(weights[user] for user in unsatisfied)
        for user in unsatisfied:
            allocation[user] += available * weights[user] / weight_sum
        available = 0.0
        satisfied_now = {user for user in unsatisfied if allocation[user] >= demands[user]}
        for user in satisfied_now:
            available += allocation[user] - demands[user]
            allocation[user] = demands[user]
        unsatisfied -= satisfied_now
        if not satisfied_now:
            break
    return allocation


def next_task_fits(demand: dict[str, float], capacity: dict[str, float],
                   consumed: dict[str, float]) -> bool:
    return all(
        amount <= 0 or (capacity.get(kind, 0) > 0
                        and consumed.get(kind, 0) + amount <= capacity[kind])
        for kind, amount in demand.items()
    )


def drf_by_scanning(capacity, demands, weights=None, max_tasks=None) -> tuple[dict, list]:
    """DRF the slow, obvious way: every step, scan all users for the eligible
    one with the smallest (share, tasks, name)."""
    weights = weights or {}
    max_tasks = max_tasks or {}
    tasks = {user: 0 for user in demands}
    consumed = {kind: 0.0 for kind in capacity}
    order = []
    while True:
        eligible = [
            user for user in demands
            if tasks[user] < max_tasks.get(user, math.inf)
            and next_task_fits(demands[user], capacity, consumed)
        ]
        if not eligible:
            return tasks, order
        chosen = min(eligible, key=lambda user: (
            dominant_share(tasks[user], demands[user], capacity, weights.get(user, 1.0)),
            tasks[user], user))
        for kind, amount in demands[chosen].items():
            if amount > 0:
                consumed[kind] += amount
        tasks[chosen] += 1
        order.append(chosen)


# ------------------------------------------------------------ max-min examples


def test_classic_max_min_example():
    result = max_min_fair(10, {"a": 2, "b": 2.6, "c": 4, "d": 5})
    assert result == pytest.approx({"a": 2, "b": 2.6, "c": 2.7, "d": 2.7})


def test_max_min_equal_split_then_redistribute():
    # Round 1: 12/4 = 3 each; a gives back 2, b is exactly met.
    # Round 2: the 2 returned go to c and d, 1 each -> 4 and 4.
    demands = {"a": 1, "b": 3, "c": 5, "d": 8}
    assert max_min_fair(12, demands) == pytest.approx({"a": 1, "b": 3, "c": 4, "d": 4})
    assert max_min_by_rounds(12, demands) == pytest.approx({"a": 1, "b": 3, "c": 4, "d": 4})


def test_max_min_everyone_satisfied_and_empty_and_zero_capacity():
    assert max_min_fair(100, {"a": 1, "b": 2}) == {"a": 1.0, "b": 2.0}
    assert max_min_fair(5, {}) == {}
    assert max_min_fair(0, {"a": 1, "b": 0}) == {"a": 0.0, "b": 0.0}


def test_max_min_infinite_demand_takes_the_rest():
    assert max_min_fair(10, {"greedy": math.inf, "small": 1}) == {"greedy": 9.0, "small": 1.0}


def test_max_min_result_keeps_input_order():
    assert list(max_min_fair(10, {"z": 9, "a": 1, "m": 5})) == ["z", "a", "m"]


def test_weighted_max_min_by_hand():
    # Weights 1:2:2 split 10 as 2, 4, 4; b needs only 2, so its 2 spare go to
    # a and c in ratio 1:2 -> a = 2 + 2/3, c = 4 + 4/3.
    result = weighted_max_min_fair(10, {"a": 5, "b": 2, "c": 10}, {"a": 1, "b": 2, "c": 2})
    assert result == pytest.approx({"a": 8 / 3, "b": 2, "c": 16 / 3})


def test_weighted_max_min_small_user_gives_back_to_heavy_user():
    # Split 8 as 2 : 6; a needs 1, so b gets 6 + 1.
    assert weighted_max_min_fair(8, {"a": 1, "b": 100}, {"a": 1, "b": 3}) == {"a": 1.0, "b": 7.0}


def test_weighted_max_min_missing_weight_defaults_to_one():
    result = weighted_max_min_fair(9, {"a": 100, "b": 100}, {"b": 2})
    assert result == pytest.approx({"a": 3, "b": 6})


# --------------------------------------------------------------- max-min props

user_names = st.sampled_from([f"u{index}" for index in range(10)])
quantities = st.floats(min_value=0, max_value=100, allow_nan=False)
demand_values = st.one_of(quantities, quantities, quantities, st.just(math.inf))
demand_maps = st.dictionaries(user_names, demand_values, min_size=1, max_size=8)
capacities = st.floats(min_value=0, max_value=300, allow_nan=False)
weight_values = st.floats(min_value=0.1, max_value=10, allow_nan=False)


def assert_fits_capacity_and_demands(capacity, demands, allocation):
    assert set(allocation) == set(demands)
    for user, amount in allocation.items():
        assert 0 <= amount <= demands[user]
    assert sum(allocation.values()) <= capacity * (1 + 1e-9) + 1e-9
    if sum(demands.values()) <= capacity:
        assert allocation == demands
    else:
        assert sum(allocation.values()) == pytest.approx(capacity, rel=1e-9, abs=1e-9)


@modest
@given(capacities, demand_maps)
def test_max_min_respects_capacity_and_demands(capacity, demands):
    assert_fits_capacity_and_demands(capacity, demands, max_min_fair(capacity, demands))


@modest
@given(capacities, demand_maps)
def test_max_min_is_max_min_optimal(capacity, demands):
    allocation = max_min_fair(capacity, demands)
    largest = max(allocation.values())
    for user, amount in allocation.items():
        if amount < demands[user]:
            assert amount == pytest.approx(largest, rel=1e-9, abs=1e-12)


@modest
@given(capacities, demand_maps)
def test_max_min_matches_the_rounds_description(capacity, demands):
    assert max_min_fair(capacity, demands) == pytest.approx(
        max_min_by_rounds(capacity, demands), rel=1e-9, abs=1e-9)


@modest
@given(capacities, demand_maps, weight_values)
def test_equal_weights_reduce_to_plain_max_min(capacity, demands, weight):
    weights = {user: weight for user in demands}
    assert weighted_max_min_fair(capacity, demands, weights) == pytest.approx(
        max_min_fair(capacity, demands), rel=1e-9, abs=1e-9)


@st.composite
def weighted_problems(draw):
    demands = draw(demand_maps)
    weights = {user: draw(weight_values) for user in demands}
    return draw(capacities), demands, weights


@modest
@given(weighted_problems())
def test_weighted_max_min_equalizes_normalized_allocations(problem):
    capacity, demands, weights = problem
    allocation = weighted_max_min_fair(capacity, demands, weights)
    assert_fits_capacity_and_demands(capacity, demands, allocation)
    levels = [allocation[user] / weights[user] for user in demands
              if allocation[user] < demands[user]]
    for level in levels:
        assert level == pytest.approx(levels[0], rel=1e-9, abs=1e-12)
    if levels:
        # A satisfied user never got more per unit of weight than the others.
        for user in demands:
            assert allocation[user] / weights[user] <= levels[0] * (1 + 1e-9) + 1e-12


@modest
@given(weighted_problems())
def test_weighted_max_min_matches_the_rounds_description(problem):
    capacity, demands, weights = problem
    assert weighted_max_min_fair(capacity, demands, weights) == pytest.approx(
        max_min_by_rounds(capacity, demands, weights), rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------- DRF examples


def test_drf_seed_example():
    result = drf(SEED_DRF_CAPACITY, SEED_DRF_DEMANDS)
    assert isinstance(result, DRFAllocation)
    assert result.tasks == {"A": 3, "B": 2}
    assert result.dominant_shares["A"] == pytest.approx(2 / 3)
    assert result.dominant_shares["B"] == pytest.approx(2 / 3)
    assert result.consumed == {"cpus": 9, "mem": 14}
    # Equal shares at the start: fewer tasks, then the name, decides (A first).
    assert result.order == ["A", "B", "A", "B", "A"]


def test_weighted_drf_small_cluster_by_hand():
    # Weight 2 halves B's share: B = 1/6, 1/3 after 1, 2 tasks; A = 2/9 per task.
    # 0/0 -> A (name); A 2/9 vs B 0 -> B; B 1/6 < 2/9 -> B; A 2/9 < 1/3 -> A
    # (cpus 8 used, B's 3 no longer fit); A -> 3 tasks, cpus full.
    result = drf(SEED_DRF_CAPACITY, SEED_DRF_DEMANDS, weights={"B": 2})
    assert result.order == ["A", "B", "B", "A", "A"]
    assert result.tasks == {"A": 3, "B": 2}
    assert result.dominant_shares == pytest.approx({"A": 2 / 3, "B": 1 / 3})


def test_weighted_drf_paper_variant_shifts_tasks_to_heavier_user():
    # 10x the seed cluster. Unweighted: x + 3y = 90 and 4x/180 = 3y/90 give
    # (30, 20). With B's weight 2: x/45 = y/60 and x + 3y = 90 give (18, 24),
    # both weighted dominant shares 0.4, CPUs exhausted.
    capacity = {"cpus": 90, "mem": 180}
    assert drf(capacity, SEED_DRF_DEMANDS).tasks == {"A": 30, "B": 20}
    weighted = drf(capacity, SEED_DRF_DEMANDS, weights={"B": 2})
    assert weighted.tasks == {"A": 18, "B": 24}
    assert weighted.dominant_shares == pytest.approx({"A": 0.4, "B": 0.4})
    assert weighted.consumed == {"cpus": 90, "mem": 96}


def test_drf_skips_a_user_that_no_longer_fits_and_keeps_filling_others():
    result = drf({"cpus": 10}, {"big": {"cpus": 6}, "small": {"cpus": 1}})
    assert result.tasks == {"big": 1, "small": 4}


def test_drf_max_tasks_caps_a_user():
    result = drf(SEED_DRF_CAPACITY, SEED_DRF_DEMANDS, max_tasks={"A": 1})
    assert result.tasks == {"A": 1, "B": 2}


def test_drf_zero_demand_user_allowed_with_max_tasks():
    result = drf({"cpus": 4}, {"free": {"cpus": 0}, "a": {"cpus": 1}}, max_tasks={"free": 3})
    assert result.tasks == {"free": 3, "a": 4}
    assert result.dominant_shares["free"] == 0.0


def test_drf_kind_without_capacity_never_fits_and_does_not_count():
    result = drf({"cpus": 4, "gpus": 0},
                 {"gpu_user": {"cpus": 1, "gpus": 1}, "cpu_user": {"cpus": 1, "gpus": 0}})
    assert result.tasks == {"gpu_user": 0, "cpu_user": 4}
    assert result.dominant_shares["cpu_user"] == 1.0
    assert result.consumed == {"cpus": 4, "gpus": 0}


def test_dominant_share_arithmetic_order():
    # (tasks * demand) / capacity / weight, not tasks * (demand / capacity):
    # 3 * 0.1 / 0.3 is 1.0000000000000002, 3 * (0.1 / 0.3) is 1.0.
    assert dominant_share(3, {"cpus": 0.1}, {"cpus": 0.3}) == (3 * 0.1) / 0.3
    assert dominant_share(3, {"cpus": 0.1}, {"cpus": 0.3}) != 3 * (0.1 / 0.3)
    assert dominant_share(2, {"cpus": 1, "mem": 4}, {"cpus": 9, "mem": 18}, 2.0) == (8 / 18) / 2
    assert dominant_share(5, {"gpus": 1}, {"cpus": 9}) == 0.0


# ------------------------------------------------------------------- DRF props

kinds = ["cpus", "mem", "disk", "gpus"]


@st.composite
def drf_problems(draw, integer: bool = True):
    # Positive fractional demands stay >= 0.25: a demand of 1e-300 would mean
    # ~1e300 tasks (DRF hands them out one at a time).
    amounts = (st.integers(min_value=0, max_value=8) if integer
               else st.one_of(st.just(0.0), st.floats(min_value=0.25, max_value=8)))
    capacity = draw(st.dictionaries(st.sampled_from(kinds[:3]),
                                    st.integers(min_value=0, max_value=40), max_size=3))
    users = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=4, unique=True))
    demands = {user: draw(st.dictionaries(st.sampled_from(kinds), amounts, max_size=4))
               for user in users}
    weights = {user: draw(st.integers(min_value=1, max_value=3))
               for user in users if draw(st.booleans())}
    max_tasks = {user: draw(st.integers(min_value=0, max_value=10))
                 for user in users
                 if draw(st.booleans()) or not any(v > 0 for v in demands[user].values())}
    return capacity, demands, weights or None, max_tasks or None


def check_drf_end_state(capacity, demands, max_tasks, result):
    max_tasks = max_tasks or {}
    for kind, total in capacity.items():
        expected = sum(result.tasks[user] * demands[user].get(kind, 0) for user in demands)
        assert result.consumed[kind] == pytest.approx(expected)
        assert result.consumed[kind] <= total * (1 + 1e-12)
    for user in demands:
        assert (result.tasks[user] == max_tasks.get(user, math.inf)
                or not next_task_fits(demands[user], capacity, result.consumed))
    assert len(result.order) == sum(result.tasks.values())


@modest
@given(drf_problems())
def test_drf_respects_capacity_and_stops_only_when_nothing_fits(problem):
    capacity, demands, weights, max_tasks = problem
    check_drf_end_state(capacity, demands, max_tasks, drf(capacity, demands, weights, max_tasks))


@modest
@given(drf_problems(integer=False))
def test_drf_with_fractional_demands_respects_capacity(problem):
    capacity, demands, weights, max_tasks = problem
    check_drf_end_state(capacity, demands, max_tasks, drf(capacity, demands, weights, max_tasks))


@modest
@given(drf_problems())
def test_drf_matches_naive_scan(problem):
    capacity, demands, weights, max_tasks = problem
    result = drf(capacity, demands, weights, max_tasks)
    assert (result.tasks, result.order) == drf_by_scanning(capacity, demands, weights, max_tasks)
    for user in demands:
        weight = (weights or {}).get(user, 1.0)
        assert result.dominant_shares[user] == dominant_share(
            result.tasks[user], demands[user], capacity, weight)


@modest
@given(drf_problems(), st.randoms(use_true_random=False))
def test_drf_is_deterministic_whatever_the_input_order(problem, rng):
    capacity, demands, weights, max_tasks = problem
    first = drf(capacity, demands, weights, max_tasks)
    assert drf(capacity, demands, weights, max_tasks) == first
    users = list(demands)
    rng.shuffle(users)
    kinds_order = list(capacity)
    rng.shuffle(kinds_order)
    shuffled = drf({kind: capacity[kind] for kind in kinds_order},
                   {user: demands[user] for user in users}, weights, max_tasks)
    assert shuffled.tasks == first.tasks
    assert shuffled.order == first.order
    assert shuffled.consumed == first.consumed
    assert shuffled.dominant_shares == first.dominant_shares



# ------------------------------------------------------------------ validation


@pytest.mark.parametrize("call", [
    lambda: max_min_fair(-1, {"a": 1}),
    lambda: max_min_fair(math.nan, {"a": 1}),
    lambda: max_min_fair(math.inf, {"a": 1}),
    lambda: max_min_fair(1, {"a": -1}),
    lambda: max_min_fair(1, {"a": math.nan}),
    lambda: max_min_fair(1, {"a": True}),
    lambda: max_min_fair(1, {"": 1}),
    lambda: weighted_max_min_fair(1, {"a": 1}, {"a": 0}),
    lambda: weighted_max_min_fair(1, {"a": 1}, {"a": -2}),
    lambda: weighted_max_min_fair(1, {"a": 1}, {"a": math.nan}),
    lambda: weighted_max_min_fair(1, {"a": 1}, {"ghost": 1}),
    lambda: drf({"cpus": -1}, {"a": {"cpus": 1}}),
    lambda: drf({"cpus": math.nan}, {"a": {"cpus": 1}}),
    lambda: drf({"cpus": math.inf}, {"a": {"cpus": 1}}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": -1}}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": math.nan}}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 1}}, weights={"a": 0}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 1}}, weights={"b": 1}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 1}}, max_tasks={"a": -1}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 1}}, max_tasks={"a": 1.5}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 1}}, max_tasks={"b": 1}),
    lambda: drf({"cpus": 1}, {"a": {"cpus": 0, "mem": 0}}),
    lambda: drf({"cpus": 1}, {"a": {}}),
    lambda: VectorSchedulable("a", weight=-1),
    lambda: VectorSchedulable("a", min_share={"cpus": -1}),
    lambda: compute_fair_share_vectors({"cpus": math.nan}, [VectorSchedulable("a")]),
])
def test_invalid_inputs_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_all_zero_demand_error_says_why():
    with pytest.raises(ValueError, match="infinitely many tasks"):
        drf({"cpus": 1}, {"lazy": {"cpus": 0}})


# ------------------------------------------------------------- vector shares


def test_vector_shares_run_per_kind():
    result = compute_fair_share_vectors(
        {"cpus": 8, "mem": 64},
        [VectorSchedulable("web", max_share={"cpus": 2}),
         VectorSchedulable("batch", weight=3, min_share={"mem": 40}),
         VectorSchedulable("idle", active=False)])
    assert result["web"] == pytest.approx({"cpus": 2, "mem": 16}, rel=1e-6)
    assert result["batch"] == pytest.approx({"cpus": 6, "mem": 48}, rel=1e-6)
    assert result["idle"] == {"cpus": 0.0, "mem": 0.0}
    steady = compute_fair_share_vectors(
        {"cpus": 10}, [VectorSchedulable("a"), VectorSchedulable("idle", active=False)],
        steady=True)
    assert steady["a"] == pytest.approx({"cpus": 5}, rel=1e-6)
    assert steady["idle"] == pytest.approx({"cpus": 5}, rel=1e-6)


def test_vector_schedulable_copies_its_mappings_and_ignores_unknown_kinds():
    limits = {"cpus": 1}
    sched = VectorSchedulable("a", max_share=limits)
    limits["cpus"] = 100
    assert compute_fair_share_vectors({"cpus": 4}, [sched]) == {"a": {"cpus": 1.0}}
    ghost = VectorSchedulable("b", min_share={"gpus": 3})
    assert compute_fair_share_vectors({"cpus": 4}, [ghost]) == {"b": {"cpus": 4.0}}
    assert hash(sched) == hash(VectorSchedulable("a", max_share={"cpus": 7}))


@modest
@given(st.dictionaries(st.sampled_from(kinds), st.floats(min_value=0, max_value=100,
                                                         allow_nan=False), max_size=4),
       st.lists(weight_values, min_size=1, max_size=4), st.booleans())
def test_vector_shares_equal_scalar_shares_kind_by_kind(total, weights, steady):
    vectors = [VectorSchedulable(f"s{i}", weight=w, max_share={"cpus": 10 * i})
               for i, w in enumerate(weights)]
    result = compute_fair_share_vectors(total, vectors, steady=steady)
    for kind, amount in total.items():
        scalar = compute_fair_shares(amount, [v.for_kind(kind) for v in vectors], steady=steady)
        assert {name: shares[kind] for name, shares in result.items()} == scalar


# -------------------------------------------------------- purity and docs


def test_module_imports_only_pure_standard_library_and_the_fairness_core():
    forbidden = {"random", "time", "datetime", "os", "sys", "io", "socket", "secrets",
                 "pathlib", "subprocess", "threading", "asyncio", "logging"}
    tree = ast.parse(MODULE_PATH.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            imported.add(node.module)
    assert {name.split(".")[0] for name in imported} - {"__future__", "mesoslike"} <= set(sys.stdlib_module_names)
    assert {name for name in imported if name.startswith("mesoslike")} == {"mesoslike.fairness"}
    assert not {name.split(".")[0] for name in imported} & forbidden


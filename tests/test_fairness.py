"""Tests for mesoslike.fairness (YARN fair shares, flat and down a queue
tree): worked examples, an exact piecewise-linear solver as an independent
reference, and property tests. The test oracles (max-min, DRF, per-kind
shares) are tested in tests/test_fairness_oracles.py."""

from __future__ import annotations

import ast
import doctest
import math
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fairness_oracles
from mesoslike import fairness
from mesoslike.fairness import FairShareQueue, Schedulable, compute_fair_shares, hierarchical_fair_shares

pytestmark = pytest.mark.timeout(60)

MODULE_PATH = Path(fairness.__file__)
DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "fairness.rst"

modest = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------ reference oracles


def exact_fair_ratio(items: list[tuple[float, float, float]], target: float) -> float:
    """Smallest R with sum(clamp(w*R, lo, hi)) >= target, found exactly: the
    sum is piecewise linear with breakpoints at lo/w and hi/w."""
    def used(ratio: float) -> float:
        return sum(min(max(w * ratio, lo), hi) for w, lo, hi in items)

    if used(0.0) >= target:
        return 0.0
    breakpoints = sorted({lo / w for w, lo, _ in items}
                         | {hi / w for w, _, hi in items if math.isfinite(hi)})
    previous = 0.0
    for point in breakpoints:
        if used(point) >= target:
            return previous + (target - used(previous)) * (point - previous) / (
                used(point) - used(previous))
        previous = point
    slope = sum(w for w, _, hi in items if math.isinf(hi))
    if slope == 0:  # every share is capped: the target is out of reach, R stops at the last cap
        return previous
    return previous + (target - used(previous)) / slope


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize("call", [
    lambda: Schedulable("a", weight=-1),
    lambda: Schedulable("a", min_share=math.nan),
    lambda: Schedulable("a", min_share=math.inf),
    lambda: Schedulable("a", max_share=-1),
    lambda: Schedulable("a", active=1),
    lambda: Schedulable(""),
    lambda: compute_fair_shares(-1, [Schedulable("a")]),
    lambda: compute_fair_shares(math.inf, [Schedulable("a")]),
    lambda: compute_fair_shares(1, [Schedulable("a"), Schedulable("a")]),
    lambda: compute_fair_shares(1, [Schedulable("a")], iterations=-1),
    lambda: FairShareQueue("root", children=(FairShareQueue("x"), FairShareQueue("x"))),
    lambda: FairShareQueue("root", children=(FairShareQueue("a/b"),)),
    lambda: FairShareQueue("root", children=("a",)),
])
def test_invalid_inputs_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


# ------------------------------------------------------------ YARN fair shares


def shares_of(total, *schedulables, steady=False, **kwargs):
    return compute_fair_shares(total, list(schedulables), steady=steady, **kwargs)


def test_yarn_weights_split_proportionally():
    result = shares_of(100, Schedulable("a"), Schedulable("b"), Schedulable("c", weight=2))
    # 4R = 100 is hit exactly by the bisection (R = 25), so no rounding error.
    assert result == {"a": 25.0, "b": 25.0, "c": 50.0}


def test_yarn_min_share_lifts_one():
    result = shares_of(100, Schedulable("a", min_share=40), Schedulable("b"), Schedulable("c"))
    assert result == pytest.approx({"a": 40, "b": 30, "c": 30}, rel=1e-6)


def test_yarn_max_share_caps_one_and_redistributes():
    result = shares_of(100, Schedulable("a", max_share=10), Schedulable("b"), Schedulable("c"))
    assert result == pytest.approx({"a": 10, "b": 45, "c": 45}, rel=1e-6)


def test_yarn_total_max_share_bounds_what_is_handed_out():
    result = shares_of(100, Schedulable("a", max_share=10), Schedulable("b", max_share=20))
    assert result == {"a": 10.0, "b": 20.0}


def test_yarn_inactive_gets_nothing_now_but_a_steady_share():
    queues = [Schedulable("a"), Schedulable("b", active=False), Schedulable("c")]
    assert compute_fair_shares(90, queues) == pytest.approx({"a": 45, "b": 0, "c": 45}, rel=1e-6)
    assert compute_fair_shares(90, queues, steady=True) == pytest.approx(
        {"a": 30, "b": 30, "c": 30}, rel=1e-6)


def test_yarn_weight_zero_gets_its_min_share_and_max_zero_gets_nothing():
    result = shares_of(100, Schedulable("fixed", weight=0, min_share=20),
                       Schedulable("none", weight=0), Schedulable("off", min_share=5, max_share=0),
                       Schedulable("b"), Schedulable("c"))
    assert result == pytest.approx({"fixed": 20, "none": 0, "off": 0, "b": 40, "c": 40}, rel=1e-6)


def test_yarn_min_shares_are_honoured_beyond_the_total():
    result = shares_of(10, Schedulable("a", min_share=8), Schedulable("b", min_share=8))
    assert result == pytest.approx({"a": 8, "b": 8}, rel=1e-6)


def test_yarn_max_share_wins_over_larger_min_share():
    assert shares_of(100, Schedulable("a", min_share=50, max_share=5))["a"] == 5.0


def test_yarn_nothing_to_distribute_gives_min_shares():
    assert shares_of(0, Schedulable("a", min_share=3), Schedulable("b")) == {"a": 3.0, "b": 0.0}


@pytest.mark.parametrize(("iterations", "expected"), [
    # R doubles 1, 2, ..., 64 until 2R >= 100; then bisection of [0, 64]:
    # 32 (64 < 100, raise left), 48 (96, left), 56 (112, lower right).
    (0, 64.0), (1, 64.0), (2, 64.0), (3, 56.0),
    # ... 52 (104, right), 50 (exactly 100: stop early).
    (25, 50.0),
])
def test_yarn_doubling_then_bisection_steps(iterations, expected):
    result = shares_of(100, Schedulable("a"), Schedulable("b"), iterations=iterations)
    assert result == {"a": expected, "b": expected}


def test_yarn_doubling_starts_at_one():
    # 2 * 1 >= 1 already: no doubling, so without bisection R stays 1.
    assert shares_of(1, Schedulable("a"), Schedulable("b"), iterations=0) == {"a": 1.0, "b": 1.0}
    assert shares_of(3, Schedulable("a"), Schedulable("b"), iterations=0) == {"a": 2.0, "b": 2.0}


def test_yarn_shares_are_floats_not_truncated():
    result = shares_of(10, Schedulable("a"), Schedulable("b"), Schedulable("c"))
    assert sum(result.values()) == pytest.approx(10, rel=1e-6)
    assert result["a"] == pytest.approx(10 / 3, rel=1e-6)


@st.composite
def fair_share_problems(draw):
    count = draw(st.integers(min_value=1, max_value=6))
    schedulables = []
    for index in range(count):
        min_share = draw(st.floats(min_value=0, max_value=60, allow_nan=False))
        extra = draw(st.one_of(st.just(math.inf),
                               st.floats(min_value=0, max_value=200, allow_nan=False)))
        schedulables.append(Schedulable(
            f"q{index}", weight=draw(st.floats(min_value=0.05, max_value=10, allow_nan=False)),
            min_share=min_share, max_share=min_share + extra, active=draw(st.booleans())))
    total = draw(st.floats(min_value=0, max_value=1000, allow_nan=False))
    return total, schedulables, draw(st.booleans())


def competing(schedulables, steady):
    return [s for s in schedulables if s.max_share > 0 and (steady or s.active)]


@modest
@given(fair_share_problems())
def test_fair_shares_fill_the_total_within_bounds(problem):
    total, schedulables, steady = problem
    players = competing(schedulables, steady)
    assume(sum(s.min_share for s in players) <= total)
    shares = compute_fair_shares(total, schedulables, steady=steady)
    tolerance = 1e-6 * (total + max(s.weight for s in schedulables) + 1)
    for sched in schedulables:
        if sched in players:
            assert sched.min_share <= shares[sched.name] <= sched.max_share
        else:
            assert shares[sched.name] == 0.0
    expected = min(total, sum(s.max_share for s in players))
    assert sum(shares.values()) == pytest.approx(expected, abs=tolerance * len(schedulables))


@modest
@given(fair_share_problems())
def test_fair_shares_match_exact_piecewise_linear_solution(problem):
    total, schedulables, steady = problem
    players = competing(schedulables, steady)
    assume(players)
    target = min(total, sum(s.max_share for s in players))
    ratio = exact_fair_ratio([(s.weight, s.min_share, s.max_share) for s in players], target)
    shares = compute_fair_shares(total, schedulables, steady=steady)
    tolerance = 1e-6 * (total + max(s.weight for s in schedulables) + 1)
    for sched in players:
        exact = min(max(sched.weight * ratio, sched.min_share), sched.max_share)
        assert shares[sched.name] == pytest.approx(exact, abs=tolerance)


# ------------------------------------------------------------------- hierarchy


def company(dev_active=None, sales_active=None) -> FairShareQueue:
    return FairShareQueue("root", children=[
        FairShareQueue("eng", weight=2, children=(
            FairShareQueue("prod", weight=3), FairShareQueue("dev", active=dev_active))),
        FairShareQueue("sales", active=sales_active),
    ])


def test_two_level_hierarchy():
    result = hierarchical_fair_shares(company(), 120)
    assert list(result) == ["", "eng", "eng/prod", "eng/dev", "sales"]
    assert result == pytest.approx(
        {"": 120, "eng": 80, "eng/prod": 60, "eng/dev": 20, "sales": 40}, rel=1e-6)


def test_hierarchy_inactive_leaves_in_instantaneous_and_steady_modes():
    tree = company(dev_active=False, sales_active=False)
    now = hierarchical_fair_shares(tree, 120)
    assert now == pytest.approx(
        {"": 120, "eng": 120, "eng/prod": 120, "eng/dev": 0, "sales": 0}, rel=1e-6)
    steady = hierarchical_fair_shares(tree, 120, steady=True)
    assert steady == pytest.approx(
        {"": 120, "eng": 80, "eng/prod": 60, "eng/dev": 20, "sales": 40}, rel=1e-6)


def test_hierarchy_parent_activity_derives_from_children_unless_given():
    idle_eng = FairShareQueue("root", children=(
        FairShareQueue("eng", children=(FairShareQueue("prod", active=False),)),
        FairShareQueue("sales")))
    assert hierarchical_fair_shares(idle_eng, 10) == pytest.approx(
        {"": 10, "eng": 0, "eng/prod": 0, "sales": 10}, rel=1e-6)
    forced = FairShareQueue("root", children=(
        FairShareQueue("eng", active=False, children=(FairShareQueue("prod"),)),
        FairShareQueue("sales")))
    assert hierarchical_fair_shares(forced, 10) == pytest.approx(
        {"": 10, "eng": 0, "eng/prod": 0, "sales": 10}, rel=1e-6)


def test_hierarchy_max_share_of_parent_caps_children():
    tree = FairShareQueue("root", children=(
        FairShareQueue("eng", max_share=30, children=(FairShareQueue("a"), FairShareQueue("b"))),
        FairShareQueue("ops")))
    assert hierarchical_fair_shares(tree, 100) == pytest.approx(
        {"": 100, "eng": 30, "eng/a": 15, "eng/b": 15, "ops": 70}, rel=1e-6)


@st.composite
def queue_trees(draw, depth=0):
    children = ()
    if depth < 2 and draw(st.booleans()):
        count = draw(st.integers(min_value=1, max_value=3))
        children = tuple(draw(queue_trees(depth + 1)) for _ in range(count))
        children = tuple(FairShareQueue(f"c{i}", weight=child.weight, active=child.active,
                                        children=child.children)
                         for i, child in enumerate(children))
    return FairShareQueue("q", weight=draw(st.integers(min_value=1, max_value=4)),
                          active=draw(st.sampled_from([None, None, True, False]))
                          if not children else None,
                          children=children)


@modest
@given(queue_trees(), st.floats(min_value=0, max_value=1000, allow_nan=False), st.booleans())
def test_hierarchy_children_split_their_parent_share(root, total, steady):
    # No min or max shares: each parent's share goes entirely to its competing
    # children (all of them in steady mode, the active ones otherwise).
    shares = hierarchical_fair_shares(root, total, steady=steady)

    def walk(queue, path):
        kids = [(child, f"{path}/{child.name}" if path else child.name)
                for child in queue.children]
        handed_out = sum(shares[child_path] for _, child_path in kids)
        if any(steady or is_active(child) for child, _ in kids):
            assert handed_out == pytest.approx(shares[path], rel=1e-6, abs=1e-6)
        else:
            assert handed_out == 0.0
        for child, child_path in kids:
            walk(child, child_path)

    walk(root, "")


def is_active(queue: FairShareQueue) -> bool:
    if queue.active is not None:
        return queue.active
    return not queue.children or any(is_active(child) for child in queue.children)


# -------------------------------------------------------- purity and docs


def test_module_imports_only_pure_standard_library():
    forbidden = {"random", "time", "datetime", "os", "sys", "io", "socket", "secrets",
                 "pathlib", "subprocess", "threading", "asyncio", "logging", "mesoslike"}
    tree = ast.parse(MODULE_PATH.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)
    assert not imported & forbidden


@pytest.mark.parametrize("module", [fairness, fairness_oracles], ids=["fairness", "fairness_oracles"])
def test_public_functions_have_docstrings_stating_complexity(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type):
            assert obj.__doc__ and "Complexity" in obj.__doc__, name


@pytest.mark.parametrize("module", [fairness, fairness_oracles], ids=["fairness", "fairness_oracles"])
def test_module_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_docs_page_examples():
    assert DOCS_PATH.exists()
    result = doctest.testfile(str(DOCS_PATH), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import MesoslikeError
from mesoslike.resources import Resources, ResourcesError

pytestmark = pytest.mark.timeout(30)


def test_parse_and_str_round_trip():
    text = "cpus:4;mem:8192;disk:10240;ports:[31000-32000]"
    r = Resources.parse(text)
    assert str(r) == text
    assert Resources.parse(str(r)) == r
    assert r.get("cpus") == 4.0
    assert r.get("ports") == 1001.0
    assert r.ranges("ports") == ((31000, 32000),)
    assert r.get("gpus") == 0.0


def test_parse_merges_repeats_ranges_and_whitespace():
    r = Resources.parse(" cpus : 1 ; cpus:0.5;ports:[10-20, 21-30];ports:[40-41] ")
    assert r.get("cpus") == 1.5
    assert r.ranges("ports") == ((10, 30), (40, 41))
    assert str(r) == "cpus:1.5;ports:[10-30,40-41]"


def test_fixed_point_arithmetic_never_drifts():
    tenth = Resources.parse("cpus:0.1")
    total = Resources()
    for _ in range(10):
        total = total + tenth
    assert total == Resources.parse("cpus:1")
    assert Resources.parse("cpus:0.1") + Resources.parse("cpus:0.2") == Resources.parse("cpus:0.3")
    # quantities closer than half a thousandth are equal
    assert Resources(cpus=1.0001) == Resources(cpus=1)


def test_add_subtract_contains():
    a = Resources.parse("cpus:4;mem:8192;ports:[31000-32000]")
    b = Resources.parse("cpus:1;mem:1024;ports:[31000-31009]")
    assert a.contains(b)
    assert not b.contains(a)
    assert (a - b) + b == a
    assert (a - b).ranges("ports") == ((31010, 32000),)
    assert not a.contains(Resources.parse("gpus:1"))
    assert not a.contains(Resources.parse("ports:[30999-31000]"))


def test_subtraction_is_strict_and_clamped_variant_saturates():
    a = Resources.parse("cpus:1;mem:10")
    with pytest.raises(ResourcesError, match="not contained"):
        a - Resources.parse("cpus:2")
    assert a.subtract_clamped(Resources.parse("cpus:2;gpus:1")) == Resources.parse("mem:10")


def test_zero_is_absent_and_empty_is_falsy():
    assert Resources.parse("cpus:0;mem:1") == Resources.parse("mem:1")
    assert not Resources()
    assert Resources.parse("") == Resources()
    assert (Resources.parse("cpus:1") - Resources.parse("cpus:1")).is_empty()


def test_minimum_and_only():
    a = Resources.parse("cpus:4;mem:100;ports:[1-10]")
    b = Resources.parse("cpus:2;mem:200;ports:[5-20];gpus:1")
    assert a.minimum(b) == Resources.parse("cpus:2;mem:100;ports:[5-10]")
    assert a.only(["cpus"]) == Resources.parse("cpus:4")


def test_immutable_hashable_and_keyword_construction():
    r = Resources(cpus=1, mem=128)
    assert r == Resources.parse("cpus:1;mem:128")
    assert {r: 1}[Resources.parse("mem:128;cpus:1")] == 1
    with pytest.raises(AttributeError):
        r.foo = 1


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("cpus:-1", "must be >= 0"),
        ("cpus:nan", "finite"),
        ("cpus:inf", "finite"),
        ("cpus:abc", "bad quantity"),
        ("cpus", "expected name:value"),
        ("cpus:", "expected name:value"),
        ("1cpus:1", "bad resource name"),
        ("ports:[10-5]", "bad range"),
        ("ports:[10-20", "expected [lo-hi"),
        ("ports:[a-b]", "bad range"),
        ("ports:[1-2];ports:3", "both a scalar and a range"),
    ],
)
def test_bad_strings_raise_a_clear_error(text, fragment):
    with pytest.raises(ResourcesError, match=fragment.replace("[", r"\[")) as info:
        Resources.parse(text)
    assert isinstance(info.value, MesoslikeError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_bad_values_in_constructor(value):
    with pytest.raises(ResourcesError):
        Resources(cpus=value)


quantities = st.integers(min_value=0, max_value=10**7).map(lambda m: m / 1000)


def vectors(port_base):
    return st.builds(
        lambda c, m, g, lo, n: Resources({"cpus": c, "mem": m, "gpus": g},
                                         ranges={"ports": [(lo, lo + n)]} if n else None),
        quantities, quantities, quantities, st.integers(port_base, port_base + 1000), st.integers(0, 50),
    )


def test_ranges_are_sets_so_overlapping_addition_is_a_union():
    a = Resources.parse("ports:[1-10]")
    assert a + a == a


# ranges are sets, not multisets: the algebra below holds for disjoint ranges
@given(vectors(1000), vectors(5000))
def test_properties_of_arithmetic(a, b):
    assert Resources.parse(str(a)) == a
    assert (a + b).contains(a) and (a + b).contains(b)
    assert (a + b) - b == a
    assert a + b == b + a
    assert a.contains(a.minimum(b)) and b.contains(a.minimum(b))
    if a.contains(b):
        assert (a - b) + b == a
    else:
        with pytest.raises(ResourcesError):
            a - b


@given(st.lists(st.one_of(vectors(1000), vectors(1500), st.just(Resources())), max_size=6))
def test_sum_equals_adding_one_by_one(items):
    expected = Resources()
    for item in items:
        expected = expected + item
    assert Resources.sum(items) == expected
    assert Resources.sum(iter(items)) == expected


# ------------------------------------------- thousandths (what quota and the allocator use)
def test_millis_view_and_from_millis_round_trip():
    from mesoslike.resources import format_millis

    r = Resources.parse("cpus:1.5;mem:64;ports:[1-3]")
    assert dict(r.millis()) == {"cpus": 1500, "mem": 64000}
    assert r.range_names() == ["ports"]
    assert Resources.from_millis({"cpus": 1500, "gpus": 0}) == Resources.parse("cpus:1.5")
    for bad in ({"cpus": -1}, {"cpus": 1.5}, {"bad name": 1}, {"cpus": True}):
        with pytest.raises(ResourcesError):
            Resources.from_millis(bad)
    assert format_millis({"mem": 8000, "cpus": 2500, "gpus": 0}) == "cpus:2.5;gpus:0;mem:8"


def test_clipped_caps_named_scalars_only():
    r = Resources.parse("cpus:4;mem:4096;ports:[1-10]")
    assert r.clipped({}) is r
    assert r.clipped({"cpus": 5000}) is r  # nothing to cut
    assert r.clipped({"cpus": 1500, "gpus": 0}) == Resources.parse("cpus:1.5;mem:4096;ports:[1-10]")
    assert r.clipped({"cpus": 0}) == Resources.parse("mem:4096;ports:[1-10]")


# ------------------------------------------------ static reservations (issue 18 §4)
ISSUE_EXAMPLE = "cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096"


def test_reserved_kinds_parse_and_round_trip():
    r = Resources.parse(ISSUE_EXAMPLE)
    assert str(r) == "cpus:4;cpus(analytics):4;mem:4096;mem(analytics):4096"
    assert Resources.parse(str(r)) == r
    assert r.get("cpus") == 4.0 and r.get("cpus(analytics)") == 4.0
    assert r.reservation_roles() == ["analytics"]
    assert r.has_reservations() and not r.unreserved().has_reservations()
    assert Resources.parse("ports(a/b):[1-3,5-5]").ranges("ports(a/b)") == ((1, 3), (5, 5))


def test_reserved_and_unreserved_are_different_kinds():
    r = Resources.parse(ISSUE_EXAMPLE)
    assert Resources.parse("cpus:5").minimum(r) == Resources.parse("cpus:4")
    assert not r.contains(Resources.parse("cpus:5"))  # only 4 unreserved
    assert r.contains(Resources.parse("cpus:4;cpus(analytics):4"))
    assert r - Resources.parse("cpus(analytics):1") == Resources.parse(
        "cpus(analytics):3;mem(analytics):4096;cpus:4;mem:4096")


def test_reservation_views():
    r = Resources.parse(ISSUE_EXAMPLE + ";cpus(web):1;ports(web):[10-20];ports:[21-30]")
    assert r.stripped() == Resources.parse("cpus:9;mem:8192;ports:[10-30]")
    assert r.unreserved() == Resources.parse("cpus:4;mem:4096;ports:[21-30]")
    assert r.reserved("analytics") == Resources.parse("cpus(analytics):4;mem(analytics):4096")
    assert r.reserved() == Resources.parse("cpus(analytics):4;mem(analytics):4096;cpus(web):1;ports(web):[10-20]")
    assert r.allocatable_to("analytics/batch") == Resources.parse(ISSUE_EXAMPLE + ";ports:[21-30]")
    assert r.allocatable_to("analytics2") == r.unreserved()
    assert r.allocatable_to("*") == r.unreserved()
    plain = Resources.parse("cpus:1")
    assert plain.stripped() is plain and plain.allocatable_to("x") is plain and plain.reserved() == Resources()


def test_default_role_reservation_is_unreserved():
    assert Resources.parse("cpus(*):2;cpus:1") == Resources.parse("cpus:3")
    assert Resources({"cpus(*)": 1}) == Resources(cpus=1)


@pytest.mark.parametrize("text, message", [
    ("cpus(bad role):1", "bad reservation"),
    ("cpus():1", "bad reservation"),
    ("cpus(a*):1", "bad reservation"),
    ("cpus(/a):1", "empty path component"),
    ("cpus(a/../b):1", "reserved"),
    ("cpus(-a):1", "may not start with '-'"),
    ("cpus(a)(b):1", "reservation role without parentheses"),
    ("cpus(a(b)):1", "reservation role without parentheses"),
    ("cpus(a:1", "bad resource name"),
    ("(a):1", "bad resource name"),
    ("cpus(" + "a" * 256 + "):1", "at most 255"),
    ("cpus(a):1;cpus(a):[1-2]", "both a scalar and a range"),
    ("cpus:1;cpus(a):[1-2]", "cannot be both scalars and ranges"),
    ("cpus(a):-1", ">= 0"),
    ("cpus(a):6e14;cpus(a):6e14", "added up"),
])
def test_bad_reservations_are_refused_clearly(text, message):
    with pytest.raises(ResourcesError, match=message.replace("(", r"\(").replace("*", r"\*")):
        Resources.parse(text)


def test_reservations_are_checked_when_built_from_mappings_too():
    with pytest.raises(ResourcesError, match="bad reservation"):
        Resources({"cpus(a b)": 1})
    with pytest.raises(ResourcesError, match="bad reservation"):
        Resources.from_millis({"cpus(a b)": 1000})
    with pytest.raises(ResourcesError, match="scalars and ranges"):
        Resources({"ports": 1}, ranges={"ports(a)": [(1, 2)]})


def test_agent_adds_no_unreserved_kind_given_only_reserved(tmp_path):
    """``--resources "cpus(analytics):4;mem:1024"``: cpus are given (reserved),
    so the machine's cpus are not added unreserved; disk and ports are."""
    from mesoslike.agent.resources_probe import complete_resources
    total = complete_resources(Resources.parse("cpus(analytics):4;mem:1024"), tmp_path)
    assert total.get("cpus") == 0 and total.get("cpus(analytics)") == 4 and total.get("mem") == 1024
    assert total.get("disk") > 0 and total.ranges("ports") == ((31000, 32000),)


def test_a_task_on_reserved_resources_gets_their_limits():
    """Isolation sizes a container from reserved cpus and mem as from plain ones."""
    from mesoslike.agent.isolation import PosixIsolator
    container = PosixIsolator().create("t", Resources.parse("cpus(analytics):1.5;mem(analytics):128;mem:64"))
    assert container.cpus == 1.5 and container.mem_bytes == 192 * 1024 * 1024

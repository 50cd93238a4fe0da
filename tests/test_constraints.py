"""Marathon-style placement constraints (issue 18 §5): parsing, each
operator's semantics as Marathon documents them, and the per-value counts of
:class:`Placements`. The e2e runs of ``mesoslike run --constraint`` are in
tests/test_attributes_labels.py."""

import pytest

from mesoslike_frameworks.constraints import Constraint, ConstraintError, Placements, parse_constraints

pytestmark = pytest.mark.timeout(30)

RACKS = {"a1": {"rack": "r1"}, "a2": {"rack": "r1"}, "b1": {"rack": "r2"}, "c1": {"rack": "r3"}, "x": {}}


def placed_on(constraints, hosts):
    """Placements with one instance on each of ``hosts``."""
    placements = Placements(parse_constraints(constraints))
    for i, host in enumerate(hosts):
        placements.place(f"t-{i}", host, RACKS[host])
    return placements


def accepted(placements, hosts=RACKS):
    return sorted(host for host in hosts if placements.refusing(host, RACKS[host]) is None)


@pytest.mark.parametrize("text, expected", [
    ("hostname:UNIQUE", Constraint("hostname", "UNIQUE")),
    ("rack:group_by:3", Constraint("rack", "GROUP_BY", "3")),
    ("rack:LIKE:r[12]:x", Constraint("rack", "LIKE", "r[12]:x")),   # a regex may hold ':'
    ("rack:CLUSTER", Constraint("rack", "CLUSTER")),
])
def test_constraints_parse_as_field_operator_value(text, expected):
    assert Constraint.parse(text) == expected


@pytest.mark.parametrize("text, problem", [
    ("hostname", "expected FIELD:OPERATOR"),
    ("hostname:SOMETIMES", "unknown operator 'SOMETIMES'"),
    ("hostname:UNIQUE:x", "UNIQUE takes no value"),
    ("rack:LIKE", "LIKE needs a value"),
    ("rack:MAX_PER:0", "whole number >= 1"),
    ("rack:GROUP_BY:two", "whole number"),
    ("rack:LIKE:r[", "not a regular expression"),
    (":UNIQUE", "the field is empty"),
])
def test_a_bad_constraint_is_refused_with_what_is_wrong(text, problem):
    with pytest.raises(ConstraintError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        Constraint.parse(text)


def test_unique_takes_each_value_once():
    assert accepted(placed_on(["hostname:UNIQUE"], ["a1"])) == ["a2", "b1", "c1", "x"]
    assert accepted(placed_on(["rack:UNIQUE"], ["a1"])) == ["b1", "c1"]   # x has no rack: refused


def test_cluster_with_a_value_takes_only_that_value():
    assert accepted(placed_on(["rack:CLUSTER:r1"], [])) == ["a1", "a2"]
    assert accepted(placed_on(["hostname:CLUSTER:b1"], [])) == ["b1"]


def test_cluster_without_a_value_follows_the_first_instance():
    assert accepted(placed_on(["rack:CLUSTER"], [])) == ["a1", "a2", "b1", "c1"]
    assert accepted(placed_on(["rack:CLUSTER"], ["b1"])) == ["b1"]
    assert accepted(placed_on(["hostname:CLUSTER"], ["a2"])) == ["a2"]


def test_group_by_spreads_evenly_over_the_values_in_use():
    # a value with no instance is always accepted; one in use only while it has the fewest
    assert accepted(placed_on(["rack:GROUP_BY"], ["a1"])) == ["a1", "a2", "b1", "c1"]
    assert accepted(placed_on(["rack:GROUP_BY"], ["a1", "b1", "a2"])) == ["b1", "c1"]


def test_group_by_with_a_count_waits_for_that_many_values():
    # Marathon: with N given, a value in use is refused until N values are in use
    assert accepted(placed_on(["rack:GROUP_BY:3"], ["a1", "b1"])) == ["c1"]
    assert accepted(placed_on(["rack:GROUP_BY:3"], ["a1", "b1", "c1"])) == ["a1", "a2", "b1", "c1"]


def test_max_per_caps_each_value():
    assert accepted(placed_on(["rack:MAX_PER:2"], ["a1"])) == ["a1", "a2", "b1", "c1"]
    assert accepted(placed_on(["rack:MAX_PER:2"], ["a1", "a2"])) == ["b1", "c1"]


def test_like_and_unlike_match_the_whole_value_and_only_unlike_takes_a_missing_attribute():
    assert accepted(placed_on(["rack:LIKE:r[12]"], [])) == ["a1", "a2", "b1"]
    assert accepted(placed_on(["rack:LIKE:r"], [])) == []                 # a full match, not a search
    assert accepted(placed_on(["rack:UNLIKE:r[12]"], [])) == ["c1", "x"]
    assert accepted(placed_on(["hostname:LIKE:a.*"], [])) == ["a1", "a2"]


def test_every_constraint_must_accept_and_the_refusing_one_is_named():
    placements = placed_on(["rack:LIKE:r[12]", "hostname:UNIQUE"], ["a1"])
    assert accepted(placements) == ["a2", "b1"]
    assert placements.refusing("a1", RACKS["a1"]) == Constraint("hostname", "UNIQUE")
    assert placements.refusing("c1", RACKS["c1"]) == Constraint("rack", "LIKE", "r[12]")


def test_an_ended_instance_no_longer_counts():
    placements = placed_on(["hostname:UNIQUE", "rack:MAX_PER:1"], ["a1", "b1"])
    assert accepted(placements) == ["c1"]
    placements.remove("t-0")
    assert accepted(placements) == ["a1", "a2", "c1"]
    assert placements.counts(Constraint("rack", "MAX_PER", "1")) == {"r2": 1}
    placements.remove("unknown")   # ignored
    assert len(placements) == 1


def test_typed_attribute_values_compare_as_their_mesos_text():
    placements = Placements([Constraint("ports", "CLUSTER", "[1000-2000]"), Constraint("level", "LIKE", "[3-5]")])
    assert placements.refusing("h", {"ports": "[1000-2000]", "level": "4"}) is None
    assert placements.refusing("h", {"ports": "[1000-2001]", "level": "4"}) is not None


def test_a_constraint_is_a_frozen_value_of_its_three_fields_its_pattern_kept_beside_them():
    # a plain class with __slots__ (an attrs class before): compared, hashed and shown by field, operator
    # and value; the compiled pattern out of all three, and copies made anew (their pattern compiled)
    import copy
    import pickle

    like = Constraint("rack", "LIKE", "r[12]")
    assert like == Constraint(field="rack", operator="LIKE", value="r[12]") and like != Constraint("rack", "LIKE", "r1")
    assert hash(like) == hash(Constraint.parse("rack:LIKE:r[12]")) and like.__eq__("rack:LIKE:r[12]") is NotImplemented
    assert repr(like) == "Constraint(field='rack', operator='LIKE', value='r[12]')"
    assert repr(Constraint("hostname", "UNIQUE")) == "Constraint(field='hostname', operator='UNIQUE', value='')"
    for name in ("field", "value", "_pattern"):
        with pytest.raises(AttributeError):
            setattr(like, name, "x")
        with pytest.raises(AttributeError):
            delattr(like, name)
    for copied in (copy.copy(like), copy.deepcopy(like), pickle.loads(pickle.dumps(like))):
        assert copied == like and copied.accepts("r2", {}) and not copied.accepts("r3", {})
    assert Constraint("hostname", "UNIQUE")._pattern is None and like._pattern.pattern == "r[12]"
    match like:
        case Constraint(field, operator, value):
            assert (field, operator, value) == ("rack", "LIKE", "r[12]")
    with pytest.raises(TypeError):
        Constraint("rack", "LIKE", "r1", "extra")   # (the pattern is not a parameter)

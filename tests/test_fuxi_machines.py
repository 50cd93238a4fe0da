"""The first-fit indexes over a batch's machines (frameworks/mesoslike_frameworks/fuxi/machines.py)
against a brute-force walk, through shrinking and growing free room."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike_frameworks.fuxi.machines import Dims, FitScan, FitTree, Scope, fits_of, make_index, minus_of

pytestmark = pytest.mark.timeout(120)

DIMS = 3
vectors = st.tuples(*(st.integers(0, 6) for _ in range(DIMS)))
needs = st.tuples(*(st.integers(0, 6) for _ in range(DIMS))).filter(any)


def brute(free, need, start=0):
    for position in range(start, len(free)):
        if all(f >= n for f, n in zip(free[position], need)):
            return position
    return None


ops = st.lists(st.one_of(
    st.tuples(st.just("update"), st.integers(0, 99), vectors),
    st.tuples(st.just("query"), needs, st.integers(0, 99)),
    st.tuples(st.just("around"), needs, st.integers(0, 99)),
), max_size=60)


@given(st.lists(vectors, min_size=1, max_size=100), ops, st.sampled_from(["tree", "scan"]),
       st.sampled_from([0, 5, 2048]))
def test_a_scope_answers_as_a_walk_over_the_machines_would(initial, plan, kind, scan_first):
    # scan_first: machines walked past the probe before the index is built (2048: never, here)
    free = list(initial)
    scope = Scope(list(range(len(free))), free, DIMS, kind, [str(i) for i in range(len(free))], scan_first)
    for op in plan:
        if op[0] == "update":
            position, vector = op[1] % len(free), op[2]
            free[position] = vector
            scope.update(position, vector)
        elif op[0] == "query":
            start = op[2] % (len(free) + 1)
            assert scope.first_fit(op[1], start) == brute(free, op[1], start)
            assert scope.may_fit(op[1]) or brute(free, op[1]) is None
        else:
            origin = op[2] % len(free)
            want = [p for p in list(range(origin, len(free))) + list(range(origin))
                    if all(f >= n for f, n in zip(free[p], op[1]))]
            assert list(scope.around(op[1], origin)) == want
        scope._check()


@given(st.lists(vectors, min_size=1, max_size=70), st.lists(st.tuples(st.integers(0, 69), vectors), max_size=30),
       needs)
def test_the_tree_refreshes_many_changes_at_once(initial, changes, need):
    free = list(initial)
    tree, scan = FitTree(free, DIMS), FitScan(free, DIMS)
    batch = {}
    for position, vector in changes:
        batch[position % len(free)] = vector
    for position, vector in batch.items():
        free[position] = vector
    tree.update_many(batch.items())
    scan.update_many(batch.items())
    tree._check(free)
    for start in range(len(free) + 1):
        assert tree.first_fit(need, start) == scan.first_fit(need, start) == brute(free, need, start)


@pytest.mark.parametrize("scan_first", [0, 2048])
def test_a_round_robin_goes_once_around_from_its_origin_and_sees_changes(scan_first):
    free = [(1,), (0,), (2,), (1,)]
    scope = Scope(list("abcd"), free, 1, "tree", list("abcd"), scan_first)
    seen = []
    for position in scope.around((1,), 2):
        seen.append(position)
        scope.update(position, (0,))           # the machine is taken
    assert seen == [2, 3, 0]
    assert scope.first_fit((1,)) is None and not scope.may_fit((1,))
    scope.update(1, (5,))                       # it grows: no longer "fits nowhere"
    assert scope.first_fit((1,)) == 1


def test_needs_of_kinds_no_machine_has_fit_nowhere():
    dims = Dims(["mem", "cpus"])
    assert dims.names == ("cpus", "mem")
    assert dims.vector({"cpus": 2000, "gpus": 1000}) == (2000, 0)
    assert dims.need({"cpus": 1000, "gpus": 1000}) is None
    assert dims.need({"cpus": 1000, "gpus": 0}) == (1000, 0)
    with pytest.raises(ValueError, match="machine index"):
        make_index("heap", [], 1)


@given(st.integers(0, 5).flatmap(lambda d: st.tuples(st.just(d), st.tuples(*(st.integers(0, 3) for _ in range(d))),
                                                     st.tuples(*(st.integers(0, 3) for _ in range(d))))))
def test_the_written_out_fit_test_answers_as_the_kind_by_kind_one(case):
    dims, free, need = case
    assert fits_of(dims)(free, need) == all(f >= n for f, n in zip(free, need))


def test_the_written_out_fit_test_refuses_a_negative_number_of_kinds():
    with pytest.raises(ValueError):
        fits_of(-1)
    with pytest.raises(ValueError):
        minus_of(-1)


@given(st.integers(0, 5).flatmap(lambda d: st.tuples(st.just(d), st.tuples(*[st.integers(0, 99)] * d),
                                                      st.tuples(*[st.integers(0, 99)] * d))))
def test_the_written_out_subtraction_answers_as_the_kind_by_kind_one(case):
    # a grant's room left: (free[0] - need[0], ...) for the batch's number of kinds
    dims, free, need = case
    assert minus_of(dims)(free, need) == tuple(f - n for f, n in zip(free, need))


# kinds come from offers: any text, quotes and newlines too, never part of the code made
kind_names = st.text(min_size=1, max_size=8)


@given(st.lists(kind_names, max_size=5), st.dictionaries(kind_names, st.integers(0, 10**6), max_size=6))
def test_the_written_out_vector_of_a_mapping_is_its_vector(names, millis):
    # a first batch makes each machine's vector with Dims.vector_of: the same as Dims.vector
    dims = Dims(names)
    assert dims.vector_of(millis) == dims.vector(millis) == tuple(millis.get(name, 0) for name in dims.names)

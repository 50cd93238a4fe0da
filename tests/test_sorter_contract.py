"""One contract every registered sorter passes, then policy-specific checks."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike.allocator import DRFSorter, make_sorter, sorter_names
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(60)

TOTAL = Resources.parse("cpus:100;mem:1000")


@pytest.fixture(params=sorter_names())
def policy(request):
    return request.param


def build(policy, clients, seed=1):
    sorter = make_sorter(policy, rng=random.Random(seed))
    sorter.add_total(TOTAL)
    for client in clients:
        sorter.add_client(client)
    return sorter


def test_registry_knows_drf_and_random():
    assert {"drf", "random"} <= set(sorter_names())
    with pytest.raises(ValueError, match="unknown sorter 'nope'"):
        make_sorter("nope")


def test_yields_each_active_client_once(policy):
    clients = ["a", "b", "eng", "eng/prod", "eng/dev", "ops/web"]
    sorter = build(policy, clients)
    assert sorted(sorter.sort()) == sorted(clients)
    sorter.deactivate("eng/prod")
    sorter.deactivate("a")
    assert sorted(sorter.sort()) == sorted(set(clients) - {"eng/prod", "a"})
    sorter.activate("a")
    assert "a" in sorter.sort()


def test_allocations_are_exact_and_count_while_inactive(policy):
    sorter = build(policy, ["a", "b"])
    sorter.allocated("a", Resources.parse("cpus:10;mem:100"))
    sorter.deactivate("a")
    sorter.allocated("a", Resources.parse("cpus:5"))
    sorter.unallocated("a", Resources.parse("cpus:2;mem:50"))
    assert sorter.allocation("a") == Resources.parse("cpus:13;mem:50")
    assert sorter.share("a") == pytest.approx(0.13)
    assert sorter.allocation("b") == Resources()


def test_share_is_dominant_share_over_weight(policy):
    sorter = build(policy, ["x"])
    sorter.allocated("x", Resources.parse("cpus:10;mem:500"))
    assert sorter.share("x") == pytest.approx(0.5)
    sorter.update_weight("x", 2.0)
    assert sorter.share("x") == pytest.approx(0.25)
    sorter.add_total(TOTAL)  # the pool doubles, shares halve
    assert sorter.share("x") == pytest.approx(0.125)


def test_remove_forgets_and_duplicates_are_refused(policy):
    sorter = build(policy, ["a", "a/b"])
    sorter.allocated("a/b", Resources.parse("cpus:1"))
    with pytest.raises(ValueError):
        sorter.add_client("a")
    sorter.remove_client("a/b")
    assert sorter.clients() == ["a"]
    assert sorter.sort() == ["a"]
    sorter.add_client("a/b")
    assert sorter.allocation("a/b") == Resources()


def test_same_history_same_order(policy):
    def history(seed):
        sorter = build(policy, [f"c{i}" for i in range(20)], seed=seed)
        for i in range(0, 20, 3):
            sorter.allocated(f"c{i}", Resources.parse(f"cpus:{i % 7 + 1}"))
        return [sorter.sort() for _ in range(3)]

    assert history(7) == history(7)


def test_fresh_gives_an_empty_sorter_of_the_same_policy(policy):
    sorter = build(policy, ["a"])
    other = sorter.fresh()
    assert type(other) is type(sorter)
    assert other.clients() == []


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 3), st.integers(1, 20)), max_size=40))
def test_allocation_bookkeeping_matches_a_model(ops):
    for policy in sorter_names():
        sorter = build(policy, list("abcdef"))
        model = {c: Resources() for c in "abcdef"}
        for client, kind, amount in ops:
            r = Resources({("cpus", "mem", "gpus", "disk")[kind]: amount})
            sorter.allocated(client, r)
            model[client] = model[client] + r
        for client in "abcdef":
            assert sorter.allocation(client) == model[client]
        assert sorted(sorter.sort()) == list("abcdef")


# --------------------------------------------------------------------- DRF
def test_drf_orders_by_share_then_allocations_then_name():
    sorter = build("drf", ["b", "a", "c"])
    assert sorter.sort() == ["a", "b", "c"]
    sorter.allocated("a", Resources.parse("cpus:10"))
    assert sorter.sort() == ["b", "c", "a"]
    sorter.allocated("b", Resources.parse("mem:100"))  # same share 0.1, one allocation each
    assert sorter.sort() == ["c", "a", "b"]
    sorter.allocated("c", Resources.parse("cpus:5"))
    sorter.allocated("c", Resources.parse("cpus:5"))  # share 0.1 after two allocations
    assert sorter.sort() == ["a", "b", "c"]


def test_drf_weights_scale_shares():
    sorter = build("drf", ["heavy", "light"])
    sorter.update_weight("heavy", 3.0)
    sorter.allocated("heavy", Resources.parse("cpus:30"))
    sorter.allocated("light", Resources.parse("cpus:11"))
    assert sorter.share("heavy") == pytest.approx(0.1)
    assert sorter.sort() == ["heavy", "light"]


def test_drf_hierarchy_orders_level_by_level():
    sorter = build("drf", ["eng/prod", "eng/dev", "ops"])
    sorter.allocated("eng/prod", Resources.parse("cpus:20"))
    # eng's subtree share (0.2) exceeds ops (0), so ops comes first, then eng's children
    assert sorter.sort() == ["ops", "eng/dev", "eng/prod"]
    sorter.allocated("ops", Resources.parse("cpus:30"))
    assert sorter.sort() == ["eng/dev", "eng/prod", "ops"]
    assert sorter.share("eng") == pytest.approx(0.2)


def test_drf_role_with_own_clients_and_subroles_uses_a_virtual_leaf():
    sorter = build("drf", ["eng"])
    sorter.allocated("eng", Resources.parse("cpus:10"))
    sorter.add_client("eng/prod")
    assert sorter.allocation("eng") == Resources.parse("cpus:10")
    assert sorter.sort() == ["eng/prod", "eng"]
    sorter.remove_client("eng/prod")
    assert sorter.sort() == ["eng"]
    assert sorter.allocation("eng") == Resources.parse("cpus:10")


def test_drf_flat_mode_treats_slashes_as_names():
    sorter = DRFSorter(hierarchical=False)
    sorter.add_total(TOTAL)
    sorter.add_client("a/b")
    sorter.add_client("a")
    assert sorter.sort() == ["a", "a/b"]


def test_drf_total_change_reorders_lazily():
    sorter = build("drf", ["cpu-heavy", "mem-heavy"])
    sorter.allocated("cpu-heavy", Resources.parse("cpus:50"))
    sorter.allocated("mem-heavy", Resources.parse("mem:400"))
    assert sorter.sort() == ["mem-heavy", "cpu-heavy"]
    sorter.add_total(Resources.parse("cpus:900"))  # cpus now plentiful
    assert sorter.sort() == ["cpu-heavy", "mem-heavy"]


# ------------------------------------------------------------------ random
def test_random_sorter_is_seeded_and_weighted():
    orders = {tuple(build("random", list("abcdefgh"), seed=s).sort()) for s in range(10)}
    assert len(orders) > 1
    sorter = build("random", ["heavy", "light"], seed=3)
    sorter.update_weight("heavy", 20.0)
    firsts = [sorter.sort()[0] for _ in range(500)]
    assert firsts.count("heavy") > 400


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "a/x", "a/y", "c/d/e", "c/f"]),
                          st.sampled_from(["alloc", "free", "off", "on", "weight"]),
                          st.integers(1, 9)), max_size=60))
def test_drf_order_matches_a_from_scratch_sort(ops):
    """Incremental upkeep (lazy keys, only-child shortcuts, activation) never
    drifts from a sort computed from the allocations alone."""
    clients = ["a", "b", "a/x", "a/y", "c/d/e", "c/f"]
    sorter = build("drf", clients)
    alloc = {c: Resources() for c in clients}
    active = set(clients)
    counts = {c: 0 for c in clients}
    for client, op, amount in ops:
        r = Resources(cpus=amount)
        if op == "alloc":
            sorter.allocated(client, r)
            alloc[client] = alloc[client] + r
            counts[client] += 1
        elif op == "free" and alloc[client].contains(r):
            sorter.unallocated(client, r)
            alloc[client] = alloc[client] - r
        elif op == "off":
            sorter.deactivate(client)
            active.discard(client)
        elif op == "on":
            sorter.activate(client)
            active.add(client)
        elif op == "weight":
            sorter.update_weight(client.split("/")[0], float(amount))
        # a fresh sorter fed the same totals reproduces the order from scratch
        fresh = build("drf", clients)
        for path, weight in sorter._weights.items():
            fresh.update_weight(path, weight)
        for c in clients:
            for _ in range(counts[c] - (1 if alloc[c] else 0)):
                fresh.allocated(c, Resources())
            if alloc[c]:
                fresh.allocated(c, alloc[c])
            if c not in active:
                fresh.deactivate(c)
        fresh.add_total(Resources())  # force a from-scratch rebuild
        assert sorter.sort() == fresh.sort()


def test_a_flat_drf_sorters_live_order_is_its_order_and_stays_live():
    """Sorter.live_order: the fast path walks it instead of iter_sorted."""
    sorter = DRFSorter(hierarchical=False)
    sorter.add_total(Resources.parse("cpus:100;mem:1000"))
    for name in ("a", "b", "c", "d"):
        sorter.add_client(name)
    live = sorter.live_order()
    assert live is not None
    rng = random.Random(7)
    for _ in range(50):
        client = rng.choice("abcd")
        if rng.random() < 0.7 or sorter.allocation(client).get("cpus") < 1:
            sorter.allocated(client, Resources.parse(f"cpus:1;mem:{rng.randint(1, 20)}"))
        else:
            sorter.unallocated(client, Resources.parse("cpus:1"))
        assert [entry[2] for entry in live] == list(sorter.iter_sorted())
    assert DRFSorter(hierarchical=True).live_order() is None
    assert make_sorter("random", hierarchical=False).live_order() is None

"""Apache Mesos's own allocator and sorter cases, ported: each test is named
after the Mesos test (``src/tests/hierarchical_allocator_tests.cpp``,
``src/tests/sorter_tests.cpp``) whose expectations it checks, with Mesos's
numbers. These are the semantics the allocator follows to the letter."""

import pytest

from mesoslike.allocator import DRFSorter
from mesoslike.resources import Resources

from allocator_helpers import R, make

pytestmark = pytest.mark.timeout(30)


def test_small_offer_filter_timeout_MESOS_4302():
    """HierarchicalAllocatorTest.SmallOfferFilterTimeout, step by step as
    Mesos's test (hierarchical_allocator_tests.cpp): a filter shorter than
    the allocation interval holds through the next batch allocation, and is
    gone by the batch after it. Mesos's clock is paused; its batch timer
    fires when ``Clock::advance`` passes it, here when ``tick`` runs after
    ``clock.advance``. Each ``tick`` between Mesos's steps checks that
    nothing is allocated where Mesos's ``Clock::settle`` allocates nothing.

    Shares: Mesos's comments give framework shares within the role's own
    allocation (framework1 "share = 1" after the decline), as its sorters
    once did; its framework sorters now divide by the cluster's total
    (``frameworkSorter->addSlave(slaveId, agent total)``), as ours do, so
    the shares below are of the cluster. The order, which is what Mesos's
    test asserts, is the same either way here."""
    alloc, clock = make(allocation_interval=60.0)   # flags_.allocation_interval = Minutes(1)
    alloc.add_framework("framework1", role="role")
    alloc.add_framework("framework2", role="role")
    alloc.add_agent("agent1", R("cpus:1;mem:512"), used={"framework1": R("cpus:1;mem:512")})
    assert alloc.tick() == []   # Clock::settle(): nothing to allocate
    # role share 1; framework1 share 1, framework2 share 0
    assert (alloc.dominant_share("framework1"), alloc.dominant_share("framework2")) == (1.0, 0.0)

    alloc.add_agent("agent2", R("cpus:1;mem:512"))
    (offer,) = alloc.tick()    # the allocation the agent's addition triggers
    assert (offer.framework_id, offer.agent_id, offer.resources) == ("framework2", "agent2", R("cpus:1;mem:512"))
    assert (alloc.dominant_share("framework1"), alloc.dominant_share("framework2")) == (0.5, 0.5)

    # framework2 declines with a filter of 1 s (< the allocation interval)
    alloc.decline_offer(offer.id, refuse_seconds=1)
    assert (alloc.dominant_share("framework1"), alloc.dominant_share("framework2")) == (0.5, 0.0)
    assert alloc.tick() == []   # recovering resources does not allocate (MESOS-3078)

    clock.advance(1)            # Clock::advance(filterTimeout); Clock::settle()
    assert alloc.tick() == []
    clock.advance(60)           # Clock::advance(allocation_interval): the batch allocation
    (offer,) = alloc.tick()
    # the filter is applied: framework1 is offered agent2 although its share is the larger
    assert (offer.framework_id, offer.agent_id, offer.resources) == ("framework1", "agent2", R("cpus:1;mem:512"))
    assert (alloc.dominant_share("framework1"), alloc.dominant_share("framework2")) == (1.0, 0.0)
    # (Mesos's comment: framework1 share 1, framework2 0 — here too, both agents being framework1's)

    # the filter is gone now that the batch allocation has happened; framework1
    # declines without a filter (Mesos: recoverResources(..., None()))
    alloc.decline_offer(offer.id, refuse_seconds=0)
    assert alloc.tick() == []   # no allocation until the next batch
    clock.advance(59.5)
    assert alloc.tick() == []
    clock.advance(0.5)          # one allocation interval after the last batch
    (offer,) = alloc.tick()
    assert (offer.framework_id, offer.agent_id, offer.resources) == ("framework2", "agent2", R("cpus:1;mem:512"))
    assert (alloc.dominant_share("framework1"), alloc.dominant_share("framework2")) == (0.5, 0.5)
    alloc.check_invariants()


def test_a_small_filter_made_between_batches_holds_through_the_next_batch_only():
    """The same rule for a decline half-way between two batches: the filter
    (max(interval, 1 s) = 60 s) outlives the next batch, which honours it,
    and expires before the one after, which offers the agent back."""
    alloc, clock = make(allocation_interval=60.0)
    alloc.add_framework("framework1", role="role")
    alloc.add_framework("framework2", role="role")
    alloc.add_agent("agent1", R("cpus:1;mem:512"), used={"framework1": R("cpus:1;mem:512")})
    assert alloc.tick() == []               # the batch at t=0
    clock.advance(30)
    alloc.add_agent("agent2", R("cpus:1;mem:512"))
    (offer,) = alloc.tick()
    assert offer.framework_id == "framework2"
    alloc.decline_offer(offer.id, refuse_seconds=1)   # at t=30: filtered until t=90
    clock.advance(30)
    (offer,) = alloc.tick()                  # the batch at t=60 honours it
    assert offer.framework_id == "framework1"
    alloc.decline_offer(offer.id, refuse_seconds=0)
    clock.advance(60)
    (offer,) = alloc.tick()                  # the batch at t=120: the filter expired at t=90
    assert offer.framework_id == "framework2"


def test_multi_quota_absent_frameworks():
    """HierarchicalAllocatorTest.MultiQuotaAbsentFrameworks: a quota role
    without frameworks does not keep another quota role from its guarantee.
    One agent cpus:2;mem:2048; quota-role-1 guarantees cpus:1;mem:1024 and
    has no framework, quota-role-2 guarantees cpus:2;mem:2048: its framework
    is offered the whole agent (before: cpus:1;mem:1024, the rest held back
    as headroom for quota-role-1)."""
    alloc, _ = make()
    alloc.add_agent("agent", R("cpus:2;mem:2048"))
    alloc.update_quota("quota-role-1", guarantee=R("cpus:1;mem:1024"))
    alloc.update_quota("quota-role-2", guarantee=R("cpus:2;mem:2048"))
    alloc.add_framework("framework", role="quota-role-2")
    (offer,) = alloc.allocate()
    assert (offer.framework_id, offer.resources) == ("framework", R("cpus:2;mem:2048"))
    alloc.check_invariants()


def test_multi_quota_absent_frameworks_keeps_headroom_beyond_the_guarantee():
    """Two agents of cpus:2;mem:2048, both roles guarantee cpus:2;mem:2048,
    only quota2 has a framework: it gets its guarantee, one whole agent; the
    other agent stays free as headroom for quota1's guarantee."""
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:2;mem:2048"))
    alloc.add_agent("a2", R("cpus:2;mem:2048"))
    alloc.update_quota("quota1", guarantee=R("cpus:2;mem:2048"))
    alloc.update_quota("quota2", guarantee=R("cpus:2;mem:2048"))
    alloc.add_framework("fw", role="quota2")
    (offer,) = alloc.allocate()
    assert offer.resources == R("cpus:2;mem:2048")
    assert alloc.allocate() == []  # quota2 is satisfied; the rest is quota1's headroom
    alloc.check_invariants()


def test_remove_filters():
    """HierarchicalAllocatorTest.RemoveFilters: an agent updated with new
    attributes loses every decline filter and is allocated again."""
    alloc, clock = make()
    alloc.add_framework("framework", role="role")
    alloc.add_agent("agent", R("cpus:1;mem:512"))
    (offer,) = alloc.tick()
    alloc.decline_offer(offer.id, refuse_seconds=2 * alloc.allocation_interval)
    clock.advance(alloc.allocation_interval)
    assert alloc.tick() == []  # filtered
    alloc.update_agent("agent", total=R("cpus:1;mem:512"), attributes={"foo": "bar", "baz": "quux"})
    assert alloc.snapshot()["filters"] == {}
    assert alloc.next_wakeup() == clock.now()  # the update triggers allocation of the agent
    (offer,) = alloc.tick()
    assert (offer.framework_id, offer.resources) == ("framework", R("cpus:1;mem:512"))
    assert offer.attributes == {"foo": "bar", "baz": "quux"}


def test_remove_filters_only_when_attributes_change():
    """Mesos removes filters for changed attributes only: the same
    attributes, or a changed total, keep them (a grown agent is offered
    again through the filter's containment check)."""
    alloc, clock = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:2;mem:2048"), attributes={"rack": "r1"})
    (offer,) = alloc.tick()
    alloc.decline_offer(offer.id, refuse_seconds=3600)
    alloc.update_agent("n", attributes={"rack": "r1"})
    assert alloc.next_wakeup() > clock.now()  # nothing changed: no allocation triggered
    alloc.update_agent("n", total=R("cpus:1;mem:1024"))
    assert alloc.next_wakeup() == clock.now()  # changed total: allocation triggered...
    assert alloc.tick() == []                  # ...and the filter still holds (it refused more)
    assert len(alloc.snapshot()["filters"]["f"]["n"]) == 1


def test_add_child_to_leaf():
    """DRFSorterTest.AddChildToLeaf: a client that gains sub-clients keeps
    its own allocation in a virtual leaf of weight 1; its weight applies to
    its subtree against its siblings, not to that leaf."""
    sorter = DRFSorter()
    sorter.add_total(Resources.parse("cpus:100;mem:100"))
    sorter.add_client("a")
    sorter.allocated("a", Resources.parse("cpus:10;mem:10"))
    sorter.add_client("b")
    sorter.allocated("b", Resources.parse("cpus:6;mem:6"))
    assert sorter.sort() == ["b", "a"]

    sorter.add_client("a/c")
    sorter.allocated("a/c", Resources.parse("cpus:5;mem:5"))
    assert sorter.sort() == ["b", "a/c", "a"]

    sorter.remove_client("a")
    assert "a" not in sorter
    assert sorter.sort() == ["a/c", "b"]

    sorter.add_client("a")
    sorter.allocated("a", Resources.parse("cpus:10;mem:10"))
    assert "a" in sorter
    assert sorter.sort() == ["b", "a/c", "a"]

    sorter.update_weight("a/c", 0.2)  # "a" competes with "a/c" at weight 1
    assert sorter.sort() == ["b", "a", "a/c"]

    sorter.update_weight("a", 3)  # against "b", not against "a/c"
    assert sorter.sort() == ["a", "a/c", "b"]

    sorter.update_weight("a/c", 1)
    assert sorter.sort() == ["a/c", "a", "b"]


def test_add_child_to_leaf_in_the_allocator():
    """Roles "a" and "a/c", weight 3 on "a": 8 agents split 4:4 (the weight
    has no sibling to act against), where a weight on the virtual leaf
    would split them 6:2."""
    alloc, _ = make()
    for i in range(8):
        alloc.add_agent(f"n{i}", R("cpus:1;mem:1024"))
    alloc.add_framework("own", role="a")
    alloc.add_framework("child", role="a/c")
    alloc.update_weights({"a": 3.0})
    for offer in alloc.allocate():
        alloc.accept_offer(offer.id, offer.resources, refuse_seconds=0)
    held = {fw: len(alloc.allocation(fw)) for fw in ("own", "child")}
    assert held == {"own": 4, "child": 4}

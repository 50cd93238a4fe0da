"""Apache Mesos's own allocator and sorter cases, ported: each test is named
after the Mesos test (``src/tests/hierarchical_allocator_tests.cpp``,
``src/tests/sorter_tests.cpp``) whose expectations it checks, with Mesos's
numbers. These are the semantics the allocator follows to the letter."""

import pytest

from allocator_helpers import R, make

pytestmark = pytest.mark.timeout(30)


def test_small_offer_filter_timeout_MESOS_4302():
    """HierarchicalAllocatorTest.SmallOfferFilterTimeout: a filter shorter
    than the allocation interval, made at the instant of a batch cycle,
    still holds in the next batch cycle, however late that one runs."""
    alloc, clock = make(allocation_interval=60.0)
    alloc.add_framework("framework1", role="role")
    alloc.add_framework("framework2", role="role")
    alloc.add_agent("agent1", R("cpus:1;mem:512"), used={"framework1": R("cpus:1;mem:512")})
    assert alloc.tick() == []  # the batch cycle at t=0: nothing to allocate
    alloc.add_agent("agent2", R("cpus:1;mem:512"))
    (offer,) = alloc.tick()  # event-triggered: framework2 has the lower share
    assert (offer.framework_id, offer.agent_id) == ("framework2", "agent2")
    alloc.decline_offer(offer.id, refuse_seconds=1)  # filter: max(60, 1) s, made at t=0
    clock.advance(1)
    assert alloc.tick() == []
    clock.advance(60)  # the batch due at t=60 runs at t=61; the filter expired at t=60
    (offer,) = alloc.tick()
    # the filter still applies in that batch: framework1 gets agent2 although
    # its share is the larger one
    assert (offer.framework_id, offer.agent_id, offer.resources) == ("framework1", "agent2", R("cpus:1;mem:512"))
    alloc.check_invariants()


def test_small_offer_filter_timeout_gives_way_after_that_batch():
    """The filter holds through one batch cycle, not more: at the batch
    after it, the decliner (lowest share) is offered the agent again."""
    alloc, clock = make(allocation_interval=60.0)
    alloc.add_framework("framework1", role="role")
    alloc.add_framework("framework2", role="role")
    alloc.add_agent("agent1", R("cpus:1;mem:512"), used={"framework1": R("cpus:1;mem:512")})
    alloc.tick()
    alloc.add_agent("agent2", R("cpus:1;mem:512"))
    (offer,) = alloc.tick()
    alloc.decline_offer(offer.id, refuse_seconds=1)
    clock.advance(61)
    (offer,) = alloc.tick()
    assert offer.framework_id == "framework1"
    alloc.decline_offer(offer.id, refuse_seconds=0)
    clock.advance(60)
    (offer,) = alloc.tick()
    assert offer.framework_id == "framework2"

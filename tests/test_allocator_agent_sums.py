"""add_agent works out the sum of an agent's holdings and what is left
available once for agents alike (the same total and holdings objects: a new
leader's re-registering agents) — HierarchicalAllocator._agent_sums
(failover30k). The books must be what adding each agent on its own makes."""

import pytest

from mesoslike.errors import AgentCapacityError, DuplicateAgentError, UnknownAgentError, UnknownFrameworkError

from allocator_helpers import R, make


def _alike(count):
    total, task_a, task_b = R("cpus:8;mem:16384"), R("cpus:1;mem:1024"), R("cpus:2;mem:512")
    return total, [{"fw-a": task_a, "fw-b": task_b} for _ in range(count)]


def test_agents_alike_get_the_books_each_would_get_alone():
    alloc, _ = make()
    for framework_id in ("fw-a", "fw-b"):
        alloc.add_framework(framework_id)
    total, holdings = _alike(3)
    for index, used in enumerate(holdings):
        alloc.add_agent(f"a{index}", total, used=used)
    alloc.add_agent("other", R("cpus:4;mem:4096"), used={"fw-a": R("cpus:1;mem:1024")})
    alloc.add_agent("idle", total)
    alloc.check_invariants()
    for index in range(3):
        assert alloc.available(f"a{index}") == R("cpus:5;mem:14848")
    assert alloc.available("other") == R("cpus:3;mem:3072") and alloc.available("idle") == total
    # what one agent is offered and takes leaves the others alike as they were
    offers = alloc.allocate()
    for offer in offers:
        if offer.agent_id == "a0":
            alloc.accept_offer(offer.id, R("cpus:1;mem:1"), refuse_seconds=0)
        else:
            alloc.decline_offer(offer.id, refuse_seconds=0)
    alloc.check_invariants()
    assert {offer.agent_id for offer in offers} >= {"a0", "a1", "a2"}
    assert alloc.available("a0") == R("cpus:4;mem:14847")
    assert alloc.available("a1") == alloc.available("a2") == R("cpus:5;mem:14848")


def test_holdings_that_do_not_fit_are_refused_every_time_and_change_nothing():
    alloc, _ = make()
    alloc.add_framework("fw-a")
    total, big = R("cpus:2;mem:1024"), R("cpus:4;mem:64")
    for attempt in range(2):
        with pytest.raises(AgentCapacityError, match="does not fit"):
            alloc.add_agent(f"a{attempt}", total, used={"fw-a": big})
    with pytest.raises(UnknownFrameworkError):
        alloc.add_agent("a9", total, used={"fw-unknown": R("cpus:1")})
    alloc.add_agent("a0", total, used={"fw-a": R("cpus:1;mem:64")})
    alloc.check_invariants()
    assert alloc.available("a0") == R("cpus:1;mem:960")


def test_an_empty_holding_is_not_held():
    alloc, _ = make()
    for framework_id in ("fw-a", "fw-b"):
        alloc.add_framework(framework_id)
    alloc.add_agent("a0", R("cpus:2;mem:64"), used={"fw-b": R(""), "fw-a": R("cpus:1")})
    alloc.check_invariants()
    assert alloc.available("a0") == R("cpus:1;mem:64")


def test_an_agent_checked_then_booked_gets_the_books_add_agent_makes():
    # failover30p: a new leader checks a re-registering agent at admission and books it later
    eager, _ = make()
    later, _ = make()
    total, holdings = _alike(2)
    for alloc in (eager, later):
        for framework_id in ("fw-a", "fw-b"):
            alloc.add_framework(framework_id)
    for index, used in enumerate(holdings):
        eager.add_agent(f"a{index}", total, hostname=f"h{index}", used=used)
    checked = [later.check_agent(f"a{index}", total, None, f"h{index}", used) for index, used in enumerate(holdings)]
    with pytest.raises(UnknownAgentError):   # checked, not booked
        later.available("a0")
    for agent in checked:
        later.book_agent(agent)
    later.check_invariants()
    for index in range(2):
        assert later.available(f"a{index}") == eager.available(f"a{index}")
    for framework_id in ("fw-a", "fw-b"):
        assert later.allocation(framework_id) == eager.allocation(framework_id)
    assert sorted((o.agent_id, o.framework_id, o.resources) for o in later.allocate()) == \
        sorted((o.agent_id, o.framework_id, o.resources) for o in eager.allocate())


def test_checking_an_agent_refuses_what_adding_it_refuses_and_changes_nothing():
    alloc, _ = make()
    alloc.add_framework("fw-a")
    alloc.add_agent("a0", R("cpus:8;mem:16384"))
    with pytest.raises(AgentCapacityError):
        alloc.check_agent("a1", R("cpus:1;mem:16"), used={"fw-a": R("cpus:2;mem:1")})
    with pytest.raises(UnknownFrameworkError):
        alloc.check_agent("a1", R("cpus:8;mem:16"), used={"nobody": R("cpus:1;mem:1")})
    with pytest.raises(DuplicateAgentError):
        alloc.check_agent("a0", R("cpus:8;mem:16"))
    checked = alloc.check_agent("a1", R("cpus:8;mem:16"))
    alloc.add_agent("a1", R("cpus:8;mem:16"))   # (not the caller's gate: booked meanwhile)
    with pytest.raises(DuplicateAgentError):
        alloc.book_agent(checked)
    alloc.check_invariants()
    assert alloc.allocation("fw-a") == {}

"""The allocator's answer to "why does this framework get no offers?"
(HierarchicalAllocator.offer_blockers, shown in /state and `mesoslike state`)."""

from allocator_helpers import R, make


def reasons(alloc, framework_id):
    return [blocker.reason for blocker in alloc.offer_blockers().get(framework_id, [])]


def test_a_framework_holding_an_offer_has_no_blockers_and_one_without_is_pending():
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:4;mem:1024"))
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    offers = alloc.allocate()
    (taker,) = {offer.framework_id for offer in offers}
    other = "f2" if taker == "f1" else "f1"
    blockers = alloc.offer_blockers()
    assert taker not in blockers
    assert reasons(alloc, other)[0] == "MIN_ALLOCATABLE"      # everything is offered to the other one
    share = alloc.offer_blockers()[other][1]
    assert share.reason == "WEIGHT_SHARE" and share.details["role"] == "*" and share.details["weight"] == 1.0
    alloc.decline_offer(offers[0].id, refuse_seconds=0)
    assert reasons(alloc, taker) == ["PENDING"] and reasons(alloc, other) == ["PENDING"]


def test_suppressed_and_disconnected_frameworks_say_so():
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:4;mem:1024"))
    alloc.add_framework("f1", role="web")
    alloc.add_framework("f2")
    alloc.suppress_offers("f1")
    alloc.deactivate_framework("f2")
    blockers = alloc.offer_blockers()
    assert [b.to_json() for b in blockers["f1"]] == [{
        "reason": "SUPPRESSED", "roles": ["web"],
        "message": "it suppressed offers for role 'web': none until it revives"}]
    assert reasons(alloc, "f2") == ["INACTIVE"]


def test_decline_filters_in_force_are_counted_with_the_soonest_expiry():
    alloc, clock = make()
    alloc.add_agent("a1", R("cpus:4;mem:1024"))
    alloc.add_agent("a2", R("cpus:4;mem:1024"))
    alloc.add_framework("f1")
    for offer in alloc.allocate():
        alloc.decline_offer(offer.id, refuse_seconds=30 if offer.agent_id == "a1" else 60)
    clock.advance(10)
    (blocker,) = alloc.offer_blockers()["f1"]
    assert blocker.reason == "DECLINE_FILTERS"
    assert blocker.details == {"filters": 2, "agents": 2, "soonest_expiry": 30.0, "expires_in": 20.0}
    assert "2 decline filter(s) in force on 2 agent(s), the soonest ends in 20.0 s" in blocker.message
    clock.advance(25)   # a1's filter has expired: it can take a1 again
    assert reasons(alloc, "f1") == ["PENDING"]


def test_a_quota_limit_reached_is_named_with_its_role():
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:8;mem:4096"))
    alloc.add_framework("f1", role="eng/web")
    alloc.update_quota("eng", limit="cpus:2")
    (offer,) = alloc.allocate()
    alloc.accept_offer(offer.id, R("cpus:2;mem:100"), refuse_seconds=0)
    blockers = alloc.offer_blockers()["f1"]
    assert blockers[0].reason == "QUOTA_LIMIT"
    assert blockers[0].details["role"] == "eng" and blockers[0].details["kinds"] == ["cpus"]
    assert "role 'eng' reached its quota limit for cpus" in blockers[0].message


def test_free_resources_held_for_another_roles_guarantee_are_named():
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:4;mem:4096"))
    alloc.add_framework("f1", role="batch")
    alloc.update_quota("prod", guarantee="cpus:4;mem:4096")    # no framework of prod yet: all is held for it
    assert alloc.allocate() == []
    (blocker,) = alloc.offer_blockers()["f1"]
    assert blocker.reason == "QUOTA_HEADROOM" and blocker.details["kinds"] == ["cpus", "mem"]


def test_nothing_fits_the_minimum_allocatable_and_no_agents_at_all():
    alloc, _ = make()
    alloc.add_framework("f1", min_allocatable="cpus:8")
    assert reasons(alloc, "f1") == ["NO_AGENTS"]
    alloc.add_agent("a1", R("cpus:4;mem:1024"))
    blockers = alloc.offer_blockers()["f1"]
    assert [b.reason for b in blockers] == ["MIN_ALLOCATABLE", "WEIGHT_SHARE"]
    assert blockers[0].details == {"min_allocatable": ["cpus:8"], "free": "cpus:4;mem:1024"}


def test_the_query_changes_nothing_the_allocation_reads():
    """Asked between cycles, the query leaves the allocator's decisions as they were."""
    results = []
    for ask in (False, True):
        alloc, clock = make()
        for i in range(4):
            alloc.add_agent(f"a{i}", R("cpus:4;mem:1024"))
        for i in range(3):
            alloc.add_framework(f"f{i}", role=f"r{i % 2}")
        made = []
        for _ in range(5):
            if ask:
                alloc.offer_blockers()
            offers = alloc.allocate()
            made.append(sorted((o.framework_id, o.agent_id) for o in offers))
            for offer in offers:
                used = offer.resources.minimum(R("cpus:1;mem:100"))
                alloc.accept_offer(offer.id, used, refuse_seconds=2)
            clock.advance(1)
        alloc.check_invariants()
        results.append(made)
    assert results[0] == results[1]

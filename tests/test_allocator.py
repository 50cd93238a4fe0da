"""The hierarchical allocator, driven through its public API with a fake clock."""

import pytest

from mesoslike.allocator import HierarchicalAllocator, RescindReason
from mesoslike.clock import FakeClock

from allocator_helpers import R, make, run_tasks

pytestmark = pytest.mark.timeout(30)


# ------------------------------------------------------------------ DRF
def test_seed_004_example_through_offers():
    alloc, _ = make()
    alloc.add_agent("a1", R("cpus:9;mem:18432"))
    alloc.add_framework("A")
    alloc.add_framework("B")
    launched = run_tasks(alloc, {"A": R("cpus:1;mem:4096"), "B": R("cpus:3;mem:1024")})
    assert launched == {"A": 3, "B": 2}
    stats = alloc.statistics()
    assert stats.framework_shares["A"] == pytest.approx(2 / 3)
    assert stats.framework_shares["B"] == pytest.approx(2 / 3)
    assert stats.allocated == R("cpus:9;mem:14336")


def test_first_offer_goes_to_lowest_share_then_fewest_allocations_then_name():
    alloc, _ = make()
    alloc.add_framework("b")
    alloc.add_framework("a")
    alloc.add_agent("x", R("cpus:4;mem:4096"))
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a"  # all equal: name decides
    alloc.accept_offer(offer.id, R("cpus:1;mem:1024"), refuse_seconds=0)
    (offer,) = alloc.allocate()
    assert offer.framework_id == "b"  # a now has a share
    assert offer.resources == R("cpus:3;mem:3072")


def test_offers_are_coarse_grained_one_framework_per_agent_per_cycle():
    alloc, _ = make()
    for fw in ("f1", "f2", "f3"):
        alloc.add_framework(fw)
    for i in range(3):
        alloc.add_agent(f"a{i}", R("cpus:4;mem:4096"))
    offers = alloc.allocate()
    assert len(offers) == 3
    assert sorted(o.agent_id for o in offers) == ["a0", "a1", "a2"]
    assert sorted(o.framework_id for o in offers) == ["f1", "f2", "f3"]
    assert all(o.resources == R("cpus:4;mem:4096") for o in offers)
    assert alloc.allocate() == []  # everything is offered: nothing left


def test_two_level_sort_roles_first_then_frameworks_in_role():
    alloc, _ = make()
    alloc.add_framework("a1", role="a")
    alloc.add_framework("a2", role="a")
    alloc.add_framework("b1", role="b")
    for i in range(4):
        alloc.add_agent(f"n{i}", R("cpus:1;mem:1024"))
    offers = sorted(alloc.allocate(), key=lambda o: o.id)
    by_fw = {}
    for offer in offers:
        by_fw[offer.framework_id] = by_fw.get(offer.framework_id, 0) + 1
    # roles alternate (a, b, a, b): role b's single framework gets as much as role a's two
    assert by_fw == {"a1": 1, "a2": 1, "b1": 2}
    stats = alloc.statistics()
    assert stats.role_shares["a"] == pytest.approx(stats.role_shares["b"])


def test_role_weights_give_weighted_drf():
    alloc, _ = make()
    alloc.add_agent("big", R("cpus:30;mem:30720"))
    alloc.add_framework("heavy", role="gold")
    alloc.add_framework("light", role="bronze")
    alloc.update_weights({"gold": 2.0})
    launched = run_tasks(alloc, {"heavy": R("cpus:1;mem:1024"), "light": R("cpus:1;mem:1024")})
    assert launched == {"heavy": 20, "light": 10}


def test_hierarchical_roles_share_within_their_parent():
    alloc, _ = make()
    alloc.add_agent("n", R("cpus:40;mem:40960"))
    alloc.add_framework("prod", role="eng/prod")
    alloc.add_framework("dev", role="eng/dev")
    alloc.add_framework("ops", role="ops")
    launched = run_tasks(alloc, {f: R("cpus:1;mem:1024") for f in ("prod", "dev", "ops")})
    # eng and ops split the cluster, eng's half is split again
    assert launched == {"prod": 10, "dev": 10, "ops": 20}


def test_random_sorter_is_deterministic_for_a_seed():
    import random

    def offers(seed):
        alloc = HierarchicalAllocator(FakeClock(), sorter="random", rng=random.Random(seed))
        for i in range(10):
            alloc.add_framework(f"f{i}")
        for i in range(10):
            alloc.add_agent(f"a{i}", R("cpus:1;mem:64"))
        return [(o.framework_id, o.agent_id) for o in alloc.allocate()]

    assert offers(1) == offers(1)
    assert offers(1) != offers(2)


# ------------------------------------------------------- min allocatable
def test_minimum_allocatable_resources():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("tiny", R("cpus:0.005;mem:16"))
    alloc.add_agent("cpu-only", R("cpus:0.01"))
    alloc.add_agent("mem-only", R("mem:32"))
    offered = {o.agent_id for o in alloc.allocate()}
    assert offered == {"cpu-only", "mem-only"}  # either alternative suffices


def test_minimum_allocatable_per_framework_override():
    alloc, _ = make(min_allocatable="cpus:1")
    alloc.add_framework("picky")
    alloc.add_framework("easy", min_allocatable="mem:8")
    alloc.add_agent("small", R("cpus:0.5;mem:64"))
    (offer,) = alloc.allocate()
    assert offer.framework_id == "easy"


# ----------------------------------------------------------------- filters
def test_decline_filter_blocks_reoffer_until_timeout():
    alloc, clock = make()
    alloc.add_framework("f")
    alloc.add_agent("a", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=5)
    clock.advance(4.9)
    assert alloc.allocate() == []
    assert alloc.statistics().offers_filtered == 1
    clock.advance(0.1)
    (again,) = alloc.allocate()
    assert again.resources == offer.resources


def test_default_refuse_is_five_seconds_and_zero_means_no_filter():
    alloc, clock = make()
    alloc.add_framework("f")
    alloc.add_agent("a", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id)
    clock.advance(4.99)
    assert alloc.allocate() == []
    clock.advance(0.01)
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=0)
    assert len(alloc.allocate()) == 1


def test_filter_timeout_is_at_least_the_allocation_interval():
    alloc, clock = make(allocation_interval=10.0)
    alloc.add_framework("f")
    alloc.add_agent("a", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=1)
    clock.advance(9)
    assert alloc.allocate() == []
    clock.advance(1)
    assert len(alloc.allocate()) == 1


def test_refuse_seconds_is_capped_at_365_days():
    alloc, clock = make()
    alloc.add_framework("f")
    alloc.add_agent("a", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=10 * 365 * 86400)
    clock.advance(365 * 86400 - 1)
    assert alloc.allocate() == []
    clock.advance(1)
    assert len(alloc.allocate()) == 1


def test_declined_agent_goes_to_the_next_framework():
    alloc, _ = make()
    alloc.add_framework("a")
    alloc.add_framework("b")
    alloc.add_agent("n", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a"
    alloc.decline_offer(offer.id, refuse_seconds=60)
    (offer,) = alloc.allocate()
    assert offer.framework_id == "b"


def test_filter_only_blocks_offers_contained_in_what_was_refused():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_framework("g")
    alloc.add_agent("n", R("cpus:4;mem:4096"))
    (offer,) = alloc.allocate()  # f gets it
    alloc.accept_offer(offer.id, R("cpus:2;mem:2048"), refuse_seconds=3600)  # refused the other half
    (offer,) = alloc.allocate()
    assert offer.framework_id == "g"
    alloc.accept_offer(offer.id, R("cpus:1;mem:1024"), refuse_seconds=3600)
    # the agent now has less than f refused: still filtered for f, and g filtered it too
    assert alloc.allocate() == []
    # f's task ends: the agent has more than f refused, so f is offered again
    alloc.recover_resources("f", "n", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    assert offer.framework_id == "f"
    assert offer.resources == R("cpus:3;mem:3072")


def test_revive_clears_filters_and_suppress_stops_offers():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=3600)
    assert alloc.allocate() == []
    alloc.revive_offers("f")
    (offer,) = alloc.allocate()
    alloc.suppress_offers("f")
    assert alloc.outstanding_offers("f") == [offer]  # suppress does not rescind
    alloc.decline_offer(offer.id, refuse_seconds=0)
    assert alloc.allocate() == []
    alloc.revive_offers("f")
    assert len(alloc.allocate()) == 1


def test_deactivated_framework_gets_nothing_and_loses_its_offers():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:2;mem:2048"))
    (offer,) = alloc.allocate()
    alloc.deactivate_framework("f")
    (rescind,) = alloc.drain_rescinds()
    assert rescind.offer == offer and rescind.reason == RescindReason.FRAMEWORK_DEACTIVATED
    assert alloc.available("n") == R("cpus:2;mem:2048")
    assert alloc.allocate() == []
    alloc.activate_framework("f")
    assert len(alloc.allocate()) == 1


# ------------------------------------------------------------------- quota
def test_quota_guarantee_headroom_is_held_back_from_other_roles():
    alloc, _ = make()
    for i in range(4):
        alloc.add_agent(f"n{i}", R("cpus:2;mem:2048"))
    alloc.update_quota("q", guarantee=R("cpus:4;mem:4096"))
    alloc.add_framework("other", role="other")
    offers = alloc.allocate()
    assert sum(o.resources.get("cpus") for o in offers) == 4  # 8 - 4 held back
    for offer in offers:
        alloc.accept_offer(offer.id, offer.resources)
    alloc.add_framework("owed", role="q")
    offers = alloc.allocate()
    assert {o.framework_id for o in offers} == {"owed"}
    assert sum(o.resources.get("cpus") for o in offers) == 4


def test_quota_guarantee_is_served_first_in_stage_one():
    alloc, _ = make()
    alloc.add_agent("n", R("cpus:8;mem:8192"))
    alloc.add_framework("aaa", role="aaa")  # would win on name
    alloc.add_framework("q", role="zzz")
    alloc.update_quota("zzz", guarantee=R("cpus:2"))
    offers = {o.framework_id: o.resources for o in alloc.allocate()}
    assert offers["q"].get("cpus") == 2
    assert offers["aaa"].get("cpus") == 6


def test_quota_limit_clips_offers_and_is_never_exceeded():
    alloc, _ = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_agent("n1", R("cpus:4;mem:4096"))
    alloc.add_framework("capped", role="capped")
    alloc.update_quota("capped", limit=R("cpus:3;mem:100000"))
    offers = alloc.allocate()
    assert sum(o.resources.get("cpus") for o in offers) == 3
    assert alloc.allocate() == []


def test_zero_limit_means_none_of_that_kind():
    alloc, _ = make()
    alloc.add_agent("gpu", R("cpus:4;mem:4096;gpus:2"))
    alloc.add_framework("f", role="nogpu")
    alloc.update_quota("nogpu", limit="gpus:0")
    (offer,) = alloc.allocate()
    assert offer.resources == R("cpus:4;mem:4096")


def test_new_limit_below_outstanding_offers_rescinds_them():
    alloc, _ = make()
    alloc.add_agent("n", R("cpus:4;mem:4096"))
    alloc.add_framework("f", role="r")
    (offer,) = alloc.allocate()
    alloc.update_quota("r", limit=R("cpus:1"))
    (rescind,) = alloc.drain_rescinds()
    assert rescind.offer.id == offer.id and rescind.reason == RescindReason.QUOTA_UPDATED
    (offer,) = alloc.allocate()
    assert offer.resources.get("cpus") == 1


def test_new_guarantee_rescinds_other_roles_offers_it_needs():
    alloc, _ = make()
    alloc.add_agent("n", R("cpus:4;mem:4096"))
    alloc.add_framework("other", role="other")
    alloc.add_framework("q", role="q")
    alloc.update_quota("other", limit=R("cpus:100"))  # a quota role too, unaffected
    offers = alloc.allocate()
    assert [o.framework_id for o in offers] == ["other"]
    alloc.update_quota("q", guarantee=R("cpus:2"))
    rescinds = alloc.drain_rescinds()
    assert [r.reason for r in rescinds] == [RescindReason.QUOTA_UPDATED]
    offers = {o.framework_id: o.resources for o in alloc.allocate()}
    assert offers["q"].get("cpus") == 2


# ----------------------------------------------------------- rescinds, time
def test_offer_timeout_rescinds_unanswered_offers():
    alloc, clock = make(offer_timeout=30, allocation_interval=100)
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:2;mem:2048"))
    (offer,) = alloc.tick()
    clock.advance(29)
    assert alloc.expire_offers() == []
    assert alloc.next_wakeup() == pytest.approx(30)
    clock.advance(1)
    (rescind,) = alloc.expire_offers()
    assert rescind.offer == offer and rescind.reason == RescindReason.OFFER_TIMEOUT
    assert alloc.drain_rescinds() == [rescind]
    assert alloc.available("n") == R("cpus:2;mem:2048")


def test_removing_or_deactivating_an_agent_rescinds_its_offers():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n0", R("cpus:2;mem:2048"))
    alloc.add_agent("n1", R("cpus:2;mem:2048"))
    offers = {o.agent_id: o for o in alloc.allocate()}
    alloc.deactivate_agent("n0")
    alloc.remove_agent("n1")
    rescinds = alloc.drain_rescinds()
    assert [(r.offer.id, r.reason) for r in rescinds] == [
        (offers["n0"].id, RescindReason.AGENT_DEACTIVATED),
        (offers["n1"].id, RescindReason.AGENT_REMOVED),
    ]
    assert alloc.allocate() == []  # n0 inactive, n1 gone
    alloc.activate_agent("n0")
    assert [o.agent_id for o in alloc.allocate()] == ["n0"]


def test_weight_change_rescinds_outstanding_offers():
    alloc, _ = make()
    alloc.add_framework("f", role="r")
    alloc.add_agent("n", R("cpus:2;mem:2048"))
    alloc.allocate()
    alloc.update_weights({"unused-role": 3.0})
    assert alloc.drain_rescinds() == []
    alloc.update_weights({"r": 2.0})
    assert [r.reason for r in alloc.drain_rescinds()] == [RescindReason.WEIGHTS_UPDATED]


def test_tick_runs_batch_cycles_and_coalesced_event_triggered_allocation():
    alloc, clock = make(allocation_interval=1.0)
    alloc.add_framework("f")
    assert alloc.tick() == []  # first batch cycle, nothing to offer
    alloc.add_agent("n0", R("cpus:1;mem:64"))
    alloc.add_agent("n1", R("cpus:1;mem:64"))
    assert alloc.next_wakeup() == clock.now()  # events pending
    offers = alloc.tick()  # one event-triggered allocation covers both agents
    assert sorted(o.agent_id for o in offers) == ["n0", "n1"]
    assert alloc.statistics().cycles == 2
    assert alloc.tick() == []
    assert alloc.next_wakeup() == pytest.approx(1.0)
    for offer in offers:
        alloc.decline_offer(offer.id, refuse_seconds=0)
    assert alloc.tick() == []  # declines do not trigger allocation...
    clock.advance(1.0)
    assert len(alloc.tick()) == 2  # ...the next batch cycle picks them up


def test_event_triggered_allocation_only_touches_given_agents():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n0", R("cpus:1;mem:64"))
    alloc.add_agent("n1", R("cpus:1;mem:64"))
    assert [o.agent_id for o in alloc.allocate(["n1"])] == ["n1"]


# -------------------------------------------------------------- recovering
def test_recover_takes_from_used_first_then_answers_offers():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:9;mem:18432"))
    (offer,) = alloc.allocate()
    # the design's example: the framework keeps 1 cpu, returns the rest
    alloc.recover_resources("f", "n", R("cpus:8;mem:14336"))
    assert alloc.outstanding_offers() == []
    assert alloc.allocation("f") == {"n": R("cpus:1;mem:4096")}
    alloc.check_invariants()
    alloc.add_framework("g")
    (offer,) = alloc.allocate()
    assert offer.framework_id == "g"
    # f's task ends while g holds an offer on the same agent: g's offer stays
    alloc.recover_resources("f", "n", R("cpus:1;mem:4096"))
    assert alloc.outstanding_offers() == [offer]
    alloc.check_invariants()


def test_accept_returns_unused_part():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:4;mem:4096;ports:[31000-31010]"))
    (offer,) = alloc.allocate()
    unused = alloc.accept_offer(offer.id, R("cpus:1;mem:128;ports:[31000-31000]"))
    assert unused == R("cpus:3;mem:3968;ports:[31001-31010]")
    assert alloc.available("n") == unused


def test_statistics_is_a_frozen_snapshot():
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:4;mem:4096"))
    alloc.allocate()
    stats = alloc.statistics()
    assert (stats.offers_made, stats.outstanding_offers, stats.cycles) == (1, 1, 1)
    assert stats.framework_shares == {"f": 1.0}
    assert stats.last_cycle_duration == 0.0  # the fake clock did not move
    with pytest.raises(Exception):
        stats.offers_made = 5
    with pytest.raises(TypeError):
        stats.framework_shares["f"] = 0.0
    alloc.allocate()
    assert stats.cycles == 1


def test_framework_added_suppressed_gets_offers_once_revived():
    alloc, _ = make()
    alloc.add_framework("f", suppressed=True)
    alloc.add_agent("n", R("cpus:1;mem:64"))
    assert alloc.allocate() == []
    alloc.suppress_offers("f")  # suppressing twice must not unbalance the role's count
    alloc.revive_offers("f")
    assert len(alloc.allocate()) == 1


def test_single_role_accounting_is_deferred_exactly():
    """With one role the role sorter is brought up to date lazily; once a
    second role arrives, shares and allocation counts — and so the order when
    shares tie — are exactly those of an allocator that never deferred."""
    def scenario(force_eager):
        alloc, clock = make()
        for i in range(4):
            alloc.add_agent(f"n{i}", R("cpus:1;mem:1024"))
        alloc.add_framework("f1", role="a")
        if force_eager:  # a second (idle) role keeps the role sorter eager
            alloc.add_framework("idle", role="zz", suppressed=True)
        log = []

        def cycle(answer):
            for offer in alloc.allocate():
                log.append((offer.framework_id, offer.agent_id))
                answer(offer)
            clock.advance(1)

        kept = []
        def keep_two(offer):  # role a ends up holding 2 agents after 8 grants
            if len(kept) < 2:
                kept.append(offer.agent_id)
                alloc.accept_offer(offer.id, offer.resources, refuse_seconds=0)
            else:
                alloc.decline_offer(offer.id, refuse_seconds=0)
        for _ in range(3):
            cycle(keep_two)
        alloc.add_framework("g", role="b")
        cycle(lambda offer: alloc.accept_offer(offer.id, offer.resources, refuse_seconds=0))
        # both roles hold 2 agents; free one of each: equal shares, and the
        # role with fewer allocations received (b) must come first
        alloc.recover_resources("f1", kept[0], R("cpus:1;mem:1024"))
        (b_agent, _), = sorted(alloc.allocation("g").items())[:1]
        alloc.recover_resources("g", b_agent, R("cpus:1;mem:1024"))
        cycle(lambda offer: alloc.decline_offer(offer.id, refuse_seconds=0))
        shares = dict(alloc.statistics().role_shares)
        shares.pop("zz", None)
        alloc.check_invariants()
        return log, shares

    eager, deferred = scenario(force_eager=True), scenario(force_eager=False)
    assert deferred == eager
    assert eager[0][-2][0] == "g"  # the tie went to the role with fewer allocations


# --------------------------------------------- preferences (fair-share preemption's Prefer)
def test_preferred_role_gets_the_agent_ahead_of_weighted_drf_until_the_window_ends():
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_framework("a1", role="a")
    alloc.add_framework("b1", role="b")
    alloc.update_weights({"a": 100.0})  # a would win every tie and more
    alloc.prefer_role("n0", "b", until=clock.now() + 2.0)
    assert alloc.preferences() == {"n0": ("b", 2.0)}
    (offer,) = alloc.tick()  # the preference triggers allocation of the agent
    assert (offer.framework_id, offer.resources) == ("b1", R("cpus:4;mem:4096"))
    alloc.decline_offer(offer.id, refuse_seconds=0)
    clock.advance(2.0)  # the window is over: weighted DRF again
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a1"
    assert alloc.preferences() == {} and alloc.snapshot()["preferred"] == {}
    alloc.check_invariants()


def test_preference_gives_way_when_the_role_cannot_take_the_agent():
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_framework("a1", role="a")
    alloc.add_framework("b1", role="b")
    alloc.add_framework("b2", role="b", suppressed=True)
    alloc.prefer_role("n0", "b", until=10.0)
    (offer,) = alloc.allocate()
    assert offer.framework_id == "b1"
    alloc.decline_offer(offer.id, refuse_seconds=60)  # b1 filters it, b2 is suppressed: a1 may have it
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a1"
    alloc.check_invariants()


def test_preference_beats_a_guarantee_stage_but_not_the_headroom_or_a_limit():
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_agent("n1", R("cpus:4;mem:4096"))
    alloc.add_framework("g1", role="g")
    alloc.add_framework("b1", role="b")
    alloc.update_quota("g", guarantee=R("cpus:4;mem:4096"))
    alloc.update_quota("b", limit=R("cpus:3"))
    alloc.prefer_role("n0", "b", until=10.0)
    offers = {(o.agent_id, o.framework_id): o.resources for o in alloc.allocate()}
    # b gets n0 first, up to its limit (without the preference the guarantee
    # stage could have served g there first); the headroom for g stays
    assert offers[("n0", "b1")] == R("cpus:3;mem:4096")
    held_by_g = sum(r.get("cpus") for (agent, fw), r in offers.items() if fw == "g1")
    assert held_by_g >= 4  # its guarantee is met (plus what nobody else may take)
    alloc.check_invariants()


def test_a_preference_only_for_a_role_with_eligible_frameworks_and_a_past_until_clears_it():
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_framework("a1", role="a")
    alloc.prefer_role("n0", "nobody", until=5.0)  # no framework in that role: DRF order
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a1"
    alloc.prefer_role("n0", "nobody", until=0.0)
    assert alloc.preferences() == {}
    with pytest.raises(Exception):
        alloc.prefer_role("missing", "b", until=5.0)
    with pytest.raises(Exception):
        alloc.prefer_role("n0", "bad role", until=5.0)
    alloc.prefer_role("n0", "b", until=5.0)
    alloc.remove_agent("n0")
    assert alloc.preferences() == {}


def test_a_cycle_with_every_framework_suppressed_walks_no_agent():
    # at 100,000 agents the list and shuffle of a cycle that can grant nothing
    # cost ~0.1 s of the master's loop every allocation interval
    alloc, clock = make()
    for i in range(50):
        alloc.add_agent(f"a{i}", R("cpus:4;mem:1024"))
    alloc.add_framework("f", suppressed=True)
    before = alloc._rng.getstate()
    clock.advance(10.0)
    assert alloc.tick() == [] and alloc._rng.getstate() == before   # no shuffle: no walk
    alloc.revive_offers("f")
    assert {offer.agent_id for offer in alloc.allocate()} == {f"a{i}" for i in range(50)}


@pytest.mark.parametrize("roles", [("r", "r"), ("r1", "r2")])  # the fast path (one role) and the stage loop
def test_the_offer_gate_passes_an_agent_to_the_next_framework_and_is_asked_again_once_changed(roles):
    """``offer_gate`` (offer filters judged by the allocator's owner): a
    framework it refuses is skipped and the agent goes to the next one in
    the order; an agent nobody may take is offered again only after
    ``offer_filters_changed``."""
    alloc, _ = make()
    alloc.add_framework("a", role=roles[0])
    alloc.add_framework("b", role=roles[1])
    alloc.add_agent("x", R("cpus:4;mem:4096"))
    allowed = {"b"}
    alloc.offer_gate = lambda framework_id, agent_id: framework_id in allowed and agent_id == "x"
    (offer,) = alloc.allocate()
    assert offer.framework_id == "b"      # "a" comes first in the order, but its filters refuse "x"
    alloc.decline_offer(offer.id, refuse_seconds=0)
    allowed.clear()
    assert alloc.allocate() == []
    allowed.add("a")
    assert alloc.allocate() == []         # nothing told the allocator: the agent's idle stamp holds
    alloc.offer_filters_changed()
    (offer,) = alloc.allocate()
    assert offer.framework_id == "a"

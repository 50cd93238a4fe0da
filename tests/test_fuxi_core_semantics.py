"""The Fuxi core on the seeds' own examples (issue 16 §2): gangs, priority
preemption, FAIR, locality order, temporary blacklists, "no machine can
ever fit". Each test states what the code before issue 16 did instead."""

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.core import (
    WAIT_ALL_OR_NOTHING,
    WAIT_NEVER_FITS,
    FuxiCore,
    FuxiError,
    KillSlot,
    SlotGranted,
    SlotRevoked,
)
from mesoslike_frameworks.fuxi.model import JobSpec, Locality, UnitSpec
from mesoslike_frameworks.fuxi.quota import parse_quota

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
_seq = iter(range(1, 10**9))


def offer(host, res="cpus:1;mem:100", room="er0"):
    return Offer(f"o{next(_seq)}", f"a-{host}", host, R(res), {"room": room})


def unit(name="su", slots=1, slot="cpus:1;mem:100", **kwargs):
    return UnitSpec(name, slots, R(slot), **kwargs)


def job(*units, name="j", **kwargs):
    return JobSpec(name, units or (unit(),), **kwargs)


def grants(out, job_id=None):
    return [c.slot for c in out if isinstance(c, SlotGranted) and (job_id is None or c.slot.job_id == job_id)]


def hosts(out, job_id=None):
    return sorted(s.hostname for s in grants(out, job_id))


def kills(out):
    return [c for c in out if isinstance(c, KillSlot)]


def unit_status(core, job_id, name="su"):
    (u,) = [u for u in core.status(job_id)["jobs"][0]["units"] if u["name"] == name]
    return u


@pytest.fixture
def clock():
    return FakeClock()


# ============================================================ all or nothing
def test_a_gang_accumulates_pieces_across_batches_and_a_lower_unit_cannot_take_them(clock):
    # before: planned within one batch only; the three pieces of the first
    # batch went to the waiting priority-900 unit and the gang got nothing
    core = FuxiCore(clock=clock)
    low, _ = core.submit(job(unit(slots=10), name="low", priority=900))
    core.on_offers([])                                               # low waits
    gang, _ = core.submit(job(unit(slots=4, all_or_nothing=True), name="gang", priority=1))
    core.on_offers([])                                               # the gang waits too
    out = core.on_offers([offer("M1"), offer("M2"), offer("M3")])   # 3 of 4
    assert grants(out) == [] and unit_status(core, gang)["reserved"] == 3
    out = core.on_offers([offer("M4")])                              # the 4th, alone
    assert grants(out) == [] and unit_status(core, gang)["reserved"] == 4
    out = core.on_offers([offer(h) for h in ("M1", "M2", "M3", "M4", "M5")])
    assert hosts(out, gang) == ["M1", "M2", "M3", "M4"]              # all at once
    assert hosts(out, low) == ["M5"]                                 # the rest goes on


def test_a_priority_1_gang_is_not_starved_by_ten_piecemeal_frees(clock):
    # the measurement: 0 slots for the gang after 10 frees while the
    # priority-900 unit took every one
    core = FuxiCore(clock=clock, preemption=False)
    low, _ = core.submit(job(unit(slots=20), name="low", priority=900))
    gang, _ = core.submit(job(unit(slots=4, all_or_nothing=True), name="gang", priority=1))
    core.on_offers([])
    for i in range(10):
        core.on_offers([offer(f"M{i}")])
        clock.advance(1)
    assert unit_status(core, gang)["reserved"] == 4
    assert unit_status(core, low)["granted"] == 6
    out = core.on_offers([offer(f"M{i}") for i in range(10)])        # the reserved machines come back
    assert len(grants(out, gang)) == 4


def test_a_gang_that_cannot_complete_releases_its_reservation_on_timeout_so_gangs_cannot_deadlock(clock):
    # gang A may only use M1 and M2, and M2 is held for good by a higher
    # priority unit: A could hold M1 forever, and gang B (which may only use
    # M1) would starve. A's reservation ends after gang_seconds; it backs off
    core = FuxiCore(clock=clock, gang_seconds=10, preemption=False)
    core.submit(job(unit(name="hog", locality=[Locality.machine("M2")]), name="hog", priority=0))
    core.on_offers([offer("M2")])
    a, _ = core.submit(job(unit(slots=2, all_or_nothing=True, locality=[Locality.machine("M1"),
                                                                          Locality.machine("M2")]),
                           name="A", priority=5))
    b, _ = core.submit(job(unit(all_or_nothing=True, locality=[Locality.machine("M1")]), name="B", priority=5))
    core.on_offers([offer("M1")])
    assert unit_status(core, a)["reserved"] == 1 and unit_status(core, b)["granted"] == 0
    clock.advance(5)
    assert grants(core.on_offers([offer("M1")])) == []             # still A's
    clock.advance(6)                                                 # past gang_seconds
    out = core.on_offers([offer("M1")])
    assert hosts(out, b) == ["M1"] and unit_status(core, a)["reserved"] == 0
    assert core.counters["gang_reservations_expired"] == 1


def test_a_gang_in_backoff_still_starts_when_one_batch_holds_all_of_it(clock):
    core = FuxiCore(clock=clock, gang_seconds=10, preemption=False)
    a, _ = core.submit(job(unit(slots=2, all_or_nothing=True), name="A"))
    core.on_offers([offer("M1")])
    clock.advance(11)
    core.on_offers([])                                               # expired: backing off
    assert unit_status(core, a)["reserved"] == 0
    assert grants(core.on_offers([offer("M1")])) == []              # no reservation while backing off
    assert unit_status(core, a)["reserved"] == 0
    assert hosts(core.on_offers([offer("M1"), offer("M2")]), a) == ["M1", "M2"]


def test_a_gang_preempts_lower_priority_for_all_its_slots_at_once(clock):
    # before: gangs never preempted
    core = FuxiCore(clock=clock)
    low, _ = core.submit(job(unit(slots=4), name="low", priority=500))
    core.on_offers([offer("M1", "cpus:2;mem:200"), offer("M2", "cpus:2;mem:200")])
    gang, _ = core.submit(job(unit(slots=3, all_or_nothing=True), name="gang", priority=10))
    out = core.on_offers([])
    assert len(kills(out)) == 3 and {r.job_id for r in out if isinstance(r, SlotRevoked)} == {low}
    out = core.on_offers([offer("M1", "cpus:2;mem:200"), offer("M2", "cpus:1;mem:100")])
    assert len(grants(out, gang)) == 3 and grants(out, low) == []


def test_a_gang_does_not_preempt_when_it_cannot_free_room_for_all_of_it(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2), name="low", priority=500))
    core.on_offers([offer("M1", "cpus:2;mem:200")])
    gang, _ = core.submit(job(unit(slots=3, all_or_nothing=True), name="gang", priority=10))
    assert kills(core.on_offers([])) == []                          # 2 of 3 is not worth a kill
    assert unit_status(core, gang)["why_waiting"] == WAIT_ALL_OR_NOTHING


def test_a_gang_honours_locality_machine_first(clock):
    # before: the gang's plan went machine by machine in agent order (M1, M2)
    core = FuxiCore(clock=clock)
    gang, _ = core.submit(job(unit(slots=2, all_or_nothing=True,
                                   locality=[Locality.cluster(2), Locality.machine("M3", 2)])))
    out = core.on_offers([offer(h, "cpus:4;mem:400") for h in ("M1", "M2", "M3")])
    assert hosts(out, gang) == ["M3", "M3"]


# ======================================================= priority preemption
def test_preemption_takes_the_lowest_priority_first_seed_002(clock):
    # M1 holds one priority-200 slot of 2 cpus; M2 two priority-900 slots of
    # 1 cpu. Before: the machine needing the fewest kills lost its
    # priority-200 slot. Seed 002: from the lowest priority upward
    core = FuxiCore(clock=clock)
    mid, _ = core.submit(job(unit(slot="cpus:2;mem:100", locality=[Locality.machine("M1")]), name="mid",
                             priority=200))
    low, _ = core.submit(job(unit(slots=2, locality=[Locality.machine("M2", 2)]), name="low", priority=900))
    core.on_offers([offer("M1", "cpus:2;mem:200"), offer("M2", "cpus:2;mem:200")])
    core.submit(job(unit(slot="cpus:2;mem:100"), name="urgent", priority=100))
    out = core.on_offers([])
    revoked = [c for c in out if isinstance(c, SlotRevoked)]
    assert len(revoked) == 2 and {r.job_id for r in revoked} == {low}


def test_preemption_frees_room_for_every_missing_slot_in_one_pass(clock):
    # before: one slot's room per pass, so a 4-slot urgent unit took 4 passes
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=8), name="low", priority=900))
    core.on_offers([offer(f"M{i}", "cpus:2;mem:200") for i in range(4)])
    urgent, _ = core.submit(job(unit(slots=4), name="urgent", priority=1))
    out = core.on_offers([])
    assert len(kills(out)) == 4
    out = core.on_offers([offer(f"M{i}", "cpus:1;mem:100") for i in range(4)])
    assert len(grants(out, urgent)) == 4


def test_the_freed_room_is_reserved_for_the_urgent_unit(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2), name="low", priority=900))
    core.on_offers([offer("M1", "cpus:2;mem:200")])
    lower, _ = core.submit(job(unit(slots=2), name="lower", priority=950))      # may not preempt "low"
    core.on_offers([])
    urgent, _ = core.submit(job(unit(slots=1), name="urgent", priority=1))
    assert len(kills(core.on_offers([]))) == 1
    out = core.on_offers([offer("M1", "cpus:1;mem:100")])
    assert hosts(out, urgent) == ["M1"] and grants(out, lower) == []


def test_preemption_takes_back_a_lower_units_reservation_before_it_kills(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2), name="low", priority=900))
    core.on_offers([offer("M1", "cpus:2;mem:200")])
    mid, _ = core.submit(job(unit(slots=2), name="mid", priority=300))
    assert len(kills(core.on_offers([]))) == 2                       # mid's room is on its way
    assert unit_status(core, mid)["reserved"] == 2
    urgent, _ = core.submit(job(unit(slots=1), name="urgent", priority=1))
    assert kills(core.on_offers([])) == []                           # mid's reservation, not a task
    assert unit_status(core, urgent)["reserved"] == 1 and unit_status(core, mid)["reserved"] == 0
    out = core.on_offers([offer("M1", "cpus:2;mem:200")])
    assert hosts(out, urgent) == ["M1"] and hosts(out, mid) == ["M1"]


# ===================================================================== FAIR
def test_fair_units_of_equal_priority_split_one_machine_evenly(clock):
    # before: the picked unit filled the machine, 10/0
    core = FuxiCore(clock=clock, policies={"default": "FAIR"})
    a, _ = core.submit(job(unit(slots=10), name="a"))
    b, _ = core.submit(job(unit(slots=10), name="b"))
    core.on_offers([])                                                # both wait
    out = core.on_offers([offer("M1", "cpus:10;mem:1000")])
    assert (len(grants(out, a)), len(grants(out, b))) == (5, 5)


def test_fair_units_arriving_together_split_the_machine_too(clock):
    core = FuxiCore(clock=clock, policies={"default": "FAIR"})
    a, _ = core.submit(job(unit(slots=10), name="a"))
    b, _ = core.submit(job(unit(slots=10), name="b"))
    out = core.on_offers([offer("M1", "cpus:10;mem:1000")])
    assert (len(grants(out, a)), len(grants(out, b))) == (5, 5)


def test_fair_among_equal_priority_only_the_higher_priority_comes_first(clock):
    core = FuxiCore(clock=clock, policies={"default": "FAIR"})
    a, _ = core.submit(job(unit(slots=10), name="a", priority=5))
    b, _ = core.submit(job(unit(slots=4), name="b", priority=1))
    c, _ = core.submit(job(unit(slots=10), name="c", priority=5))
    core.on_offers([])
    out = core.on_offers([offer("M1", "cpus:10;mem:1000")])
    # seed 002: the priority group first, then the next one shares the rest evenly
    assert (len(grants(out, b)), len(grants(out, a)), len(grants(out, c))) == (4, 3, 3)


def test_fifo_still_serves_a_picked_unit_greedily(clock):
    core = FuxiCore(clock=clock)
    a, _ = core.submit(job(unit(slots=10), name="a"))
    core.submit(job(unit(slots=10), name="b"))
    core.on_offers([])
    assert len(grants(core.on_offers([offer("M1", "cpus:10;mem:1000")]), a)) == 10


def test_the_policy_is_the_quota_groups_seed_000(clock):
    # before: set per job, and one group could mix both
    core = FuxiCore({"batch": None}, clock=clock, policies={"batch": "FAIR"})
    with pytest.raises(FuxiError, match="FIFO or FAIR is the quota group's"):
        core.submit(job(quota_group="batch", policy="FIFO"))
    with pytest.raises(FuxiError, match="schedules FIFO"):
        core.submit(job(policy="FAIR"))                             # default is FIFO
    job_id, _ = core.submit(job(quota_group="batch"))               # no policy: the group's
    assert core.status(job_id)["jobs"][0]["policy"] == "FAIR"
    assert {g["name"]: g["policy"] for g in core.status()["quota_groups"]} == {"batch": "FAIR", "default": "FIFO"}
    config = parse_quota({"quota": {"batch": {"cpus": 4, "policy": "FAIR"}}})
    assert config.policies == {"batch": "FAIR"} and config.groups == {"batch": R("cpus:4")}
    assert FuxiCore.from_config(config, clock=clock).groups["batch"].policy == "FAIR"


# ============================================================ locality order
def test_locality_machine_before_room_before_cluster_whatever_the_listed_order(clock):
    # before: preferences were tried in the order listed: [cluster, room,
    # machine] landed on M1, M2 instead of the named machine
    core = FuxiCore(clock=clock)
    j, _ = core.submit(job(unit(slots=2, locality=[Locality.cluster(2), Locality.room("er1", 2),
                                                   Locality.machine("M5", 2)])))
    out = core.on_offers([offer(h, "cpus:4;mem:400", room="er1" if h in ("M3", "M4") else "er0")
                          for h in ("M1", "M2", "M3", "M4", "M5")])
    assert hosts(out, j) == ["M5", "M5"]
    k, _ = core.submit(job(unit(slots=3, locality=[Locality.cluster(3), Locality.room("er1", 2),
                                                   Locality.machine("M5", 1)]), name="k"))
    out = core.on_offers([offer(h, "cpus:4;mem:400", room="er1" if h in ("M3", "M4") else "er0")
                          for h in ("M1", "M2", "M3", "M4", "M5")])
    placed = hosts(out, k)
    assert "M5" in placed and "M3" in placed and "M4" in placed


# =============================================================== blacklists
def test_a_units_blacklist_entry_expires_seed_000_says_for_a_while(clock):
    # before: for good
    core = FuxiCore(clock=clock)
    j, _ = core.submit(job(unit(slots=3), blacklist_seconds=60))
    core.blacklist(j, "su", "M1")
    assert hosts(core.on_offers([offer("M1")])) == []
    clock.advance(59)
    assert hosts(core.on_offers([offer("M1")])) == []
    clock.advance(1)
    assert hosts(core.on_offers([offer("M1")])) == ["M1"]


def test_the_global_blacklist_needs_reports_from_two_jobs_and_they_expire(clock):
    # before: one job's report blacklisted the machine for every job, for good
    core = FuxiCore(clock=clock, blacklist_report_seconds=100)
    a, _ = core.submit(job(unit(slots=10), name="a"))
    b, _ = core.submit(job(name="b"))
    core.report_host(a, "M1")
    core.report_host(a, "M1")                                        # the same job twice: still one
    assert "M1" not in core.global_blacklist
    assert hosts(core.on_offers([offer("M1")]), a) == ["M1"]
    clock.advance(10)
    core.report_host(b, "M1")
    assert "M1" in core.global_blacklist
    assert hosts(core.on_offers([offer("M1")])) == []
    clock.advance(91)                                                # a's report is 101 s old
    assert "M1" not in core.global_blacklist
    assert hosts(core.on_offers([offer("M1")]), a) == ["M1"]
    core.add_to_global_blacklist("M9")                               # the operators': for good
    clock.advance(10**6)
    assert "M9" in core.global_blacklist
    with pytest.raises(FuxiError, match="unknown job"):
        core.report_host("nope", "M1")


def test_the_quota_file_sets_how_many_reports_and_for_how_long(clock):
    config = parse_quota({"blacklist": {"hosts": ["h9"], "reports": 3, "report_seconds": 30}})
    core = FuxiCore.from_config(config, clock=clock)
    assert core.global_blacklist == {"h9"}
    jobs = [core.submit(job(name=f"j{i}"))[0] for i in range(3)]
    for job_id in jobs[:2]:
        core.report_host(job_id, "h1")
    assert "h1" not in core.global_blacklist
    core.report_host(jobs[2], "h1")
    assert "h1" in core.global_blacklist
    for bad, field in (({"reports": 0}, "blacklist.reports"), ({"report_seconds": -1}, "blacklist.report_seconds"),
                       ({"other": 1}, "blacklist")):
        with pytest.raises(ValueError, match=field):
            parse_quota({"blacklist": bad})
    with pytest.raises(ValueError, match="quota.a.policy"):
        parse_quota({"quota": {"a": {"policy": "LIFO"}}})


# ======================================================= no machine can ever fit
def test_a_slot_no_single_machine_holds_says_no_machine_can_ever_fit(clock):
    # before: "no fit", for ever. M1 has the cpus, M2 the memory, nobody both
    core = FuxiCore(clock=clock)
    j, _ = core.submit(job(unit(slot="cpus:4;mem:4096")))
    core.on_offers([offer("M1", "cpus:8;mem:1024"), offer("M2", "cpus:1;mem:65536")])
    assert unit_status(core, j)["why_waiting"] == WAIT_NEVER_FITS
    core.on_offers([offer("M3", "cpus:8;mem:8192")])                  # a big enough machine joins
    assert unit_status(core, j)["granted"] == 1


def test_what_can_ever_fit_follows_machines_of_new_kinds_for_every_unit_of_the_size(clock):
    # the sizes seen are kept batch by batch (a new machine widens them in place); a
    # machine with a kind never seen before, or known only from an adopted slot, starts over
    core = FuxiCore(clock=clock)
    j, _ = core.submit(job(unit(slot="cpus:1;mem:100;gpus:1"), unit("twin", slot="cpus:1;mem:100;gpus:1")))
    core.on_offers([offer("M1", "cpus:8;mem:8192")])
    assert unit_status(core, j)["why_waiting"] == unit_status(core, j, "twin")["why_waiting"] == WAIT_NEVER_FITS
    core.on_offers([offer("M2", "cpus:2;mem:200;gpus:1")])
    assert unit_status(core, j)["granted"] + unit_status(core, j, "twin")["granted"] == 1
    # the other one was not reached in that pass: it may fit (M2, once free), it is no longer "never"
    assert unit_status(core, j, "twin")["why_waiting"] in ("no fit", "lower priority")
    core._check()


def test_a_pass_leaves_the_collector_as_it_found_it(clock):
    import gc
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=3)))
    assert gc.isenabled()
    core.on_offers([offer("M1", "cpus:1;mem:100")])
    assert gc.isenabled()                       # deferred during the pass, back on after it
    gc.disable()
    try:
        core.on_offers([offer("M2", "cpus:1;mem:100")])
        assert not gc.isenabled()               # a caller's choice is kept
    finally:
        gc.enable()
    with pytest.raises(AttributeError):
        core.on_offers([object()])              # a pass that fails still turns it back on
    assert gc.isenabled()


def test_a_machine_seen_bigger_before_still_counts_when_it_is_busy(clock):
    core = FuxiCore(clock=clock, preemption=False)
    core.submit(job(unit(slots=4), name="first"))
    core.on_offers([offer("M1", "cpus:4;mem:400")])                   # full now
    later, _ = core.submit(job(unit(slot="cpus:2;mem:200"), name="later"))
    core.on_offers([offer("M1", "cpus:0.5;mem:50")])
    assert unit_status(core, later)["why_waiting"] == "no fit"       # it can fit once M1 frees


# ================================================================ the books
def test_the_books_balance_through_gangs_preemption_and_expiry(clock):
    core = FuxiCore(clock=clock, gang_seconds=5)
    core.submit(job(unit(slots=6), name="low", priority=900))
    core.submit(job(unit(slots=3, all_or_nothing=True), name="gang", priority=5))
    core.submit(job(unit(slots=2, locality=[Locality.room("er1", 2)]), name="roomy", priority=50))
    for step in range(12):
        core.on_offers([offer(f"M{(step + i) % 5}", room=f"er{i % 2}") for i in range(step % 3)])
        core._check()
        clock.advance(2)

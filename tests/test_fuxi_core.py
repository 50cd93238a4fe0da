"""The Fuxi scheduler core, sans I/O: offers in, grants and commands out."""

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.core import (
    WAIT_ALL_OR_NOTHING,
    WAIT_BLACKLIST,
    WAIT_LOWER_PRIORITY,
    WAIT_NEVER_FITS,
    WAIT_QUOTA,
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    SlotGranted,
    SlotRevoked,
    SuppressOffers,
)
from mesoslike_frameworks.fuxi.model import JobSpec, Locality, UnitSpec

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
SLOT = "cpus:1;mem:100"


def offers(*hosts, res="cpus:4;mem:4096", room=None, tag=""):
    return [Offer(f"o-{h}{tag}", f"a-{h}", h, R(res), {"room": room or ("er1" if i % 2 else "er0")})
            for i, h in enumerate(hosts)]


def unit(name="su", slots=1, slot=SLOT, **kwargs):
    return UnitSpec(name, slots, R(slot), **kwargs)


def job(*units, name="j", **kwargs):
    return JobSpec(name, units or (unit(),), **kwargs)


def grants(out):
    return [c.slot for c in out if isinstance(c, SlotGranted)]


def hosts(out):
    return sorted(s.hostname for s in grants(out))


def kinds(out, kind):
    return [c for c in out if isinstance(c, kind)]


@pytest.fixture
def clock():
    return FakeClock()


# ------------------------------------------------------------- seed 000
SEED_UNIT = unit(slots=5, locality=[Locality.machine(f"M{i}") for i in range(1, 6)] + [Locality.cluster(5)])


def test_seed_000_one_slot_on_each_preferred_machine(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(SEED_UNIT))
    out = core.on_offers(offers("M1", "M2", "M3", "M4", "M5", "M6", "M7"))
    assert hosts(out) == ["M1", "M2", "M3", "M4", "M5"]


def test_seed_000_with_m3_blacklisted_four_on_the_others_and_one_elsewhere(clock):
    core = FuxiCore(clock=clock, global_blacklist=["M3"])
    core.submit(job(SEED_UNIT))
    out = core.on_offers(offers("M1", "M2", "M3", "M4", "M5", "M6", "M7"))
    placed = hosts(out)
    assert placed[:4] == ["M1", "M2", "M4", "M5"] and placed[4] in ("M6", "M7")


# ------------------------------------------------------ level-1 citizenship
def test_suppresses_with_nothing_waiting_and_revives_when_demand_arrives(clock):
    core = FuxiCore(clock=clock)
    out = core.on_offers(offers("M1"))
    assert kinds(out, DeclineOffers) and kinds(out, SuppressOffers)
    _, out = core.submit(job())
    assert kinds(out, ReviveOffers)
    out = core.on_offers(offers("M1", "M2"))
    (launch,) = kinds(out, LaunchSlots)
    assert launch.offer_ids == ("o-M1",) and len(launch.slots) == 1
    (decline,) = kinds(out, DeclineOffers)
    assert decline.offer_ids == ("o-M2",)       # never held past the pass
    assert kinds(out, SuppressOffers)           # nothing left to wait for


def test_declines_with_a_short_filter_while_units_wait_for_other_resources(clock):
    core = FuxiCore(clock=clock, decline_seconds=2.0)
    core.submit(job(unit(slot="cpus:8;mem:100")))
    out = core.on_offers(offers("M1"))
    (decline,) = kinds(out, DeclineOffers)
    assert decline.refuse_seconds == 2.0 and not kinds(out, SuppressOffers)
    # issue 16: bigger than every machine seen is no longer a plain "no fit"
    assert core.status()["jobs"][0]["units"][0]["why_waiting"] == WAIT_NEVER_FITS


# -------------------------------------------------------------- limits
def test_max_per_machine_spreads_a_unit(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=6, max_per_machine=2)))
    out = core.on_offers(offers("M1", "M2"))
    assert hosts(out) == ["M1", "M1", "M2", "M2"]
    out = core.on_offers(offers("M3", tag="b"))
    assert hosts(out) == ["M3", "M3"]


def test_the_units_own_blacklist_and_the_reason_it_waits(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2, blacklist=["M1"])))
    out = core.on_offers(offers("M1"))
    assert grants(out) == []
    assert core.status()["jobs"][0]["units"][0]["why_waiting"] == WAIT_BLACKLIST


def test_locality_machine_then_room_then_cluster(clock):
    core = FuxiCore(clock=clock)
    spec = unit(slots=4, locality=[Locality.machine("M4", 1), Locality.room("er9", 2), Locality.cluster(1)])
    core.submit(job(spec))
    batch = offers("M1", "M2") + offers("M3", room="er9") + offers("M4") + offers("M5", room="er9")
    placed = hosts(core.on_offers(batch))
    assert placed.count("M4") == 1 and placed.count("M3") + placed.count("M5") == 2 and len(placed) == 4
    assert {"M3", "M5"} <= set(placed)          # round-robin over the room


def test_without_a_cluster_preference_a_unit_stays_on_its_machines_and_rooms(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=3, locality=[Locality.machine("M2", 3)])))
    assert hosts(core.on_offers(offers("M1", "M2", res="cpus:2;mem:4096"))) == ["M2", "M2"]
    assert hosts(core.on_offers(offers("M1", tag="b"))) == []


# -------------------------------------------------------------- quotas
def test_a_quota_group_caps_its_units(clock):
    core = FuxiCore({"a": R("cpus:3;mem:1000")}, clock=clock)
    core.submit(job(unit(slots=5), quota_group="a"))
    out = core.on_offers(offers("M1", "M2"))
    assert len(grants(out)) == 3
    assert core.status()["jobs"][0]["units"][0]["why_waiting"] == WAIT_QUOTA


def test_why_waiting_says_of_one_unit_what_status_says(clock):
    core = FuxiCore({"a": R("cpus:3;mem:1000")}, clock=clock)
    job_id, _ = core.submit(job(unit(slots=5), quota_group="a"))
    done_id, _ = core.submit(job(unit(name="small"), name="k"))
    core.on_offers(offers("M1", "M2"))
    assert core.why_waiting(job_id, "su") == WAIT_QUOTA == core.status(job_id)["jobs"][0]["units"][0]["why_waiting"]
    assert core.why_waiting(done_id, "small") == ""             # all its slots granted: it does not wait
    with pytest.raises(FuxiError, match="unknown job"):
        core.why_waiting("nope", "su")
    with pytest.raises(FuxiError, match="no unit 'other'"):
        core.why_waiting(job_id, "other")


def test_an_unknown_quota_group_is_refused_and_nothing_changes(clock):
    core = FuxiCore({"a": R("cpus:3")}, clock=clock)
    with pytest.raises(FuxiError, match="unknown quota group 'nope'"):
        core.submit(job(quota_group="nope"))
    assert core.status()["jobs"] == [] and not core.needs_offers()


def test_unused_quota_is_lent_in_proportion_and_taken_back_by_preemption(clock):
    core = FuxiCore({"a": R("cpus:4;mem:4000"), "b": R("cpus:2;mem:2000"), "c": R("cpus:2;mem:2000")},
                    clock=clock)
    # b and c wait for more than their quota; a is idle and lends its 4 cpus 1:1
    core.submit(job(unit(slots=10), quota_group="b", name="jb"))
    core.submit(job(unit(slots=10), quota_group="c", name="jc"))
    out = core.on_offers(offers("M1", "M2", "M3", res="cpus:4;mem:4096"))
    by_group = {}
    for slot in grants(out):
        by_group[slot.group] = by_group.get(slot.group, 0) + 1
    assert by_group == {"b": 4, "c": 4}           # 2 own + 2 borrowed each
    # a's owner comes back: a gets its quota back from the borrowers
    job_a, _ = core.submit(job(unit(slots=2), quota_group="a", name="ja"))
    out = core.on_offers(offers("M1", res="cpus:0.5;mem:100", tag="b"))   # nothing fits: preempt
    revoked = kinds(out, SlotRevoked)
    assert revoked and all(r.job_id != job_a for r in revoked)
    assert {core._slots.get(r.slot_id) for r in revoked} == {None}
    kills = {k.slot_id for k in kinds(out, KillSlot)}
    assert kills == {r.slot_id for r in revoked} and "quota taken back" in revoked[0].reason


def test_hunger_orders_the_groups_when_resources_free_up(clock):
    core = FuxiCore({"a": R("cpus:10;mem:10000"), "b": R("cpus:10;mem:10000")}, clock=clock)
    core.submit(job(unit(slots=4), quota_group="a", name="ja"))
    core.on_offers(offers("M1", res="cpus:4;mem:4096"))     # a uses 4 of 10
    core.submit(job(unit(slots=4), quota_group="a", name="ja2"))
    core.submit(job(unit(slots=4), quota_group="b", name="jb"))
    core.on_offers([])                                       # active pass: nothing free, both wait
    out = core.on_offers(offers("M2", res="cpus:1;mem:100"))
    (slot,) = grants(out)
    assert slot.group == "b"                                 # b is hungrier (0/10 < 4/10)


# ----------------------------------------------------------- FIFO / FAIR
def _queue_up(core, policy, names, slots=2):
    ids = []
    for name in names:
        job_id, _ = core.submit(job(unit(slots=slots), name=name, policy=policy))
        ids.append(job_id)
    core.on_offers([])  # active pass with nothing free: all wait
    return ids


def test_fifo_serves_the_earliest_submission_first_among_equal_priority(clock):
    core = FuxiCore(clock=clock)
    first, second = _queue_up(core, "FIFO", ["one", "two"])
    out = core.on_offers(offers("M1", res="cpus:2;mem:200"))
    assert [s.job_id for s in grants(out)] == [first, first]


def test_fair_serves_the_unit_with_fewest_granted_slots_first(clock):
    # issue 16: FAIR is the quota group's, and two FAIR units waiting for one
    # machine split it (test_fuxi_core_semantics.py), so "one" takes its two
    # slots before "two" waits
    core = FuxiCore(clock=clock, policies={"default": "FAIR"})
    first, = _queue_up(core, "FAIR", ["one"], slots=3)
    out = core.on_offers(offers("M1", res="cpus:2;mem:200"))
    assert [s.job_id for s in grants(out)] == [first, first]
    second, = _queue_up(core, "FAIR", ["two"], slots=3)
    out = core.on_offers(offers("M1", res="cpus:1;mem:100", tag="b"))
    assert [s.job_id for s in grants(out)] == [second]       # FIFO would give first its third slot


def test_higher_priority_waits_first_whatever_the_order(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=1), name="low", priority=200))
    urgent, _ = core.submit(job(unit(slots=1), name="high", priority=10))
    core.on_offers([])
    out = core.on_offers(offers("M1", res="cpus:1;mem:100"))
    assert [s.job_id for s in grants(out)] == [urgent]


# ----------------------------------------------------------- preemption
def test_priority_preemption_takes_the_lowest_priority_slots_and_gives_them_to_the_urgent_unit(clock):
    core = FuxiCore(clock=clock)
    low, _ = core.submit(job(unit(slots=2), name="low", priority=300))
    mid, _ = core.submit(job(unit(slots=2), name="mid", priority=200))
    core.on_offers(offers("M1", res="cpus:4;mem:400"))                # the machine is full
    urgent, _ = core.submit(job(unit(slots=1), name="urgent", priority=100))
    out = core.on_offers([])
    (revoked,) = kinds(out, SlotRevoked)
    assert revoked.job_id == low and kinds(out, KillSlot)[0].slot_id == revoked.slot_id
    # the low job waits again; the freed resources go to the urgent unit
    out = core.on_offers(offers("M1", res="cpus:1;mem:100", tag="b"))
    assert [s.job_id for s in grants(out)] == [urgent]


def test_preemption_never_takes_equal_or_higher_priority(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2), name="same", priority=100))
    core.submit(job(unit(slots=2), name="higher", priority=50))
    core.on_offers(offers("M1", res="cpus:4;mem:400"))
    core.submit(job(unit(slots=1), name="new", priority=100))
    out = core.on_offers([])
    assert not kinds(out, KillSlot) and not kinds(out, SlotRevoked)
    units = {j["name"]: j["units"][0] for j in core.status()["jobs"]}
    assert units["new"]["why_waiting"] == WAIT_LOWER_PRIORITY


def test_preemption_can_be_switched_off(clock):
    core = FuxiCore(clock=clock, preemption=False)
    core.submit(job(unit(slots=4), name="low", priority=300))
    core.on_offers(offers("M1", res="cpus:4;mem:400"))
    core.submit(job(unit(slots=1), name="urgent", priority=1))
    assert not kinds(core.on_offers([]), KillSlot)


# ------------------------------------------------------- all or nothing
def test_all_or_nothing_gets_every_slot_at_once_or_none(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=3, slot="cpus:2;mem:100", all_or_nothing=True)))
    out = core.on_offers(offers("M1", "M2", res="cpus:2;mem:4096"))   # room for 2 of 3
    assert grants(out) == [] and kinds(out, DeclineOffers)
    assert core.status()["jobs"][0]["units"][0]["why_waiting"] == WAIT_ALL_OR_NOTHING
    out = core.on_offers(offers("M1", "M2", "M3", res="cpus:2;mem:4096", tag="b"))
    assert hosts(out) == ["M1", "M2", "M3"]


# ------------------------------------------------- incremental protocol
def test_the_job_states_its_demand_once_and_grants_arrive_as_slots_come_back(clock):
    core = FuxiCore(clock=clock)
    job_id, _ = core.submit(job(unit(slots=3)))
    first = grants(core.on_offers(offers("M1", res="cpus:2;mem:200")))
    assert len(first) == 2
    assert core.status()["jobs"][0]["units"][0]["waiting"] == 1
    # a task ends and the job still wants its slot: nothing re-sent, the
    # outstanding desire is remembered and served when resources come back
    core.release(first[0].id, keep_desire=True)
    more = grants(core.on_offers(offers("M2", res="cpus:4;mem:400")))
    assert len(more) == 2                                       # the waiting one and the re-wanted one
    # the job returns slots it no longer needs: no new grants for them
    for slot in [first[1], *more]:
        core.release(slot.id)
    assert core.status()["jobs"][0]["units"][0]["desired"] == 0
    assert grants(core.on_offers(offers("M3"))) == [] and not core.needs_offers()


def test_bad_calls_from_a_job_are_clear_errors(clock):
    core = FuxiCore(clock=clock)
    job_id, _ = core.submit(job())
    with pytest.raises(FuxiError, match="unknown slot"):
        core.release("nope")
    with pytest.raises(FuxiError, match="unknown job or unit"):
        core.update_desire(job_id, "nope", 1)
    with pytest.raises(FuxiError, match=">= 0"):
        core.update_desire(job_id, "su", -1)
    with pytest.raises(FuxiError, match="taken"):
        core.submit(job(), job_id=job_id)


def test_a_unit_too_big_for_any_machine_says_no_machine_can_ever_fit_not_priority(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2), name="small", priority=1))
    core.on_offers(offers("M1", res="cpus:2;mem:200"))
    core.submit(job(unit(slot="cpus:64;mem:100"), name="huge", priority=100))
    core.on_offers([])
    units = {j["name"]: j["units"][0] for j in core.status()["jobs"]}
    # issue 16: it said "no fit" and waited forever
    assert units["huge"]["why_waiting"] == WAIT_NEVER_FITS == "no machine can ever fit"


def test_a_job_can_steer_its_next_slots_away_from_hosts_and_back(clock):
    core = FuxiCore(clock=clock)
    job_id, _ = core.submit(job(unit(slots=2)))
    core.avoid_hosts(job_id, "su", ["M1"])             # e.g. a backup must not land by its straggler
    assert hosts(core.on_offers(offers("M1"))) == []
    assert hosts(core.on_offers(offers("M1", "M2", tag="b"))) == ["M2", "M2"]
    core.update_desire(job_id, "su", 3)
    core.avoid_hosts(job_id, "su", [])
    assert hosts(core.on_offers(offers("M1", tag="c"))) == ["M1"]
    with pytest.raises(FuxiError):
        core.avoid_hosts(job_id, "nope", ["M1"])


def test_a_first_batch_with_an_agent_of_two_offers_sums_them(clock):
    """The first batch (no machine seen yet) in agent order is taken by a
    loop of its own; an agent of two offers in it is one machine with both
    offers' room, as in any later batch."""
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=2, slot="cpus:3;mem:100")))
    first = offers("h1", res="cpus:2;mem:4096") + offers("h1", res="cpus:4;mem:4096", tag="b") + offers("h2")
    out = core.on_offers(first)
    core._check()
    (launch_h1,) = [c for c in kinds(out, LaunchSlots) if c.agent_id == "a-h1"]
    assert sorted(launch_h1.offer_ids) == ["o-h1", "o-h1b"] and len(launch_h1.slots) == 1
    assert hosts(out) == ["h1", "h2"]


def test_a_batch_over_fewer_kinds_leaves_the_frontier_of_sizes_alone(clock):
    """The frontier of machine sizes is over the kinds of the batches that
    made it (here with GPUs); a later batch over other kinds (a known machine
    offering no GPU, then a machine first seen) must not widen it with its
    vectors -- it did, after the known machine, and failed (found by the
    simulator's offer filters, whose batches are subsets of the cluster)."""
    core = FuxiCore(clock=clock)
    core.submit(job(unit(slots=12)), "j1")
    core.on_offers(offers("h1", res="cpus:4;gpus:1;mem:4096"))
    # h1 is full of the unit's slots: it offers what it has left, no GPU (nothing new to learn of it)
    out = core.on_offers([*offers("h1", res="mem:100", tag="b"), *offers("h2", tag="b")])
    assert len(grants(out)) == 4
    core._check()
    out = core.on_offers(offers("h3", res="cpus:2;gpus:1;mem:4096", tag="c"))
    assert len(grants(out)) == 2
    core._check()

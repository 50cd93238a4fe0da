"""The Fuxi core's preemption search as a planner of its own
(mesoslike_frameworks/fuxi/preemption.py): it reads the scheduler's books,
yields decisions and changes nothing; the core carries them out.

Each test brings a real core (fake clock) to the point a pass preempts from
— a unit that waits after its active scheduling — with preemption off, asks
the planner what it would do, checks that asking changed nothing, then lets
the core preempt in a pass and checks it did what the planner said."""

from __future__ import annotations

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.books import WAIT_LOWER_PRIORITY
from mesoslike_frameworks.fuxi.core import FuxiCore, KillSlot, SlotGranted, SlotRevoked
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from mesoslike_frameworks.fuxi.preemption import Evict, PreemptionPlanner, SearchLater, WaitReason
from mesoslike_frameworks.fuxi.quota import compute_caps

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
MACHINES = {"h1": "cpus:4;mem:4096", "h2": "cpus:4;mem:4096"}


class Cluster:
    """Two machines; every pass offers what the core's slots leave free."""

    def __init__(self, core: FuxiCore) -> None:
        self.core = core
        self.used = {host: Resources() for host in MACHINES}
        self.slots: dict = {}
        self.passes = 0

    def apply(self, out: list) -> list:
        for command in out:
            if isinstance(command, SlotGranted):
                self.slots[command.slot.id] = command.slot
                self.used[command.slot.hostname] += command.slot.resources
            elif isinstance(command, KillSlot) and command.slot_id in self.slots:
                slot = self.slots.pop(command.slot_id)
                self.used[slot.hostname] -= slot.resources
        return out

    def submit(self, name: str, slots: int, priority: int, group: str = "default", cpus: int = 1) -> str:
        job_id, out = self.core.submit(JobSpec(name, (UnitSpec("u", slots, R(f"cpus:{cpus};mem:512")),),
                                               quota_group=group, priority=priority))
        self.apply(out)
        return job_id

    def run(self) -> list:
        """One pass over the free room; its commands."""
        self.passes += 1
        offers = [Offer(f"o{self.passes}-{host}", f"a-{host}", host, free, {})
                  for host, cap in MACHINES.items() if (free := R(cap) - self.used[host])]
        out = self.apply(self.core.on_offers(offers))
        self.core.clock.advance(1.0)
        return out


def plan(core: FuxiCore) -> list:
    """Every decision of a search outside a pass, carried out as the core would."""
    core._settle_use()
    decisions = []
    for decision in PreemptionPlanner(core, None, compute_caps(core.groups.values())).decisions():
        decisions.append(decision)
        if isinstance(decision, WaitReason):
            decision.unit.reason = decision.reason
        elif isinstance(decision, SearchLater):
            decision.unit.search_after = decision.until
        else:
            break    # an eviction changes the books: the first one is what this test looks at
    return decisions


def books(core: FuxiCore) -> tuple:
    """What a search must not change: slots, reservations, units' slots and holds."""
    return (sorted(core._slots), sorted((m.agent_id, sorted(m.holds.items()), sorted(m.slots))
                                        for m in core._machines.values()),
            sorted((k, sorted(u.holds.items()), sorted(u.slots)) for k, u in core._units.items()))


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(FuxiCore(clock=FakeClock(), preemption=False))


def test_it_plans_to_take_the_lowest_priority_newest_slots_and_the_core_does_so(cluster):
    cluster.submit("older", 4, priority=500)
    cluster.run()
    cluster.core.clock.advance(5.0)
    newer = cluster.submit("newer", 4, priority=500)      # the same priority, granted later: taken first
    cluster.run()
    urgent = cluster.submit("urgent", 3, priority=10)
    cluster.run()                                          # active scheduling: nothing fits, it waits
    before = books(cluster.core)

    (evict,) = [d for d in plan(cluster.core) if isinstance(d, Evict)]
    assert books(cluster.core) == before, "the planner changed the books"
    assert evict.unit.key == f"{urgent}/u" and "preempted by a higher priority unit" in evict.reason
    victims = [victim for _, taken, _ in evict.plan for victim in taken]
    assert {v.job_id for v in victims} == {newer} and len(victims) == 3
    assert sum(slots for _, _, slots in evict.plan) == 3

    cluster.core.preemption = True
    out = cluster.run()
    killed = [c.slot_id for c in out if isinstance(c, KillSlot)]
    assert sorted(killed) == sorted(v.id for v in victims)
    assert sorted(c.slot_id for c in out if isinstance(c, SlotRevoked)) == sorted(killed)
    cluster.core._check()


def test_owners_take_back_lent_quota_first(cluster):
    core = FuxiCore({"a": R("cpus:4;mem:4096"), "b": R("cpus:4;mem:4096")}, clock=FakeClock(), preemption=False)
    cluster = Cluster(core)
    borrower = cluster.submit("borrower", 8, priority=100, group="b")   # b holds 8 cpus: 4 of them a's
    cluster.run()
    owner = cluster.submit("owner", 2, priority=100, group="a")          # same priority: only a take-back
    cluster.run()
    before = books(core)

    (evict,) = [d for d in plan(core) if isinstance(d, Evict)]
    assert books(core) == before
    assert evict.unit.key == f"{owner}/u" and evict.reason == "quota taken back by its owner"
    assert {v.job_id for _, taken, _ in evict.plan for v in taken} == {borrower}


def test_nothing_lower_to_take_means_waiting_behind_higher_priority_and_searching_later(cluster):
    cluster.submit("first", 8, priority=10)
    cluster.run()
    late = cluster.submit("late", 2, priority=100)
    cluster.run()
    before = books(cluster.core)

    decisions = plan(cluster.core)
    assert books(cluster.core) == before
    assert not any(isinstance(d, Evict) for d in decisions)
    assert WaitReason(cluster.core._units[f"{late}/u"], WAIT_LOWER_PRIORITY) in decisions


@pytest.mark.parametrize("slots, planned", [(2, 2), (3, 0)])
def test_a_gang_is_planned_whole_or_not_at_all(cluster, slots, planned):
    # 3-cpu slots on two 4-cpu machines: room for two, never three
    cluster.submit("low", 8, priority=500)
    cluster.run()
    _, out = cluster.core.submit(JobSpec("gang", (UnitSpec("u", slots, R("cpus:3;mem:512"), all_or_nothing=True),),
                                         priority=10))
    cluster.apply(out)
    cluster.run()
    evictions = [d for d in plan(cluster.core) if isinstance(d, Evict)]
    assert sum(made for d in evictions for _, _, made in d.plan) == planned


def test_the_budget_bounds_what_one_search_looks_at(cluster):
    cluster.core.preemption_budget = 2
    cluster.submit("low", 8, priority=500)
    cluster.run()
    urgent = cluster.submit("urgent", 4, priority=10)
    cluster.run()
    planner = PreemptionPlanner(cluster.core, None, compute_caps(cluster.core.groups.values()))
    decisions = list(planner.decisions())
    assert planner._examined <= cluster.core.preemption_budget + 1
    evictions = [d for d in decisions if isinstance(d, Evict)]
    assert sum(slots for d in evictions for _, _, slots in d.plan) <= 2
    assert all(d.unit.key == f"{urgent}/u" for d in evictions)

"""Quota take-back and priority preemption in the Fuxi core agree on who
owns what, so preemptions stop (issue 19: the preemption storm).

A unit on borrowed quota used to preempt a lower priority slot that another
group held within its own maximum; that group then took its quota back,
killing the unit's slot, and the unit preempted again, for ever: 224,826
preemptions for 8,151 pods in the contended simulation of docs/simulate.rst.

The cluster here is a few dictionaries: every pass offers each machine's
free room, and grants and kills change it, as the master would (the core is
sans-I/O; the clock is fake)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.core import WAIT_QUOTA, FuxiCore, KillSlot, Slot, SlotGranted
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec

pytestmark = pytest.mark.timeout(120)

R = Resources.parse


class Cluster:
    """Machines of a fixed size; a pass offers what our slots leave free."""

    def __init__(self, core: FuxiCore, machines: dict[str, str]) -> None:
        self.core = core
        self.capacity = {host: R(res) for host, res in machines.items()}
        self.used = {host: Resources() for host in machines}
        self.slots: dict[str, Slot] = {}
        self.kills: list[tuple[str, str]] = []       # (victim's quota group, reason)
        self.passes = 0

    def apply(self, out: list) -> None:
        for command in out:
            if isinstance(command, SlotGranted):
                slot = command.slot
                self.slots[slot.id] = slot
                self.used[slot.hostname] = self.used[slot.hostname] + slot.resources
            elif isinstance(command, KillSlot) and command.slot_id in self.slots:
                slot = self.slots.pop(command.slot_id)
                self.used[slot.hostname] = self.used[slot.hostname] - slot.resources
                self.kills.append((slot.group, command.reason))

    def submit(self, name: str, group: str, slots: int, slot: str, priority: int) -> str:
        job_id, out = self.core.submit(JobSpec(name, (UnitSpec("u", slots, R(slot)),), quota_group=group,
                                               priority=priority))
        self.apply(out)
        return job_id

    def run(self, passes: int) -> int:
        """``passes`` passes, a second apart; the kills they made."""
        before = len(self.kills)
        for _ in range(passes):
            self.passes += 1
            offers = [Offer(f"o{self.passes}-{host}", f"a-{host}", host, free, {})
                      for host, cap in self.capacity.items() if (free := cap - self.used[host])]
            self.apply(self.core.on_offers(offers))
            self.core.clock.advance(1.0)
        return len(self.kills) - before

    def unit(self, job_id: str) -> dict:
        return self.core.status(job_id)["jobs"][0]["units"][0]


def used(core: FuxiCore) -> dict[str, str]:
    return {g["name"]: g["used"] for g in core.status()["quota_groups"]}


def storm_cluster() -> Cluster:
    """Four 4-cpu machines. ``default`` (unlimited, priority 1: nobody may
    preempt it) holds 6 cpus; ``b`` (priority 50) holds its own maximum, 4;
    ``a`` (priority 10) holds its 4 and borrows 2 of idle ``c``'s 4 -- all
    that is free -- and wants 2 more."""
    core = FuxiCore({"a": R("cpus:4"), "b": R("cpus:4"), "c": R("cpus:4")}, clock=FakeClock())
    cluster = Cluster(core, {f"m{i}": "cpus:4" for i in range(1, 5)})
    cluster.submit("d", "default", 6, "cpus:1", priority=1)
    cluster.run(1)
    cluster.submit("b", "b", 4, "cpus:1", priority=50)
    cluster.run(1)
    return cluster


def test_a_unit_on_borrowed_quota_does_not_preempt_what_another_group_holds_within_its_own_maximum():
    cluster = storm_cluster()
    a = cluster.submit("a", "a", 8, "cpus:1", priority=10)
    # before issue 19: a preempted 2 of b's slots, b took them back from a (over its
    # maximum), a preempted again ... 80 kills in 40 passes, and on for ever
    assert cluster.run(40) == 0
    assert used(cluster.core) == {"a": "cpus:6", "b": "cpus:4", "c": "", "default": "cpus:6"}
    assert cluster.unit(a)["waiting"] == 2 and cluster.unit(a)["why_waiting"] == WAIT_QUOTA
    assert cluster.core.waiting_reasons() == {(a, "u"): WAIT_QUOTA}       # what the simulator asks each cycle


def test_within_its_own_maximum_a_unit_still_preempts_another_groups_lower_priority_and_keeps_it():
    core = FuxiCore({"a": R("cpus:4"), "b": R("cpus:4"), "c": R("cpus:4")}, clock=FakeClock())
    cluster = Cluster(core, {f"m{i}": "cpus:4" for i in range(1, 5)})
    cluster.submit("d", "default", 12, "cpus:1", priority=1)
    cluster.submit("b", "b", 4, "cpus:1", priority=50)           # its own maximum: the cluster is full
    cluster.run(1)
    a = cluster.submit("a", "a", 2, "cpus:1", priority=10)       # within a's own maximum
    assert cluster.run(5) == 2 and {group for group, _ in cluster.kills} == {"b"}
    assert all("preempted by a higher priority unit" in reason for _, reason in cluster.kills)
    assert cluster.unit(a)["granted"] == 2
    # b is under its maximum now, but a is not over its own: nothing to take back
    assert cluster.run(40) == 0
    assert used(core) == {"a": "cpus:2", "b": "cpus:2", "c": "", "default": "cpus:12"}


def test_a_unit_on_borrowed_quota_may_preempt_what_another_group_borrowed():
    # b is over its maximum (borrowed from idle c): a, on borrowed quota too, may take
    # that, since b, still over its maximum, cannot take it back
    core = FuxiCore({"a": R("cpus:2"), "b": R("cpus:2"), "c": R("cpus:4")}, clock=FakeClock())
    cluster = Cluster(core, {"m1": "cpus:4", "m2": "cpus:4"})
    b = cluster.submit("b", "b", 6, "cpus:1", priority=50)     # 2 own + 4 of idle c's
    cluster.run(1)
    assert cluster.unit(b)["granted"] == 6
    a = cluster.submit("a", "a", 4, "cpus:1", priority=10)     # 2 own + borrowed
    cluster.run(10)
    assert cluster.unit(a)["granted"] == 4
    assert cluster.kills and all(group == "b" for group, _ in cluster.kills)
    assert cluster.run(30) == 0


def test_quota_is_taken_back_only_in_the_kinds_the_lender_borrowed():
    # a borrows gpus only (over its maximum there); b wants cpus, within its own
    # maximum, and the machines are full: a holds no cpus of b's, so nothing is taken back
    core = FuxiCore({"a": R("cpus:8;gpus:1"), "b": R("cpus:8;gpus:4"), "c": R("cpus:0;gpus:3")}, clock=FakeClock())
    cluster = Cluster(core, {"m1": "cpus:8;gpus:4", "m2": "cpus:8;gpus:4"})
    cluster.submit("a", "a", 4, "cpus:2;gpus:1", priority=10)       # 8 cpus (own), 4 gpus (1 own, 3 lent)
    cluster.submit("d", "default", 4, "cpus:2", priority=1)          # the other 8 cpus
    cluster.run(1)
    assert used(core)["a"] == "cpus:8;gpus:4"
    b = cluster.submit("b", "b", 1, "cpus:1", priority=100)
    assert cluster.run(10) == 0
    assert cluster.unit(b)["waiting"] == 1
    # but b's gpu unit takes back a's borrowed gpus
    g = cluster.submit("bg", "b", 1, "cpus:0.5;gpus:1", priority=100)
    assert cluster.run(5) >= 1 and all(reason == "quota taken back by its owner" for _, reason in cluster.kills)
    assert cluster.unit(g)["granted"] == 1


# ========================================================= bounded, always
jobs = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "default"]), st.integers(1, 6),
                          st.sampled_from(["cpus:1;mem:256", "cpus:2;mem:256", "cpus:1;mem:1024;gpus:1",
                                           "cpus:0.5;gpus:2"]),
                          st.sampled_from([1, 10, 50, 100])), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(jobs, st.integers(0, 11))
def test_preemptions_stop_once_the_demand_stops_changing(plan, split):
    """Whatever the jobs, groups and priorities: with no task ending and no
    new job, the core stops preempting. Each preemption kills a slot and
    frees room for one that does not come back, so the kills are bounded by
    the slots granted."""
    core = FuxiCore({"a": R("cpus:4;mem:2048;gpus:2"), "b": R("cpus:4;mem:2048;gpus:3"),
                     "c": R("cpus:2;mem:1024;gpus:1")}, clock=FakeClock())
    cluster = Cluster(core, {"m1": "cpus:4;mem:2048;gpus:2", "m2": "cpus:4;mem:2048;gpus:2",
                             "m3": "cpus:4;mem:2048;gpus:2"})
    for i, (group, slots, slot, priority) in enumerate(plan):
        cluster.submit(f"j{i}", group, slots, slot, priority)
        if i == split:
            cluster.run(3)                                     # some run before the others arrive
    cluster.run(60)                                            # reservations last 30 s
    assert cluster.run(40) == 0
    granted = core.counters["slots_granted"]
    assert len(cluster.kills) <= granted
    core._check()


def test_a_unit_set_aside_at_its_quota_searches_once_an_eviction_gives_its_group_room():
    """The planner sets aside the units whose group leaves them no quota slot
    (``PreemptionPlanner._set_aside``: most of a group at its quota, every
    pass); an eviction earlier in the same pass may give their group room,
    and then they search in that pass, as if never set aside."""
    core = FuxiCore({"g": R("cpus:4")}, clock=FakeClock())
    cluster = Cluster(core, {"m1": "cpus:4", "m2": "cpus:4"})
    cluster.submit("low", "g", 3, "cpus:1", priority=100)          # g's lowest priority slots
    cluster.submit("d", "default", 5, "cpus:1", priority=1)         # nobody may preempt these: the cluster is full
    cluster.run(1)
    h = cluster.submit("h", "g", 1, "cpus:1", priority=10)          # g has room for one cpu: it preempts low
    j = cluster.submit("j", "g", 1, "cpus:2", priority=20)          # no room for two cpus: set aside
    unit_j = core._units[f"{j}/u"]
    assert cluster.run(1) == 1 and cluster.kills[-1][0] == "g"      # h took one of low's slots
    assert core._units[f"{h}/u"].reserved == 1
    # once h's eviction freed a cpu of g's, j had quota room for a slot: it searched (and found
    # nothing it may take: g's slots are smaller than its own) in the same pass
    assert unit_j.search_after > core.clock.now() - 1.0

"""The Fuxi core's memo of failed preemption searches, kept from pass to
pass (mesoslike_frameworks/fuxi/preemption.py, ``FailedSearches``;
docs/performance.rst, "Contended simulation: preemption search memo").

A remembered failure answers a search only while what the search read is
the same; these tests check that it is exact:

* cases where a remembered failure must be searched again after a change
  -- a lower priority slot added on a machine, a machine's open room grown,
  a lending group's excess changed -- and is (the unit preempts, as it does
  with the memo off);
* whole simulations (synthetic ones with quota groups and preemption, the
  contended trace's first pods) whose every answer from the memo is checked
  against the walk it saves (the same nothing, the same candidates counted),
  and whose reports are the same byte for byte with the memo and without."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike.sim import SimulationConfig, Simulator
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike.sim.traces import load_openb_trace
from mesoslike.sim.workload import Workload
from mesoslike_frameworks.fuxi.books import Reserved, Slot, Unit
from mesoslike_frameworks.fuxi.core import FuxiCore, KillSlot, SlotGranted
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from mesoslike_frameworks.fuxi import preemption
from mesoslike_frameworks.fuxi.preemption import PreemptionPlanner
from mesoslike_frameworks.fuxi.quota import QuotaConfig

pytestmark = pytest.mark.timeout(300)

R = Resources.parse


class Cluster:
    """Machines of ``cpus:4;mem:4096``; every pass offers what the core's slots leave free."""

    def __init__(self, core: FuxiCore, hosts: tuple[str, ...] = ("h1",)) -> None:
        self.core = core
        self.hosts = hosts
        self.used = {host: Resources() for host in hosts}
        self.slots: dict[str, Slot] = {}
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

    def submit(self, name: str, slots: int, priority: int, cpus: int, group: str = "default") -> str:
        job_id, out = self.core.submit(JobSpec(name, (UnitSpec("u", slots, R(f"cpus:{cpus};mem:256")),),
                                               quota_group=group, priority=priority))
        self.apply(out)
        return job_id

    def end(self, job_id: str) -> None:
        """The job's slots end (returned: the job wants them no more)."""
        for slot in [s for s in self.slots.values() if s.job_id == job_id]:
            self.slots.pop(slot.id)
            self.used[slot.hostname] -= slot.resources
            self.apply(self.core.release(slot.id))

    def run(self, seconds: float = 1.0) -> list:
        """One pass over the free room (then ``seconds`` later); its commands."""
        self.passes += 1
        offers = [Offer(f"o{self.passes}-{host}", f"a-{host}", host, free, {})
                  for host in self.hosts if (free := R("cpus:4;mem:4096") - self.used[host])]
        out = self.apply(self.core.on_offers(offers))
        self.core._check()
        self.core.clock.advance(seconds)
        return out

    def killed(self, out: list) -> list[str]:
        return sorted(c.slot_id for c in out if isinstance(c, KillSlot))


def _both(scenario: Callable[[Cluster], Any], **core: Any) -> tuple[Any, Any, FuxiCore]:
    """The scenario's outcome with the memo (and the core) and without it."""
    results = []
    cores = []
    for memo in (True, False):
        made = FuxiCore(clock=FakeClock(), **core)
        made.search_memo = memo
        cores.append(made)
        results.append(scenario(Cluster(made)))
    return results[0], results[1], cores[0]


def test_a_failure_is_searched_again_once_a_lower_priority_slot_is_added_where_it_then_fits() -> None:
    def scenario(cluster: Cluster) -> list:
        blocker = cluster.submit("blocker", 1, priority=1, cpus=2)
        cluster.submit("low1", 1, priority=10, cpus=1)
        other = cluster.submit("other", 1, priority=1, cpus=1)
        cluster.run()                                   # h1 full: 2 + 1 + 1
        cluster.submit("urgent", 1, priority=5, cpus=2)
        assert not cluster.killed(cluster.run(11.0))    # low1's cpu is not enough: the search fails
        assert not cluster.killed(cluster.run(11.0))    # ... and again (remembered)
        cluster.end(other)
        cluster.submit("low2", 1, priority=10, cpus=1)  # takes the cpu other freed (urgent fits not in 1)
        passes = [cluster.killed(cluster.run(11.0)) for _ in range(3)]
        assert blocker
        return passes

    with_memo, without, core = _both(scenario)
    assert with_memo == without
    assert any(with_memo), "low1 and low2 together make room: urgent preempts them"
    assert core._failed_searches.hits > 0, "the failure was answered from the memo before the change"


def test_a_failure_is_searched_again_once_a_machine_of_its_candidates_has_more_open_room() -> None:
    def scenario(cluster: Cluster) -> list:
        cluster.submit("blocker", 1, priority=1, cpus=2)
        cluster.submit("low", 1, priority=10, cpus=1)
        other = cluster.submit("other", 1, priority=1, cpus=1)
        cluster.run()
        cluster.submit("urgent", 1, priority=5, cpus=2)
        assert not cluster.killed(cluster.run(11.0))
        assert not cluster.killed(cluster.run(11.0))
        cluster.end(other)                              # h1 offers a cpu: with low's, room for urgent
        return [cluster.killed(cluster.run(11.0)) for _ in range(3)]

    with_memo, without, core = _both(scenario)
    assert with_memo == without
    assert any(with_memo), "the open cpu and low's make room: urgent preempts low"
    assert core._failed_searches.hits > 0


def test_a_failure_on_borrowed_quota_is_searched_again_once_a_group_lends_more() -> None:
    quota = {"a": R("cpus:2;mem:4096"), "b": R("cpus:2;mem:4096"), "c": R("cpus:4;mem:4096")}

    def scenario(cluster: Cluster) -> list:
        cluster.submit("a-own", 2, priority=1, cpus=1, group="a")      # a at its maximum
        cluster.submit("b-low", 1, priority=10, cpus=1, group="b")     # b within its own
        cluster.run()
        borrower = cluster.submit("c-low", 1, priority=10, cpus=1, group="c")
        cluster.run()                                                  # h1 full
        cluster.submit("a-more", 1, priority=5, cpus=1, group="a")     # on borrowed quota: may take only
        out = [cluster.killed(cluster.run(11.0)) for _ in range(2)]    # a slot of a group over its maximum
        cluster.end(borrower)
        cluster.submit("b-more", 2, priority=10, cpus=1, group="b")    # b goes over its maximum
        out += [cluster.killed(cluster.run(11.0)) for _ in range(3)]
        return out

    with_memo, without, _ = _both(scenario, quota_groups=quota)
    assert with_memo == without


# ----------------------------------------------------------- whole simulations
#: answers of the memo for take-backs followed as slots came and went (:func:`_checked` counts them)
followed_answers = [0]


def _checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check every answer the memo gives against the walk it saves; returns
    [answers checked], filled as the simulation runs."""
    checked = [0]
    followed = followed_answers
    followed[0] = 0
    search = PreemptionPlanner._search
    remembered = PreemptionPlanner._remembered

    def remembered_and_noted(self: PreemptionPlanner, key: tuple, unit: Unit) -> int | None:
        answer = remembered(self, key, unit)
        self._noted = answer          # type: ignore[attr-defined]
        return answer

    def search_and_check(self: PreemptionPlanner, failed: dict, key: Any, unit: Unit, missing: int,
                         candidates: Callable[[], Iterator[Slot | Reserved]]) -> Any:
        self._noted = None            # type: ignore[attr-defined]
        before = self._examined
        out = search(self, failed, key, unit, missing, candidates)
        answer = getattr(self, "_noted", None)
        if answer is not None:
            examined, self._examined = self._examined, before
            memo, self.memo = self.memo, None
            try:
                plan, complete = self._make_room(unit, missing, candidates())
            finally:
                self.memo = memo
            assert plan is None, f"the memo said nothing to take for {key}, the walk found {plan}"
            assert (self._examined, complete) == (examined, out[1]), f"{key}: counted as the walk counts"
            checked[0] += 1
            entry = self.memo.entries.get(key) if self.memo is not None else None
            if entry is not None and entry.follow is not None:
                # a take-back followed as slots come and go: its members and rooms are the walk's
                walked = list(candidates())
                for name, lent in entry.follow.items():
                    assert set(lent.members) == {v.id for v in walked if v.group == name}, f"{key}: {name}'s"
                    assert lent.last is max(lent.members.values(), key=preemption._victim_key)
                rooms: dict[str, list[int]] = {}
                for victim in walked:
                    room = rooms.setdefault(victim.agent_id, [0] * len(entry.kinds))
                    for j, kind in enumerate(entry.kinds):
                        room[j] += victim.resources.millis().get(kind, 0)
                assert {a: r for a, r in entry.rooms.items() if any(r)} == rooms, f"{key}: the rooms"
                followed[0] += 1
        return out

    monkeypatch.setattr(PreemptionPlanner, "_remembered", remembered_and_noted)
    monkeypatch.setattr(PreemptionPlanner, "_search", search_and_check)
    return checked


def _report(workload: Workload, policy: str, quota: QuotaConfig | None, memo: bool, check: bool = False
            ) -> tuple[str, dict, FuxiCore]:
    simulator = Simulator(workload, SimulationConfig.for_policy(policy, quota=quota, seed=3, check_invariants=check))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    core.search_memo = memo
    if check:
        begin = simulator.scheduler.begin_cycle

        def begin_cycle() -> None:
            core._check()
            begin()
        simulator.scheduler.begin_cycle = begin_cycle  # type: ignore[method-assign]
    document = json.dumps(simulator.run().to_dict(checkpoints=5), indent=2)
    return document, dict(core.counters), core


QUOTA = QuotaConfig(groups={"prod": Resources.parse("cpus:40;mem:200000"),
                            "batch": Resources.parse("cpus:60;mem:400000;gpus:4"),
                            "dev": Resources.parse("cpus:20;mem:100000;gpus:2")})


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
@pytest.mark.parametrize("seed, agents, load", [(4, 12, 3.0), (6, 20, 4.0)])
def test_a_synthetic_report_is_the_same_with_the_memo_and_without(monkeypatch: pytest.MonkeyPatch, policy: str,
                                                                  seed: int, agents: int, load: float) -> None:
    spec = SyntheticSpec(agents=agents, tasks=300, load=load, seed=seed)
    checked = _checked(monkeypatch)
    fast, fast_counters, core = _report(synthetic_workload(spec), policy, QUOTA, True, check=True)
    assert checked[0] > 0 and core._failed_searches.hits == checked[0], "answers from the memo, each checked"
    monkeypatch.undo()
    plain, plain_counters, _ = _report(synthetic_workload(spec), policy, QUOTA, False, check=True)
    assert plain == fast
    assert plain_counters == fast_counters


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
def test_a_contended_trace_report_is_the_same_with_the_memo_and_without(monkeypatch: pytest.MonkeyPatch,
                                                                       policy: str) -> None:
    """The contended command's cluster and quota groups, its first 4,000
    pods: units wait, preempt, take quota back and search on borrowed quota;
    every answer of the memo is checked against the walk."""
    quota = QuotaConfig(groups={"LS": Resources.parse("cpus:21388;mem:111432499;gpus:876"),
                                "Guaranteed": Resources.parse("cpus:1425;mem:7428833;gpus:58"),
                                "Burstable": Resources.parse("cpus:4990;mem:26000916;gpus:204"),
                                "BE": Resources.parse("cpus:7129;mem:37144166;gpus:292")})

    def workload() -> Workload:
        return load_openb_trace(nodes=500, pods=4000, load=1000.0)

    checked = _checked(monkeypatch)
    fast, fast_counters, core = _report(workload(), policy, quota, True)
    assert fast_counters["slots_preempted"] > 0
    assert checked[0] > 0 and core._failed_searches.hits == checked[0], "answers from the memo, each checked"
    monkeypatch.undo()
    plain, plain_counters, _ = _report(workload(), policy, quota, False)
    assert plain == fast
    assert plain_counters == fast_counters


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
def test_a_take_back_followed_as_the_lending_groups_slots_change_is_the_walk(monkeypatch: pytest.MonkeyPatch,
                                                                            policy: str) -> None:
    """The contended command itself (the trace's own time: ``time_scale``
    1), its first 4,000 pods: units of Burstable and Guaranteed take GPUs back
    from LS and BE, whose slots start and end between the searches. Every
    take-back the memo answers is checked against the walk, its candidates
    group by group and its rooms machine by machine too; the report is the
    one without the memo."""
    quota = QuotaConfig(groups={"LS": Resources.parse("cpus:21388;mem:111432499;gpus:876"),
                                "Guaranteed": Resources.parse("cpus:1425;mem:7428833;gpus:58"),
                                "Burstable": Resources.parse("cpus:4990;mem:26000916;gpus:204"),
                                "BE": Resources.parse("cpus:7129;mem:37144166;gpus:292")})

    def workload() -> Workload:
        return load_openb_trace(nodes=500, pods=4000, load=1000.0, time_scale=1.0)

    checked = _checked(monkeypatch)
    trims = [0]
    trim = PreemptionPlanner._trim

    def counting(entry: Any, lent: Any, excess: int) -> None:
        trims[0] += 1
        trim(entry, lent, excess)
    monkeypatch.setattr(PreemptionPlanner, "_trim", staticmethod(counting))
    fast, fast_counters, core = _report(workload(), policy, quota, True)
    assert checked[0] > 0 and core._failed_searches.hits == checked[0], "answers from the memo, each checked"
    assert followed_answers[0] > 0, "take-backs answered while their lending groups' slots changed"
    assert trims[0] > 0, "and while slots after their candidates ended"
    monkeypatch.undo()
    plain, plain_counters, _ = _report(workload(), policy, quota, False)
    assert plain == fast
    assert plain_counters == fast_counters

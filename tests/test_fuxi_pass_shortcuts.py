"""The Fuxi core's pass shortcuts change no result (docs/performance.rst,
"Contended simulation: Fuxi passes only on change"):

* passive scheduling passes over a machine whose open room does not hold a
  quota group's floor (the least its queued units ask for, kind by kind:
  ``WaitingQueue.least``) without searching the group's queues;
* the preemption search counts the room freed on a machine as integers over
  the unit's slot's kinds, not as sums of Resources; it asks no scope or
  blacklist question per candidate of a unit that may use any machine, and
  sorts only the units that may search now, and of those only the ones
  that would not do nothing (``PreemptionPlanner._set_aside``).

Each is checked against the code it replaces (kept here as the oracle) over
whole simulations, with the core's invariants checked every round, whose
reports must be the same byte for byte, with preemption taking place."""

from __future__ import annotations

import heapq
import itertools
import json
from typing import Callable, Iterator, Sequence

import pytest

from mesoslike import Resources
from mesoslike.sim import SimulationConfig, Simulator
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike.sim.traces import load_openb_trace
from mesoslike.sim.workload import Workload
from mesoslike_frameworks.fuxi import preemption
from mesoslike_frameworks.fuxi.books import EMPTY, Reserved, Slot, Unit, how_many
from mesoslike_frameworks.fuxi.core import FuxiCore
from mesoslike_frameworks.fuxi.preemption import PreemptionPlanner
from mesoslike_frameworks.fuxi.quota import QuotaConfig

QUOTA = QuotaConfig(groups={"prod": Resources.parse("cpus:40;mem:200000"),
                            "batch": Resources.parse("cpus:60;mem:400000;gpus:4"),
                            "dev": Resources.parse("cpus:20;mem:100000;gpus:2")})


# ------------------------------------------------------------- the oracles
def _plain_make_room(self: PreemptionPlanner, unit: Unit, missing: int, candidates: Iterator[Slot | Reserved]
                     ) -> tuple[list | None, bool]:
    """PreemptionPlanner._make_room as it was: the freed room as Resources."""
    batch, machines = self.batch, self.books._machines
    freed: dict[str, Resources] = {}
    chosen: dict[str, list] = {}
    made: dict[str, int] = {}
    useful: dict[str, int] = {}
    total = 0
    limit = unit.spec.max_per_machine
    complete = True
    for slot in candidates:
        self._examined += 1
        if self._examined > self.preemption_budget:
            complete = False
            break
        agent = slot.agent_id
        machine = machines[agent]
        if agent not in freed:
            freed[agent] = batch.resources(machine.open) if batch is not None and machine.in_batch else EMPTY
            chosen[agent], made[agent] = [], 0
        freed[agent] = freed[agent] + slot.resources
        chosen[agent].append(slot)
        can = how_many(freed[agent], unit.slot)
        if limit is not None:
            can = min(can, limit - unit.per_host.get(machine.hostname, 0) - unit.holds.get(agent, 0))
        if can > made[agent]:
            total += can - made[agent]
            made[agent] = can
            useful[agent] = len(chosen[agent])
            if total >= missing:
                complete = False
                break
    if total == 0 or (unit.gang and total < missing):
        return None, complete
    return preemption._plan(machines, chosen, made, useful, total - missing), complete


def _plain_candidates(self: PreemptionPlanner, unit: Unit, order: list[Slot], first: int,
                      may_take: Callable[[Slot], bool] | None, held: Sequence[Reserved] = (),
                      lower_only: bool = False, groups: object = None) -> Iterator[Slot | Reserved]:
    """PreemptionPlanner._candidates as it was: every question per candidate
    (``groups``, the groups ``may_take`` allows, is not asked)."""
    if may_take is None:
        may_take = lambda s: s.priority > unit.priority  # noqa: E731 - the lambda it replaced
    books = self.books
    units, slots, machines = books._units, books._slots, books._machines
    lowest: Iterator[Slot] = itertools.islice(order, first, None)
    if lower_only:
        lowest = itertools.takewhile(lambda s: s.priority > unit.priority, lowest)
    ahead = [r for r in held if r.priority > unit.priority]
    reserved = ((-r.priority, 0, r) for r in ahead)
    running = ((-s.priority, 1, s) for s in lowest)
    for _, _, victim in heapq.merge(reserved, running, key=lambda item: item[:2]):
        if isinstance(victim, Reserved):
            holder = units.get(victim.unit)
            if holder is None or not holder.holds.get(victim.agent_id) or holder is unit:
                continue
        elif victim.id not in slots or not may_take(victim):
            continue
        machine = machines.get(victim.agent_id)
        if machine is not None and books._in_scope(unit, machine) and books._allowed(unit, machine):
            yield victim


def _without_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FuxiCore, "_floors", lambda self, dims: {})
    monkeypatch.setattr(PreemptionPlanner, "_make_room", _plain_make_room)
    monkeypatch.setattr(PreemptionPlanner, "_candidates", _plain_candidates)
    # every waiting unit sorted, as before (the sort is stable: the same order)
    monkeypatch.setattr(preemption, "_by_rank", lambda u: (u.priority, u.submitted))
    # every unit due to search looked at in rank order, none set aside
    monkeypatch.setattr(PreemptionPlanner, "_set_aside",
                        lambda self, short, parked, reserved, sizes: (
                            sorted([u for u in short + [u for _, members in parked for u in members]
                                    if u.search_after <= self.now], key=preemption._by_rank), []))


# -------------------------------------------------------------- the checks
def _report(workload: Workload, policy: str, quota: QuotaConfig | None, check: bool,
            budget: int | None = None) -> tuple[str, dict]:
    simulator = Simulator(workload, SimulationConfig.for_policy(policy, quota=quota, seed=3, check_invariants=check))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    if budget is not None:
        core.preemption_budget = budget
    if check:
        simulator.scheduler.begin_cycle = _checking(core, simulator.scheduler.begin_cycle)  # type: ignore[method-assign]
    document = json.dumps(simulator.run().to_dict(checkpoints=5), indent=2)
    return document, dict(core.counters)


def _checking(core: FuxiCore, begin: Callable[[], None]) -> Callable[[], None]:
    def begin_cycle() -> None:
        core._check()            # the core's books agree between every two passes
        begin()
    return begin_cycle


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
@pytest.mark.parametrize("seed, agents, load, quota", [(1, 12, 2.0, None), (4, 12, 3.0, QUOTA), (6, 20, 4.0, QUOTA)])
def test_a_synthetic_report_is_the_same_without_the_shortcuts(monkeypatch: pytest.MonkeyPatch, policy: str, seed: int,
                                                              agents: int, load: float,
                                                              quota: QuotaConfig | None) -> None:
    spec = SyntheticSpec(agents=agents, tasks=300, load=load, seed=seed)
    fast, fast_counters = _report(synthetic_workload(spec), policy, quota, True)
    _without_shortcuts(monkeypatch)
    plain, plain_counters = _report(synthetic_workload(spec), policy, quota, True)
    assert plain == fast
    assert plain_counters == fast_counters


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
@pytest.mark.parametrize("budget", [3, 40])
def test_units_set_aside_come_back_after_an_eviction_or_the_budget(monkeypatch: pytest.MonkeyPatch, policy: str,
                                                                   budget: int) -> None:
    """The preemption search sets aside the units that would do nothing
    (their group leaves them no own or quota slot: ``_set_aside``) and brings
    them back once an eviction changes the books or the budget runs out (the
    first unit reached then stops the search): with a budget small enough to
    run out in passes, the report is the one of every unit looked at."""
    spec = SyntheticSpec(agents=12, tasks=300, load=3.0, seed=4)
    set_aside = PreemptionPlanner._set_aside
    seen = {"idle": 0, "evictions": 0}

    def counting(self: PreemptionPlanner, short: list[Unit], parked: list, reserved: dict,
                 sizes: dict) -> tuple[list[Unit], list[Unit]]:
        active, idle = set_aside(self, short, parked, reserved, sizes)
        seen["idle"] += len(idle)
        return active, idle

    monkeypatch.setattr(PreemptionPlanner, "_set_aside", counting)
    fast, fast_counters = _report(synthetic_workload(spec), policy, QUOTA, True, budget)
    assert seen["idle"] > 0                       # units were set aside
    assert fast_counters["slots_preempted"] > 0   # and evictions took place
    _without_shortcuts(monkeypatch)
    plain, plain_counters = _report(synthetic_workload(spec), policy, QUOTA, True, budget)
    assert plain == fast
    assert plain_counters == fast_counters


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
def test_a_contended_trace_report_is_the_same_without_the_shortcuts(monkeypatch: pytest.MonkeyPatch,
                                                                    policy: str) -> None:
    """The contended command's cluster and quota groups, its first 3,000 pods:
    units wait, preempt and take quota back."""
    quota = QuotaConfig(groups={"LS": Resources.parse("cpus:21388;mem:111432499;gpus:876"),
                                "Guaranteed": Resources.parse("cpus:1425;mem:7428833;gpus:58"),
                                "Burstable": Resources.parse("cpus:4990;mem:26000916;gpus:204"),
                                "BE": Resources.parse("cpus:7129;mem:37144166;gpus:292")})

    def workload() -> Workload:
        return load_openb_trace(nodes=500, pods=3000, load=1000.0)

    fast, fast_counters = _report(workload(), policy, quota, False)
    assert fast_counters["slots_preempted"] > 0           # the preemption search ran and found victims
    _without_shortcuts(monkeypatch)
    plain, plain_counters = _report(workload(), policy, quota, False)
    assert plain == fast
    assert plain_counters == fast_counters

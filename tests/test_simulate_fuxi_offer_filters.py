"""Offer filters for the Fuxi policies (docs/simulate.rst, "Offer filters"):
the Fuxi scheduler declares the shapes its waiting units need (but those of
units at their quota), the allocator offers it only agents whose free
resources hold one, and a cycle that offers nothing still has its pass, in
which the core preempts and takes quota back. ``offer_filters=False`` keeps
the model before them (every agent offered, no pass over no offers)."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from mesoslike import Resources
from mesoslike.sim import STOP_DONE, AgentSpec, SimulationConfig, Simulator, TaskSpec, Workload
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike_frameworks.fuxi.core import FuxiCore
from mesoslike_frameworks.fuxi.quota import QuotaConfig

pytestmark = pytest.mark.timeout(300)

R = Resources.parse
FUXI = ("fuxi-fifo", "fuxi-fair")
QUOTA = QuotaConfig(groups={"prod": R("cpus:40;mem:200000"), "batch": R("cpus:60;mem:400000;gpus:4"),
                            "dev": R("cpus:20;mem:100000;gpus:2")})


def _checking(core: FuxiCore, begin: Callable[[], None]) -> Callable[[], None]:
    def begin_cycle() -> None:
        core._check()            # the core's books agree between every two passes
        begin()
    return begin_cycle


@pytest.mark.parametrize("policy", FUXI)
@pytest.mark.parametrize("seed, load", [(4, 3.0), (6, 4.0)])
def test_every_offer_holds_a_shape_the_fuxi_scheduler_waits_for(policy: str, seed: int, load: float) -> None:
    """Under offer filters every offer holds a slot shape the scheduler
    declared when the cycle began; the run completes with preemption taking
    place, the allocator's and the core's books checked throughout."""
    workload = synthetic_workload(SyntheticSpec(agents=12, tasks=300, load=load, seed=seed))
    simulator = Simulator(workload, SimulationConfig.for_policy(policy, quota=QUOTA, seed=3, check_invariants=True))
    scheduler = simulator.scheduler
    core: FuxiCore = scheduler.core  # type: ignore[attr-defined]
    scheduler.begin_cycle = _checking(core, scheduler.begin_cycle)  # type: ignore[method-assign]
    allocate = simulator.allocator.allocate
    offer_shapes = scheduler.offer_shapes  # type: ignore[attr-defined]
    checked = 0
    declared: list = []

    def declaring():
        shapes = offer_shapes()
        declared[:] = shapes["fuxi"]
        return shapes

    def checking(agent_ids=None):
        nonlocal checked
        assert agent_ids is not None          # only the agents that hold a wanted shape
        shapes = list(declared)               # as declared when the cycle began
        offers = allocate(agent_ids)
        for offer in offers:
            assert any(offer.resources.contains(shape) for shape in shapes)
            checked += 1
        return offers

    simulator.allocator.allocate = checking  # type: ignore[method-assign]
    scheduler.offer_shapes = declaring  # type: ignore[attr-defined]
    result = simulator.run()
    assert result.stop_reason == STOP_DONE
    assert checked > 100 and result.metrics["offers"]["made"] == checked
    assert core.counters["slots_preempted"] > 0


@pytest.mark.parametrize("policy", FUXI)
def test_without_offer_filters_every_agent_is_offered_and_no_pass_runs_over_no_offers(policy: str) -> None:
    workload = synthetic_workload(SyntheticSpec(agents=12, tasks=300, load=3.0, seed=4))
    simulator = Simulator(workload, SimulationConfig.for_policy(policy, quota=QUOTA, offer_filters=False))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    on_offers = core.on_offers
    batches: list[int] = []

    def counting(offers):
        batches.append(len(offers))
        return on_offers(offers)

    core.on_offers = counting  # type: ignore[method-assign]
    assert simulator.scheduler.offer_shapes() is None  # type: ignore[attr-defined]
    simulator.run()
    assert simulator.allocator.offer_gate is None
    assert batches and min(batches) > 0


def _full_cluster() -> Workload:
    """Two agents, both full of best-effort tasks (priority 200) from 0 to
    50; a latency-sensitive task (priority 1) needing a whole agent arrives
    at 5: no agent's free resources hold it, so nothing is offered."""
    agents = tuple(AgentSpec(f"a{i}", R("cpus:4;mem:4096")) for i in range(2))
    tasks = [TaskSpec(f"be{i}", "BE", R("cpus:2;mem:1024"), 0.0, 50.0, i, 200) for i in range(4)]
    tasks.append(TaskSpec("ls", "LS", R("cpus:4;mem:2048"), 5.0, 10.0, 4, 1))
    return Workload("full", agents, ("BE", "LS"), tuple(tasks))


@pytest.mark.parametrize("policy", FUXI)
def test_a_cycle_that_offers_nothing_still_preempts(policy: str) -> None:
    """The core preempts in its passes: with every agent full, the cycle at 5
    offers nothing under offer filters, its pass over no offers preempts two
    best-effort tasks, and the room they free is offered at 6, as without
    filters (where the pass at 5 declines two full agents' crumbs)."""
    results = {}
    for filters in (True, False):
        simulator = Simulator(_full_cluster(), SimulationConfig.for_policy(policy, check_invariants=True,
                                                                           offer_filters=filters))
        result = simulator.run()
        starts = {t.task_id: s for t, s in simulator.recorder.first_starts()}
        assert starts["ls"] == 6.0
        assert result.metrics["preemptions"]["total"] == 2
        assert result.stop_reason == STOP_DONE
        results[filters] = result
    assert results[True].metrics["wait"] == results[False].metrics["wait"]
    assert results[True].metrics["offers"]["made"] < results[False].metrics["offers"]["made"]


def test_a_unit_at_its_quota_is_offered_agents_again_once_a_slot_returns() -> None:
    """A unit the last pass found waiting for quota is left out of the
    filters (offers could not help it) only until a slot is returned: its
    group may have room then, and the next pass must see agents."""
    agents = (AgentSpec("a1", R("cpus:4;mem:4096")),)
    tasks = tuple(TaskSpec(f"b{i}", "BE", R("cpus:2;mem:64"), 0.0, 10.0, i) for i in range(3))
    quota = QuotaConfig({"BE": R("cpus:2;mem:4096")})
    for policy in FUXI:
        simulator = Simulator(Workload("quota", agents, ("BE",), tasks),
                              SimulationConfig.for_policy(policy, quota=quota, check_invariants=True))
        result = simulator.run()
        assert {t.task_id: s for t, s in simulator.recorder.first_starts()} == {"b0": 0.0, "b1": 10.0, "b2": 20.0}
        assert result.stop_reason == STOP_DONE


@pytest.mark.parametrize("policy", FUXI)
def test_the_same_seed_gives_the_same_report_under_offer_filters(policy: str) -> None:
    def report() -> str:
        workload = synthetic_workload(SyntheticSpec(agents=12, tasks=200, load=3.0, seed=6))
        return json.dumps(Simulator(workload, SimulationConfig.for_policy(policy, quota=QUOTA)).run().to_dict(5))
    assert report() == report()


@pytest.mark.parametrize("policy", FUXI)
@pytest.mark.parametrize("trace", [True, False])
def test_the_kept_quota_count_and_the_agents_rechecked_are_the_recount(monkeypatch: pytest.MonkeyPatch,
                                                                       policy: str, trace: bool) -> None:
    """The contended command's cluster and quota groups, its first 3,000
    pods in the trace's own time (and a synthetic run whose jobs have many
    tasks, which come and go while their unit waits for quota): every count of the tasks waiting for quota
    that the adapter follows (``FuxiScheduler._quota_held``, through the
    core's ``quota_log`` and those jobs' task changes) is the count made
    anew, and after every ``_Useful.agents`` each wanted shape's holders and
    each agent's count are the recount over every agent -- also when a shape
    wanted again re-checks only the agents changed since a long log."""
    from mesoslike.sim import engine
    from mesoslike.sim.traces import load_openb_trace
    from mesoslike_frameworks.fuxi.simulation import FuxiScheduler

    quota = QuotaConfig(groups={"LS": R("cpus:21388;mem:111432499;gpus:876"),
                                "Guaranteed": R("cpus:1425;mem:7428833;gpus:58"),
                                "Burstable": R("cpus:4990;mem:26000916;gpus:204"),
                                "BE": R("cpus:7129;mem:37144166;gpus:292")}) if trace else QUOTA

    def workload() -> Workload:
        if trace:
            return load_openb_trace(nodes=500, pods=3000, load=1000.0, time_scale=1.0)
        return synthetic_workload(SyntheticSpec(agents=12, tasks=400, load=3.0, seed=4))
    kept_answers = [0]
    held = FuxiScheduler._quota_held

    def checked_held(self: FuxiScheduler) -> dict[Resources, int]:
        kept = not self.core.quota_log
        answer = held(self)
        assert answer == self._recount(), "the count followed is the recount"
        kept_answers[0] += kept
        return answer
    monkeypatch.setattr(FuxiScheduler, "_quota_held", checked_held)
    long_logs = [0]
    agents = engine._Useful.agents

    def checked_agents(self: engine._Useful, by_framework: Any) -> list[str]:
        long_logs[0] += sum(1 for shape in self._since if len(self._log) - self._since[shape] > len(self._free))
        order = agents(self, by_framework)
        count: dict[str, int] = {}
        for shape in self._wanted:
            has = {a for a, room in self._free.items() if room.contains(shape)}
            assert self._holders[shape] == has, "a wanted shape's holders are the recount"
            for agent_id in has:
                count[agent_id] = count.get(agent_id, 0) + 1
        assert self._count == count
        return order
    monkeypatch.setattr(engine._Useful, "agents", checked_agents)
    checked = Simulator(workload(), SimulationConfig.for_policy(policy, quota=quota, seed=3))
    report = json.dumps(checked.run().to_dict(checkpoints=5), indent=2)
    assert kept_answers[0] > 0, "counts kept across _measure calls"
    assert long_logs[0] > 0 or not trace, "shapes wanted again after a long log"
    monkeypatch.undo()
    plain = Simulator(workload(), SimulationConfig.for_policy(policy, quota=quota, seed=3))
    assert json.dumps(plain.run().to_dict(checkpoints=5), indent=2) == report

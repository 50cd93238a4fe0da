"""State the Fuxi core keeps per unit as it changes, where a pass used to
recount it over the waiting units (docs/performance.rst, "Contended
simulation: state kept per unit"):

* each quota group's waiting demand (``FuxiCore._demand``, summed into
  ``QuotaGroup.waiting`` only for groups whose demand changed), kept by
  ``_sync`` as desires and grants change;
* the units waiting for quota (``FuxiCore._at_quota``, read by the
  simulator's adapter through ``waiting_for_quota``), kept as reasons change.

``FuxiCore._check`` compares both with a recount; these tests drive the
cases that change them (desire up and down, a slot returned or lost, a job
finished, grants, a group at its maximum) and whole simulations with the
check between every two cycles."""

from __future__ import annotations

import pytest

from mesoslike import Offer, Resources
from mesoslike.sim import SimulationConfig, Simulator
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike_frameworks.fuxi.books import WAIT_QUOTA
from mesoslike_frameworks.fuxi.core import FuxiCore, SlotGranted
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from mesoslike_frameworks.fuxi.quota import QuotaConfig

pytestmark = pytest.mark.timeout(300)

R = Resources.parse


def _recounted(core: FuxiCore, group: str) -> Resources:
    total = Resources()
    for unit in core._units.values():
        if unit.group == group and unit.waiting:
            total += unit.slot.scale(unit.waiting)
    return total


def _status_waiting(core: FuxiCore) -> dict[str, str]:
    return {g["name"]: g["waiting"] for g in core.status()["quota_groups"]}


def _quota_units(core: FuxiCore) -> set[tuple[str, str]]:
    return {key for key, reason in core.waiting_reasons().items() if reason == WAIT_QUOTA}


def test_group_demand_follows_desire_grants_returns_and_finished_jobs() -> None:
    core = FuxiCore({"a": R("cpus:4;mem:4096"), "b": None})
    held: dict[str, object] = {}
    used = Resources()

    def run() -> None:
        nonlocal used
        free = R("cpus:8;mem:8192") - used
        out = core.on_offers([Offer(f"o{core.counters['passes']}", "a1", "h1", free, {})] if free else [])
        for command in out:
            if isinstance(command, SlotGranted):
                held[command.slot.id] = command.slot
                used += command.slot.resources
        core._check()
        core._refresh_groups()       # (a pass sums the demand as of its start: the next one would sum this)
        core._check()
        for name in ("a", "b"):
            assert core.groups[name].waiting == _recounted(core, name) or core.groups[name].maximum is None

    def release(job_id: str, keep: bool = False, lost: bool = False) -> None:
        nonlocal used
        slot_id = next(s for s, slot in held.items() if slot.job_id == job_id)   # type: ignore[attr-defined]
        slot = held.pop(slot_id)
        used -= slot.resources                                                  # type: ignore[attr-defined]
        core.on_slot_lost(slot_id, "lost") if lost else core.release(slot_id, keep_desire=keep)
        core._check()

    j1, _ = core.submit(JobSpec("j1", (UnitSpec("u", 6, R("cpus:1;mem:256")),), quota_group="a"))
    j2, _ = core.submit(JobSpec("j2", (UnitSpec("u", 3, R("cpus:2;mem:256")),), quota_group="b"))
    core._check()
    run()                                          # a: 4 granted, 2 wait for quota
    assert core.groups["a"].waiting == R("cpus:2;mem:512")
    assert _quota_units(core) == {(j1, "u")} and set(core.waiting_for_quota()) == {(j1, "u")}
    core.update_desire(j1, "u", 9)                 # more wanted
    core._check()
    run()
    assert core.groups["a"].waiting == R("cpus:5;mem:1280")
    core.update_desire(j1, "u", 5)                 # fewer wanted, still waiting
    core._check()
    run()
    assert core.groups["a"].waiting == R("cpus:1;mem:256")
    release(j1, keep=True)                         # its task ended, the unit still wants the slot
    release(j1, lost=True)                         # one lost: waits for another
    run()
    release(j1)                                    # one returned: wants one less
    run()
    assert set(core.waiting_for_quota()) == _quota_units(core)
    assert _status_waiting(core)["b"] == str(_recounted(core, "b"))   # status sums the unlimited group too
    core.finish_job(j1)
    core._check()
    run()
    assert core.groups["a"].waiting == Resources() and not core.waiting_for_quota()
    core.finish_job(j2)
    core._check()
    assert set(_status_waiting(core).values()) == {str(Resources())}


def test_a_changed_sum_is_caught_by_the_check() -> None:
    core = FuxiCore({"a": R("cpus:4;mem:4096")})
    core.submit(JobSpec("j1", (UnitSpec("u", 6, R("cpus:1;mem:256")),), quota_group="a"))
    core.on_offers([])
    core._check()
    unit = next(iter(core._units.values()))
    unit.desired = 7                               # changed behind _sync's back
    with pytest.raises(AssertionError):
        core._check()
    unit.desired = 6
    core._at_quota.add(unit.key)                   # said to wait for quota without that reason
    with pytest.raises(AssertionError):
        core._check()


QUOTA = QuotaConfig(groups={"prod": Resources.parse("cpus:40;mem:200000"),
                            "batch": Resources.parse("cpus:60;mem:400000;gpus:4"),
                            "dev": Resources.parse("cpus:20;mem:100000;gpus:2")})


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
def test_a_synthetic_simulation_keeps_the_state_equal_to_a_recount(policy: str) -> None:
    spec = SyntheticSpec(agents=12, tasks=300, load=3.0, seed=4)
    simulator = Simulator(synthetic_workload(spec), SimulationConfig.for_policy(policy, quota=QUOTA, seed=3))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    begin = simulator.scheduler.begin_cycle
    seen = {"quota": 0, "cycles": 0}

    def begin_cycle() -> None:
        core._check()
        assert set(core.waiting_for_quota()) == _quota_units(core)
        seen["quota"] += bool(core.waiting_for_quota())
        seen["cycles"] += 1
        begin()
    simulator.scheduler.begin_cycle = begin_cycle  # type: ignore[method-assign]
    simulator.run()
    assert seen["cycles"] > 100 and seen["quota"] > 0, seen


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
@pytest.mark.parametrize("seed, agents, load", [(4, 12, 3.0), (6, 20, 4.0)])
def test_the_planner_finds_the_same_units_short_as_a_recount(monkeypatch: pytest.MonkeyPatch, policy: str,
                                                             seed: int, agents: int, load: float) -> None:
    """The planner's units short of slots come from the queued units (kept
    by ``_sync``) and the gangs backing off; every pass compares them with
    the walk over the waiting units they replace (``check_short``), with
    quota groups, gangs and preemption."""
    from mesoslike_frameworks.fuxi.preemption import PreemptionPlanner

    monkeypatch.setattr(PreemptionPlanner, "check_short", True)
    passes = {"short": 0}
    short = PreemptionPlanner._short

    def counted(self: PreemptionPlanner) -> list:
        found = short(self)
        passes["short"] += bool(found)
        return found
    monkeypatch.setattr(PreemptionPlanner, "_short", counted)
    spec = SyntheticSpec(agents=agents, tasks=300, load=load, seed=seed)
    simulator = Simulator(synthetic_workload(spec), SimulationConfig.for_policy(policy, quota=QUOTA, seed=3))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    report = simulator.run()
    core._check()
    assert passes["short"] > 10 and core.counters["slots_preempted"] > 0, (passes, core.counters)
    assert report.to_dict()


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
def test_the_contended_trace_finds_the_same_units_short_as_a_recount(monkeypatch: pytest.MonkeyPatch,
                                                                     policy: str) -> None:
    from mesoslike.sim.traces import load_openb_trace
    from mesoslike_frameworks.fuxi.preemption import PreemptionPlanner

    monkeypatch.setattr(PreemptionPlanner, "check_short", True)
    quota = QuotaConfig(groups={"LS": Resources.parse("cpus:21388;mem:111432499;gpus:876"),
                                "Guaranteed": Resources.parse("cpus:1425;mem:7428833;gpus:58"),
                                "Burstable": Resources.parse("cpus:4990;mem:26000916;gpus:204"),
                                "BE": Resources.parse("cpus:7129;mem:37144166;gpus:292")})
    simulator = Simulator(load_openb_trace(nodes=500, pods=3000, load=1000.0),
                          SimulationConfig.for_policy(policy, quota=quota, seed=3))
    core: FuxiCore = simulator.scheduler.core  # type: ignore[attr-defined]
    simulator.run()
    core._check()
    assert core.counters["slots_preempted"] > 0

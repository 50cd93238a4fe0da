"""Each policy of mesoslike.sim on small workloads whose outcome is known
by hand: priorities and preemption, FIFO against FAIR, gangs, quota; why
waiting tasks wait; and the same seed giving the same JSON, byte for byte."""

from __future__ import annotations

import json

import pytest

from mesoslike_frameworks.fuxi.quota import QuotaConfig
from mesoslike.master.roles import RoleConfig, RolesConfig
from mesoslike.resources import Resources
from mesoslike.sim import (
    POLICIES,
    REASONS,
    STOP_DONE,
    AgentSpec,
    SimulationConfig,
    Simulator,
    SyntheticSpec,
    TaskSpec,
    Workload,
    load_openb_trace,
    simulate,
    synthetic_workload,
)
from mesoslike.sim.schedulers import REASON_FILTERED, REASON_GANG, REASON_LOWER_PRIORITY, REASON_NO_FIT, REASON_QUOTA

pytestmark = pytest.mark.timeout(120)

R = Resources.parse
FUXI = ("fuxi-fifo", "fuxi-fair")


def workload(agents: dict[str, str], tasks: list[TaskSpec]) -> Workload:
    return Workload("test", tuple(AgentSpec(a, R(r)) for a, r in agents.items()),
                    tuple(sorted({t.framework_id for t in tasks})), tuple(tasks))


def task(task_id: str, cls: str, resources: str, arrival: float, duration: float | None, index: int,
         priority: int = 100, **group: str) -> TaskSpec:
    return TaskSpec(task_id, cls, R(resources), arrival, duration, index, priority, **group)


def run(load: Workload, policy: str, **config) -> tuple[Simulator, dict[str, float | None]]:
    """The finished simulator and each task's first start."""
    simulator = Simulator(load, SimulationConfig.for_policy(policy, check_invariants=True, **config))
    simulator.run()
    return simulator, {t.task_id: start for t, start in simulator.recorder.first_starts()}


# ================================================================ priorities
def priority_workload() -> Workload:
    """One agent; a best-effort task holds it 0..10; a latency-sensitive
    task that needs the whole agent arrives at 1."""
    return workload({"a1": "cpus:4;mem:4096"}, [task("be", "BE", "cpus:4;mem:1024", 0.0, 10.0, 0, priority=100),
                                                 task("ls", "LS", "cpus:4;mem:1024", 1.0, 5.0, 1, priority=10)])


@pytest.mark.parametrize("policy", ["drf", "random"])
def test_the_allocator_knows_no_priorities(policy):
    simulator, starts = run(priority_workload(), policy)
    assert starts == {"be": 0.0, "ls": 10.0}
    result = Simulator(priority_workload(), SimulationConfig.for_policy(policy)).run()
    assert result.metrics["preemptions"]["total"] == 0
    assert result.metrics["makespan"] == 15.0


@pytest.mark.parametrize("policy", FUXI)
def test_fuxi_preempts_the_lower_priority_task(policy):
    result = simulate(priority_workload(), SimulationConfig.for_policy(policy, check_invariants=True))
    # the pass at 1 preempts "be"; the freed agent is offered again at 2; "be" runs again from 7
    assert result.metrics["wait"]["LS"]["max"] == 1.0
    assert result.metrics["preemptions"] == {"total": 1, "by_class": {"BE": 1, "LS": 0}}
    assert result.metrics["makespan"] == 17.0
    assert result.stop_reason == STOP_DONE


@pytest.mark.parametrize("policy", FUXI)
def test_fuxi_without_preemption_waits_like_the_allocator(policy):
    simulator, starts = run(priority_workload(), policy, preemption=False)
    assert starts == {"be": 0.0, "ls": 10.0}


@pytest.mark.parametrize("policy", FUXI)
def test_fuxi_says_lower_priority_when_tasks_it_may_not_preempt_hold_the_room(policy):
    equal = workload({"a1": "cpus:4;mem:4096"}, [task("first", "BE", "cpus:4;mem:1024", 0.0, 10.0, 0),
                                                  task("second", "LS", "cpus:4;mem:1024", 1.0, 5.0, 1)])
    simulator = Simulator(equal, SimulationConfig.for_policy(policy))
    simulator.run_until(5.0)
    assert simulator.why_waiting() == {"second": REASON_LOWER_PRIORITY}
    simulator = Simulator(priority_workload(), SimulationConfig.for_policy(policy, preemption=False))
    simulator.run_until(5.0)
    assert simulator.why_waiting() == {"ls": REASON_NO_FIT}   # the core's reason when it may not preempt


# ============================================================== FIFO and FAIR
def two_jobs() -> Workload:
    """Three slots; job A (4 tasks, ending at 10, 11, 12) takes all three at
    0; job B (3 tasks) arrives at 1. When the first slot frees at 10, FIFO
    serves A (submitted first), FAIR serves B (fewest slots granted)."""
    a = [task(f"a{i}", "X", "cpus:1;mem:64", 0.0, 10.0 + i, i, job="A") for i in range(4)]
    b = [task(f"b{i}", "X", "cpus:1;mem:64", 1.0, 10.0, 4 + i, job="B") for i in range(3)]
    return workload({"a1": "cpus:3;mem:4096"}, a + b)


def test_fifo_serves_the_earlier_job_first():
    _, starts = run(two_jobs(), "fuxi-fifo")
    assert starts == {"a0": 0.0, "a1": 0.0, "a2": 0.0, "a3": 10.0, "b0": 11.0, "b1": 12.0, "b2": 21.0}


def test_fair_serves_the_job_with_fewer_slots_first():
    _, starts = run(two_jobs(), "fuxi-fair")
    assert starts == {"a0": 0.0, "a1": 0.0, "a2": 0.0, "a3": 11.0, "b0": 10.0, "b1": 12.0, "b2": 20.0}


def test_greedy_frameworks_serve_their_queue_in_arrival_order():
    _, starts = run(two_jobs(), "drf")
    assert starts == {"a0": 0.0, "a1": 0.0, "a2": 0.0, "a3": 10.0, "b0": 11.0, "b1": 12.0, "b2": 21.0}


# ====================================================================== gangs
def gang_workload() -> Workload:
    """Two agents of 2 CPUs; a 1-CPU task holds one until 10; a gang of two
    2-CPU tasks arriving at 1 can only start when both agents are free."""
    return workload({"a1": "cpus:2;mem:1024", "a2": "cpus:2;mem:1024"}, [
        task("x", "X", "cpus:1;mem:64", 0.0, 10.0, 0),
        task("g0", "G", "cpus:2;mem:64", 1.0, 5.0, 1, gang="g"),
        task("g1", "G", "cpus:2;mem:64", 1.0, 5.0, 2, gang="g")])


@pytest.mark.parametrize("policy", POLICIES)
def test_a_gang_starts_whole_when_it_fits(policy):
    simulator = Simulator(gang_workload(), SimulationConfig.for_policy(policy, check_invariants=True))
    simulator.run_until(5.0)
    assert simulator.why_waiting() == {"g0": REASON_GANG, "g1": REASON_GANG}
    result = simulator.run()
    starts = {t.task_id: start for t, start in simulator.recorder.first_starts()}
    assert starts == {"x": 0.0, "g0": 10.0, "g1": 10.0}
    assert result.metrics["why_waiting"]["top"] == [{"reason": REASON_GANG, "task_seconds": 18.0, "share": 1.0}]
    assert result.stop_reason == STOP_DONE


# ====================================================================== quota
@pytest.mark.parametrize("policy", POLICIES)
def test_quota_holds_a_class_back(policy):
    """A limit of 2 CPUs for BE (roles file for the allocator, quota group for
    Fuxi): its second 2-CPU task waits for the first though the agent has room."""
    load = workload({"a1": "cpus:4;mem:4096"}, [task(f"b{i}", "BE", "cpus:2;mem:64", 0.0, 10.0, i) for i in range(2)])
    roles = RolesConfig(roles={"BE": RoleConfig("BE", limit="cpus:2")})
    quota = QuotaConfig({"BE": R("cpus:2;mem:4096")})
    simulator = Simulator(load, SimulationConfig.for_policy(policy, roles=roles, quota=quota, check_invariants=True))
    simulator.run_until(5.0)
    assert simulator.why_waiting() == {"b1": REASON_QUOTA}
    result = simulator.run()
    assert {t.task_id: s for t, s in simulator.recorder.first_starts()} == {"b0": 0.0, "b1": 10.0}
    assert result.metrics["why_waiting"]["top"][0]["reason"] == REASON_QUOTA


def test_role_weights_come_from_the_roles_file():
    """Weighted DRF: with weight 2, B's dominant share may be twice A's."""
    tasks = [task(f"{c}{i}", c, "cpus:1;mem:64", 0.0, None, 2 * i + (c == "B")) for i in range(9) for c in "AB"]
    roles = RolesConfig(roles={"B": RoleConfig("B", weight=2.0)})
    load = Workload("w", (AgentSpec("a1", R("cpus:9;mem:4096")),), ("A", "B"), tuple(tasks), tasks_per_offer=1)
    result = simulate(load, SimulationConfig(roles=roles, check_invariants=True))
    assert (result.final.framework("A").running_tasks, result.final.framework("B").running_tasks) == (3, 6)


# ============================================================ why tasks wait
def test_a_task_that_fits_nowhere_says_no_fit():
    load = workload({"a1": "cpus:2;mem:1024"}, [task("big", "X", "cpus:2;mem:64", 0.0, 10.0, 0),
                                                task("late", "Y", "cpus:2;mem:64", 1.0, 1.0, 1)])
    simulator = Simulator(load, SimulationConfig())
    simulator.run_until(3.0)
    assert simulator.why_waiting() == {"late": REASON_NO_FIT}


def test_the_drf_example_waits_for_lower_priority_then_no_fit():
    from mesoslike.sim import drf_example_workload
    simulator = Simulator(drf_example_workload())
    simulator.run_until(0.0)
    assert set(simulator.why_waiting().values()) == {REASON_LOWER_PRIORITY}
    result = simulator.run()
    assert set(simulator.why_waiting().values()) == {REASON_NO_FIT}
    assert {t["reason"] for t in result.metrics["why_waiting"]["top"]} == {REASON_LOWER_PRIORITY, REASON_NO_FIT}


def _filtered_workload() -> Workload:
    return workload({"small": "cpus:2;mem:1024", "big": "cpus:4;mem:1024"}, [
        task("wide", "Y", "cpus:3;mem:64", 1.0, 100.0, 0),
        task("huge", "Y", "cpus:4;mem:64", 1.0, 1.0, 1),
        task("narrow", "Y", "cpus:1;mem:64", 10.0, 1.0, 2)])


def test_a_new_task_that_fits_only_declined_agents_says_filtered():
    """Without offer filters: at 1, Y places "wide" on the big agent and
    declines the rest (the small agent and 1 CPU of the big one) with a
    30 s filter: its "huge" task cannot use them, and keeps Y from
    suppressing offers. "narrow" (1 CPU) arrives at 10: it fits what Y
    filtered, so it waits until the filters end, at 31."""
    load = _filtered_workload()
    simulator = Simulator(load, SimulationConfig(refuse_seconds=30.0, check_invariants=True, offer_filters=False))
    simulator.run_until(12.0)
    assert simulator.why_waiting() == {"huge": REASON_NO_FIT, "narrow": REASON_FILTERED}
    simulator.run()
    assert dict(simulator.recorder.first_starts())[load.tasks[2]] == 31.0


def test_with_offer_filters_a_framework_is_offered_only_agents_that_hold_a_task_it_waits_for():
    """With offer filters (the default) Y is never offered the small agent
    while it waits only for "huge" (4 CPUs), so it declines nothing and
    filters nothing: "narrow" starts in the round it arrives, at 10."""
    load = _filtered_workload()
    simulator = Simulator(load, SimulationConfig(refuse_seconds=30.0, check_invariants=True))
    simulator.run_until(5.0)
    assert simulator.why_waiting() == {"huge": REASON_NO_FIT}
    assert simulator.allocator.statistics().offers_declined == 0
    simulator.run()
    assert dict(simulator.recorder.first_starts())[load.tasks[2]] == 10.0


def test_reasons_are_the_documented_ones():
    assert set(REASONS) == {"quota", "no fit", "filtered", "lower priority", "gang incomplete", "blacklist",
                            "no offer yet"}


# ================================================================ determinism
def small_trace() -> Workload:
    return load_openb_trace(nodes=120, pods=400, time_scale=1.0, load=2000.0, pending="lifetime", job_window=3600)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_same_inputs_and_seed_give_byte_identical_json(policy):
    documents = [json.dumps(simulate(load, SimulationConfig.for_policy(policy, seed=7)).to_dict(3))
                 for load in (synthetic_workload(SyntheticSpec(agents=12, tasks=300, load=1.5, seed=3)),
                              synthetic_workload(SyntheticSpec(agents=12, tasks=300, load=1.5, seed=3)))]
    assert documents[0] == documents[1]
    trace = [json.dumps(simulate(small_trace(), SimulationConfig.for_policy(policy, seed=7)).to_dict(3))
             for _ in range(2)]
    assert trace[0] == trace[1]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_replays_a_small_trace_within_capacity(policy):
    load = small_trace()
    result = simulate(load, SimulationConfig.for_policy(policy, check_invariants=True))
    assert result.stop_reason == STOP_DONE
    started = result.metrics["wait"]["all"]["started"]
    assert started == len(load.tasks) - result.tasks_unplaceable > 0
    assert result.final.running_tasks == 0
    series = result.metrics["series"]
    assert all(0 <= u <= 1 for values in series["utilisation"].values() for u in values)


def test_a_different_seed_may_change_the_random_sorter():
    load = synthetic_workload(SyntheticSpec(agents=12, tasks=300, load=1.5, seed=3))
    runs = {seed: simulate(load, SimulationConfig.for_policy("random", seed=seed)).to_dict() for seed in range(3)}
    assert len({json.dumps(doc) for doc in runs.values()}) > 1


# ============================================================ honest waits
def test_tasks_that_never_start_count_as_never_in_the_waits():
    """A long-running task holds the only agent: "late" never starts and
    "huge" fits no agent. Neither may vanish from the waits (the wait of the
    one task that started was 0, which said nothing about the others)."""
    load = workload({"a1": "cpus:2;mem:1024"}, [task("hold", "X", "cpus:2;mem:64", 0.0, None, 0),
                                                task("late", "X", "cpus:1;mem:64", 1.0, 1.0, 1),
                                                task("huge", "X", "cpus:8;mem:64", 2.0, 1.0, 2)])
    result = simulate(load, SimulationConfig(check_invariants=True))
    wait = result.metrics["wait"]["X"]
    assert (wait["tasks"], wait["started"], wait["never_started"], wait["unplaceable"]) == (3, 1, 2, 1)
    assert wait["p50"] is None and wait["max"] is None      # "never": 2 of 3 never started
    assert wait["mean_started"] == 0.0
    cdf = result.metrics["wait_cdf"]["by_class"]["X"]
    assert cdf[0] == 0.0 and cdf[-1] is None


def test_unplaceable_trace_pods_are_never_started_not_zero_waits():
    """The first 120 nodes of the openb trace have no GPU: the GPU pods fit
    no agent. The waits must say that most pods never started."""
    load = load_openb_trace(nodes=120, pods=400, time_scale=1.0, load=2000.0, pending="lifetime", job_window=3600)
    result = simulate(load, SimulationConfig())
    wait = result.metrics["wait"]["all"]
    assert wait["unplaceable"] == result.tasks_unplaceable > wait["tasks"] / 2
    assert wait["started"] + wait["never_started"] == wait["tasks"] == len(load.tasks)
    assert wait["p50"] is None


# ======================================================= the preemption storm
def storm_workload() -> Workload:
    """Issue 19 in small: four 4-cpu agents. ``D`` (no quota group: the
    unlimited ``default``; priority 1) runs 6 cpus, ``B`` (priority 50) its
    own maximum of 4; then ``A`` (priority 10) wants 8 -- its own 4, the 2
    cpus left free, and 2 more only by preempting ``B``, which holds them
    within its own maximum. ``C`` lends its idle quota."""
    tasks = [task(f"d{i}", "D", "cpus:1;mem:1", 0.0, 600.0, i, priority=1) for i in range(6)]
    tasks += [task(f"b{i}", "B", "cpus:1;mem:1", 1.0, 300.0, 6 + i, priority=50) for i in range(4)]
    tasks += [task(f"a{i}", "A", "cpus:1;mem:1", 2.0, 100.0, 10 + i, priority=10) for i in range(8)]
    return workload({f"m{i}": "cpus:4;mem:4096" for i in range(4)}, tasks)


@pytest.mark.parametrize("policy", FUXI)
@pytest.mark.parametrize("chunk", [1, None])
@pytest.mark.parametrize("offer_filters", [True, False])
def test_fuxi_preemptions_stay_bounded_when_borrowed_quota_meets_an_owner(policy, chunk, offer_filters):
    quota = QuotaConfig({"A": R("cpus:4;mem:4096"), "B": R("cpus:4;mem:4096"), "C": R("cpus:4;mem:4096")})
    result = simulate(storm_workload(), SimulationConfig.for_policy(policy, quota=quota, cycle_chunk=chunk,
                                                                     check_invariants=True,
                                                                     offer_filters=offer_filters))
    # before issue 19: A preempted two of B's pods on borrowed quota, B took its quota
    # back from A, and again, round after round. Now A's last two wait (reason: quota)
    # until A's first pods end at 102. Without offer filters, in chunks, a pass that has
    # seen part of the cycle may preempt one B pod for A within A's own quota, and that
    # one stays preempted; with them the cycle offers only the agents that hold a slot
    # A waits for, and the pass sees them all at once (docs/simulate.rst, "Offer filters").
    partial = chunk is not None and not offer_filters
    assert result.metrics["preemptions"]["total"] == (1 if partial else 0)
    assert result.stop_reason == STOP_DONE
    assert result.metrics["wait"]["A"]["max"] == (101.0 if partial else 100.0)


def test_a_policy_scheduler_without_offer_shapes_is_offered_every_agent() -> None:
    """``Scheduler.offer_shapes`` is optional: a policy plugin written before
    it (here: greedy frameworks behind a wrapper without it) runs as before,
    every agent offered (the report of ``--no-offer-filters``)."""
    from mesoslike import plugins
    from mesoslike.sim.policies import register_policy
    from mesoslike.sim.schedulers import GreedySchedulers

    class Wrapped:
        def __init__(self, inner: GreedySchedulers) -> None:
            self._inner = inner

        def __getattr__(self, name: str):
            if name == "offer_shapes":
                raise AttributeError(name)
            return getattr(self._inner, name)

    class Policy:
        def scheduler(self, host, workload, config, clock):
            return Wrapped(GreedySchedulers(host, workload.frameworks, workload.role_of, config.refuse_seconds))

        def read_quota(self, path):
            return None

    register_policy("greedy-old", Policy())
    try:
        load = _filtered_workload()
        old = Simulator(load, SimulationConfig(refuse_seconds=30.0, offer_filters=False)).run()
        plugged = Simulator(load, SimulationConfig(scheduler="greedy-old", refuse_seconds=30.0)).run()
    finally:
        plugins.unregister(plugins.SIMULATION_POLICIES, "greedy-old")
    assert plugged.metrics["wait"] == old.metrics["wait"]
    assert plugged.metrics["offers"] == old.metrics["offers"]
    assert old.metrics["offers"] != Simulator(load, SimulationConfig(refuse_seconds=30.0)).run().metrics["offers"]

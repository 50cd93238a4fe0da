"""Tests for mesoslike.simulate: the DRF worked example of seed 004, trace
loading and replay (capacity never exceeded, every placeable task runs),
synthetic workloads, and the result objects."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fairness_oracles import drf
from mesoslike.resources import Resources
from mesoslike.sim import (
    DEFAULT_TRACE_DIR,
    STOP_DONE,
    STOP_MAX_ROUNDS,
    STOP_STUCK,
    AgentSpec,
    SimulationConfig,
    Simulator,
    TaskSpec,
    TraceError,
    Workload,
    drf_example_workload,
    load_openb_trace,
    simulate,
)

pytestmark = pytest.mark.timeout(60)

TRACE_DIR = Path(__file__).resolve().parent.parent / "mesoslike" / "sim" / "data" / "alibaba-openb-2023"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


def launch_order(result) -> list[str]:
    """Which framework launched a task in each round (one per round here)."""
    order, before = [], {f: 0 for f in ("A", "B")}
    for snapshot in result.rounds:
        for f in snapshot.frameworks:
            order += [f.framework_id] * (f.launched_tasks - before[f.framework_id])
            before[f.framework_id] = f.launched_tasks
    return order


# ============================================================ DRF example
def test_drf_example_gives_a_three_tasks_and_b_two_with_equal_shares():
    result = simulate(drf_example_workload(), SimulationConfig(check_invariants=True))
    a, b = result.final.framework("A"), result.final.framework("B")
    assert (a.running_tasks, b.running_tasks) == (3, 2)
    assert a.dominant_share == pytest.approx(2 / 3)
    assert b.dominant_share == pytest.approx(2 / 3)
    assert result.stop_reason == STOP_STUCK
    assert result.total == Resources.parse("cpus:9;mem:18432")


def test_drf_example_matches_the_progressive_filling_oracle():
    oracle = drf({"cpus": 9, "mem": 18432}, {"A": {"cpus": 1, "mem": 4096}, "B": {"cpus": 3, "mem": 1024}})
    result = simulate(drf_example_workload())
    assert launch_order(result) == oracle.order == ["A", "B", "A", "B", "A"]


def test_drf_example_rounds_are_one_allocation_interval_apart():
    result = simulate(drf_example_workload(), SimulationConfig(allocation_interval=2.0))
    assert [r.time for r in result.rounds] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert [r.offers_made for r in result.rounds] == [1, 2, 3, 4, 5]
    assert result.final.offers_declined == 0


def test_drf_example_is_deterministic():
    # speed is the benchmark's to measure (docs/simulate.rst, "Speed"), never a timed assert here
    first = simulate(drf_example_workload())
    assert simulate(drf_example_workload()) == first


def test_greedy_frameworks_with_whole_offers_are_not_drf():
    """Why the example launches one task per offer: with one agent offered
    whole, a greedy A grabs 4 tasks first and B gets 1."""
    workload = drf_example_workload()
    greedy = Workload(workload.name, workload.agents, workload.frameworks, workload.tasks, tasks_per_offer=None)
    result = simulate(greedy, SimulationConfig(check_invariants=True))
    assert result.final.framework("A").running_tasks == 4
    assert result.final.framework("B").running_tasks == 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_sorter_still_respects_capacity(seed):
    result = simulate(drf_example_workload(), SimulationConfig(sorter="random", seed=seed, check_invariants=True))
    a, b = result.final.framework("A"), result.final.framework("B")
    assert a.running_tasks * 1 + b.running_tasks * 3 <= 9
    assert a.running_tasks * 4096 + b.running_tasks * 1024 <= 18432
    assert result.sorter == "random"


def test_invalid_drf_example_size():
    with pytest.raises(ValueError):
        drf_example_workload(0)


# ============================================================ trace loading
def test_trace_nodes_and_pods_are_converted():
    workload = load_openb_trace(TRACE_DIR, nodes=3, pods=2, time_scale=1.0)
    assert [a.agent_id for a in workload.agents] == ["openb-node-0000", "openb-node-0001", "openb-node-0002"]
    assert workload.agents[0].resources == Resources(cpus=32, mem=262144)
    first, second = workload.tasks
    assert first.resources == Resources(cpus=12, mem=16384, gpus=1)
    assert second.resources == Resources(cpus=6, mem=12288, gpus=0.46)  # shares 46% of one GPU
    assert (first.arrival, first.duration) == (0.0, 12537496.0)
    assert (second.arrival, second.duration) == (427061.0, 12902960.0 - 427061.0)
    assert workload.frameworks == ("LS",)


def test_default_trace_dir_is_the_bundled_copy():
    assert DEFAULT_TRACE_DIR == TRACE_DIR
    assert (TRACE_DIR / "README.md").is_file()


def test_trace_time_scale_divides_times():
    plain = load_openb_trace(TRACE_DIR, nodes=1, pods=20, time_scale=1.0)
    fast = load_openb_trace(TRACE_DIR, nodes=1, pods=20, time_scale=1000.0)
    for slow_task, fast_task in zip(plain.tasks, fast.tasks):
        assert fast_task.arrival == pytest.approx(slow_task.arrival / 1000)
        assert fast_task.duration == pytest.approx(slow_task.duration / 1000)


def test_trace_rows_that_make_no_sense_are_skipped_and_counted(tmp_path):
    (tmp_path / "openb_node_list_all_node.csv").write_text(
        NODE_HEADER + "n0,4000,8192,1,T4\nn1,oops,8192,0,\nn2,2000,4096,0,\n")
    (tmp_path / "openb_pod_list_default.csv").write_text(POD_HEADER + "\n".join([
        "p0,1000,1024,0,0,,BE,Running,100,200,110",
        "p1,1000,1024,0,0,,BE,Pending,100,200,",           # never scheduled
        "p2,1000,1024,0,0,,BE,Failed,100,90,100",          # ends before it starts
        "p3,1000,1024,0,0,,LS,Failed,100,100,100",         # zero duration
        "p4,x,1024,0,0,,LS,Running,100,200,100",           # malformed
        "p5,0,0,0,0,,LS,Running,100,200,100",              # needs nothing
        "p6,500,512,1,300,,LS,Running,150,400,160",
    ]) + "\n")
    workload = load_openb_trace(tmp_path, time_scale=10.0)
    assert [a.agent_id for a in workload.agents] == ["n0", "n2"]
    assert workload.agents[0].attributes == {"model": "T4"}
    assert workload.skipped == {"bad node": 1, "never scheduled": 1, "non-positive duration": 2,
                                "malformed": 1, "no resources": 1}
    assert [(t.task_id, t.framework_id, t.arrival, t.duration) for t in workload.tasks] == [
        ("p0", "BE", 0.0, 9.0), ("p6", "LS", 5.0, 24.0)]
    assert workload.frameworks == ("BE", "LS")


def test_missing_trace_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_openb_trace(tmp_path / "nowhere")
    with pytest.raises(TraceError, match="openb_node_list_all_node.csv"):
        load_openb_trace(tmp_path)
    (tmp_path / "openb_node_list_all_node.csv").write_text("sn,cpu\n")
    (tmp_path / "openb_pod_list_default.csv").write_text(POD_HEADER)
    with pytest.raises(TraceError, match="missing columns"):
        load_openb_trace(tmp_path)


def test_trace_copies_repeat_every_node_and_pod_in_jobs_of_their_own():
    once = load_openb_trace(TRACE_DIR, nodes=3, pods=40, time_scale=1.0, job_window=3600)
    thrice = load_openb_trace(TRACE_DIR, nodes=3, pods=40, time_scale=1.0, job_window=3600, copies=3)
    assert [a.agent_id for a in thrice.agents][:3] == ["openb-node-0000", "openb-node-0000-c1",
                                                        "openb-node-0000-c2"]
    assert [a.resources for a in thrice.agents] == [a.resources for a in once.agents for _ in range(3)]
    assert len(thrice.tasks) == 3 * len(once.tasks)
    # copy k of a task: same class, resources, times and priority; its name and its job's carry -c<k>
    for task, copies in zip(once.tasks, zip(*[iter(thrice.tasks)] * 3)):
        assert [c.task_id for c in copies] == [task.task_id, f"{task.task_id}-c1", f"{task.task_id}-c2"]
        assert {(c.framework_id, c.resources, c.arrival, c.duration, c.priority) for c in copies} == \
            {(task.framework_id, task.resources, task.arrival, task.duration, task.priority)}
        assert [c.job for c in copies] == ([task.job, f"{task.job}-c1", f"{task.job}-c2"] if task.job else [""] * 3)
    assert any(t.job for t in once.tasks)
    assert "3 copies" in thrice.description and "120 pods" in thrice.description


def test_one_copy_is_the_trace_itself():
    assert load_openb_trace(TRACE_DIR, nodes=20, pods=100, copies=1) == load_openb_trace(TRACE_DIR, nodes=20, pods=100)


@pytest.mark.parametrize("kwargs", [{"time_scale": 0}, {"time_scale": -1.0}, {"nodes": -1}, {"pods": -5},
                                    {"copies": 0}, {"copies": 1.5}])
def test_bad_trace_arguments(kwargs):
    with pytest.raises(ValueError):
        load_openb_trace(TRACE_DIR, **kwargs)


# ============================================================ trace replay
def placeable(workload: Workload) -> list[TaskSpec]:
    return [t for t in workload.tasks if any(a.resources.contains(t.resources) for a in workload.agents)]


@pytest.mark.parametrize("nodes, pods", [(50, 300), (400, 300)])
def test_trace_replay_finishes_within_capacity_and_runs_every_placeable_task(nodes, pods):
    workload = load_openb_trace(TRACE_DIR, nodes=nodes, pods=pods, time_scale=1000.0)
    result = simulate(workload, SimulationConfig(check_invariants=True))  # asserts capacity every round
    fits = placeable(workload)
    assert result.stop_reason == STOP_DONE
    assert result.never_launched == ()
    assert result.tasks_unplaceable == len(workload.tasks) - len(fits)
    final = result.final
    assert sum(f.launched_tasks for f in final.frameworks) == len(fits) > 0
    assert sum(f.finished_tasks for f in final.frameworks) == len(fits)
    assert final.running_tasks == 0
    assert all(f.dominant_share == 0 for f in final.frameworks)
    assert result.skipped == {"never scheduled": pods - len(workload.tasks)}


def test_trace_replay_counters_agree_with_the_allocator():
    workload = load_openb_trace(TRACE_DIR, nodes=400, pods=300, time_scale=1000.0)
    result = simulate(workload)
    final = result.final
    assert final.offers_made == result.allocator["offers_made"] == sum(f.offers_received for f in final.frameworks)
    assert final.offers_declined == result.allocator["offers_declined"]
    assert final.offers_declined == sum(f.offers_declined for f in final.frameworks)
    times = [r.time for r in result.rounds]
    assert times == sorted(times)
    assert [r.round for r in result.rounds] == list(range(1, len(result.rounds) + 1))


# ======================================================= synthetic workloads
def random_workload(seed: int) -> Workload:
    rng = random.Random(seed)
    agents = tuple(AgentSpec(f"a{i}", Resources(cpus=rng.choice([2, 4, 8]), mem=rng.choice([2048, 8192])))
                   for i in range(5))
    tasks = []
    for i in range(120):
        framework_id = rng.choice(["f1", "f2", "f3"])
        resources = Resources(cpus=rng.choice([0.5, 1, 3, 9]), mem=rng.choice([256, 1024, 4096]))
        duration = None if rng.random() < 0.05 else rng.uniform(0.1, 20)
        tasks.append(TaskSpec(f"t{i}", framework_id, resources, rng.uniform(0, 60), duration, i))
    tasks.sort(key=lambda t: (t.arrival, t.index))
    return Workload("random", agents, ("f1", "f2", "f3"), tuple(tasks))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sorter", ["drf", "random"])
def test_random_workloads_stay_within_capacity_and_place_what_fits(seed, sorter):
    workload = random_workload(seed)
    result = simulate(workload, SimulationConfig(sorter=sorter, seed=seed, check_invariants=True))
    fits = placeable(workload)
    assert result.tasks_unplaceable == len(workload.tasks) - len(fits)
    launched = sum(f.launched_tasks for f in result.final.frameworks)
    if result.stop_reason == STOP_DONE:
        assert launched == len(fits)
    else:
        # long-running tasks hold on to room that some queued tasks need
        assert result.stop_reason == STOP_STUCK
        assert launched + len(result.never_launched) == len(fits)
        assert any(t.duration is None for t in workload.tasks)


def test_max_rounds_stops_the_run():
    result = simulate(random_workload(0), SimulationConfig(max_rounds=3))
    assert result.stop_reason == STOP_MAX_ROUNDS
    assert len(result.rounds) == 3


def test_empty_workload_stops_at_once():
    result = simulate(Workload("empty", (AgentSpec("a", Resources(cpus=1, mem=64)),), (), ()))
    assert result.stop_reason == STOP_DONE
    assert len(result.rounds) == 1


def test_a_simulator_runs_once():
    simulator = Simulator(drf_example_workload())
    simulator.run()
    with pytest.raises(RuntimeError):
        simulator.run()


# ================================================================ results
def test_checkpoints_are_spread_and_end_with_the_final_round():
    result = simulate(drf_example_workload())
    assert [r.round for r in result.checkpoints(1)] == [5]
    assert [r.round for r in result.checkpoints(2)] == [3, 5]
    assert [r.round for r in result.checkpoints(5)] == [1, 2, 3, 4, 5]
    assert [r.round for r in result.checkpoints(50)] == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        result.checkpoints(0)


def test_result_document_is_json():
    result = simulate(drf_example_workload())
    document = json.loads(json.dumps(result.to_dict(checkpoints=3)))
    assert document["workload"] == "drf-example"
    assert document["tasks"] == {"submitted": 12, "unplaceable": 0, "launched": 5, "finished": 0,
                                 "running": 5, "queued": 7, "never_launched": 7}
    assert [f["framework_id"] for f in document["frameworks"]] == ["A", "B"]
    assert len(document["checkpoints"]) == 3
    assert document["checkpoints"][-1]["round"] == document["rounds"] == 5


@pytest.mark.parametrize("arrival, duration", [(-1.0, 1.0), (float("nan"), 1.0), (0.0, -2.0), (0.0, float("inf"))])
def test_task_times_are_validated(arrival, duration):
    with pytest.raises(ValueError):
        TaskSpec("t", "f", Resources(cpus=1), arrival, duration)


def test_workload_validation():
    agents = (AgentSpec("a", Resources(cpus=1, mem=64)),)
    with pytest.raises(ValueError):
        Workload("w", agents, ("f",), (), tasks_per_offer=0)
    orphan = TaskSpec("t", "g", Resources(cpus=1), 0.0, 1.0)
    with pytest.raises(ValueError, match="unknown frameworks"):
        Simulator(Workload("w", agents, ("f",), (orphan,)))


def test_tasks_need_not_be_sorted_by_arrival():
    agents = (AgentSpec("a", Resources(cpus=1, mem=64)),)
    late, early = (TaskSpec("late", "f", Resources(cpus=1), 5.0, 1.0, 0),
                   TaskSpec("early", "f", Resources(cpus=1), 0.0, 1.0, 1))
    result = simulate(Workload("w", agents, ("f",), (late, early)), SimulationConfig(check_invariants=True))
    assert result.stop_reason == STOP_DONE
    assert result.final.framework("f").finished_tasks == 2
    assert result.final.time == 6.0

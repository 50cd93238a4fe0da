"""The simulator's shortcuts change no result (docs/performance.rst, "The
contended simulation"): a greedy framework turns down an offer below the
least its queued tasks need without looking at each shape
(``_Greedy.floor``), and the index of free resources sweeps the agents once
per shape, looking again only at those that grew since (``_FreeIndex``).
Each is checked against the plain
scan it replaces, alone and over whole runs whose reports must be the same,
byte for byte."""

from __future__ import annotations

import json
import random

import pytest

from mesoslike import Resources
from mesoslike.sim import SimulationConfig, Simulator
from mesoslike.sim.engine import _FreeIndex, _Useful
from mesoslike.sim.schedulers import _Greedy
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike.sim.workload import TaskSpec

SHAPES = [Resources.parse(s) for s in ("cpus:1;mem:1024", "cpus:2;mem:512", "cpus:4;mem:8192;gpus:1",
                                       "cpus:0.5;mem:4096", "mem:2048", "cpus:8;mem:16384")]


def _room(rng: random.Random) -> Resources:
    text = f"cpus:{rng.choice([0.5, 1, 2, 3, 4, 8, 9])};mem:{rng.choice([256, 512, 1024, 3000, 8192, 20000])}"
    if rng.random() < 0.3:
        text += f";gpus:{rng.randint(1, 2)}"
    return Resources.parse(text)


def _plain_fits(free: dict[str, Resources], shape: Resources) -> bool:
    return any(room.contains(shape) for room in free.values())


def test_the_free_index_answers_as_a_scan_of_every_agent() -> None:
    rng = random.Random(7)
    totals = {f"a{i}": _room(rng) for i in range(40)}
    free = dict(totals)
    index = _FreeIndex(free)
    asked = answered_yes = 0
    for _ in range(4000):
        agent_id = rng.choice(sorted(free))
        if rng.random() < 0.5:              # a task starts: the agent's free room shrinks
            shape = rng.choice(SHAPES)
            if free[agent_id].contains(shape):
                free[agent_id] = free[agent_id] - shape
        else:                               # a task ends: it grows back (at most to its total)
            free[agent_id] = totals[agent_id]
            index.grew(agent_id)
        for shape in rng.sample(SHAPES, 3):
            answer = index.fits(shape)
            assert answer == _plain_fits(free, shape), (shape, free)
            asked += 1
            answered_yes += answer
    assert 0 < answered_yes < asked         # both answers were exercised


def _task(index: int, shape: Resources, gang: str = "") -> TaskSpec:
    return TaskSpec(f"t{index}", "fw", shape, 0.0, 10.0, index, index % 3, gang=gang)


def _greedy(rng: random.Random) -> _Greedy:
    framework = _Greedy("fw", rng.choice([None, 1, 2]))
    count = 0
    for _ in range(rng.randint(0, 5)):
        shape = rng.choice(SHAPES)
        tasks = [_task(count + i, shape) for i in range(rng.randint(1, 3))]
        count += len(tasks)
        framework.enqueue(tasks)
    if rng.random() < 0.5:
        members = [_task(count + i, rng.choice(SHAPES), gang=f"g{count}") for i in range(rng.randint(2, 3))]
        framework.enqueue(members)
    return framework


def _plain_could_use(framework: _Greedy, room: Resources) -> bool:
    # what could_use says without the floor: a queued shape or a gang's first member fits
    return any(room.contains(shape) for shape in framework.queues) or \
        any(room.contains(gang[0].resources) for gang in framework.gangs.values())


def test_a_room_below_the_floor_takes_nothing_and_is_not_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    turned_down = 0
    for trial in range(600):
        rooms = [_room(rng) for _ in range(rng.randint(1, 5))]
        seed = rng.random()
        framework = _greedy(random.Random(seed))
        for room in rooms:
            assert framework.could_use(room) == _plain_could_use(framework, room)
            turned_down += not room.contains(framework.floor())
        picked = framework.place(list(rooms))
        with monkeypatch.context() as patch:      # the same framework without the floor: the old code
            patch.setattr(_Greedy, "floor", lambda self: Resources())
            plain = _greedy(random.Random(seed))
            assert plain.place(list(rooms)) == picked
        assert framework.queued == plain.queued
        for room in rooms:                         # after placing: the floor of what is left
            assert framework.could_use(room) == _plain_could_use(framework, room)
    assert turned_down > 100                       # the shortcut was taken


def _report(spec: SyntheticSpec, policy: str) -> str:
    simulator = Simulator(synthetic_workload(spec), SimulationConfig.for_policy(
        policy, seed=spec.seed, check_invariants=True))
    return json.dumps(simulator.run().to_dict(checkpoints=5), indent=2)


@pytest.mark.parametrize("policy", ["drf", "random"])
@pytest.mark.parametrize("seed, agents, load", [(2, 9, 3.0), (5, 15, 1.5)])
def test_the_report_is_the_same_without_the_shortcuts(monkeypatch: pytest.MonkeyPatch, policy: str, seed: int,
                                                      agents: int, load: float) -> None:
    spec = SyntheticSpec(agents=agents, tasks=300, load=load, seed=seed)
    fast = _report(spec, policy)
    monkeypatch.setattr(_Greedy, "floor", lambda self: Resources())
    monkeypatch.setattr(_FreeIndex, "fits", lambda self, shape: _plain_fits(self._free, shape))
    assert _report(spec, policy) == fast


def test_the_agents_that_hold_a_wanted_shape_are_those_a_scan_finds() -> None:
    """_Useful (the offer filters' agents) keeps, per shape, the agents
    whose room holds it, following only the agents changed since: its
    answers are those of a scan of every agent and shape, in the agents'
    order, whatever the history of rooms and of the shapes wanted."""
    rng = random.Random(11)
    totals = {f"a{i}": _room(rng) for i in range(30)}
    free = dict(totals)
    useful = _Useful(free)
    order = list(totals)
    nonempty = 0
    for _ in range(3000):
        agent_id = rng.choice(order)
        if rng.random() < 0.5:
            shape = rng.choice(SHAPES)
            if free[agent_id].contains(shape):
                free[agent_id] = free[agent_id] - shape
        else:
            free[agent_id] = totals[agent_id]
        useful.changed(agent_id)
        if rng.random() < 0.4:
            continue                        # several changes between two cycles
        by_framework = {f: rng.sample(SHAPES, rng.randint(0, 3)) for f in ("x", "y") if rng.random() < 0.8}
        agents = useful.agents(by_framework)
        wanted = [shape for shapes in by_framework.values() for shape in shapes]
        assert agents == [a for a in order if any(free[a].contains(shape) for shape in wanted)]
        for framework_id in ("x", "y", "z"):
            for a in order:
                assert useful.may_offer(framework_id, a) == \
                    any(free[a].contains(shape) for shape in by_framework.get(framework_id, ()))
        nonempty += bool(agents)
    assert nonempty > 100


@pytest.mark.parametrize("policy", ["drf", "random"])
def test_with_offer_filters_no_offer_holds_none_of_its_frameworks_tasks(policy: str) -> None:
    """Every offer made under offer filters holds a task its framework waited
    for when the cycle began, and a cycle asks the allocator about those
    agents only (never the whole cluster)."""
    spec = SyntheticSpec(agents=12, tasks=300, load=2.0, seed=3)
    simulator = Simulator(synthetic_workload(spec), SimulationConfig.for_policy(policy, check_invariants=True))
    allocate = simulator.allocator.allocate
    scheduler = simulator.scheduler
    checked = 0

    def checking(agent_ids=None):
        nonlocal checked
        assert agent_ids is not None
        shapes = scheduler.offer_shapes()
        offers = allocate(agent_ids)
        for offer in offers:
            assert any(offer.resources.contains(shape) for shape in shapes[offer.framework_id])
            checked += 1
        return offers

    simulator.allocator.allocate = checking
    result = simulator.run()
    assert checked > 100 and result.metrics["offers"]["made"] == checked

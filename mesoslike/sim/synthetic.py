"""Generated workloads: the DRF worked example of seed 004, and a synthetic
cluster with Poisson arrivals, heavy-tailed durations and several roles.

Deterministic: the generator draws from its own seeded ``random.Random``.
"""

from __future__ import annotations

import math
import random
from typing import Iterable, Mapping

import attrs

from mesoslike.resources import Resources
from mesoslike.sim.workload import AgentSpec, TaskSpec, Workload

__all__ = ["drf_example_workload", "SyntheticClass", "SyntheticSpec", "DEFAULT_CLASSES", "synthetic_workload"]


def drf_example_workload(tasks_per_framework: int = 6) -> Workload:
    """The worked example of seed 004 (the Mesos/DRF paper): one agent with
    9 CPUs and 18 GB; framework A runs <1 CPU, 4 GB> tasks, B <3 CPU, 1 GB>
    tasks, all long-running. DRF ends with A 3 tasks, B 2, both at 2/3.

    DRF's progressive filling hands out one task at a time, so here each
    framework launches one task per offer and the rest of the offer goes
    straight back to the pool (with one agent and whole-agent offers, a
    greedy framework would otherwise grab 4 tasks in the first offer).
    """
    if tasks_per_framework < 1:
        raise ValueError(f"tasks_per_framework must be >= 1, got {tasks_per_framework!r}")
    demands = {"A": Resources(cpus=1, mem=4096), "B": Resources(cpus=3, mem=1024)}
    tasks: list[TaskSpec] = []
    for i in range(tasks_per_framework):
        for framework_id, demand in demands.items():
            tasks.append(TaskSpec(f"{framework_id}-{i}", framework_id, demand, 0.0, None, len(tasks)))
    agent = AgentSpec("agent-1", Resources.parse("cpus:9;mem:18432"))
    return Workload(
        name="drf-example",
        agents=(agent,),
        frameworks=tuple(demands),
        tasks=tuple(tasks),
        tasks_per_offer=1,
        description="seed 004: 9 CPU / 18 GB; A needs <1 CPU, 4 GB>, B needs <3 CPU, 1 GB>",
    )


def _positive(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def _fraction(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be a number in [0, 1], got {value!r}")


def _shapes(value: Iterable[Resources | str]) -> tuple[Resources, ...]:
    return tuple(Resources.parse(s) if isinstance(s, str) else s for s in value)


@attrs.frozen
class SyntheticClass:
    """One role of the synthetic cluster: its share of the tasks, its
    priority, its task shapes (drawn uniformly), and its durations: a
    Pareto distribution of shape ``alpha`` (heavy-tailed: infinite variance
    for alpha <= 2) and mean ``mean_duration``, cut at 100 x the mean.
    ``gang_fraction`` of its arrivals are gangs of 2 to ``max_gang`` tasks
    (all-or-nothing); the others are jobs of 1 to ``max_job`` tasks."""

    share: float = attrs.field(validator=_positive)
    priority: int
    shapes: tuple[Resources, ...] = attrs.field(converter=_shapes)
    mean_duration: float = attrs.field(validator=_positive)
    alpha: float = attrs.field(default=1.5, validator=_positive)
    gang_fraction: float = attrs.field(default=0.0, validator=_fraction)
    max_gang: int = 8
    max_job: int = 1

    @property
    def mean_arrival_size(self) -> float:
        """Tasks per arrival on average."""
        return self.gang_fraction * (2 + self.max_gang) / 2 + (1 - self.gang_fraction) * (1 + self.max_job) / 2

    def __attrs_post_init__(self) -> None:
        if self.alpha <= 1:
            raise ValueError(f"alpha must be > 1 (a finite mean), got {self.alpha!r}")
        if not self.shapes:
            raise ValueError("a class needs at least one task shape")
        if self.max_gang < 2:
            raise ValueError(f"max_gang must be >= 2, got {self.max_gang!r}")
        if self.max_job < 1:
            raise ValueError(f"max_job must be >= 1, got {self.max_job!r}")


#: three roles: short latency-sensitive services, long batch jobs with
#: gangs, development jobs of all sizes
DEFAULT_CLASSES: Mapping[str, SyntheticClass] = {
    "prod": SyntheticClass(0.3, 10, ("cpus:1;mem:2048", "cpus:2;mem:4096"), 60.0),
    "batch": SyntheticClass(0.5, 50, ("cpus:4;mem:8192", "cpus:2;mem:16384", "cpus:4;mem:16384;gpus:1"), 300.0,
                            gang_fraction=0.1, max_job=8),
    "dev": SyntheticClass(0.2, 100, ("cpus:1;mem:1024", "cpus:8;mem:32768", "cpus:2;mem:8192;gpus:1"), 120.0,
                          max_job=4),
}
#: the machine types of the synthetic cluster, in turn
MACHINES = (Resources.parse("cpus:32;mem:131072"), Resources.parse("cpus:32;mem:131072"),
            Resources.parse("cpus:48;mem:262144;gpus:4"))


@attrs.frozen
class SyntheticSpec:
    """A synthetic cluster: ``agents`` machines (two CPU machines for each
    GPU machine, in two engine rooms), ``tasks`` tasks of ``classes``
    arriving as a Poisson process whose rate is ``load`` times the rate
    that keeps the cluster's scarcest resource busy on average."""

    agents: int = 60
    tasks: int = 2000
    load: float = attrs.field(default=0.9, validator=_positive)
    classes: Mapping[str, SyntheticClass] = attrs.field(factory=lambda: dict(DEFAULT_CLASSES))
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        for name, value in (("agents", self.agents), ("tasks", self.tasks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.classes:
            raise ValueError("a synthetic workload needs at least one class")


def _pareto(rng: random.Random, alpha: float, mean: float) -> float:
    """A Pareto draw of shape ``alpha`` and mean ``mean``, cut at 100 x the mean."""
    scale = mean * (alpha - 1) / alpha
    return min(scale * rng.paretovariate(alpha), 100 * mean)


def synthetic_workload(spec: SyntheticSpec = SyntheticSpec()) -> Workload:
    """Generate the workload ``spec`` describes (same spec, same workload)."""
    rng = random.Random(spec.seed)
    agents = tuple(AgentSpec(f"node-{i:04d}", MACHINES[i % len(MACHINES)], {"room": f"er{i % 2}"})
                   for i in range(spec.agents))
    total = Resources.sum(a.resources for a in agents)
    names = sorted(spec.classes)
    weights = [spec.classes[n].share for n in names]
    # the mean busy time an arrival puts on each kind (as a share of the cluster):
    # the rate keeps the kind most in demand busy ``load`` of the time on average
    work: dict[str, float] = {}
    for name, weight in zip(names, weights):
        cls = spec.classes[name]
        for shape in cls.shapes:
            for kind in shape.names():
                share = shape.get(kind) / total.get(kind) if total.get(kind) else 0.0
                work[kind] = work.get(kind, 0.0) + \
                    weight / sum(weights) / len(cls.shapes) * cls.mean_duration * share * cls.mean_arrival_size
    busiest = max(work.values(), default=0.0)
    rate = spec.load / busiest if busiest > 0 else 1.0
    tasks: list[TaskSpec] = []
    now = 0.0
    while len(tasks) < spec.tasks:
        now += rng.expovariate(rate)
        name = rng.choices(names, weights)[0]
        cls = spec.classes[name]
        shape = rng.choice(cls.shapes)
        duration = round(_pareto(rng, cls.alpha, cls.mean_duration), 3)
        is_gang = rng.random() < cls.gang_fraction
        size = rng.randint(2, cls.max_gang) if is_gang else rng.randint(1, cls.max_job)
        size = min(size, spec.tasks - len(tasks))
        group = f"{name}-{'gang' if is_gang else 'job'}-{len(tasks)}" if size > 1 else ""
        arrival = round(now, 3)
        for _ in range(size):
            # a job's tasks last as long as one another, give or take
            length = duration if is_gang else round(duration * rng.uniform(0.8, 1.2), 3)
            tasks.append(TaskSpec(f"{name}-{len(tasks)}", name, shape, arrival, length, len(tasks), cls.priority,
                                  gang=group if is_gang else "", job="" if is_gang else group))
    return Workload(
        name="synthetic",
        agents=agents,
        frameworks=tuple(names),
        tasks=tuple(tasks),
        description=(f"synthetic: {spec.agents} agents, {spec.tasks} tasks of {', '.join(names)}, "
                     f"Poisson arrivals at load {spec.load:g}, Pareto durations, seed {spec.seed}"),
    )

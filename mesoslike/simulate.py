"""A small discrete-event simulator that drives the allocator over a workload.

Pure logic: no printing, no clock but a :class:`~mesoslike.clock.FakeClock`,
no randomness but a seeded ``random.Random``; the only I/O is reading a trace
file in :func:`load_openb_trace`. The CLI (``mesoslike simulate``) formats the
:class:`SimulationResult` this module returns.

The model:

* **Agents** are added to a :class:`HierarchicalAllocator` once, at time 0.
* **Frameworks** are greedy schedulers, each holding a queue of tasks
  (resources + duration). On an offer a framework launches as many queued
  tasks as fit (optionally at most ``tasks_per_offer``) and accepts with their
  sum; it declines an offer it cannot use (with ``refuse_seconds``), suppresses
  offers when its queue is empty and revives when tasks arrive.
* **Tasks** arrive at their arrival time, wait in their framework's queue, run
  for their duration once launched, then their resources are recovered.
  ``duration=None`` means long-running (never ends).
* **Time** is a :class:`FakeClock`. A round processes the events due (task
  ends, arrivals), runs one allocation cycle and answers every offer. The next
  round comes one allocation interval later if the round made offers, or else
  jumps straight to the next event (arrival, task end, filter expiry), because
  nothing can change before then.

The run stops when everything is done, when no queued task fits the free
resources of any agent and no event is left to change that (the DRF example's
steady state), or at the ``max_rounds`` / ``max_time`` safety limits.
"""

from __future__ import annotations

import csv
import heapq
import math
import random
from collections import deque
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Sequence

import attrs

from mesoslike.allocator import HierarchicalAllocator, Offer
from mesoslike.clock import FakeClock
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources

__all__ = [
    "WORKLOADS", "TRACE_NODE_FILE", "TRACE_POD_FILE", "DEFAULT_TRACE_DIR",
    "AgentSpec", "TaskSpec", "Workload", "SimulationConfig",
    "FrameworkSnapshot", "RoundSnapshot", "SimulationResult", "TraceError",
    "drf_example_workload", "load_openb_trace", "simulate", "Simulator",
    "STOP_DONE", "STOP_STUCK", "STOP_MAX_ROUNDS", "STOP_MAX_TIME",
]

WORKLOADS = ("drf-example", "trace")
TRACE_NODE_FILE = "openb_node_list_all_node.csv"
TRACE_POD_FILE = "openb_pod_list_default.csv"
# Where the trace lives in a source checkout (bench/ is not installed).
DEFAULT_TRACE_DIR = Path(__file__).resolve().parent.parent / "bench" / "data" / "alibaba-openb-2023"

EMPTY = Resources()

STOP_DONE = "all tasks launched, no task end pending"
STOP_STUCK = "no queued task fits the free resources"
STOP_MAX_ROUNDS = "max rounds reached"
STOP_MAX_TIME = "max time reached"


class TraceError(MesoslikeError, ValueError):
    """The trace directory or one of its files is missing or malformed."""


# ====================================================================== inputs
def _check_time(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _check_count(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be an integer >= 1, got {value!r}")


@attrs.frozen
class AgentSpec:
    """One machine of the simulated cluster."""

    agent_id: str
    resources: Resources
    attributes: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class TaskSpec:
    """One task: what it needs, when it arrives, how long it runs once
    launched (None = long-running). ``index`` orders tasks that arrive together."""

    task_id: str
    framework_id: str
    resources: Resources
    arrival: float = attrs.field(validator=_check_time)
    duration: float | None = attrs.field(validator=attrs.validators.optional(_check_time))
    index: int = 0


@attrs.frozen
class Workload:
    """Agents, frameworks and tasks (in any order) to simulate.

    ``skipped`` counts input rows left out, by reason; ``tasks_per_offer``
    caps how many tasks a framework launches per offer (None = as many as fit).
    """

    name: str
    agents: tuple[AgentSpec, ...]
    frameworks: tuple[str, ...]
    tasks: tuple[TaskSpec, ...]
    skipped: Mapping[str, int] = attrs.field(factory=dict)
    tasks_per_offer: int | None = attrs.field(default=None, validator=attrs.validators.optional(_check_count))
    description: str = ""


@attrs.frozen
class SimulationConfig:
    """How to run a workload. ``refuse_seconds`` is the filter a framework
    asks for when it declines; ``check_invariants`` makes every round verify
    the allocator's bookkeeping and that no agent runs more than it has (slow;
    for tests)."""

    sorter: str = "drf"
    seed: int = 0
    allocation_interval: float = 1.0
    refuse_seconds: float = 5.0
    max_rounds: int = 1_000_000
    max_time: float = math.inf
    check_invariants: bool = False


# ===================================================================== results
@attrs.frozen
class FrameworkSnapshot:
    """One framework at the end of a round; counters are totals so far."""

    framework_id: str
    dominant_share: float
    running_tasks: int
    queued_tasks: int
    launched_tasks: int
    finished_tasks: int
    offers_received: int
    offers_declined: int

    def to_dict(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class RoundSnapshot:
    """The state after one round: simulated time, per-framework figures and
    the offers made and declined so far."""

    round: int
    time: float
    frameworks: tuple[FrameworkSnapshot, ...]
    offers_made: int
    offers_declined: int
    running_tasks: int

    def framework(self, framework_id: str) -> FrameworkSnapshot:
        """The snapshot of one framework (``KeyError`` if unknown)."""
        for snapshot in self.frameworks:
            if snapshot.framework_id == framework_id:
                return snapshot
        raise KeyError(framework_id)

    def to_dict(self) -> dict:
        return {"round": self.round, "time": round(self.time, 6), "offers_made": self.offers_made,
                "offers_declined": self.offers_declined, "running_tasks": self.running_tasks,
                "frameworks": [f.to_dict() for f in self.frameworks]}


@attrs.frozen
class SimulationResult:
    """Everything a run produced. ``never_launched`` lists placeable tasks
    that were still queued when the run stopped; ``unplaceable`` counts tasks
    that fit no agent at all (dropped on arrival)."""

    workload: str
    description: str
    sorter: str
    seed: int
    agents: int
    total: Resources
    rounds: tuple[RoundSnapshot, ...]
    stop_reason: str
    tasks_submitted: int
    tasks_unplaceable: int
    never_launched: tuple[str, ...]
    skipped: Mapping[str, int]
    allocator: Mapping[str, int]

    @property
    def final(self) -> RoundSnapshot:
        """The last round (an empty workload still has one round)."""
        return self.rounds[-1]

    def checkpoints(self, count: int) -> list[RoundSnapshot]:
        """``count`` rounds spread evenly over the run, the last one final."""
        if count < 1:
            raise ValueError(f"checkpoint count must be >= 1, got {count!r}")
        n = len(self.rounds)
        picks = sorted({max(0, math.ceil(i * n / count) - 1) for i in range(1, count + 1)})
        return [self.rounds[i] for i in picks]

    def to_dict(self, checkpoints: int = 1) -> dict:
        """A JSON-ready document: summary, final round, ``checkpoints`` rounds."""
        final = self.final
        return {
            "workload": self.workload,
            "description": self.description,
            "sorter": self.sorter,
            "seed": self.seed,
            "agents": self.agents,
            "total": str(self.total),
            "rounds": len(self.rounds),
            "time": round(final.time, 6),
            "stop_reason": self.stop_reason,
            "tasks": {
                "submitted": self.tasks_submitted,
                "unplaceable": self.tasks_unplaceable,
                "launched": sum(f.launched_tasks for f in final.frameworks),
                "finished": sum(f.finished_tasks for f in final.frameworks),
                "running": final.running_tasks,
                "queued": sum(f.queued_tasks for f in final.frameworks),
                "never_launched": len(self.never_launched),
            },
            "skipped_rows": dict(self.skipped),
            "allocator": dict(self.allocator),
            "frameworks": [f.to_dict() for f in final.frameworks],
            "checkpoints": [r.to_dict() for r in self.checkpoints(checkpoints)],
        }


# =================================================================== workloads
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


def _trace_path(trace_dir: Path, name: str) -> Path:
    path = Path(trace_dir) / name
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    return path


def _read_rows(path: Path, columns: Sequence[str], limit: int | None) -> list[dict[str, str]]:
    """The first ``limit`` rows (all if None) of a CSV file with the header checked."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path.name}: missing columns {missing}")
        rows: list[dict[str, str]] = []
        for row in reader:
            if limit is not None and len(rows) >= limit:
                break
            rows.append(row)
    return rows


def _trace_agents(rows: Iterable[Mapping[str, str]]) -> tuple[list[AgentSpec], int]:
    """Nodes -> agents (cpus = cpu_milli/1000, mem = memory_mib, gpus = gpu);
    returns the agents and how many rows did not make sense."""
    agents, bad = [], 0
    for row in rows:
        try:
            cpus, mem, gpus = int(row["cpu_milli"]) / 1000, int(row["memory_mib"]), int(row["gpu"] or 0)
            resources = Resources(cpus=cpus, mem=mem, gpus=gpus)
        except (TypeError, ValueError):
            bad += 1
            continue
        if not row["sn"] or not resources:
            bad += 1
            continue
        model = (row.get("model") or "").strip()
        agents.append(AgentSpec(row["sn"], resources, {"model": model} if model else {}))
    return agents, bad


_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos",
                "creation_time", "deletion_time", "scheduled_time")


class _Pod(NamedTuple):
    """A pod of the trace, as a task of the framework of its ``qos`` class."""

    framework_id: str
    name: str
    resources: Resources
    created: int
    duration: int


def _pod_task(row: Mapping[str, str]) -> _Pod | str:
    """One pod row -> its task, or why the row does not make sense."""
    if not row["scheduled_time"]:
        return "never scheduled"
    try:
        created, scheduled, deleted = (int(row[k]) for k in ("creation_time", "scheduled_time", "deletion_time"))
        # num_gpu whole GPUs, each used to gpu_milli/1000 (GPU sharing: 1 x 0.46)
        gpus = int(row["num_gpu"] or 0) * int(row["gpu_milli"] or 0) / 1000
        resources = Resources(cpus=int(row["cpu_milli"]) / 1000, mem=int(row["memory_mib"]), gpus=gpus)
    except (TypeError, ValueError):
        return "malformed"
    if not row["qos"] or not row["name"]:
        return "malformed"
    if scheduled < created or deleted <= scheduled:
        return "non-positive duration"
    if not resources:
        return "no resources"
    return _Pod(row["qos"], row["name"], resources, created, deleted - scheduled)


def load_openb_trace(
    trace_dir: str | Path = DEFAULT_TRACE_DIR,
    nodes: int | None = None,
    pods: int | None = None,
    time_scale: float = 1000.0,
) -> Workload:
    """The Alibaba openb GPU trace as a workload.

    Nodes become agents; pods become tasks arriving at ``creation_time`` and
    running for ``deletion_time - scheduled_time``, grouped into one framework
    per ``qos`` class. ``nodes``/``pods`` take only the first N rows (None =
    all); every time is divided by ``time_scale`` and arrivals start at 0.
    Rows that do not make sense are skipped and counted by reason.
    """
    if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
    for what, limit in (("nodes", nodes), ("pods", pods)):
        if limit is not None and limit < 0:
            raise ValueError(f"{what} must be >= 0, got {limit!r}")
    trace_dir = Path(trace_dir)
    if not trace_dir.is_dir():
        raise TraceError(f"trace directory {str(trace_dir)!r} does not exist")
    node_rows = _read_rows(_trace_path(trace_dir, TRACE_NODE_FILE), ("sn", "cpu_milli", "memory_mib", "gpu"), nodes)
    pod_rows = _read_rows(_trace_path(trace_dir, TRACE_POD_FILE), _POD_COLUMNS, pods)
    agents, bad_nodes = _trace_agents(node_rows)
    skipped: dict[str, int] = {"bad node": bad_nodes} if bad_nodes else {}
    parsed: list[_Pod] = []
    for row in pod_rows:
        pod = _pod_task(row)
        if isinstance(pod, str):
            skipped[pod] = skipped.get(pod, 0) + 1
        else:
            parsed.append(pod)
    start = min((pod.created for pod in parsed), default=0)
    tasks = [TaskSpec(pod.name, pod.framework_id, pod.resources, (pod.created - start) / time_scale,
                      pod.duration / time_scale, i) for i, pod in enumerate(parsed)]
    tasks.sort(key=lambda t: (t.arrival, t.index))
    return Workload(
        name="trace",
        agents=tuple(agents),
        frameworks=tuple(sorted({t.framework_id for t in tasks})),
        tasks=tuple(tasks),
        skipped=skipped,
        description=f"alibaba openb 2023: {len(agents)} nodes, {len(pod_rows)} pods, time / {time_scale:g}",
    )


# ================================================================= frameworks
class _GreedyFramework:
    """A framework that launches whatever queued tasks fit an offer.

    The queue is kept per task shape (the resources vector), each shape FIFO,
    so filling an offer costs O(shapes) rather than O(queued tasks): traces
    have thousands of tasks but only a few hundred distinct shapes.
    """

    def __init__(self, framework_id: str, tasks_per_offer: int | None) -> None:
        self.id = framework_id
        self.tasks_per_offer = tasks_per_offer
        self.queues: dict[Resources, deque[TaskSpec]] = {}
        self.suppressed = False
        self.queued = self.running = self.launched = self.finished = 0
        self.offers_received = self.offers_declined = 0

    def enqueue(self, task: TaskSpec) -> bool:
        """Queue a task; True if its shape is new to the queue (so agents
        declined earlier may now be useful)."""
        queue = self.queues.get(task.resources)
        self.queued += 1
        if queue is None:
            self.queues[task.resources] = deque([task])
            return True
        queue.append(task)
        return False

    def could_use(self, resources: Resources) -> bool:
        """True if some queued task fits in ``resources``."""
        return any(resources.contains(shape) for shape in self.queues)

    def fill(self, offered: Resources) -> tuple[list[TaskSpec], Resources, Resources]:
        """Take queued tasks that fit ``offered``, oldest shape first.
        Returns the tasks, what they use, and what is left of the offer."""
        picked: list[TaskSpec] = []
        used, left = EMPTY, offered
        limit = self.tasks_per_offer
        for shape in sorted(self.queues, key=lambda s: self.queues[s][0].index):
            queue = self.queues[shape]
            while queue and left.contains(shape) and (limit is None or len(picked) < limit):
                picked.append(queue.popleft())
                used, left = used + shape, left - shape
            if not queue:
                del self.queues[shape]
        self.queued -= len(picked)
        return picked, used, left

    def snapshot(self, share: float) -> FrameworkSnapshot:
        return FrameworkSnapshot(self.id, share, self.running, self.queued, self.launched, self.finished,
                                 self.offers_received, self.offers_declined)


# ================================================================== simulator
class Simulator:
    """Runs one workload through a :class:`HierarchicalAllocator`; see the
    module docstring for the model. Use :meth:`run` once."""

    def __init__(self, workload: Workload, config: SimulationConfig = SimulationConfig()) -> None:
        if config.allocation_interval <= 0 or config.refuse_seconds < 0:
            raise ValueError("allocation_interval must be > 0 and refuse_seconds >= 0")
        unknown = {t.framework_id for t in workload.tasks} - set(workload.frameworks)
        if unknown:
            raise ValueError(f"tasks of unknown frameworks {sorted(unknown)}")
        self.workload = workload
        self.config = config
        self._tasks = sorted(workload.tasks, key=lambda t: (t.arrival, t.index))
        self.clock = FakeClock()
        self.allocator = HierarchicalAllocator(self.clock, sorter=config.sorter,
                                               allocation_interval=config.allocation_interval,
                                               rng=random.Random(config.seed))
        self.frameworks = {f: _GreedyFramework(f, workload.tasks_per_offer) for f in workload.frameworks}
        for agent in workload.agents:
            self.allocator.add_agent(agent.agent_id, agent.resources, attributes=agent.attributes)
        for framework_id in workload.frameworks:
            # nothing queued yet: suppressed until the first task arrives
            self.allocator.add_framework(framework_id, suppressed=True)
            self.frameworks[framework_id].suppressed = True
        self._agent_totals = {a.agent_id: a.resources for a in workload.agents}
        self._agent_used = {a.agent_id: EMPTY for a in workload.agents}
        self._placeable: dict[Resources, bool] = {}
        self._next_arrival = 0                        # index into self._tasks (arrival order)
        self._ends: list[tuple[float, int, str, TaskSpec]] = []   # (end, index, agent, task)
        self._filter_expiries: list[float] = []
        self._rounds: list[RoundSnapshot] = []
        self._offers_made = self._offers_declined = self._unplaceable = 0

    # ---------------------------------------------------------------- events
    def _fits_somewhere(self, resources: Resources) -> bool:
        known = self._placeable.get(resources)
        if known is None:
            known = self._placeable[resources] = any(t.contains(resources) for t in self._agent_totals.values())
        return known

    def _end_tasks(self, now: float) -> None:
        """Tasks whose time is up end; their resources go back to the pool."""
        while self._ends and self._ends[0][0] <= now:
            _, _, agent_id, task = heapq.heappop(self._ends)
            framework = self.frameworks[task.framework_id]
            self.allocator.recover_resources(task.framework_id, agent_id, task.resources, refuse_seconds=0.0)
            self._agent_used[agent_id] = self._agent_used[agent_id] - task.resources
            framework.running -= 1
            framework.finished += 1

    def _admit_arrivals(self, now: float) -> None:
        """Queue the tasks that have arrived; a framework revives when it was
        suppressed or gets a new shape (its filters may hide agents that the
        new task fits). Tasks that fit no agent are dropped and counted."""
        tasks = self._tasks
        while self._next_arrival < len(tasks) and tasks[self._next_arrival].arrival <= now:
            task = tasks[self._next_arrival]
            self._next_arrival += 1
            if not self._fits_somewhere(task.resources):
                self._unplaceable += 1
                continue
            framework = self.frameworks[task.framework_id]
            new_shape = framework.enqueue(task)
            if framework.suppressed or new_shape:
                self.allocator.revive_offers(framework.id)
                framework.suppressed = False

    def _answer(self, offer: Offer, now: float) -> None:
        """The framework launches what fits, or declines the offer."""
        framework = self.frameworks[offer.framework_id]
        framework.offers_received += 1
        picked, used, left = framework.fill(offer.resources)
        refuse = self.config.refuse_seconds
        if not picked:
            self.allocator.decline_offer(offer.id, refuse_seconds=refuse)
            framework.offers_declined += 1
            self._offers_declined += 1
            self._note_filter(now, refuse)
            return
        # the unused rest is filtered only if this framework has no use for it
        refuse = 0.0 if framework.could_use(left) else refuse
        self.allocator.accept_offer(offer.id, used, refuse_seconds=refuse)
        if left:
            self._note_filter(now, refuse)
        self._agent_used[offer.agent_id] = self._agent_used[offer.agent_id] + used
        framework.running += len(picked)
        framework.launched += len(picked)
        for task in picked:
            if task.duration is not None:
                heapq.heappush(self._ends, (now + task.duration, task.index, offer.agent_id, task))

    def _note_filter(self, now: float, refuse: float) -> None:
        # the allocator filters for max(allocation_interval, refuse) seconds
        if refuse > 0:
            heapq.heappush(self._filter_expiries, now + max(self.config.allocation_interval, refuse))

    def _suppress_idle(self) -> None:
        for framework in self.frameworks.values():
            if not framework.queued and not framework.suppressed:
                self.allocator.suppress_offers(framework.id)
                framework.suppressed = True

    # ----------------------------------------------------------------- rounds
    def _round(self) -> int:
        """One round at the current time; returns the number of offers made."""
        now = self.clock.now()
        self._end_tasks(now)
        self._admit_arrivals(now)
        offers = self.allocator.allocate()
        self._offers_made += len(offers)
        for offer in offers:
            self._answer(offer, now)
        self._suppress_idle()
        if self.config.check_invariants:
            self._check()
        self._rounds.append(self._snapshot(now))
        return len(offers)

    def _snapshot(self, now: float) -> RoundSnapshot:
        shares = {f: self.allocator.dominant_share(f) for f in self.frameworks}
        frameworks = tuple(f.snapshot(shares[f.id]) for f in self.frameworks.values())
        return RoundSnapshot(len(self._rounds) + 1, now, frameworks, self._offers_made, self._offers_declined,
                             sum(f.running for f in self.frameworks.values()))

    def _check(self) -> None:
        """The allocator's bookkeeping is consistent and no agent runs more
        than it has."""
        self.allocator.check_invariants()
        for agent_id, used in self._agent_used.items():
            assert self._agent_totals[agent_id].contains(used), f"agent {agent_id} over capacity: {used}"

    def _next_event(self) -> float | None:
        """The earliest future arrival, task end or filter expiry."""
        now = self.clock.now()
        while self._filter_expiries and self._filter_expiries[0] <= now:
            heapq.heappop(self._filter_expiries)
        candidates = [self._filter_expiries[0]] if self._filter_expiries else []
        if self._ends:
            candidates.append(self._ends[0][0])
        if self._next_arrival < len(self._tasks):
            candidates.append(self._tasks[self._next_arrival].arrival)
        return min(candidates) if candidates else None

    def _stuck(self) -> bool:
        """No arrival or task end is coming and no queued task fits the free
        resources of any agent: nothing can ever change."""
        if self._ends or self._next_arrival < len(self._tasks):
            return False
        shapes = {s for f in self.frameworks.values() for s in f.queues}
        free = [self.allocator.available(a) for a in self._agent_totals]
        return not any(room.contains(shape) for shape in shapes for room in free)

    def _stop_reason(self, offers_made: int) -> str | None:
        """Why to stop after this round, or None to go on (and move the clock)."""
        cfg = self.config
        if len(self._rounds) >= cfg.max_rounds:
            return STOP_MAX_ROUNDS
        done = (not self._ends and self._next_arrival >= len(self._tasks)
                and not any(f.queued for f in self.frameworks.values()))
        if done:
            return STOP_DONE
        if self._stuck():
            return STOP_STUCK
        now = self.clock.now()
        # after a round without offers nothing changes before the next event
        following = now + cfg.allocation_interval if offers_made else self._next_event()
        if following is None:
            return STOP_STUCK
        if following > cfg.max_time:
            return STOP_MAX_TIME
        self.clock.advance(following - now)
        return None

    def run(self) -> SimulationResult:
        """Run rounds until the workload is done or stuck (or a limit hits)."""
        if self._rounds:
            raise RuntimeError("a Simulator runs once; make a new one")
        while True:
            reason = self._stop_reason(self._round())
            if reason is not None:
                return self._result(reason)

    def _result(self, reason: str) -> SimulationResult:
        stats = self.allocator.statistics()
        never = tuple(t.task_id for f in self.frameworks.values() for q in f.queues.values() for t in q)
        counters = {k: getattr(stats, k) for k in
                    ("cycles", "offers_made", "offers_declined", "offers_accepted", "offers_filtered")}
        return SimulationResult(
            workload=self.workload.name,
            description=self.workload.description,
            sorter=self.config.sorter,
            seed=self.config.seed,
            agents=len(self.workload.agents),
            total=stats.total,
            rounds=tuple(self._rounds),
            stop_reason=reason,
            tasks_submitted=len(self.workload.tasks),
            tasks_unplaceable=self._unplaceable,
            never_launched=never,
            skipped=dict(self.workload.skipped),
            allocator=counters,
        )


def simulate(workload: Workload, config: SimulationConfig = SimulationConfig()) -> SimulationResult:
    """Run ``workload`` once with ``config`` and return the result."""
    return Simulator(workload, config).run()

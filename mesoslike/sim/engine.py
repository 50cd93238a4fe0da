"""The discrete-event simulator: a workload through the real allocator and a
level-2 scheduler (greedy frameworks, or a policy of its own such as the
bundled Fuxi core), on a virtual clock.

Pure logic: no printing, no clock but a :class:`~mesoslike.clock.FakeClock`,
no randomness but seeded ``random.Random`` instances. The CLI
(``mesoslike simulate``) and :mod:`mesoslike.sim.report` present the
:class:`SimulationResult` this module returns.

The model (docs/simulate.rst gives the details):

* **Agents** are added to a :class:`HierarchicalAllocator` once, at time 0.
  Weights and quota come from a roles file (:class:`RolesConfig`).
* **Schedulers** (:mod:`mesoslike.sim.schedulers`): one greedy framework per
  task class (policies ``drf``, ``random``: the allocator's sorter), or the
  scheduler of a policy plugin (:mod:`mesoslike.sim.policies`): the bundled
  Fuxi core as the one framework (``fuxi-fifo``, ``fuxi-fair``).
* **Tasks** arrive at their arrival time, wait, run for their duration once
  started, then their resources are recovered; a preempted task waits again
  and runs its whole duration when it starts again.
* **Time** is a :class:`FakeClock`. A round ends the tasks that are due,
  queues arrivals and runs one allocation cycle, whose offers are all
  answered within the round. The next round comes one allocation interval
  later while some framework wants offers and the round made some;
  otherwise the clock jumps to the next arrival, task end or (if a
  framework wants offers) filter expiry, because nothing can change before.
* **Allocation cycles** visit the agents in a random order in chunks of
  ``cycle_chunk`` agents (the allocator decides who is offered each agent);
  a framework holds its offers until they could cover all it waits for, or
  the cycle ends, then answers them; the cycle stops early when no
  framework wants offers (docs/simulate.rst, "Allocation cycles"). With
  offer filters (a scheduler's ``offer_shapes``: the greedy frameworks and
  the Fuxi scheduler) a cycle visits only the agents whose free resources
  hold a shape some framework waits for, and the allocator's offer gate
  gives each only to a framework that waits for a shape it holds; a cycle
  that visits none still lets the scheduler answer (the Fuxi core's pass
  over no offers, in which it preempts).

The run stops when everything is done, when nothing can change any more
(no event is left and no waiting task can be placed), or at the
``max_rounds`` / ``max_time`` limits.
"""

from __future__ import annotations

import heapq
import math
import random
from typing import Iterable, Mapping, Sequence

import attrs

from mesoslike.allocator import HierarchicalAllocator, Offer
from mesoslike.allocator.roles import ancestors
from mesoslike.clock import FakeClock
from mesoslike.master.roles import RolesConfig, quantities
from mesoslike.resources import Resources
from mesoslike.sim.metrics import Recorder
from mesoslike.sim.policies import greedy_policies, load_policy, policy_names
from mesoslike.sim.schedulers import (
    REASONS,
    GreedySchedulers,
    Run,
    Scheduler,
    group_key,
)
from mesoslike.sim.workload import KNOWN_KINDS, TaskSpec, Workload

__all__ = [
    "POLICIES", "SimulationConfig", "FrameworkSnapshot", "RoundSnapshot", "SimulationResult", "Simulator",
    "simulate", "STOP_DONE", "STOP_STUCK", "STOP_MAX_ROUNDS", "STOP_MAX_TIME",
]

#: the policies a run can use (as installed when this module was imported: :func:`policy_names` asks
#: again): the allocator's sorter over greedy frameworks, or a policy plugin's scheduler
POLICIES = policy_names()
GREEDY = "greedy"

EMPTY = Resources()

STOP_DONE = "all tasks launched, no task end pending"
STOP_STUCK = "no queued task fits the free resources"
STOP_MAX_ROUNDS = "max rounds reached"
STOP_MAX_TIME = "max time reached"


def _check_positive_or_none(_instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be an integer >= 1 or None, got {value!r}")


@attrs.frozen
class SimulationConfig:
    """How to run a workload.

    ``sorter`` is the allocator's sorter; ``scheduler`` is ``"greedy"``
    (one framework per class) or a policy plugin's name (the bundled
    ``"fuxi-fifo"``, ``"fuxi-fair"``: :mod:`mesoslike.sim.policies`);
    :meth:`for_policy` sets both from a policy name.
    ``refuse_seconds`` is the filter a greedy framework asks for when it
    declines (the Fuxi core uses its own ``decline_seconds``). ``roles``: weights and quota
    of the allocator's roles (a role per class); ``quota``: the policy
    plugin's quota (the Fuxi policies: a ``QuotaConfig`` of quota groups, a
    group per class, unlisted classes in ``default``, and a blacklist),
    opaque to the simulator; ``preemption`` (None: the quota's, else on)
    turns the plugin's preemption on or off. ``cycle_chunk``: agents allocated at a
    time within a cycle (None: the whole cycle at once). ``samples``: points
    of the time series; ``sample_interval``: seconds between the samples of
    why tasks wait (None: about 1/500 of the arrival span, at least one
    allocation interval). ``check_invariants`` makes every round verify the
    allocator's bookkeeping and that no agent runs more than it has (slow;
    for tests). ``quiet_passes``: a policy plugin may answer a cycle's
    offers without its scheduling pass when a pass could change nothing
    (the Fuxi policies: docs/simulate.rst, "Speed"); False runs every pass
    in full, with the same results (for checks and benchmarks).
    ``offer_filters``: the greedy frameworks and the Fuxi scheduler keep
    offer filters, the shapes they wait for (Mesos's
    ``min_allocatable_resources`` of ``offer_filters``): a cycle offers a
    framework only agents whose free resources hold one (docs/simulate.rst,
    "Offer filters"); False offers every agent, as before them.
    """

    sorter: str = "drf"
    seed: int = 0
    allocation_interval: float = 1.0
    refuse_seconds: float = 5.0
    max_rounds: int = 1_000_000
    max_time: float = math.inf
    check_invariants: bool = False
    scheduler: str = GREEDY
    roles: RolesConfig | None = None
    quota: object | None = None
    preemption: bool | None = None
    cycle_chunk: int | None = attrs.field(default=1, validator=_check_positive_or_none)
    samples: int = 200
    sample_interval: float | None = None
    quiet_passes: bool = True
    offer_filters: bool = True

    def __attrs_post_init__(self) -> None:
        plugged = [name for name in policy_names() if name not in greedy_policies()]
        if self.scheduler != GREEDY and self.scheduler not in plugged:
            raise ValueError(f"scheduler must be {GREEDY!r} or one of {plugged}, got {self.scheduler!r}")
        if self.samples < 2:
            raise ValueError(f"samples must be >= 2, got {self.samples!r}")
        if self.sample_interval is not None and not self.sample_interval > 0:
            raise ValueError(f"sample_interval must be > 0, got {self.sample_interval!r}")

    @classmethod
    def for_policy(cls, policy: str, **kwargs: object) -> SimulationConfig:
        """The configuration of a policy of :func:`policy_names` (other fields as given)."""
        if policy in greedy_policies():
            return cls(sorter=policy, **kwargs)  # type: ignore[arg-type]
        if policy in policy_names():
            return cls(scheduler=policy, **kwargs)  # type: ignore[arg-type]
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(policy_names())}")

    @property
    def policy(self) -> str:
        """The policy's name: the sorter's under greedy frameworks, else the plugin's."""
        return self.sorter if self.scheduler == GREEDY else self.scheduler


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
    that were still waiting when the run stopped; ``unplaceable`` counts tasks
    that fit no agent at all (dropped on arrival); ``metrics`` is the
    :meth:`~mesoslike.sim.metrics.Recorder.summary` of the run."""

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
    policy: str = ""
    metrics: Mapping = attrs.field(factory=dict, eq=False)
    notes: Mapping[str, int] = attrs.field(factory=dict)

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
        """A JSON-ready document: summary, final round, ``checkpoints`` rounds, metrics."""
        final = self.final
        return {
            "workload": self.workload,
            "description": self.description,
            "policy": self.policy or self.sorter,
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
            "notes": dict(self.notes),
            "allocator": dict(self.allocator),
            "frameworks": [f.to_dict() for f in final.frameworks],
            "checkpoints": [r.to_dict() for r in self.checkpoints(checkpoints)],
            "metrics": dict(self.metrics),
        }


# ============================================================== what is free
class _FreeIndex:
    """Does a shape fit the free resources of some agent now? Each shape
    keeps a witness agent (checked in O(1)) and a sweep over the agents:
    the agents the sweep has passed (below its cursor) held no room for the
    shape when it passed them, and an agent's room only grows when a task
    ends (:meth:`grew`), so only those that grew since are looked at again.
    A shape whose witness filled up looks at the agents that grew since
    (most agents are full when tasks wait: those are the likeliest to have
    room), oldest first, each once (those that had none drop out of the
    recheck), then the sweep goes on where it stopped; each agent is passed
    once per sweep, not once per lost witness. Free
    resources only shrink within a cycle, so an answer of "no" holds through
    the cycle."""

    def __init__(self, free: Mapping[str, Resources]) -> None:
        self._free = free
        self._agents = list(free)
        self._witness: dict[Resources, str] = {}
        #: shape -> (cursor, since): the agents below the cursor had no room for it, but those of _grown[since:]
        self._sweep: dict[Resources, tuple[int, int]] = {}
        self._grown: list[str] = []

    def grew(self, agent_id: str) -> None:
        self._grown.append(agent_id)

    def fits(self, shape: Resources) -> bool:
        free = self._free
        witness = self._witness.get(shape)
        if witness is not None:
            if free[witness].contains(shape):
                return True
            del self._witness[shape]    # it has no room now: below the cursor it holds the sweep's promise
        grown = self._grown
        cursor, since = self._sweep.get(shape, (0, len(grown)))
        while since < len(grown):       # oldest first: those passed over have no room, the promise holds again
            agent_id = grown[since]
            if free[agent_id].contains(shape):
                self._witness[shape] = agent_id
                self._sweep[shape] = (cursor, since)
                return True
            since += 1
        agents = self._agents
        for position in range(cursor, len(agents)):
            agent_id = agents[position]
            if free[agent_id].contains(shape):
                self._witness[shape] = agent_id
                self._sweep[shape] = (position + 1, since)
                return True
        self._sweep[shape] = (len(agents), since)
        return False


class _Useful:
    """The agents whose free resources hold some shape a framework waits
    for (:meth:`~mesoslike.sim.schedulers.Scheduler.offer_shapes`), kept up
    to date as rooms change and shapes come and go, so that a cycle offers
    only those (docs/simulate.rst, "Allocation cycles").

    Each shape keeps its *holders* (the agents whose room holds it) and
    each agent a count of the wanted shapes it holds. The holders of a
    wanted shape follow every change of a room (an agent that changed is
    looked at once per wanted shape before the next cycle); those of a shape
    no longer wanted go stale, and when it is wanted again only the agents
    changed since are looked at again (all of them the first time). O(agents
    changed x shapes wanted) a cycle, not O(agents x shapes)."""

    def __init__(self, free: Mapping[str, Resources]) -> None:
        self._free = free
        self._index = {agent_id: i for i, agent_id in enumerate(free)}
        self._wanted: dict[Resources, None] = {}
        self._holders: dict[Resources, set[str]] = {}
        self._since: dict[Resources, int] = {}       # shape not wanted: the log position its holders are true at
        self._count: dict[str, int] = {}            # agent -> wanted shapes it holds (> 0 only)
        self._log: list[str] = []                   # agents whose room changed, in order
        self._last: dict[str, int] = {}             # agent -> 1 + its last position in the log
        self._seen = 0                              # the log position the wanted shapes' holders are true at
        self._sets: dict[str, list[set[str]]] = {}  # framework -> the holders of each of its shapes
        self._agents: list[str] = []                # the agents holding some wanted shape, in order

    def changed(self, agent_id: str) -> None:
        log = self._log
        log.append(agent_id)
        self._last[agent_id] = len(log)

    def may_offer(self, framework_id: str, agent_id: str) -> bool:
        """Does the agent's room hold one of the framework's shapes (those of
        the last :meth:`agents`)? The allocator's offer gate."""
        for has in self._sets.get(framework_id, ()):
            if agent_id in has:
                return True
        return False

    def agents(self, by_framework: Mapping[str, Sequence[Resources]]) -> list[str]:
        """The agents that hold some shape of ``by_framework`` now, in the workload's order."""
        free, log, holders, wanted, count = self._free, self._log, self._holders, self._wanted, self._count
        changed = False
        if len(log) > self._seen:                   # rooms changed: the wanted shapes' holders follow
            for agent_id in dict.fromkeys(log[self._seen:]):
                room = free[agent_id]
                for shape in wanted:
                    has = holders[shape]
                    if room.contains(shape):
                        if agent_id not in has:
                            has.add(agent_id)
                            count[agent_id] = count.get(agent_id, 0) + 1
                            changed = True
                    elif agent_id in has:
                        has.discard(agent_id)
                        left = count[agent_id] - 1
                        if left:
                            count[agent_id] = left
                        else:
                            del count[agent_id]
                        changed = True
            self._seen = len(log)
        now = dict.fromkeys(shape for shapes in by_framework.values() for shape in shapes)
        for shape in [s for s in wanted if s not in now]:   # no longer wanted: its holders go stale
            for agent_id in holders[shape]:
                left = count[agent_id] - 1
                if left:
                    count[agent_id] = left
                else:
                    del count[agent_id]
            self._since[shape] = len(log)
            del wanted[shape]
            changed = True
        for shape in now:
            if shape in wanted:
                continue
            since = self._since.pop(shape, None)
            stale = holders.get(shape)
            if stale is None or since is None:
                has = holders[shape] = {a for a, room in free.items() if room.contains(shape)}
            else:   # only the agents whose room changed since are looked at again
                has = stale
                moved: Iterable[str]
                if len(log) - since <= len(free):
                    moved = dict.fromkeys(log[since:])
                else:       # a long log: the agents last changed after ``since``, one int test each
                    moved = [agent_id for agent_id, end in self._last.items() if end > since]
                for agent_id in moved:
                    if free[agent_id].contains(shape):
                        has.add(agent_id)
                    else:
                        has.discard(agent_id)
            for agent_id in has:
                count[agent_id] = count.get(agent_id, 0) + 1
            wanted[shape] = None
            changed = True
        self._sets = {framework_id: [holders[shape] for shape in shapes]
                      for framework_id, shapes in by_framework.items()}
        if changed:
            self._agents = sorted(count, key=self._index.__getitem__)
        return list(self._agents)     # a copy: the cycle shuffles it


class _View:
    """The free resources, filters and quota at one sample time, for the
    reasons tasks wait (:class:`~mesoslike.sim.schedulers.ClusterView`)."""

    def __init__(self, simulator: Simulator, now: float) -> None:
        self._sim = simulator
        self._now = now
        self._filtered: dict[str, set[str]] = {}

    def fits_free(self, shape: Resources, framework_id: str | None = None) -> bool:
        sim = self._sim
        if not sim.free_index.fits(shape):
            return False
        if framework_id is None:
            return True
        skip = self._filtered.get(framework_id)
        if skip is None:
            skip = self._filtered[framework_id] = sim._filtered_agents(framework_id, self._now)
        if not skip:
            return True
        free = sim._free
        return any(free[a].contains(shape) for a in free if a not in skip)

    def fits_together(self, shapes: Sequence[Resources]) -> bool:
        rooms = dict(self._sim._free)
        for shape in shapes:
            for agent_id, room in rooms.items():
                if room.contains(shape):
                    rooms[agent_id] = room - shape
                    break
            else:
                return False
        return True

    def quota_blocks(self, framework_id: str, shape: Resources) -> bool:
        return self._sim._quota_blocks(framework_id, shape)


# ================================================================== simulator
class Simulator:
    """Runs one workload under one policy; see the module docstring. Use
    :meth:`run` once (or :meth:`run_until`, then :meth:`why_waiting`)."""

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
        self._agent_totals = {a.agent_id: a.resources for a in workload.agents}
        self._free = dict(self._agent_totals)
        self.free_index = _FreeIndex(self._free)
        self._useful = _Useful(self._free)
        self._kills = 0                                      # tasks preempted so far
        for agent in workload.agents:
            self.allocator.add_agent(agent.agent_id, agent.resources, attributes=agent.attributes)
        total = workload.total
        self.kinds = [k for k in KNOWN_KINDS if total.get(k)] + sorted(set(total.names()) - set(KNOWN_KINDS))
        self._limits, self._guarantees = self._apply_roles(config.roles)
        self.scheduler: Scheduler = self._make_scheduler()
        for framework_id, role in self.scheduler.frameworks.items():
            self.allocator.add_framework(framework_id, role, suppressed=self.scheduler.suppressed_at_start)
        self._role_of = dict(self.scheduler.frameworks)
        self._framework_used = {f: EMPTY for f in self.scheduler.frameworks}
        self.recorder = Recorder(workload.frameworks, total, self.kinds)
        self._order = [a.agent_id for a in workload.agents]  # the cycle order, shuffled as it goes
        self._order_rng = random.Random(f"agent order {config.seed}")
        self._placeable: dict[Resources, bool] = {}
        self._next_arrival = 0                               # index into self._tasks (arrival order)
        self._ends: list[tuple[float, int, Run]] = []        # (end, sequence, run)
        self._end_seq = 0
        self._running = 0
        self._filters: dict[str, dict[str, list[tuple[Resources, float]]]] = {}
        self._filter_expiries: list[float] = []
        self._last_expiry = -math.inf                        # the expiry pushed last
        self._rounds: list[RoundSnapshot] = []
        self._offers_made = self._offers_declined = self._unplaceable = 0
        self._last_progress = 0.0
        last_arrival = self._tasks[-1].arrival if self._tasks else 0.0
        self._sample_interval = config.sample_interval or max(config.allocation_interval, last_arrival / 500)
        self._next_sample = 0.0
        self._stop: str | None = None
        self._finished = False

    # ------------------------------------------------------------- set-up
    def _apply_roles(self, roles: RolesConfig | None) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """Weights and quota of the roles file into the allocator; returns the
        limits and guarantees (thousandths) for the reasons tasks wait."""
        limits: dict[str, dict[str, int]] = {}
        guarantees: dict[str, dict[str, int]] = {}
        if roles is None:
            return limits, guarantees
        self.allocator.update_weights({name: c.weight for name, c in roles.roles.items()})
        for name, c in sorted(roles.roles.items(), key=lambda item: item[0].count("/")):
            if c.guarantee or c.limit:
                self.allocator.update_quota(name, c.guarantee, c.limit)
            if c.limit:
                limits[name] = quantities(c.limit)
            if c.guarantee:
                guarantees[name] = quantities(c.guarantee)
        return limits, guarantees

    def _make_scheduler(self) -> Scheduler:
        config = self.config
        if config.scheduler == GREEDY:
            return GreedySchedulers(self, self.workload.frameworks, self.workload.role_of, config.refuse_seconds,
                                    self.workload.tasks_per_offer, offer_filters=config.offer_filters)
        return load_policy(config.scheduler).scheduler(self, self.workload, config, self.clock)

    # ------------------------------------------------------- the host side
    def accept(self, offers: Sequence[Offer], tasks: Sequence[TaskSpec], refuse_seconds: float,
               slot_ids: Sequence[str] = ()) -> list[Run]:
        """Launch ``tasks`` on the agent of ``offers``: the offers are accepted
        with what the tasks use (spread over them), the rest filtered."""
        now = self.clock.now()
        agent_id, framework_id = offers[0].agent_id, offers[0].framework_id
        used = Resources.sum(t.resources for t in tasks)
        left = used
        for offer in offers:
            part = left.minimum(offer.resources)
            unused = self.allocator.accept_offer(offer.id, part, refuse_seconds=refuse_seconds)
            left = left - part
            if unused:
                self._note_filter(framework_id, agent_id, unused, refuse_seconds)
        assert not left, f"launched {used} on {agent_id} beyond the offers"
        self._free[agent_id] = self._free[agent_id] - used
        self._useful.changed(agent_id)
        self._framework_used[framework_id] = self._framework_used[framework_id] + used
        runs = []
        for i, task in enumerate(tasks):
            run = Run(task, agent_id, framework_id, now, slot_ids[i] if slot_ids else "")
            runs.append(run)
            self.recorder.started(task, now)
            if task.duration is not None:
                self._end_seq += 1
                heapq.heappush(self._ends, (now + task.duration, self._end_seq, run))
        self._running += len(tasks)
        if tasks:
            self._last_progress = now
        return runs

    def decline(self, offer: Offer, refuse_seconds: float) -> None:
        self.allocator.decline_offer(offer.id, refuse_seconds=refuse_seconds)
        self._offers_declined += 1
        self._note_filter(offer.framework_id, offer.agent_id, offer.resources, refuse_seconds)

    def kill(self, run: Run) -> None:
        run.killed = True
        self._kills += 1
        task = run.task
        self.allocator.recover_resources(run.framework_id, run.agent_id, task.resources, refuse_seconds=0.0)
        self._release(run)
        self.recorder.preempted(task)

    def suppress(self, framework_id: str) -> None:
        self.allocator.suppress_offers(framework_id)

    def fits_now(self, shape: Resources) -> bool:
        return self.free_index.fits(shape)

    def revive(self, framework_id: str) -> None:
        self.allocator.revive_offers(framework_id)
        self._filters.pop(framework_id, None)

    def _release(self, run: Run) -> None:
        self._free[run.agent_id] = self._free[run.agent_id] + run.task.resources
        self._useful.changed(run.agent_id)
        self.free_index.grew(run.agent_id)
        self._framework_used[run.framework_id] = self._framework_used[run.framework_id] - run.task.resources
        self._running -= 1

    def _note_filter(self, framework_id: str, agent_id: str, refused: Resources, refuse: float) -> None:
        # the allocator filters for max(allocation_interval, refuse) seconds
        # (an agent's expired filters are dropped when it has a few: every decline notes one)
        if refuse > 0 and refused:
            now = self.clock.now()
            until = now + max(self.config.allocation_interval, refuse)
            on_agent = self._filters.get(framework_id)
            if on_agent is None:
                on_agent = self._filters[framework_id] = {}
            filters = on_agent.get(agent_id)
            if filters is None:
                on_agent[agent_id] = [(refused, until)]
            else:
                if len(filters) >= 4:
                    filters[:] = [f for f in filters if f[1] > now]
                filters.append((refused, until))
            if until != self._last_expiry:     # the declines of a round mostly share one expiry
                self._last_expiry = until
                heapq.heappush(self._filter_expiries, until)

    def _filtered_agents(self, framework_id: str, now: float) -> set[str]:
        """Agents whose free resources ``framework_id`` has filtered at ``now``."""
        out = set()
        for agent_id, filters in self._filters.get(framework_id, {}).items():
            free = self._free[agent_id]
            if any(until > now and refused.contains(free) for refused, until in filters):
                out.add(agent_id)
        return out

    def _quota_blocks(self, framework_id: str, shape: Resources) -> bool:
        """Would ``shape`` take the framework's role (or an ancestor) over its
        limit, or into the headroom other roles' unmet guarantees hold back?"""
        if not self._limits and not self._guarantees:
            return False
        role = self._role_of.get(framework_id, framework_id)
        need = shape.millis()

        def used_under(root: str) -> dict[str, int]:
            total: dict[str, int] = {}
            for fw, r in self._role_of.items():
                if r == root or r.startswith(root + "/"):
                    for kind, amount in self._framework_used[fw].millis().items():
                        total[kind] = total.get(kind, 0) + amount
            return total

        for name in ancestors(role):
            limit = self._limits.get(name)
            if limit:
                used = used_under(name)
                if any(used.get(k, 0) + need.get(k, 0) > cap for k, cap in limit.items()):
                    return True
        if self._guarantees:
            own = set(ancestors(role))
            held_back: dict[str, int] = {}
            for name, guarantee in self._guarantees.items():
                if name in own:
                    continue
                used = used_under(name)
                for kind, amount in guarantee.items():
                    held_back[kind] = held_back.get(kind, 0) + max(0, amount - used.get(kind, 0))
            free = Resources.sum(self._free.values()).millis()
            if any(need.get(k, 0) > free.get(k, 0) - held for k, held in held_back.items() if need.get(k, 0)):
                return True
        return False

    # ---------------------------------------------------------------- events
    def _fits_somewhere(self, resources: Resources) -> bool:
        known = self._placeable.get(resources)
        if known is None:
            known = self._placeable[resources] = any(t.contains(resources) for t in self._agent_totals.values())
        return known

    def _end_tasks(self, now: float) -> None:
        """Tasks whose time is up end; their resources go back to the pool."""
        while self._ends and self._ends[0][0] <= now:
            _, _, run = heapq.heappop(self._ends)
            if run.killed:
                continue
            self.allocator.recover_resources(run.framework_id, run.agent_id, run.task.resources, refuse_seconds=0.0)
            self._release(run)
            self.recorder.ended(run.task, now)
            self._last_progress = now
            self.scheduler.task_ended(run)

    def _admit_arrivals(self, now: float) -> None:
        """Hand the tasks that have arrived to the scheduler, those of one
        gang or job together; tasks that fit no agent are dropped and counted."""
        tasks = self._tasks
        batches: dict[tuple[str, str], list[TaskSpec]] = {}
        while self._next_arrival < len(tasks) and tasks[self._next_arrival].arrival <= now:
            task = tasks[self._next_arrival]
            self._next_arrival += 1
            batches.setdefault(group_key(task), []).append(task)
        if batches:
            self._last_progress = now
        for batch in batches.values():
            if not self._fits_somewhere(batch[0].resources):
                self._unplaceable += len(batch)
                for member in batch:
                    self.recorder.dropped(member, now)
                continue
            for member in batch:
                self.recorder.arrived(member, now)
            self.scheduler.admit(batch)

    def _cycle(self) -> int:
        """One allocation cycle (module docstring); returns the offers made."""
        scheduler = self.scheduler
        scheduler.begin_cycle()
        if not scheduler.wants_offers():
            return 0  # suppressed, or waiting for what no agent has free: all offers would be declined
        chunk = self.config.cycle_chunk
        offer_shapes = getattr(scheduler, "offer_shapes", None)   # a policy's scheduler may not have it
        shapes = offer_shapes() if offer_shapes is not None else None
        gate = None if shapes is None else self._useful.may_offer
        if self.allocator.offer_gate != gate:
            self.allocator.offer_gate = gate
            self.allocator.offer_filters_changed()
        if shapes is None:
            order = self._order
        else:   # offer filters: only the agents that hold some shape a framework waits for
            order = self._useful.agents(shapes)
            if not order:
                # a policy may pass over no offers (the Fuxi core preempts and takes quota back in
                # passes); what it waits for may change with it (a unit no longer waits for quota)
                kills = self._kills
                scheduler.answer()
                if self._kills != kills:     # it preempted: the room freed is offered in the next round
                    return 0
                again = offer_shapes()   # type: ignore[misc]
                if not again or not scheduler.wants_offers():
                    return 0
                order = self._useful.agents(again)
                if not order:
                    return 0
            self.allocator.offer_filters_changed()
        count = len(order)
        if chunk is None or chunk >= count:
            offers = self.allocator.allocate(None if shapes is None else order)
            if offers:
                scheduler.hold(offers)
            scheduler.answer()
            return len(offers)
        made = 0
        rng = self._order_rng
        start = 0
        while start < count and scheduler.wants_offers():
            stop = min(start + chunk, count)
            chunk *= 2  # few offers when little is wanted, few steps when much is
            for i in range(start, stop):  # a partial Fisher-Yates shuffle: only the agents visited
                j = rng.randrange(i, count)
                order[i], order[j] = order[j], order[i]
            offers = self.allocator.allocate(order[start:stop])
            if offers:
                made += len(offers)
                scheduler.hold(offers)
            start = stop
        scheduler.answer()
        return made

    # ---------------------------------------------------------- why waiting
    def _reasons(self, now: float) -> Iterable[tuple[TaskSpec, str]]:
        view = _View(self, now)
        scheduler = self.scheduler
        for key, tasks in scheduler.waiting():
            reason = scheduler.reason(key, tasks, view)
            for task in tasks:
                yield task, reason

    def why_waiting(self) -> dict[str, str]:
        """Why each waiting task waits, by task id, after the last round:
        one of :data:`~mesoslike.sim.schedulers.REASONS`."""
        now = self._rounds[-1].time if self._rounds else 0.0
        return {task.task_id: reason for task, reason in self._reasons(now)}

    def _sample_reasons(self, until: float) -> None:
        """Count why tasks waited at the sample times before ``until`` (the
        state has not changed since the last round)."""
        step = self._sample_interval
        if self._next_sample >= until:
            return
        ticks = math.floor((until - self._next_sample) / step) + 1
        if self._next_sample + (ticks - 1) * step >= until:
            ticks -= 1
        if ticks <= 0:
            return
        counts: dict[tuple[str, str], int] = {}
        for task, reason in self._reasons(self._next_sample):
            key = (task.framework_id, reason)
            counts[key] = counts.get(key, 0) + 1
        if counts:
            self.recorder.waited(counts, ticks * step)
        self._next_sample += ticks * step

    # ----------------------------------------------------------------- rounds
    def _round(self) -> int:
        """One round at the current time; returns the number of offers made
        (-1 if none, but a pass over no offers preempted: the room it freed
        is offered in the next round, as it is after a pass over offers)."""
        now = self.clock.now()
        self._sample_reasons(now)
        self._end_tasks(now)
        self._admit_arrivals(now)
        kills = self._kills
        made = self._cycle()
        self._offers_made += made
        if self._kills != kills and not made:
            made = -1    # a pass over no offers preempted: the freed room is offered in the next round
        if self.config.check_invariants:
            self._check()
        self._rounds.append(self._snapshot(now))
        self.recorder.snapshot(now)
        return made

    def _snapshot(self, now: float) -> RoundSnapshot:
        scheduler = self.scheduler
        snapshots = []
        for framework_id, counters in scheduler.counters.items():
            snapshots.append(FrameworkSnapshot(
                framework_id, self.allocator.dominant_share(framework_id), counters.running,
                scheduler.queued(framework_id), counters.launched, counters.finished, counters.offers_received,
                counters.offers_declined))
        return RoundSnapshot(len(self._rounds) + 1, now, tuple(snapshots), self._offers_made, self._offers_declined,
                             self._running)

    def _check(self) -> None:
        """The allocator's bookkeeping is consistent and no agent runs more
        than it has."""
        self.allocator.check_invariants()
        for agent_id, free in self._free.items():
            total = self._agent_totals[agent_id]
            assert total.contains(free) and self.allocator.available(agent_id) == free, \
                f"agent {agent_id}: free {free} of {total}, the allocator says {self.allocator.available(agent_id)}"

    def _waiting_count(self) -> int:
        return sum(self.scheduler.queued(f) for f in self.scheduler.frameworks)

    def _next_event(self) -> float | None:
        """The earliest future arrival, task end or (while a framework wants
        offers) filter expiry."""
        now = self.clock.now()
        candidates = []
        if self.scheduler.wants_offers():
            while self._filter_expiries and self._filter_expiries[0] <= now:
                heapq.heappop(self._filter_expiries)
            if self._filter_expiries:
                candidates.append(self._filter_expiries[0])
        if self._ends:
            candidates.append(self._ends[0][0])
        if self._next_arrival < len(self._tasks):
            candidates.append(self._tasks[self._next_arrival].arrival)
        return min(candidates) if candidates else None

    def _stuck(self, now: float) -> bool:
        """No arrival or task end is coming and no waiting task can start:
        none fits the free resources of any agent, or nothing started for
        long enough that nothing will (quota, gangs)."""
        if self._ends or self._next_arrival < len(self._tasks):
            return False
        shapes = {t.resources for _, tasks in self.scheduler.waiting() for t in tasks}
        if not any(self.free_index.fits(shape) for shape in shapes):
            return True
        stall = 10 * max(self.config.refuse_seconds, self.config.allocation_interval)
        return now - self._last_progress > stall

    def _stop_reason(self, offers_made: int) -> str | None:
        """Why to stop after this round, or None to go on (and move the clock)."""
        cfg = self.config
        if len(self._rounds) >= cfg.max_rounds:
            return STOP_MAX_ROUNDS
        done = not self._ends and self._next_arrival >= len(self._tasks) and not self._waiting_count()
        if done:
            return STOP_DONE
        now = self.clock.now()
        if self._stuck(now):
            return STOP_STUCK
        # after a round without offers nothing changes before the next event
        wanting = offers_made and self.scheduler.wants_offers()
        following = now + cfg.allocation_interval if wanting else self._next_event()
        if following is None:
            return STOP_STUCK
        if following > cfg.max_time:
            return STOP_MAX_TIME
        self.clock.advance(following - now)
        return None

    def run_until(self, time: float) -> bool:
        """Run the rounds up to simulated ``time``; False once the run has
        stopped (then :meth:`run` returns the result at once)."""
        while self._stop is None and self.clock.now() <= time:
            self._stop = self._stop_reason(self._round())
        return self._stop is None

    def run(self) -> SimulationResult:
        """Run rounds until the workload is done or stuck (or a limit hits)."""
        if self._finished:
            raise RuntimeError("a Simulator runs once; make a new one")
        while self._stop is None:
            self._stop = self._stop_reason(self._round())
        self._finished = True
        return self._result(self._stop)

    def _result(self, reason: str) -> SimulationResult:
        end = self._rounds[-1].time
        self._sample_reasons(end + self._sample_interval / 2)
        stats = self.allocator.statistics()
        never = tuple(t.task_id for _, tasks in self.scheduler.waiting() for t in tasks)
        counters = {k: getattr(stats, k) for k in
                    ("cycles", "offers_made", "offers_declined", "offers_accepted", "offers_filtered")}
        metrics = self.recorder.summary(end, self.config.samples)
        metrics["offers"] = {"made": self._offers_made, "declined": self._offers_declined}
        metrics["why_waiting"]["reasons"] = list(REASONS)
        # reasons are sampled: a wait shorter than this may fall between two samples
        metrics["why_waiting"]["sample_interval"] = round(self._sample_interval, 6)
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
            policy=self.config.policy,
            metrics=metrics,
            notes=dict(self.workload.notes),
        )


def simulate(workload: Workload, config: SimulationConfig = SimulationConfig()) -> SimulationResult:
    """Run ``workload`` once with ``config`` and return the result."""
    return Simulator(workload, config).run()

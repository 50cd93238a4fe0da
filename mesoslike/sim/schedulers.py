"""The level-2 schedulers a simulation runs over the allocator's offers.

* :class:`GreedySchedulers` -- one framework per task class, in the role of
  the class: each launches whatever queued tasks fit its offers (gangs only
  whole), declines what it cannot use (with a filter), suppresses offers
  when its queue is empty and revives when a task arrives while suppressed. The allocator's sorter (``drf`` or
  ``random``) decides who is offered what: the ``drf`` and ``random``
  policies.
* A policy plugin's (:mod:`mesoslike.sim.policies`): the bundled Fuxi
  scheduler's core as the one framework (``fuxi-fifo``, ``fuxi-fair``;
  ``mesoslike_frameworks.fuxi.simulation``) is one.

Each answers offers through a :class:`Host` (the simulator), which owns the
allocator, the agents and the clock. Within an allocation cycle a framework
*holds* the offers it gets until they could cover everything it waits for,
or the cycle ends, and then answers them all in one batch (docs/simulate.rst,
"Allocation cycles").
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Mapping, Protocol, Sequence

import attrs

from mesoslike.allocator import Offer
from mesoslike.resources import Resources
from mesoslike.sim.workload import TaskSpec

__all__ = [
    "Host", "Run", "Scheduler", "ClusterView", "GreedySchedulers", "group_key",
    "REASON_QUOTA", "REASON_NO_FIT", "REASON_FILTERED", "REASON_LOWER_PRIORITY", "REASON_GANG",
    "REASON_BLACKLIST", "REASON_NO_OFFER", "REASONS", "FrameworkCounters",
]

EMPTY = Resources()

#: why a pending task waits (docs/simulate.rst, "Why tasks wait")
REASON_QUOTA = "quota"
REASON_NO_FIT = "no fit"
REASON_FILTERED = "filtered"
REASON_LOWER_PRIORITY = "lower priority"
REASON_GANG = "gang incomplete"
REASON_BLACKLIST = "blacklist"
REASON_NO_OFFER = "no offer yet"
REASONS = (REASON_QUOTA, REASON_NO_FIT, REASON_FILTERED, REASON_LOWER_PRIORITY, REASON_GANG, REASON_BLACKLIST,
           REASON_NO_OFFER)


@attrs.define(eq=False)
class Run:
    """One start of a task on an agent (a preempted task starts again as a new run)."""

    task: TaskSpec
    agent_id: str
    framework_id: str
    started: float
    slot_id: str = ""
    killed: bool = False


class Host(Protocol):
    """What a scheduler may do: the simulator's side of the offer protocol."""

    def accept(self, offers: Sequence[Offer], tasks: Sequence[TaskSpec], refuse_seconds: float,
               slot_ids: Sequence[str] = ()) -> list[Run]:
        """Launch ``tasks`` on the agent of ``offers`` (all of one agent)."""

    def decline(self, offer: Offer, refuse_seconds: float) -> None: ...

    def kill(self, run: Run) -> None:
        """Preempt a running task: its resources go back, it waits again."""

    def suppress(self, framework_id: str) -> None: ...

    def revive(self, framework_id: str) -> None: ...

    def fits_now(self, shape: Resources) -> bool:
        """Does ``shape`` fit the free resources of some agent now? (Within a
        cycle a "no" holds; offers cannot help a task that fits nowhere.)"""


@attrs.define
class FrameworkCounters:
    """A framework's counters, totals so far."""

    offers_received: int = 0
    offers_declined: int = 0
    launched: int = 0
    finished: int = 0
    running: int = 0


class Scheduler(Protocol):
    """The level-2 side of a simulation (see the module docstring)."""

    @property
    def frameworks(self) -> Mapping[str, str]:
        """Framework id -> role, in registration order."""

    @property
    def suppressed_at_start(self) -> bool:
        """Do the frameworks register suppressed (until their first task)?"""

    @property
    def counters(self) -> Mapping[str, FrameworkCounters]:
        """Each framework's counters."""

    def admit(self, tasks: Sequence[TaskSpec]) -> None:
        """Tasks arrived (all of a gang together)."""

    def begin_cycle(self) -> None:
        """An allocation cycle starts (what each framework waits for is
        measured again)."""

    def hold(self, offers: Sequence[Offer]) -> None:
        """Offers of this cycle; answered now or by :meth:`answer`."""

    def answer(self) -> None:
        """The cycle is over: answer every offer still held."""

    def eligible(self) -> bool:
        """May some framework receive offers (is one not suppressed)?"""

    def offer_shapes(self) -> Mapping[str, Sequence[Resources]] | None:
        """Each framework's offer filters, if it keeps them: the shapes it
        waits for, by framework that may receive offers; a framework is
        offered only agents whose free resources hold one of its shapes
        (Mesos's ``min_allocatable_resources`` of a framework's
        ``offer_filters``). None: no offer filters, every agent is offered
        (also for a scheduler without this method)."""

    def wants_offers(self) -> bool:
        """Does a framework that may receive offers wait for something the
        free resources could hold, beyond the offers it holds?"""

    def task_ended(self, run: Run) -> None: ...

    def queued(self, framework_id: str) -> int:
        """Tasks of the framework waiting to start."""

    def waiting(self) -> Iterable[tuple[str, Sequence[TaskSpec]]]:
        """``(key, tasks)`` groups of waiting tasks that wait for the same
        reason (a shape of a greedy framework, a Fuxi job)."""

    def reason(self, key: str, tasks: Sequence[TaskSpec], view: ClusterView) -> str:
        """Why a group of :meth:`waiting` waits (one of :data:`REASONS`)."""


class ClusterView(Protocol):
    """What the simulator knows at a sample time, for the reasons."""

    def fits_free(self, shape: Resources, framework_id: str | None = None) -> bool:
        """Does ``shape`` fit the free resources of some agent (that
        ``framework_id`` has not filtered, if given)?"""

    def fits_together(self, shapes: Sequence[Resources]) -> bool:
        """Do all of ``shapes`` fit the free resources at once (first fit)?"""

    def quota_blocks(self, framework_id: str, shape: Resources) -> bool:
        """Would ``shape`` take the framework's role over a quota limit, or
        into the headroom other roles' guarantees hold back?"""


# ===================================================================== greedy
class _Greedy:
    """One greedy framework: a queue per task shape (each in arrival order,
    served highest priority / oldest head first), gangs in a queue of their
    own. Filling an offer costs O(shapes), not O(queued tasks): traces have
    thousands of tasks but few hundred distinct shapes."""

    def __init__(self, framework_id: str, tasks_per_offer: int | None) -> None:
        self.id = framework_id
        self.tasks_per_offer = tasks_per_offer
        self.queues: dict[Resources, deque[TaskSpec]] = {}
        self.gangs: dict[str, list[TaskSpec]] = {}
        self.suppressed = True
        self.queued = 0
        self.held: list[Offer] = []
        self.held_total = EMPTY
        #: what the queued tasks that fit some agent now need, together (None: not measured this cycle)
        self.wanted: Resources | None = None
        #: what every queued shape needs at least, kind by kind (None: the shapes changed since)
        self._floor: Resources | None = None

    def floor(self) -> Resources:
        """What each queued task and gang member needs at least, kind by kind
        (scalars): a room that does not hold this holds none of them. Most
        offers a framework gets are crumbs it declines; this turns them down
        in O(kinds) instead of O(shapes). O(shapes) after the shapes changed."""
        if self._floor is None:
            common: dict[str, int] | None = None
            gang_shapes = {member.resources for gang in self.gangs.values() for member in gang}
            for shape in (*self.queues, *gang_shapes):
                needs = shape.millis()
                if common is None:
                    common = dict(needs)
                    continue
                for kind, least in list(common.items()):
                    need = needs.get(kind, 0)
                    if need < least:
                        if need:
                            common[kind] = need
                        else:
                            del common[kind]
            self._floor = Resources.from_millis(common or {})
        return self._floor

    def measure(self, fits_now: Callable[[Resources], bool]) -> Resources:
        """What the queued tasks that fit some agent's free resources need
        (offers cannot help the others). O(shapes + gangs)."""
        parts = [shape.scale(len(queue)) for shape, queue in self.queues.items() if fits_now(shape)]
        parts += [gang[0].resources.scale(len(gang)) for gang in self.gangs.values() if fits_now(gang[0].resources)]
        return Resources.sum(parts)

    def enqueue(self, tasks: Sequence[TaskSpec]) -> None:
        """Queue tasks of one shape (or a whole gang)."""
        head = tasks[0]
        self.queued += len(tasks)
        self.wanted = None
        if head.gang:
            self.gangs[head.gang] = list(tasks)
            self._floor = None
        else:
            queue = self.queues.get(head.resources)
            if queue is None:
                queue = self.queues[head.resources] = deque()
                self._floor = None
            queue.extend(tasks)

    def could_use(self, resources: Resources) -> bool:
        """True if some queued task (or gang member) fits in ``resources``."""
        if not resources.contains(self.floor()):
            return False
        return any(resources.contains(shape) for shape in self.queues) or \
            any(resources.contains(gang[0].resources) for gang in self.gangs.values())

    def place(self, rooms: list[Resources]) -> list[list[TaskSpec]]:
        """Decide what to launch on each offer (``rooms``: what each offers,
        updated): whole gangs first, first fit across the offers, then queued
        tasks that fit, highest priority and oldest shape first. Rooms below
        :meth:`floor` take nothing and are passed over (the same picks)."""
        picks: list[list[TaskSpec]] = [[] for _ in rooms]
        floor = self.floor()
        usable = [i for i, room in enumerate(rooms) if room.contains(floor)]
        if not usable:
            return picks
        if self.gangs:
            # first fit over the usable rooms is first fit over all: the others hold no member
            usable_rooms = [rooms[i] for i in usable]
            for gang_id, members in list(self.gangs.items()):
                plan = _first_fit([m.resources for m in members], usable_rooms)
                if plan is not None:
                    for member, j in zip(members, plan):
                        picks[usable[j]].append(member)
                        usable_rooms[j] = usable_rooms[j] - member.resources
                    del self.gangs[gang_id]
                    self._floor = None
            for j, i in enumerate(usable):
                rooms[i] = usable_rooms[j]
        limit = self.tasks_per_offer
        order = sorted(self.queues, key=lambda s: (self.queues[s][0].priority, self.queues[s][0].index))
        for i in usable:
            for shape in order:
                queue = self.queues.get(shape)
                while queue and rooms[i].contains(shape) and (limit is None or len(picks[i]) < limit):
                    picks[i].append(queue.popleft())
                    rooms[i] = rooms[i] - shape
                if queue is not None and not queue:
                    del self.queues[shape]
                    self._floor = None
        placed = sum(len(p) for p in picks)
        if placed:
            self.queued -= placed
            if self.wanted is not None:
                self.wanted = self.wanted.subtract_clamped(Resources.sum(t.resources for p in picks for t in p))
        return picks


def _first_fit(shapes: Sequence[Resources], rooms: Sequence[Resources]) -> list[int] | None:
    """Indexes of ``rooms`` that take each of ``shapes`` at once, first fit; None if they do not all fit."""
    left = list(rooms)
    plan = []
    for shape in shapes:
        for i, room in enumerate(left):
            if room.contains(shape):
                left[i] = room - shape
                plan.append(i)
                break
        else:
            return None
    return plan


class GreedySchedulers:
    """One greedy framework per class (see the module docstring)."""

    def __init__(self, host: Host, classes: Sequence[str], role_of: Callable[[str], str],
                 refuse_seconds: float, tasks_per_offer: int | None = None,
                 offer_filters: bool = False) -> None:
        self.host = host
        self.refuse_seconds = refuse_seconds
        self.offer_filters = offer_filters
        self.frameworks = {c: role_of(c) for c in classes}
        self.suppressed_at_start = True
        self._fw = {c: _Greedy(c, tasks_per_offer) for c in classes}
        self.counters = {c: FrameworkCounters() for c in classes}

    def admit(self, tasks: Sequence[TaskSpec]) -> None:
        framework = self._fw[tasks[0].framework_id]
        framework.enqueue(tasks)
        if framework.suppressed:
            # a framework that is not suppressed keeps its filters: a new task
            # may wait for one to expire ("filtered")
            framework.suppressed = False
            self.host.revive(framework.id)

    def begin_cycle(self) -> None:
        for framework in self._fw.values():
            framework.wanted = None

    def hold(self, offers: Sequence[Offer]) -> None:
        touched = {}
        for offer in offers:
            framework = self._fw[offer.framework_id]
            framework.held.append(offer)
            framework.held_total = framework.held_total + offer.resources
            touched[framework.id] = framework
        for framework in touched.values():
            if framework.wanted is None:
                framework.wanted = framework.measure(self.host.fits_now)
            if framework.held_total.contains(framework.wanted):
                self._answer(framework)

    def answer(self) -> None:
        for framework in self._fw.values():
            if framework.held:
                self._answer(framework)

    def _answer(self, framework: _Greedy) -> None:
        offers, framework.held, framework.held_total = framework.held, [], EMPTY
        counters = self.counters[framework.id]
        counters.offers_received += len(offers)
        rooms = [offer.resources for offer in offers]
        picks = framework.place(rooms)
        refuse = self.refuse_seconds
        for offer, tasks, left in zip(offers, picks, rooms):
            # what is declined is filtered only if this framework has no use for it (a gang
            # that did not fit this time may fit these offers next time, with others)
            refuse_left = 0.0 if framework.could_use(left) else refuse
            if not tasks:
                self.host.decline(offer, refuse_left)
                counters.offers_declined += 1
                continue
            self.host.accept([offer], tasks, refuse_left)
            counters.launched += len(tasks)
            counters.running += len(tasks)
        if not framework.queued and not framework.suppressed:
            framework.suppressed = True
            self.host.suppress(framework.id)

    def eligible(self) -> bool:
        return any(not f.suppressed for f in self._fw.values())

    def offer_shapes(self) -> Mapping[str, Sequence[Resources]] | None:
        if not self.offer_filters:
            return None
        return {framework.id: [*framework.queues, *(gang[0].resources for gang in framework.gangs.values())]
                for framework in self._fw.values() if not framework.suppressed}

    def wants_offers(self) -> bool:
        for framework in self._fw.values():
            if framework.suppressed:
                continue
            if framework.wanted is None:
                framework.wanted = framework.measure(self.host.fits_now)
            if framework.wanted and not framework.held_total.contains(framework.wanted):
                return True
        return False

    def task_ended(self, run: Run) -> None:
        counters = self.counters[run.framework_id]
        counters.running -= 1
        counters.finished += 1

    def queued(self, framework_id: str) -> int:
        return self._fw[framework_id].queued

    def waiting(self) -> Iterable[tuple[str, Sequence[TaskSpec]]]:
        for framework in self._fw.values():
            for queue in framework.queues.values():
                yield framework.id, queue
            for members in framework.gangs.values():
                yield framework.id, members

    def reason(self, key: str, tasks: Sequence[TaskSpec], view: ClusterView) -> str:
        shape = tasks[0].resources
        if view.quota_blocks(key, shape.scale(len(tasks)) if tasks[0].gang else shape):
            return REASON_QUOTA
        if not view.fits_free(shape):
            return REASON_NO_FIT
        if tasks[0].gang and not view.fits_together([t.resources for t in tasks]):
            return REASON_GANG
        if not view.fits_free(shape, key):
            return REASON_FILTERED
        return REASON_LOWER_PRIORITY   # others come first in the allocator's order


# ================================================================ shared
def group_key(task: TaskSpec) -> tuple[str, str]:
    """What a task is scheduled with: its gang, its job, or itself."""
    if task.gang:
        return "gang", task.gang
    if task.job:
        return "job", task.job
    return "task", task.task_id

"""The level-2 schedulers a simulation runs over the allocator's offers.

* :class:`GreedySchedulers` -- one framework per task class, in the role of
  the class: each launches whatever queued tasks fit its offers (gangs only
  whole), declines what it cannot use (with a filter), suppresses offers
  when its queue is empty and revives when a task arrives while suppressed. The allocator's sorter (``drf`` or
  ``random``) decides who is offered what: the ``drf`` and ``random``
  policies.
* :class:`FuxiScheduler` -- one framework, the bundled Fuxi scheduler's
  core (:class:`~mesoslike.frameworks.fuxi.core.FuxiCore`, driven only
  through its public methods): every task is a job of one ScheduleUnit (a
  gang is one all-or-nothing unit of several slots) in the quota group of
  its class, with the task's priority, FIFO or FAIR: the ``fuxi-fifo`` and
  ``fuxi-fair`` policies.

Both answer offers through a :class:`Host` (the simulator), which owns the
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
from mesoslike.frameworks.fuxi.core import (
    WAIT_ALL_OR_NOTHING,
    WAIT_BLACKLIST,
    WAIT_LOWER_PRIORITY,
    WAIT_NO_FIT,
    WAIT_QUOTA,
    DeclineOffers,
    FuxiCore,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    SlotGranted,
    SuppressOffers,
)
from mesoslike.frameworks.fuxi.model import DEFAULT_QUOTA_GROUP, JobSpec, UnitSpec
from mesoslike.resources import Resources
from mesoslike.sim.workload import TaskSpec

__all__ = [
    "Host", "Run", "Scheduler", "GreedySchedulers", "FuxiScheduler", "FUXI_FRAMEWORK",
    "REASON_QUOTA", "REASON_NO_FIT", "REASON_FILTERED", "REASON_LOWER_PRIORITY", "REASON_GANG",
    "REASON_BLACKLIST", "REASON_NO_OFFER", "REASONS", "FrameworkCounters",
]

EMPTY = Resources()
FUXI_FRAMEWORK = "fuxi"
UNIT = "tasks"          # the one ScheduleUnit of every job

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
_FUXI_REASONS = {WAIT_QUOTA: REASON_QUOTA, WAIT_NO_FIT: REASON_NO_FIT, WAIT_LOWER_PRIORITY: REASON_LOWER_PRIORITY,
                 WAIT_ALL_OR_NOTHING: REASON_GANG, WAIT_BLACKLIST: REASON_BLACKLIST}


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
        else:
            self.queues.setdefault(head.resources, deque()).extend(tasks)

    def could_use(self, resources: Resources) -> bool:
        """True if some queued task (or gang member) fits in ``resources``."""
        return any(resources.contains(shape) for shape in self.queues) or \
            any(resources.contains(gang[0].resources) for gang in self.gangs.values())

    def place(self, rooms: list[Resources]) -> list[list[TaskSpec]]:
        """Decide what to launch on each offer (``rooms``: what each offers,
        updated): whole gangs first, first fit across the offers, then queued
        tasks that fit, highest priority and oldest shape first."""
        picks: list[list[TaskSpec]] = [[] for _ in rooms]
        for gang_id, members in list(self.gangs.items()):
            plan = _first_fit([m.resources for m in members], rooms)
            if plan is not None:
                for member, i in zip(members, plan):
                    picks[i].append(member)
                    rooms[i] = rooms[i] - member.resources
                del self.gangs[gang_id]
        limit = self.tasks_per_offer
        order = sorted(self.queues, key=lambda s: (self.queues[s][0].priority, self.queues[s][0].index))
        for i in range(len(rooms)):
            for shape in order:
                queue = self.queues.get(shape)
                while queue and rooms[i].contains(shape) and (limit is None or len(picks[i]) < limit):
                    picks[i].append(queue.popleft())
                    rooms[i] = rooms[i] - shape
                if queue is not None and not queue:
                    del self.queues[shape]
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
                 refuse_seconds: float, tasks_per_offer: int | None = None) -> None:
        self.host = host
        self.refuse_seconds = refuse_seconds
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


# ======================================================================= fuxi
@attrs.define(eq=False)
class _Job:
    """A Fuxi job: one task, a job's tasks (one unit whose desire grows as
    they arrive) or a gang (one all-or-nothing unit)."""

    job_id: str
    tasks: deque[TaskSpec]            # waiting to start, in order
    desired: int                      # the unit's desired slots: waiting + running
    left: int                         # tasks not finished, counting those still to arrive


def group_key(task: TaskSpec) -> tuple[str, str]:
    """What a task is scheduled with: its gang, its job, or itself."""
    if task.gang:
        return "gang", task.gang
    if task.job:
        return "job", task.job
    return "task", task.task_id


class FuxiScheduler:
    """The Fuxi core as the one framework (see the module docstring).
    ``quota_groups``: group -> maximum (None: unlimited); a task goes to the
    group named like its class, else to ``default``."""

    def __init__(self, host: Host, core: FuxiCore, policy: str,
                 sizes: Mapping[tuple[str, str], int] | None = None) -> None:
        self.host = host
        self.core = core
        self.policy = policy
        self.frameworks = {FUXI_FRAMEWORK: "*"}
        self.suppressed_at_start = False   # as the service registers; the core suppresses when idle
        self.counters = {FUXI_FRAMEWORK: FrameworkCounters()}
        self._sizes = dict(sizes or {})     # tasks of each job or gang (others: one)
        self._jobs: dict[str, _Job] = {}
        self._by_key: dict[tuple[str, str], _Job] = {}
        self._slots: dict[str, tuple[_Job, TaskSpec]] = {}     # granted slot -> its task
        self._runs: dict[str, Run] = {}                         # running slot -> its run
        self._seq = 0
        self._suppressed = False
        self._queued = 0
        self._waiting_shapes: dict[Resources, int] = {}       # waiting tasks by shape
        self._wanted: dict[Resources, int] | None = None
        self._held: list[Offer] = []
        self._passes = 0                                       # passes in this cycle
        self._offers: dict[str, Offer] = {}          # the batch being answered

    def admit(self, tasks: Sequence[TaskSpec]) -> None:
        head = tasks[0]
        key = group_key(head)
        self._wait(tasks)
        job = self._by_key.get(key)
        if job is not None:   # more tasks of a job: its unit wants more slots
            job.tasks.extend(tasks)
            job.desired += len(tasks)
            self._apply(self.core.update_desire(job.job_id, UNIT, job.desired))
            return
        self._seq += 1
        job = _Job(f"job-{self._seq}", deque(tasks), len(tasks), self._sizes.get(key, len(tasks)))
        group = head.framework_id if head.framework_id in self.core.groups else DEFAULT_QUOTA_GROUP
        unit = UnitSpec(UNIT, slots=len(tasks), slot=head.resources, all_or_nothing=bool(head.gang))
        spec = JobSpec(_job_name(head), (unit,), quota_group=group, priority=head.priority)
        self._jobs[job.job_id] = job
        self._by_key[key] = job
        self._apply(self.core.submit(spec, job.job_id)[1])

    def _wait(self, tasks: Sequence[TaskSpec]) -> None:
        self._queued += len(tasks)
        shape = tasks[0].resources
        self._waiting_shapes[shape] = self._waiting_shapes.get(shape, 0) + len(tasks)
        self._wanted = None

    def _unwait(self, task: TaskSpec) -> None:
        self._queued -= 1
        shape = task.resources
        left = self._waiting_shapes[shape] - 1
        if left:
            self._waiting_shapes[shape] = left
        else:
            del self._waiting_shapes[shape]
        wanted = self._wanted
        if wanted is not None and shape in wanted:
            if wanted[shape] > 1:
                wanted[shape] -= 1
            else:
                del wanted[shape]

    def begin_cycle(self) -> None:
        self._wanted = None
        self._passes = 0

    def _measure(self) -> dict[Resources, int]:
        """The waiting tasks that fit some agent's free resources, by shape,
        but those of units the core's last pass found waiting for quota
        (offers cannot help them: their room comes from ends and take-backs,
        and a pass comes every cycle anyway). Without that exception a unit
        at its quota had every agent offered and declined, every second."""
        if self._wanted is None:
            shapes = dict(self._waiting_shapes)
            for (job_id, _), reason in self.core.waiting_reasons().items():
                job = self._jobs.get(job_id)
                if reason == WAIT_QUOTA and job is not None and job.tasks:
                    shape = job.tasks[0].resources
                    shapes[shape] = shapes.get(shape, 0) - len(job.tasks)
            fits = self.host.fits_now
            self._wanted = {shape: n for shape, n in shapes.items() if n > 0 and fits(shape)}
        return self._wanted

    def _covered(self) -> bool:
        """Could the held offers take every task of :meth:`_measure` (each
        shape on its own)? A pass on less would find units it could place
        elsewhere unplaced, and preempt for them. O(shapes x held offers)."""
        for shape, count in self._measure().items():
            room = 0
            for offer in self._held:
                room += _how_many(offer.resources, shape)
                if room >= count:
                    break
            else:
                return False
        return True

    def hold(self, offers: Sequence[Offer]) -> None:
        self._held.extend(offers)
        # one early pass per cycle at most: a pass costs the core O(units)
        if self._held and not self._passes and self._measure() and self._covered():
            self.answer()

    def answer(self) -> None:
        if not self._held:
            return
        offers, self._held = self._held, []
        self._passes += 1
        self.counters[FUXI_FRAMEWORK].offers_received += len(offers)
        self._offers = {offer.id: offer for offer in offers}
        self._apply(self.core.on_offers(offers))

    def _apply(self, commands: Iterable[object]) -> None:
        """Carry out what the core says."""
        counters = self.counters[FUXI_FRAMEWORK]
        for command in commands:
            if isinstance(command, SlotGranted):
                slot = command.slot
                job = self._jobs[slot.job_id]
                task = job.tasks.popleft()
                self._slots[slot.id] = (job, task)
                self._unwait(task)
            elif isinstance(command, LaunchSlots):
                launch = [(s.id, self._slots[s.id][1]) for s in command.slots if s.id in self._slots]
                offers = [self._offers[i] for i in command.offer_ids]
                runs = self.host.accept(offers, [t for _, t in launch], command.refuse_seconds,
                                        [slot_id for slot_id, _ in launch])
                for run in runs:
                    self._runs[run.slot_id] = run
                self._started(len(runs))
            elif isinstance(command, DeclineOffers):
                for offer_id in command.offer_ids:
                    self.host.decline(self._offers[offer_id], command.refuse_seconds)
                counters.offers_declined += len(command.offer_ids)
            elif isinstance(command, KillSlot):
                self._kill(command.slot_id)
            elif isinstance(command, SuppressOffers):
                self._suppressed = True
                self.host.suppress(FUXI_FRAMEWORK)
            elif isinstance(command, ReviveOffers):
                self._suppressed = False
                self.host.revive(FUXI_FRAMEWORK)
            # SlotRevoked goes with KillSlot: nothing more to do

    def _started(self, count: int) -> None:
        counters = self.counters[FUXI_FRAMEWORK]
        counters.launched += count
        counters.running += count

    def _kill(self, slot_id: str) -> None:
        """A preempted slot: its task stops (if it started) and waits again
        at the head of its job; the core already wants the slot back."""
        if slot_id not in self._slots:
            return  # the slot of a task that just ended, returned with its finished job
        job, task = self._slots.pop(slot_id)
        run = self._runs.pop(slot_id, None)
        if run is not None:  # else granted in this very pass, never started
            self.host.kill(run)
            self.counters[FUXI_FRAMEWORK].running -= 1
        job.tasks.appendleft(task)
        self._wait([task])

    def eligible(self) -> bool:
        return not self._suppressed

    def wants_offers(self) -> bool:
        if self._suppressed:
            return False
        if self._queued and not self._passes and not self._held:
            return True   # a pass every cycle while units wait: the core preempts (and says why) in passes
        return bool(self._measure()) and not self._covered()

    def task_ended(self, run: Run) -> None:
        counters = self.counters[FUXI_FRAMEWORK]
        counters.running -= 1
        counters.finished += 1
        job, task = self._slots.pop(run.slot_id)
        del self._runs[run.slot_id]
        job.left -= 1
        job.desired -= 1
        if job.left:
            self._apply(self.core.release(run.slot_id, keep_desire=False))
        else:
            # the job is done: finishing it returns its last slot too (one call, not two)
            del self._jobs[job.job_id]
            del self._by_key[group_key(task)]
            self._apply(self.core.finish_job(job.job_id))

    def queued(self, framework_id: str) -> int:
        return self._queued

    def waiting(self) -> Iterable[tuple[str, Sequence[TaskSpec]]]:
        for job in self._jobs.values():
            if job.tasks:
                yield job.job_id, job.tasks

    def reason(self, key: str, tasks: Sequence[TaskSpec], view: ClusterView) -> str:
        why = self.core.why_waiting(key, UNIT)
        if not why:
            return REASON_NO_OFFER
        return _FUXI_REASONS.get(why, why)


def _how_many(room: Resources, shape: Resources) -> int:
    """How many ``shape``s fit in ``room``. O(kinds)."""
    have = room.millis()
    return min((have.get(kind, 0) // need for kind, need in shape.millis().items() if need), default=0)


def _job_name(task: TaskSpec) -> str:
    """A job name the Fuxi model accepts (no '/', tabs or newlines)."""
    name = task.group or task.task_id
    return "".join("_" if c in "/\t\n" else c for c in name) or "task"

"""The bundled Fuxi scheduler as a policy of the simulator (``mesoslike
simulate --policy fuxi-fifo|fuxi-fair``; docs/simulate.rst).

:class:`FuxiScheduler` is one framework around the scheduler's pure core
(:class:`~mesoslike_frameworks.fuxi.core.FuxiCore`, driven only through its
public methods): every task is a job of one ScheduleUnit (a gang is one
all-or-nothing unit of several slots) in the quota group of its class, with
the task's priority, FIFO or FAIR in every group. :data:`FIFO` and
:data:`FAIR` are the two policies, declared in the
``mesoslike.simulation_policies`` entry points (:mod:`mesoslike.plugins`):
the simulator finds them by name and imports this module only for a run
that uses them.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import attrs

from mesoslike import Clock, Offer, Resources
from mesoslike.sim.policies import (
    REASON_BLACKLIST,
    REASON_GANG,
    REASON_LOWER_PRIORITY,
    REASON_NO_FIT,
    REASON_NO_OFFER,
    REASON_QUOTA,
    ClusterView,
    FrameworkCounters,
    Host,
    Run,
    RunSettings,
    Scheduler,
    TaskSpec,
    Workload,
    group_key,
)
from mesoslike_frameworks.fuxi.core import (
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
from mesoslike_frameworks.fuxi.deferred_gc import deferred_collection
from mesoslike_frameworks.fuxi.model import DEFAULT_QUOTA_GROUP, JobSpec, UnitSpec
from mesoslike_frameworks.fuxi.quota import QuotaConfig, load_quota_file

__all__ = ["FuxiScheduler", "FuxiPolicy", "FIFO", "FAIR", "FUXI_FRAMEWORK"]

FUXI_FRAMEWORK = "fuxi"
UNIT = "tasks"          # the one ScheduleUnit of every job
_FUXI_REASONS = {WAIT_QUOTA: REASON_QUOTA, WAIT_NO_FIT: REASON_NO_FIT, WAIT_LOWER_PRIORITY: REASON_LOWER_PRIORITY,
                 WAIT_ALL_OR_NOTHING: REASON_GANG, WAIT_BLACKLIST: REASON_BLACKLIST}


@attrs.define(eq=False)
class _Job:
    """A Fuxi job: one task, a job's tasks (one unit whose desire grows as
    they arrive) or a gang (one all-or-nothing unit)."""

    job_id: str
    tasks: deque[TaskSpec]            # waiting to start, in order
    desired: int                      # the unit's desired slots: waiting + running
    left: int                         # tasks not finished, counting those still to arrive
    #: its tasks' resources, the adapter's one object of that size (None: its tasks differ; then the
    #: first waiting one's, as the core's unit has one slot size)
    shape: Resources | None


class FuxiScheduler:
    """The Fuxi core as the one framework (see the module docstring).
    ``quota_groups``: group -> maximum (None: unlimited); a task goes to the
    group named like its class, else to ``default``."""

    def __init__(self, host: Host, core: FuxiCore, policy: str,
                 sizes: Mapping[tuple[str, str], int] | None = None, offer_filters: bool = False) -> None:
        self.host = host
        self.offer_filters = offer_filters
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
        self._waiting_shapes: dict[Resources, int] = {}       # waiting tasks by shape (keys: ``_shapes``')
        # a shape -> its one object here: the tasks' shapes are equal objects apart; looked up by the one
        # object, a dict of shapes finds its key by identity (no Resources.__eq__ per lookup)
        self._shapes: dict[Resources, Resources] = {}
        self._wanted: dict[Resources, int] | None = None
        # _measure's tasks of the units the core says wait for quota, by shape, and each such job's share
        # (its shape, its waiting tasks): followed through the core's ``quota_log`` and the jobs' task changes
        self._quota_tasks: dict[Resources, int] = {}
        self._quota_jobs: dict[str, tuple[Resources | None, int]] = {}
        core.quota_log = [(job_id, True) for job_id, _ in core.waiting_for_quota()]
        self._held: list[Offer] = []
        # _covered's count: the room for each shape of ``_room_for`` (a _measure()) in _held[:_room_at[shape]]
        self._room: dict[Resources, int] = {}
        self._room_at: dict[Resources, int] = {}
        self._room_for: dict[Resources, int] | None = None
        self._short: Resources | None = None          # the shape _covered found short last
        self._passes = 0                                       # passes in this cycle
        self._offers: dict[str, Offer] = {}          # the batch being answered
        self._returned = False                       # a slot returned (ended, preempted) since the last pass

    def admit(self, tasks: Sequence[TaskSpec]) -> None:
        head = tasks[0]
        key = group_key(head)
        self._wait(tasks)
        job = self._by_key.get(key)
        if job is not None:   # more tasks of a job: its unit wants more slots
            if job.shape is not None and any(task.resources != job.shape for task in tasks):
                job.shape = None
            job.tasks.extend(tasks)
            self._tasks_changed(job)
            job.desired += len(tasks)
            self._apply(self.core.update_desire(job.job_id, UNIT, job.desired))
            return
        self._seq += 1
        job = _Job(f"job-{self._seq}", deque(tasks), len(tasks), self._sizes.get(key, len(tasks)),
                   self._shapes[head.resources] if all(t.resources == head.resources for t in tasks) else None)
        group = head.framework_id if head.framework_id in self.core.groups else DEFAULT_QUOTA_GROUP
        unit = UnitSpec(UNIT, slots=len(tasks), slot=head.resources, all_or_nothing=bool(head.gang))
        spec = JobSpec(_job_name(head), (unit,), quota_group=group, priority=head.priority)
        self._jobs[job.job_id] = job
        self._by_key[key] = job
        self._apply(self.core.submit(spec, job.job_id)[1])

    def _wait(self, tasks: Sequence[TaskSpec]) -> None:
        self._queued += len(tasks)
        shape = tasks[0].resources
        shape = self._shapes.setdefault(shape, shape)
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
            # with offer filters, a unit's quota may have room again once a slot is returned: the
            # last pass's reasons hold only until then (the next pass says anew)
            stale = self.offer_filters and self._returned
            held = {} if stale else self._quota_held()
            fits = self.host.fits_now
            get = held.get
            self._wanted = {shape: left for shape, n in self._waiting_shapes.items()
                            if (left := n - get(shape, 0)) > 0 and fits(shape)}
        return self._wanted

    def _quota_held(self) -> dict[Resources, int]:
        """The waiting tasks of the units the core's last pass found waiting
        for quota (:meth:`FuxiCore.waiting_for_quota`), by shape: followed
        as units join and leave them (the core's ``quota_log``) and as their
        jobs' waiting tasks change (:meth:`_tasks_changed`), in O(changes)
        rather than O(such units) a call. :meth:`_recount` counts them anew."""
        log = self.core.quota_log
        if log:
            shares = self._quota_jobs
            for job_id, joined in log:
                if joined:
                    if job_id not in shares:
                        job = self._jobs.get(job_id)
                        self._add_share(job_id, job)
                elif job_id in shares:
                    self._drop_share(job_id)
            log.clear()
        return self._quota_tasks

    def _recount(self) -> dict[Resources, int]:
        """:meth:`_quota_held`'s count made anew (for the tests)."""
        held: dict[Resources, int] = {}
        jobs = self._jobs
        for job_id, _ in self.core.waiting_for_quota():
            job = jobs.get(job_id)
            if job is not None and job.tasks:
                shape = job.shape
                if shape is None:
                    shape = job.tasks[0].resources
                held[shape] = held.get(shape, 0) + len(job.tasks)
        return held

    def _add_share(self, job_id: str, job: _Job | None) -> None:
        shape: Resources | None = None
        count = 0
        if job is not None and job.tasks:
            shape = job.shape
            if shape is None:
                shape = job.tasks[0].resources
            count = len(job.tasks)
            tasks = self._quota_tasks
            tasks[shape] = tasks.get(shape, 0) + count
        self._quota_jobs[job_id] = (shape, count)

    def _drop_share(self, job_id: str) -> None:
        shape, count = self._quota_jobs.pop(job_id)
        if shape is not None:
            tasks = self._quota_tasks
            left = tasks[shape] - count
            if left:
                tasks[shape] = left
            else:
                del tasks[shape]

    def _tasks_changed(self, job: _Job) -> None:
        """A job's waiting tasks changed: its share in :meth:`_quota_held` follows."""
        if job.job_id in self._quota_jobs:
            self._drop_share(job.job_id)
            self._add_share(job.job_id, job)

    def _covered(self) -> bool:
        """Could the held offers take every task of :meth:`_measure` (each
        shape on its own)? A pass on less would find units it could place
        elsewhere unplaced, and preempt for them. The room each shape has in
        the held offers is counted as offers come (a cycle holds them chunk
        by chunk and asks after each): O(shapes x offers held since), or
        O(shapes x held offers) when the shapes wanted changed.

        Shapes are counted only until one falls short (the shape that fell
        short last is asked first): a shape's room only grows as offers
        come, so one counted enough stays enough, and one not counted yet
        is counted over every offer held since it last was."""
        wanted = self._measure()
        room, room_at = self._room, self._room_at
        if self._room_for is not wanted:        # other shapes wanted: count them over every held offer
            room.clear()
            room_at.clear()
            self._room_for = wanted
        held = self._held
        end = len(held)
        short = self._short
        shapes: Iterable[Resources] = wanted if short is None or short not in wanted else (short, *wanted)
        for shape in shapes:
            have = room.get(shape, 0)
            if have >= wanted[shape]:
                continue
            start = room_at.get(shape, 0)
            if start < end:           # how many of it each offer holds, its kinds looked up once
                needs = [(kind, need) for kind, need in shape.millis().items() if need]
                if len(needs) == 1:
                    kind, need = needs[0]
                    have += sum(offer.resources.millis().get(kind, 0) // need for offer in held[start:])
                else:
                    have += sum(min((have_.get(kind, 0) // need for kind, need in needs), default=0)
                                for have_ in (offer.resources.millis() for offer in held[start:]))
                room[shape] = have
                room_at[shape] = end
            if have < wanted[shape]:
                self._short = shape
                return False
        return True

    def hold(self, offers: Sequence[Offer]) -> None:
        self._held.extend(offers)
        # one early pass per cycle at most: a pass costs the core O(units)
        if self._held and not self._passes and self._measure() and self._covered():
            self.answer()

    def answer(self) -> None:
        if not self._held:
            if self.offer_filters and self._queued and not self._passes and not self._suppressed:
                # nothing offered holds a waiting shape: a pass over no offers, for what the core
                # does in passes (preemption, its timers, why units wait)
                self._passes += 1
                self._offers = {}
                self._returned = False
                with deferred_collection():
                    commands = self.core.on_offers([])
                self._apply(commands)
                self._wanted = None     # the pass says anew which units wait for quota
            return
        offers, self._held = self._held, []
        self._room_for = None
        self._passes += 1
        self.counters[FUXI_FRAMEWORK].offers_received += len(offers)
        self._offers = {offer.id: offer for offer in offers}
        self._returned = False
        with deferred_collection():   # as the service runs a pass
            commands = self.core.on_offers(offers)
        self._apply(commands)

    def _apply(self, commands: Iterable[object]) -> None:
        """Carry out what the core says."""
        counters = self.counters[FUXI_FRAMEWORK]
        for command in commands:
            if isinstance(command, SlotGranted):
                slot = command.slot
                job = self._jobs[slot.job_id]
                task = job.tasks.popleft()
                self._tasks_changed(job)
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
            self._returned = True
            self.host.kill(run)
            self.counters[FUXI_FRAMEWORK].running -= 1
        job.tasks.appendleft(task)
        self._tasks_changed(job)
        self._wait([task])

    def eligible(self) -> bool:
        return not self._suppressed

    def offer_shapes(self) -> Mapping[str, Sequence[Resources]] | None:
        """With offer filters: the shapes of the waiting tasks that fit some
        agent's free resources, but those of units the core's last pass found
        waiting for quota (:meth:`_measure`) -- what the core would decline
        on any other agent (docs/simulate.rst, "Offer filters"). A cycle
        that offers nothing still has its pass (:meth:`answer`), in which
        the core preempts from the machines it knows. None without them:
        every agent is offered."""
        if not self.offer_filters or self._suppressed:
            return None if not self.offer_filters else {}
        return {FUXI_FRAMEWORK: list(self._measure())}

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
        self._returned = True
        self._wanted = None if self.offer_filters else self._wanted
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


def _job_name(task: TaskSpec) -> str:
    """A job name the Fuxi model accepts (no '/', tabs or newlines)."""
    name = task.group or task.task_id
    return "".join("_" if c in "/\t\n" else c for c in name) or "task"


@attrs.frozen
class FuxiPolicy:
    """``fuxi-fifo`` or ``fuxi-fair``: the Fuxi core with every quota group
    ordering its units FIFO or FAIR (seed 000: the policy under test, for
    every group). The run's ``quota`` is a :class:`QuotaConfig` (its
    groups, blacklist and preemption; none: one unlimited ``default``
    group); the run's ``preemption``, when given, overrides the quota's."""

    order: str   # FIFO or FAIR

    def scheduler(self, host: Host, workload: Workload, config: RunSettings, clock: Clock) -> Scheduler:
        quota = config.quota if config.quota is not None else QuotaConfig()
        if not isinstance(quota, QuotaConfig):
            raise ValueError(f"the Fuxi policies take a QuotaConfig as quota, got {type(quota).__name__}")
        preemption = quota.preemption if config.preemption is None else config.preemption
        # the core declines with its own short filter while units wait (decline_seconds)
        policies = {name: self.order for name in (*quota.groups, "default")}
        core = FuxiCore(quota.groups, global_blacklist=quota.blacklist, preemption=preemption, clock=clock,
                        policies=policies, quiet_passes=config.quiet_passes)
        sizes: dict[tuple[str, str], int] = {}
        for task in workload.tasks:
            if task.group:
                key = group_key(task)
                sizes[key] = sizes.get(key, 0) + 1
        return FuxiScheduler(host, core, self.order, sizes, offer_filters=getattr(config, "offer_filters", False))

    def read_quota(self, path: Path) -> QuotaConfig:
        """A Fuxi quota file (docs/fuxi.rst): quota groups, blacklist, preemption."""
        return load_quota_file(path)


#: ``mesoslike simulate --policy fuxi-fifo``
FIFO = FuxiPolicy("FIFO")
#: ``mesoslike simulate --policy fuxi-fair``
FAIR = FuxiPolicy("FAIR")

"""The Fuxi service's job core: every job's lifecycle, sans I/O.

:class:`JobCore` decides what ``mesoslike fuxi serve`` does with its jobs.
Scheduling is the :class:`~mesoslike.frameworks.fuxi.core.FuxiCore`'s, held
inside it; processes, sockets and the scheduler driver are the service's
(:mod:`.service`). Like dask's worker state machine, every stimulus is an
*event* — a frozen value carrying a ``stimulus_id`` — given to
:meth:`JobCore.handle`, which changes the state and returns *commands* for
the service to carry out in order. Time comes from the scheduler's injected
clock; nothing here touches a socket, a file, a process or the system clock.

Events in (:data:`Event`):

=========================  ==========================================================
event                      what the core does
=========================  ==========================================================
``JobSubmitted``           the scheduler takes the job's demand; :class:`JobAccepted`
                           (the reply), then :class:`StartAppMaster`
``OffersReceived``         a scheduling pass; each granted slot gets a worker task
``OfferRescinded``         nothing (offers are answered within their pass)
``AgentLost``              its slots are lost
``WorkerUpdate``           a worker task's status: one that ended by itself gives its
                           slot back (the unit keeps its desire), one killed or lost
                           is a lost slot; failed ones count towards the job's limit
``AppMasterRequest``       a decoded AppMaster request (:mod:`.protocol`), checked and
                           dispatched by type (table :attr:`JobCore._requests`)
``AppMasterExited``        restart it (:class:`RestartAppMaster`) or, past the
                           limit, fail the job
``AppMasterStartFailed``   the job fails
``DriverRegistered``       reconcile the worker tasks (on a re-registration) and
                           revive offers if units wait
``Tick``                   kill the worker tasks that outlived their release
=========================  ==========================================================

Commands out (:data:`Command`): the scheduler's :class:`LaunchSlots`,
:class:`DeclineOffers`, :class:`KillSlot`, :class:`SuppressOffers`,
:class:`ReviveOffers`, and :class:`ReconcileTasks`, :class:`JobAccepted`,
:class:`StartAppMaster`, :class:`RestartAppMaster`, :class:`StopAppMaster`,
:class:`JobFinished`, :class:`ForgetJob`.

A job's state is a small machine (:data:`TRANSITIONS`): ``running`` until it
``succeeded`` or ``failed``, once; every transition is recorded with the
stimulus that caused it (:meth:`JobCore.story`). A job fails when its
AppMaster says so, when ``max_worker_failures`` of its worker tasks failed,
when its AppMaster exited more than ``max_appmaster_restarts`` times, or
when its AppMaster cannot be started. An ended job's slots are killed and
returned; its record stays for ``status`` until ``keep_ended`` newer ended
jobs push it out (:class:`ForgetJob`).

Workers: a worker task runs in every granted slot. Whether its slot still
counts as granted is the scheduler's (:meth:`FuxiCore.holds`), never a copy
of it. A slot the AppMaster releases goes back at once; its worker exits by
itself on the AppMaster's RELEASE, and its task is killed if it still runs
``release_grace`` seconds later (:class:`Tick`).
"""

from __future__ import annotations

import collections
import enum
import hmac
import json
import logging
from typing import Any, Callable, Collection, Iterable, Mapping

import attrs

from mesoslike import Offer, TaskState, TaskStatus
from mesoslike.frameworks.fuxi import protocol
from mesoslike.frameworks.fuxi.core import (
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    Slot,
    SlotGranted,
    SlotRevoked,
    SuppressOffers,
)
from mesoslike.frameworks.fuxi.core import Command as SchedulerCommand
from mesoslike.frameworks.fuxi.model import JobSpec, UnitSpec

__all__ = ["JobCore", "Job", "JobState", "TRANSITIONS", "Transition", "Event", "JobSubmitted", "OffersReceived",
           "OfferRescinded", "AgentLost", "WorkerUpdate", "AppMasterRequest", "AppMasterExited",
           "AppMasterStartFailed", "DriverRegistered", "Tick", "Command", "ReconcileTasks", "JobAccepted",
           "StartAppMaster", "RestartAppMaster", "StopAppMaster", "JobFinished", "ForgetJob",
           "KEEP_ENDED_JOBS", "MAX_APPMASTER_RESTARTS", "MAX_WORKER_FAILURES", "RELEASE_GRACE"]

log = logging.getLogger("mesoslike.frameworks.fuxi.service")

#: ended jobs kept for ``status``
KEEP_ENDED_JOBS = 1000
#: AppMaster restarts after which its job fails
MAX_APPMASTER_RESTARTS = 10
#: worker tasks of a job that may fail (not start, crash) before the job fails
MAX_WORKER_FAILURES = 20
#: seconds a released slot's worker has to exit by itself before its task is killed
RELEASE_GRACE = 5.0
#: job transitions kept by :meth:`JobCore.story`
STORY_LENGTH = 10_000

#: task states of a worker that ended by itself (any other terminal state: the slot was lost)
_ENDED_BY_ITSELF = (TaskState.FINISHED, TaskState.FAILED, TaskState.ERROR)
_FAILED = (TaskState.FAILED, TaskState.ERROR)


class JobState(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: the states a job may go to from each state: a job ends once, and stays ended
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
}


@attrs.frozen
class Transition:
    """One line of a job's story: ``start`` (None: submitted) to ``finish`` at ``time``, because of ``stimulus_id``."""
    job_id: str
    start: JobState | None
    finish: JobState
    stimulus_id: str
    time: float


# ------------------------------------------------------------------ events
@attrs.frozen
class _Stimulus:
    #: names the stimulus in the story of the transitions it caused
    stimulus_id: str = attrs.field(kw_only=True)


@attrs.frozen
class JobSubmitted(_Stimulus):
    """A checked job; ``document`` is what its AppMaster reads, ``token`` its secret for the AppMaster's requests."""
    spec: JobSpec
    document: Mapping[str, Any]
    token: str


@attrs.frozen
class OffersReceived(_Stimulus):
    offers: tuple[Offer, ...] = attrs.field(converter=tuple)


@attrs.frozen
class OfferRescinded(_Stimulus):
    offer_id: str


@attrs.frozen
class AgentLost(_Stimulus):
    agent_id: str


@attrs.frozen
class WorkerUpdate(_Stimulus):
    """A status update of a task (worker tasks are named by their slot id)."""
    status: TaskStatus


#: what an AppMaster asks (:data:`protocol.APPMASTER_REQUESTS`)
AppMasterMessage = (protocol.SetDesire | protocol.ReleaseSlot | protocol.AvoidHosts | protocol.BlacklistHost
                    | protocol.ReportHost | protocol.Progress | protocol.JobEnded)


@attrs.frozen
class AppMasterRequest(_Stimulus):
    """A decoded AppMaster request. :meth:`JobCore.handle` raises :class:`FuxiError`
    for one it refuses (unknown job or unit, wrong token, ...); nothing changes then."""
    request: AppMasterMessage


@attrs.frozen
class AppMasterExited(_Stimulus):
    """The job's AppMaster process exited with ``status``; ``log_tail``: the end of its log."""
    job_id: str
    status: int
    log_tail: str = ""


@attrs.frozen
class AppMasterStartFailed(_Stimulus):
    """Starting (or restarting) the job's AppMaster process failed: ``error`` says why."""
    job_id: str
    error: str


@attrs.frozen
class DriverRegistered(_Stimulus):
    """The framework (re-)registered with a master."""
    reregistered: bool = False


@attrs.frozen
class Tick(_Stimulus):
    """Time passed: deadlines are due."""


Event = (JobSubmitted | OffersReceived | OfferRescinded | AgentLost | WorkerUpdate | AppMasterRequest
         | AppMasterExited | AppMasterStartFailed | DriverRegistered | Tick)


# ---------------------------------------------------------------- commands
@attrs.frozen
class ReconcileTasks:
    """Ask the master about these tasks (unknown ones come back as TASK_LOST)."""
    task_ids: tuple[str, ...]


@attrs.frozen
class JobAccepted:
    """The reply to the submission: the job is in, as ``job_id``."""
    job_id: str


@attrs.frozen
class StartAppMaster:
    """Start the job's AppMaster process, with the job ``document`` and its ``token``.
    If it cannot start: :class:`AppMasterStartFailed`."""
    job_id: str
    document: Mapping[str, Any]
    token: str


@attrs.frozen
class RestartAppMaster:
    """Start the job's AppMaster again, the same way (its ``restart``-th
    restart; the last one exited with ``exit_status``). If it cannot start:
    :class:`AppMasterStartFailed`."""
    job_id: str
    restart: int
    exit_status: int


@attrs.frozen
class StopAppMaster:
    """Stop the job's AppMaster (its job failed; one whose job succeeded exits by itself)."""
    job_id: str


@attrs.frozen
class JobFinished:
    """The job ended (``state``: succeeded or failed, because of ``reason``)."""
    job_id: str
    state: JobState
    reason: str


@attrs.frozen
class ForgetJob:
    """The ended job is forgotten: whatever the service keeps about it can go."""
    job_id: str


Command = (LaunchSlots | DeclineOffers | KillSlot | SuppressOffers | ReviveOffers | ReconcileTasks | JobAccepted
           | StartAppMaster | RestartAppMaster | StopAppMaster | JobFinished | ForgetJob)


# ------------------------------------------------------------------- state
@attrs.define(eq=False)
class Job:
    """A job as the service knows it: its spec, its AppMaster's token, its
    state, and the counts its limits are about."""
    id: str
    spec: JobSpec
    token: str
    submitted: float
    state: JobState = JobState.RUNNING
    reason: str = ""
    ended: float | None = None
    #: the AppMaster's last progress report (JSON-able)
    report: Mapping[str, Any] | None = None
    worker_failures: int = 0
    appmaster_restarts: int = 0


@attrs.define(eq=False)
class _Worker:
    """The worker task in a granted slot."""
    slot: Slot
    #: the slot was released: the task is killed if it still runs then
    release_deadline: float | None = None


class JobCore:
    """The lifecycle of the jobs of one Fuxi service around ``scheduler``
    (module docstring). Not thread-safe: one caller at a time.

    Costs: an event costs what the scheduler does with it, plus O(1) per
    command; ending a job is O(worker tasks) and O(jobs) to drop the oldest
    ended one; :class:`Tick` is O(worker tasks); :meth:`status` O(jobs x units).
    """

    def __init__(self, scheduler: FuxiCore, *, max_appmaster_restarts: int = MAX_APPMASTER_RESTARTS,
                 max_worker_failures: int = MAX_WORKER_FAILURES, release_grace: float = RELEASE_GRACE,
                 keep_ended: int = KEEP_ENDED_JOBS) -> None:
        self.scheduler = scheduler
        self.clock = scheduler.clock
        self.max_appmaster_restarts = max_appmaster_restarts
        self.max_worker_failures = max_worker_failures
        self.release_grace = release_grace
        self.keep_ended = keep_ended
        self._jobs: dict[str, Job] = {}
        self._workers: dict[str, _Worker] = {}     # slot (= task) id -> its worker task
        self._story: collections.deque[Transition] = collections.deque(maxlen=STORY_LENGTH)
        self._events: dict[type, Callable[[Any], list[Command]]] = {
            JobSubmitted: self._submitted, OffersReceived: self._offers, OfferRescinded: self._rescinded,
            AgentLost: self._agent_lost, WorkerUpdate: self._worker_update, AppMasterRequest: self._appmaster,
            AppMasterExited: self._appmaster_exited, AppMasterStartFailed: self._appmaster_start_failed,
            DriverRegistered: self._registered, Tick: self._tick,
        }
        #: AppMaster request type -> its handler, called for a running job whose token matched
        self._requests: dict[type, Callable[[Job, Any, str], list[Command]]] = {
            protocol.SetDesire: self._set_desire, protocol.ReleaseSlot: self._release_slot,
            protocol.AvoidHosts: self._avoid_hosts, protocol.BlacklistHost: self._blacklist_host,
            protocol.ReportHost: self._report_host, protocol.Progress: self._progress,
            protocol.JobEnded: self._job_ended,
        }

    # ============================================================== events
    def handle(self, event: Event) -> list[Command]:
        """Take one event; the commands to carry out, in order. Raises
        :class:`FuxiError` for a submission or AppMaster request it refuses,
        before anything changes."""
        handler = self._events.get(type(event))
        if handler is None:
            raise FuxiError(f"{type(event).__name__} is not an event of the job core")
        return handler(event)

    def _submitted(self, event: JobSubmitted) -> list[Command]:
        job_id, commands = self.scheduler.submit(event.spec)
        job = self._jobs[job_id] = Job(job_id, event.spec, event.token, self.clock.now())
        self._record(job, None, JobState.RUNNING, event.stimulus_id)
        for unit in event.spec.units:
            desire = _initial_desire(unit)
            if desire != unit.slots:
                commands += self.scheduler.update_desire(job_id, unit.name, desire)
        return [JobAccepted(job_id), *self._absorb(commands), StartAppMaster(job_id, event.document, event.token)]

    def _offers(self, event: OffersReceived) -> list[Command]:
        return self._absorb(self.scheduler.on_offers(list(event.offers)))

    def _rescinded(self, event: OfferRescinded) -> list[Command]:
        self.scheduler.on_offer_rescinded(event.offer_id)
        return []

    def _agent_lost(self, event: AgentLost) -> list[Command]:
        return self._absorb(self.scheduler.on_agent_lost(event.agent_id))

    def _worker_update(self, event: WorkerUpdate) -> list[Command]:
        status = event.status
        worker = self._workers.get(status.task_id)
        if worker is None or not status.terminal:
            return []   # a task of an ended job, or news that changes nothing here
        del self._workers[status.task_id]
        slot = worker.slot
        job = self._jobs[slot.job_id]   # the workers of an ended job are dropped with it
        why = _describe(status)
        if status.state in _FAILED:
            job.worker_failures += 1
            log.warning("job %s: worker %s on %s ended %s", job.id, slot.id, slot.hostname, why)
            if job.worker_failures >= self.max_worker_failures:
                return self._end(job, JobState.FAILED, f"{job.worker_failures} worker tasks failed; last on "
                                                       f"{slot.hostname}: {why}", event.stimulus_id)
        if not self.scheduler.holds(slot.id):
            return []   # released or revoked before: the task's end is no news to the scheduler
        if status.state in _ENDED_BY_ITSELF:
            # the slot goes back; the unit keeps the desire its AppMaster last stated
            return self._absorb(self.scheduler.release(slot.id, keep_desire=True))
        return self._absorb(self.scheduler.on_slot_lost(slot.id, why))

    def _appmaster_exited(self, event: AppMasterExited) -> list[Command]:
        job = self._jobs.get(event.job_id)
        if job is None or job.state is not JobState.RUNNING:
            return []   # it ended with its job
        if job.appmaster_restarts >= self.max_appmaster_restarts:
            return self._end(job, JobState.FAILED, f"the AppMaster exited {job.appmaster_restarts + 1} times "
                                                   f"(last: exit status {event.status}): {event.log_tail}",
                             event.stimulus_id)
        job.appmaster_restarts += 1
        return [RestartAppMaster(job.id, job.appmaster_restarts, event.status)]

    def _appmaster_start_failed(self, event: AppMasterStartFailed) -> list[Command]:
        job = self._jobs.get(event.job_id)
        if job is None or job.state is not JobState.RUNNING:
            return []
        verb = "restart" if job.appmaster_restarts else "start"
        return self._end(job, JobState.FAILED, f"cannot {verb} the AppMaster: {event.error}", event.stimulus_id)

    def _registered(self, event: DriverRegistered) -> list[Command]:
        out: list[Command] = []
        if event.reregistered and self._workers:
            out.append(ReconcileTasks(tuple(sorted(self._workers))))
        if self.scheduler.needs_offers():
            out.append(ReviveOffers())   # a revive made before the subscription was dropped
        return out

    def _tick(self, event: Tick) -> list[Command]:
        now = self.clock.now()
        out: list[Command] = []
        for slot_id, worker in self._workers.items():
            if worker.release_deadline is not None and now >= worker.release_deadline:
                worker.release_deadline = None
                out.append(KillSlot(slot_id, f"its worker did not exit within {self.release_grace:g}s of its "
                                             "release"))
        return out

    # ========================================================== AppMasters
    def _appmaster(self, event: AppMasterRequest) -> list[Command]:
        request = event.request
        handler = self._requests.get(type(request))
        if handler is None:
            raise FuxiError(f"{getattr(request, 'TYPE', type(request).__name__)} is not an AppMaster request")
        job = self._jobs.get(request.job_id)
        if job is None:
            raise FuxiError(f"unknown job {request.job_id!r}")
        if not hmac.compare_digest(request.token.encode(), job.token.encode()):
            raise FuxiError(f"wrong token for job {request.job_id}")
        if job.state is not JobState.RUNNING:
            return []   # the job ended: whatever its AppMaster still says is moot
        return handler(job, request, event.stimulus_id)

    def _set_desire(self, job: Job, request: protocol.SetDesire, stimulus_id: str) -> list[Command]:
        _check_unit(job, request.unit)
        if request.slots < 0:
            raise FuxiError(f"desired slots must be >= 0, got {request.slots}")
        return self._absorb(self.scheduler.update_desire(job.id, request.unit, request.slots))

    def _release_slot(self, job: Job, request: protocol.ReleaseSlot, stimulus_id: str) -> list[Command]:
        worker = self._workers.get(request.slot)
        if worker is None:
            return []   # its task already ended
        if worker.slot.job_id != job.id:
            raise FuxiError(f"slot {request.slot!r} is not a slot of job {job.id}")
        if not self.scheduler.holds(request.slot):
            return []   # released before, or revoked
        worker.release_deadline = self.clock.now() + self.release_grace
        return self._absorb(self.scheduler.release(request.slot, keep_desire=True))

    def _avoid_hosts(self, job: Job, request: protocol.AvoidHosts, stimulus_id: str) -> list[Command]:
        _check_unit(job, request.unit)
        if not all(isinstance(host, str) and host for host in request.hosts):
            raise FuxiError("hosts must be non-empty hostnames")
        self.scheduler.avoid_hosts(job.id, request.unit, request.hosts)
        return []

    def _blacklist_host(self, job: Job, request: protocol.BlacklistHost, stimulus_id: str) -> list[Command]:
        _check_host(request.host)
        log.info("job %s blacklists %s", job.id, request.host)
        for unit in job.spec.units:
            self.scheduler.blacklist(job.id, unit.name, request.host)
        return []

    def _report_host(self, job: Job, request: protocol.ReportHost, stimulus_id: str) -> list[Command]:
        _check_host(request.host)
        log.warning("job %s reports %s for the global blacklist", job.id, request.host)
        self.scheduler.report_host(job.id, request.host)
        return []

    def _progress(self, job: Job, request: protocol.Progress, stimulus_id: str) -> list[Command]:
        try:
            json.dumps(request.report)
        except (TypeError, ValueError) as exc:
            raise FuxiError(f"a progress report must be JSON-able: {exc}") from None
        job.report = request.report
        return []

    def _job_ended(self, job: Job, request: protocol.JobEnded, stimulus_id: str) -> list[Command]:
        return self._end(job, JobState.SUCCEEDED if request.succeeded else JobState.FAILED, request.reason,
                         stimulus_id)

    # ============================================================= queries
    def get(self, job_id: str) -> Job | None:
        """The job (running, or ended and still kept), or None."""
        return self._jobs.get(job_id)

    def job(self, job_id: str) -> Job:
        """The job; :class:`FuxiError` if it is unknown (or forgotten)."""
        job = self._jobs.get(job_id)
        if job is None:
            raise FuxiError(f"unknown job {job_id!r}")
        return job

    @property
    def jobs(self) -> Collection[Job]:
        """Every job kept, in submission order (a read-only view)."""
        return self._jobs.values()

    def story(self, job_id: str) -> list[Transition]:
        """The job's transitions, oldest first, each with the stimulus that caused it."""
        return [t for t in self._story if t.job_id == job_id]

    def status(self, job_id: str | None = None) -> dict[str, Any]:
        """Jobs (or one job) with their units: desired and granted slots,
        hosts, why a unit waits, the instances' progress (the AppMaster's
        last report); the quota groups and the global blacklist."""
        jobs = [self.job(job_id)] if job_id is not None else list(self._jobs.values())
        live = self.scheduler.status()
        scheduled = {job["id"]: {u["name"]: u for u in job["units"]} for job in live["jobs"]}
        return {"jobs": [self._job_status(job, scheduled.get(job.id, {})) for job in jobs],
                "quota_groups": live["quota_groups"], "global_blacklist": sorted(self.scheduler.global_blacklist)}

    def _job_status(self, job: Job, scheduled: Mapping[str, dict]) -> dict[str, Any]:
        report = job.report if isinstance(job.report, Mapping) else {}
        reported = report.get("units")
        reported_units: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
        units = []
        for spec in job.spec.units:
            core_unit = scheduled.get(spec.name, {})
            reported_unit = reported_units.get(spec.name)
            counts: Mapping[str, Any] = reported_unit if isinstance(reported_unit, Mapping) else {}
            units.append({
                "name": spec.name, "slot": str(spec.slot), "command": spec.command,
                "desired": core_unit.get("desired", 0), "granted": core_unit.get("granted", 0),
                "waiting": core_unit.get("waiting", 0), "hosts": core_unit.get("hosts", {}),
                "why_waiting": core_unit.get("why_waiting", ""),
                "instances": {"total": counts.get("total", spec.instance_count), "done": counts.get("done", 0),
                              "running": counts.get("running", 0), "pending": counts.get("pending", 0),
                              "failed": counts.get("failed_attempts", 0), "backups": counts.get("backups", 0),
                              "workers": counts.get("workers", 0)}})
        totals = {key: sum(u["instances"][key] for u in units)
                  for key in ("total", "done", "running", "pending", "failed", "backups")}
        end = job.ended if job.ended is not None else self.clock.now()
        return {"id": job.id, "name": job.spec.name, "state": str(job.state), "reason": job.reason,
                "quota_group": job.spec.quota_group, "priority": job.spec.priority, "policy": job.spec.policy,
                "elapsed": round(end - job.submitted, 3), "instances": totals,
                "blacklisted": list(report.get("blacklisted", [])), "units": units}

    # =========================================================== internals
    def _absorb(self, commands: Iterable[SchedulerCommand]) -> list[Command]:
        """The scheduler's commands for the service; its job events change the workers here."""
        out: list[Command] = []
        for command in commands:
            if isinstance(command, SlotGranted):
                self._workers[command.slot.id] = _Worker(command.slot)
            elif isinstance(command, SlotRevoked):
                continue   # the scheduler dropped the slot; its task is killed or lost, and its update says so
            else:
                out.append(command)
        return out

    def _end(self, job: Job, state: JobState, reason: str, stimulus_id: str) -> list[Command]:
        """The job ends: its worker tasks are no news any more, its slots are
        killed and returned, a failed job's AppMaster is stopped."""
        self._record(job, job.state, state, stimulus_id)
        job.state, job.reason, job.ended = state, reason, self.clock.now()
        log.info("job %s (%s) %s%s", job.id, job.spec.name, state, f": {reason}" if reason else "")
        for slot_id in [s for s, worker in self._workers.items() if worker.slot.job_id == job.id]:
            del self._workers[slot_id]   # their kills' updates are not news
        out = self._absorb(self.scheduler.finish_job(job.id))
        if state is JobState.FAILED:
            out.append(StopAppMaster(job.id))   # an AppMaster that ended its job exits by itself
        out.append(JobFinished(job.id, state, reason))
        ended = [j.id for j in self._jobs.values() if j.state is not JobState.RUNNING]
        for job_id in ended[:max(0, len(ended) - self.keep_ended)]:
            del self._jobs[job_id]
            out.append(ForgetJob(job_id))
        return out

    def _record(self, job: Job, start: JobState | None, finish: JobState, stimulus_id: str) -> None:
        if start is not None and finish not in TRANSITIONS[start]:
            raise FuxiError(f"job {job.id}: no transition from {start} to {finish}")
        self._story.append(Transition(job.id, start, finish, stimulus_id, self.clock.now()))

    # -------------------------------------------------------------- checks
    def _check(self) -> None:
        """Verify the invariants; AssertionError names the first broken one. O(jobs + slots): for tests."""

        def fail(message: str) -> None:
            raise AssertionError(f"JobCore invariant broken: {message}")

        running = {job_id for job_id, job in self._jobs.items() if job.state is JobState.RUNNING}
        if running != set(self.scheduler.jobs):
            fail(f"running jobs {sorted(running)} are not the scheduler's {sorted(self.scheduler.jobs)}")
        for job_id, job in self._jobs.items():
            if job.id != job_id or job.state not in TRANSITIONS:
                fail(f"job {job_id} is kept as {job.id} in state {job.state!r}")
            if (job.ended is None) != (job.state is JobState.RUNNING):
                fail(f"job {job_id} is {job.state} with end time {job.ended}")
            if job.appmaster_restarts > self.max_appmaster_restarts:
                fail(f"job {job_id} restarted its AppMaster {job.appmaster_restarts} times")
            if job.state is JobState.RUNNING and job.worker_failures >= self.max_worker_failures:
                fail(f"job {job_id} runs after {job.worker_failures} failed worker tasks")
        if len(self._jobs) - len(running) > self.keep_ended:
            fail(f"{len(self._jobs) - len(running)} ended jobs kept, at most {self.keep_ended}")
        for slot in self.scheduler.held_slots():
            worker = self._workers.get(slot.id)
            if worker is None or worker.slot != slot:
                fail(f"granted slot {slot.id} has no worker task")
            elif worker.release_deadline is not None:
                fail(f"slot {slot.id} is granted and released")
        for slot_id, worker in self._workers.items():
            if worker.slot.id != slot_id or worker.slot.job_id not in running:
                fail(f"worker task {slot_id} of {worker.slot.job_id}, which does not run")


def _initial_desire(unit: UnitSpec) -> int:
    """A unit's desire until its AppMaster says: its instances (at most its
    slots), none while units it comes after have not finished."""
    return 0 if unit.after else min(unit.slots, unit.instance_count)


def _check_unit(job: Job, unit: str) -> None:
    if all(spec.name != unit for spec in job.spec.units):
        raise FuxiError(f"unknown unit {unit!r} of job {job.id}")


def _check_host(host: str) -> None:
    if not host:
        raise FuxiError("a host must be a non-empty hostname")


def _describe(status: TaskStatus) -> str:
    detail = status.message or status.reason
    return f"{status.state}: {detail}" if detail else status.state

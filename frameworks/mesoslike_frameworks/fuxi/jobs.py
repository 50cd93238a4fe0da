"""The Fuxi service's job core: every job's lifecycle, sans I/O.

:class:`JobCore` decides what ``mesoslike fuxi serve`` does with its jobs.
Scheduling is the :class:`~mesoslike_frameworks.fuxi.core.FuxiCore`'s, held
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
``DriverRegistered``       reconcile the worker tasks (on a re-registration; every
                           task after a recovery) and revive offers if units wait
``DriverDisconnected``     the master is out of reach: ``status`` says so
``JobKillRequested``       a client ends the job: ``killed``
``AppMasterStarted``       where the job's AppMaster runs now (kept in the hard state)
``Recover``                a new leader takes the hard state (below)
``Persisted``              the hard state written: a submission or kill waiting
                           for it is carried out
``PersistFailed``          it was not: a waiting submission or kill is refused,
                           other records are written again at a later tick
``Tick``                   kill the worker tasks that outlived their release; end
                           the adoption window; write records again
=========================  ==========================================================

Commands out (:data:`Command`): the scheduler's :class:`LaunchSlots`,
:class:`DeclineOffers`, :class:`KillSlot`, :class:`SuppressOffers`,
:class:`ReviveOffers`, its grants and revocations for the job's AppMaster
(:class:`TellAppMaster`: SLOT_GRANTED, SLOT_REVOKED of :mod:`.protocol`),
and :class:`ReconcileTasks`, :class:`JobAccepted`,
:class:`Refused`, :class:`StartAppMaster`, :class:`RestartAppMaster`,
:class:`AdoptAppMaster`, :class:`StopAppMaster`, :class:`JobFinished`,
:class:`ForgetJob`, :class:`Persist`.

A job's state is a small machine (:data:`TRANSITIONS`): ``running`` until it
``succeeded``, ``failed`` or was ``killed``, once; every transition is
recorded with the stimulus that caused it (:meth:`JobCore.story`). A job
fails when its AppMaster says so, when ``max_worker_failures`` of its worker
tasks failed, when its AppMaster exited more than ``max_appmaster_restarts``
times, or when its AppMaster cannot be started. An ended job's slots are
killed and returned — but a succeeded job's workers, which its AppMaster
released as it ended the job, are given ``release_grace`` seconds to exit
by themselves (TASK_FINISHED, as they really ended) before they are killed;
its record stays for ``status`` until ``keep_ended``
newer ended jobs push it out (:class:`ForgetJob`).

**Hard state** (``persist=True``; :mod:`.hard_state`). A submission is
written (:class:`Persist`) before it is accepted, and so is a kill before
it is carried out; a job's end, its AppMaster's whereabouts, the framework
id and the global blacklist are written as they change, again at the next
tick if a write failed. **Failover**: a new leader gives the core what the
store holds (:class:`Recover`): every job, running ones back in the
scheduler with no desire, and :class:`AdoptAppMaster` for their AppMasters.
Once the driver registered (with the same framework id) the core asks the
master for every task (:class:`ReconcileTasks` of none) and opens an
*adoption window* of ``adopt_window`` seconds. A recovered job's AppMaster
reports its workers' slots with its progress: each is adopted
(:meth:`FuxiCore.adopt`) and the unit's desire set from the report. When
the window closes, a task the master reported running that no AppMaster
claimed is killed, and an adopted slot the master did not report running
is lost.

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
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

import attrs

from mesoslike import Offer, TaskState, TaskStatus
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.hard_state import (
    SERVICE_KEY,
    AppMasterRecord,
    JobRecord,
    ServiceRecord,
    job_key,
)
from mesoslike_frameworks.fuxi.core import (
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
from mesoslike_frameworks.fuxi.core import Command as SchedulerCommand
from mesoslike_frameworks.fuxi.model import JobSpec, JobSpecError, UnitSpec, parse_job

__all__ = ["JobCore", "Job", "JobState", "TRANSITIONS", "Transition", "Event", "JobSubmitted", "OffersReceived",
           "OfferRescinded", "AgentLost", "WorkerUpdate", "AppMasterRequest", "AppMasterExited",
           "AppMasterStartFailed", "DriverRegistered", "DriverDisconnected", "JobKillRequested", "AppMasterStarted",
           "Recover", "Persisted", "PersistFailed", "Tick", "Command", "ReconcileTasks", "JobAccepted", "Refused",
           "StartAppMaster", "RestartAppMaster", "AdoptAppMaster", "StopAppMaster", "JobFinished", "ForgetJob",
           "Persist", "TellAppMaster", "KEEP_ENDED_JOBS", "MAX_APPMASTER_RESTARTS", "MAX_WORKER_FAILURES", "RELEASE_GRACE",
           "ADOPT_WINDOW", "RETRY_PERSIST", "parse_slot_id"]

log = logging.getLogger("mesoslike_frameworks.fuxi.service")

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
#: seconds after a recovered scheduler registered during which AppMasters' slots are adopted
ADOPT_WINDOW = 10.0
#: seconds between attempts to write records whose write failed
RETRY_PERSIST = 1.0

#: task states of a worker that ended by itself (any other terminal state: the slot was lost)
_ENDED_BY_ITSELF = (TaskState.FINISHED, TaskState.FAILED, TaskState.ERROR)
_FAILED = (TaskState.FAILED, TaskState.ERROR)


class JobState(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"


#: the states a job may go to from each state: a job ends once, and stays ended
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.KILLED: frozenset(),
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
    """A checked job; ``document`` is what its AppMaster reads, ``token`` its secret for the AppMaster's
    requests; ``principal``: who submitted it (an authenticated service's client; "" anonymous), its owner."""
    spec: JobSpec
    document: Mapping[str, Any]
    token: str
    principal: str = ""


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
    """The framework (re-)registered with a master, as ``framework_id``."""
    reregistered: bool = False
    framework_id: str = ""


@attrs.frozen
class DriverDisconnected(_Stimulus):
    """The framework lost its master (or has not reached one): ``reason``, for ``status``."""
    reason: str


@attrs.frozen
class JobKillRequested(_Stimulus):
    """A client asks to end the job. :meth:`JobCore.handle` raises
    :class:`FuxiError` for an unknown or ended job."""
    job_id: str


@attrs.frozen
class AppMasterStarted(_Stimulus):
    """The job's AppMaster runs (started, restarted or adopted) as ``appmaster``."""
    job_id: str
    appmaster: AppMasterRecord


@attrs.frozen
class Recover(_Stimulus):
    """A new leader's hard state: the service record (None: nothing stored
    yet, a first start) and every job stored."""
    service: ServiceRecord | None
    jobs: Sequence[JobRecord] = ()


@attrs.frozen
class Persisted(_Stimulus):
    """A :class:`Persist` was written; ``waiting`` is its ``waiting``."""
    waiting: str = ""


@attrs.frozen
class PersistFailed(_Stimulus):
    """A :class:`Persist` was not written (or may not have been): ``error``."""
    keys: tuple[str, ...]
    error: str
    waiting: str = ""


@attrs.frozen
class Tick(_Stimulus):
    """Time passed: deadlines are due."""


Event = (JobSubmitted | OffersReceived | OfferRescinded | AgentLost | WorkerUpdate | AppMasterRequest
         | AppMasterExited | AppMasterStartFailed | DriverRegistered | DriverDisconnected | JobKillRequested
         | AppMasterStarted | Recover | Persisted | PersistFailed | Tick)


# ---------------------------------------------------------------- commands
@attrs.frozen
class ReconcileTasks:
    """Ask the master about these tasks (unknown ones come back as TASK_LOST);
    none: about every task it knows of the framework."""
    task_ids: tuple[str, ...]


@attrs.frozen
class JobAccepted:
    """The reply to the submission: the job is in, as ``job_id``."""
    job_id: str


@attrs.frozen
class Refused:
    """The reply to a submission or kill that could not be carried out: ``reason``."""
    job_id: str
    reason: str


@attrs.frozen
class Persist:
    """Write ``records`` (name -> record) and delete ``deleted`` from the
    hard state, then give the core :class:`Persisted` (or
    :class:`PersistFailed`) with ``waiting``: the submission or kill that
    waits for it ("" none)."""
    records: Mapping[str, ServiceRecord | JobRecord]
    deleted: tuple[str, ...] = ()
    waiting: str = ""


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
class AdoptAppMaster:
    """After a failover: the job's AppMaster may still run as ``appmaster``
    (None: it never started). Adopt it if it does (same job, alive);
    otherwise give the core :class:`AppMasterExited`, which restarts it."""
    job_id: str
    document: Mapping[str, Any]
    token: str
    appmaster: AppMasterRecord | None


@attrs.frozen
class StopAppMaster:
    """Stop the job's AppMaster (its job failed or was killed; one whose job succeeded exits by itself)."""
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


@attrs.frozen
class TellAppMaster:
    """Tell the job's AppMaster, unasked, of a grant or a revocation (no answer)."""
    job_id: str
    news: protocol.SlotGranted | protocol.SlotRevoked


Command = (LaunchSlots | DeclineOffers | KillSlot | SuppressOffers | ReviveOffers | ReconcileTasks | JobAccepted
           | Refused | StartAppMaster | RestartAppMaster | AdoptAppMaster | StopAppMaster | JobFinished | ForgetJob
           | Persist | TellAppMaster)


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
    #: the job file as submitted (what its AppMaster reads, and the hard state keeps)
    document: Mapping[str, Any] = attrs.field(factory=dict)
    appmaster: AppMasterRecord | None = None
    #: recovered after a failover: its AppMaster's reports name the slots to adopt
    recovered: bool = False
    #: who submitted it ("" anonymous): only it, or a principal the ``kill_jobs`` ACL allows, may kill it
    principal: str = ""


@attrs.define(eq=False)
class _Worker:
    """The worker task in a granted slot."""
    slot: Slot
    #: the slot was released: the task is killed if it still runs then
    release_deadline: float | None = None


class JobCore:
    """The lifecycle of the jobs of one Fuxi service around ``scheduler``
    (module docstring). Not thread-safe: one caller at a time.

    ``persist``: write the hard state (:class:`Persist`) — a submission is
    accepted, a kill carried out, only once written. ``adopt_window``:
    seconds after a recovered scheduler registered during which AppMasters'
    slots are adopted.

    Costs: an event costs what the scheduler does with it, plus O(1) per
    command; ending a job is O(worker tasks) and O(jobs) to drop the oldest
    ended one; :class:`Tick` is O(worker tasks); :meth:`status` O(jobs x units);
    :class:`Recover` O(jobs); a recovered job's report O(its slots).
    """

    def __init__(self, scheduler: FuxiCore, *, max_appmaster_restarts: int = MAX_APPMASTER_RESTARTS,
                 max_worker_failures: int = MAX_WORKER_FAILURES, release_grace: float = RELEASE_GRACE,
                 keep_ended: int = KEEP_ENDED_JOBS, persist: bool = False, adopt_window: float = ADOPT_WINDOW) -> None:
        self.scheduler = scheduler
        self.clock = scheduler.clock
        self.max_appmaster_restarts = max_appmaster_restarts
        self.max_worker_failures = max_worker_failures
        self.release_grace = release_grace
        self.keep_ended = keep_ended
        self.persist = persist
        self.adopt_window = adopt_window
        self.framework_id = ""
        #: leaders that recovered this hard state, this one included (0: it was never stored)
        self.generation = 0
        self._next_job = 1
        self._jobs: dict[str, Job] = {}
        self._workers: dict[str, _Worker] = {}     # slot (= task) id -> its worker task
        #: workers of succeeded jobs, exiting by themselves (their AppMaster released them): task id ->
        #: when they are killed if they still run. Their slots are back with the scheduler already.
        self._exiting: dict[str, float] = {}
        self._story: collections.deque[Transition] = collections.deque(maxlen=STORY_LENGTH)
        #: what waits for a Persist: its ``waiting`` -> (carry it out, refuse it because of the error)
        self._waiting: dict[str, tuple[Callable[[str], list[Command]], Callable[[str], list[Command]]]] = {}
        self._dirty: set[str] = set()              # records whose write failed: written again at a tick
        self._retry_at = 0.0
        #: the master: None while registered, else why not and since when
        self._unregistered: tuple[str, float] | None = ("not registered with a master yet", self.clock.now())
        # after a Recover: the adoption window (its end once registered) and what it learned
        self._recovering = False
        self._adopt_until: float | None = None
        self._confirmed: set[str] = set()          # tasks the master reported not terminal
        self._gone: set[str] = set()               # tasks the master reported terminal
        self._adopted: set[str] = set()
        self._events: dict[type, Callable[[Any], list[Command]]] = {
            JobSubmitted: self._submitted, OffersReceived: self._offers, OfferRescinded: self._rescinded,
            AgentLost: self._agent_lost, WorkerUpdate: self._worker_update, AppMasterRequest: self._appmaster,
            AppMasterExited: self._appmaster_exited, AppMasterStartFailed: self._appmaster_start_failed,
            DriverRegistered: self._registered, DriverDisconnected: self._disconnected,
            JobKillRequested: self._kill_requested, AppMasterStarted: self._appmaster_started,
            Recover: self._recover, Persisted: self._persisted, PersistFailed: self._persist_failed,
            Tick: self._tick,
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
        if event.spec.quota_group not in self.scheduler.groups:
            raise FuxiError(f"unknown quota group {event.spec.quota_group!r}; known: "
                            f"{', '.join(sorted(self.scheduler.groups))}")
        job_id = f"job-{self._next_job:04d}"
        self._next_job += 1
        if not self.persist:
            return self._accept(job_id, event)
        record = JobRecord(job_id, dict(event.document), event.token, str(JobState.RUNNING),
                           submitted=self.clock.now(), principal=event.principal)
        return self._wait_for([Persist({job_key(job_id): record, SERVICE_KEY: self._service_record()},
                                       waiting=f"submit {job_id}")],
                              lambda error: self._accept(job_id, event),
                              lambda error: self._refuse_submission(job_id, error))

    def _accept(self, job_id: str, event: JobSubmitted) -> list[Command]:
        job_id, commands = self.scheduler.submit(event.spec, job_id)
        job = self._jobs[job_id] = Job(job_id, event.spec, event.token, self.clock.now(),
                                       document=dict(event.document), principal=event.principal)
        self._record(job, None, JobState.RUNNING, event.stimulus_id)
        for unit in event.spec.units:
            desire = _initial_desire(unit)
            if desire != unit.slots:
                commands += self.scheduler.update_desire(job_id, unit.name, desire)
        return [JobAccepted(job_id), *self._absorb(commands), StartAppMaster(job_id, event.document, event.token)]

    def _refuse_submission(self, job_id: str, error: str) -> list[Command]:
        # the record may have been written nonetheless: it must not come back as a job at the next failover
        self._dirty.add(job_key(job_id))
        return [Refused(job_id, f"the job could not be stored, so it was not accepted: {error}")]

    def _offers(self, event: OffersReceived) -> list[Command]:
        return self._absorb(self.scheduler.on_offers(list(event.offers)))

    def _rescinded(self, event: OfferRescinded) -> list[Command]:
        self.scheduler.on_offer_rescinded(event.offer_id)
        return []

    def _agent_lost(self, event: AgentLost) -> list[Command]:
        return self._absorb(self.scheduler.on_agent_lost(event.agent_id))

    def _worker_update(self, event: WorkerUpdate) -> list[Command]:
        status = event.status
        # what the master says of the predecessors' tasks (this leader knows its own)
        predecessors = self._recovering and not self._own_task(status.task_id)
        if predecessors:
            if status.terminal:
                self._gone.add(status.task_id)
                self._confirmed.discard(status.task_id)
            elif status.task_id not in self._gone:
                self._confirmed.add(status.task_id)
        if status.task_id in self._exiting:
            if status.terminal:
                del self._exiting[status.task_id]
            return []
        worker = self._workers.get(status.task_id)
        if worker is None and predecessors and not status.terminal:
            return self._unknown_task(status)
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
        self._unregistered = None
        if event.framework_id and event.framework_id != self.framework_id:
            self.framework_id = event.framework_id
            out += self._persist_records([SERVICE_KEY])
        if self._recovering and self._adopt_until is None:
            # what runs: every task the master knows; what the AppMasters claim comes with their reports
            self._adopt_until = self.clock.now() + self.adopt_window
            out.append(ReconcileTasks(()))
        elif event.reregistered and self._workers:
            out.append(ReconcileTasks(tuple(sorted(self._workers))))
        if self.scheduler.needs_offers():
            out.append(ReviveOffers())   # a revive made before the subscription was dropped
        return out

    def _disconnected(self, event: DriverDisconnected) -> list[Command]:
        if self._unregistered is None:
            self._unregistered = (event.reason, self.clock.now())
        return []

    def _tick(self, event: Tick) -> list[Command]:
        now = self.clock.now()
        out: list[Command] = []
        for slot_id, worker in self._workers.items():
            if worker.release_deadline is not None and now >= worker.release_deadline:
                worker.release_deadline = None
                out.append(KillSlot(slot_id, f"its worker did not exit within {self.release_grace:g}s of its "
                                             "release"))
        for slot_id in [slot_id for slot_id, deadline in self._exiting.items() if now >= deadline]:
            del self._exiting[slot_id]
            out.append(KillSlot(slot_id, f"its worker did not exit within {self.release_grace:g}s of its job's "
                                         "success"))
        if self._adopt_until is not None and now >= self._adopt_until:
            out += self._end_adoption()
        if self._dirty and now >= self._retry_at:
            out += self._persist_records(sorted(self._dirty))
        return out

    # ============================================================ recovery
    def _recover(self, event: Recover) -> list[Command]:
        if self._jobs or self._recovering:
            raise FuxiError("a job core recovers once, before it has jobs")
        service = event.service or ServiceRecord()
        self.framework_id = service.framework_id
        self.generation = service.generation + 1
        # slot ids of this leader's own: its predecessors' slots come back by adoption
        self.scheduler.slot_prefix = f"{self.generation}-" if self.generation > 1 else ""
        numbers = [_job_number(record.id) for record in event.jobs]
        self._next_job = max([service.next_job, *(n + 1 for n in numbers if n is not None)])
        for host in service.global_blacklist:
            self.scheduler.add_to_global_blacklist(host)
        out: list[Command] = []
        for record in sorted(event.jobs, key=lambda r: (r.submitted, _job_number(r.id) or 0, r.id)):
            out += self._recover_job(record, event.stimulus_id)
        # a failover (something was kept): what runs is asked of the master, and sorted out in the window
        self._recovering = event.service is not None or bool(self._jobs)
        log.info("recovered %d job(s) (%d running) as generation %d of framework %s", len(self._jobs),
                 sum(job.state is JobState.RUNNING for job in self._jobs.values()), self.generation,
                 self.framework_id or "(none yet)")
        return [*self._persist_records([SERVICE_KEY]), *out]

    def _recover_job(self, record: JobRecord, stimulus_id: str) -> list[Command]:
        try:
            spec = parse_job(record.document)
        except JobSpecError as exc:
            log.error("job %s cannot be read back (%s): forgotten", record.id, exc)
            return self._persist_records([job_key(record.id)])   # deletes it
        now = self.clock.now()
        job = Job(record.id, spec, record.token, min(record.submitted, now), JobState(record.state), record.reason,
                  None if record.ended is None else min(record.ended, now), worker_failures=record.worker_failures,
                  appmaster_restarts=record.appmaster_restarts, document=dict(record.document),
                  appmaster=record.appmaster, principal=record.principal)
        self._jobs[job.id] = job
        self._record(job, None, job.state, stimulus_id)
        if job.state is not JobState.RUNNING:
            return []
        try:
            _, commands = self.scheduler.submit(spec, job.id)
        except FuxiError as exc:   # its quota group is gone from the quota file, say
            return self._end(job, JobState.FAILED, f"cannot run after the failover: {exc}", stimulus_id)
        for unit in spec.units:   # no desire until its AppMaster says (or reports)
            commands += self.scheduler.update_desire(job.id, unit.name, 0)
        job.recovered = True
        return [*self._absorb(commands), AdoptAppMaster(job.id, job.document, job.token, job.appmaster)]

    def _own_task(self, task_id: str) -> bool:
        """Was the task launched by this leader? Its slots are numbered apart
        from its predecessors' (:attr:`FuxiCore.slot_prefix`)."""
        prefix = self.scheduler.slot_prefix
        return bool(prefix) and task_id.rpartition(".")[2].startswith(prefix)

    def _unknown_task(self, status: TaskStatus) -> list[Command]:
        """A running task the core has no worker for, while recovering: a
        slot of a job that ended meanwhile is killed; others wait for their
        AppMaster's claim until the adoption window closes."""
        job_id, _ = parse_slot_id(status.task_id)
        job = self._jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING:
            self._confirmed.discard(status.task_id)
            return [KillSlot(status.task_id, "a worker of a job that is not running")]
        return []

    def _adopt_reported(self, job: Job, report: Mapping[str, Any]) -> list[Command]:
        """A recovered job's report: adopt the slots it names, then take its
        desires and blacklist (O(slots named + units))."""
        out: list[Command] = []
        slots = report.get("slots")
        adopted = []
        for slot_id, claim in (slots.items() if isinstance(slots, Mapping) else ()):
            slot = self._claimed_slot(job, slot_id, claim)
            if slot is not None:
                out += self._absorb(self.scheduler.adopt(slot))
                self._workers[slot.id] = _Worker(slot)
                self._adopted.add(slot.id)
                adopted.append(slot.id)
        if adopted:
            log.info("job %s: adopted %d slot(s) its AppMaster reported: %s", job.id, len(adopted),
                     ", ".join(adopted))
        units = report.get("units")
        for spec in job.spec.units:
            counts = units.get(spec.name) if isinstance(units, Mapping) else None
            desired = counts.get("desired") if isinstance(counts, Mapping) else None
            if isinstance(desired, int) and not isinstance(desired, bool) and 0 <= desired <= spec.slots:
                out += self._absorb(self.scheduler.update_desire(job.id, spec.name, desired))
        for host in report.get("blacklisted", ()) if isinstance(report.get("blacklisted"), list) else ():
            if isinstance(host, str) and host:
                for spec in job.spec.units:
                    self.scheduler.blacklist(job.id, spec.name, host)
        return out

    def _claimed_slot(self, job: Job, slot_id: object, claim: object) -> Slot | None:
        """The slot an AppMaster claims — ``[unit, hostname, room, agent id]`` —
        if it is the job's, not held and not known to have ended."""
        if not (isinstance(slot_id, str) and isinstance(claim, list) and len(claim) == 4
                and all(isinstance(part, str) for part in claim)):
            return None
        unit, hostname, room, agent_id = claim
        owner, unit_of_id = parse_slot_id(slot_id)
        if owner != job.id or unit_of_id != unit or slot_id in self._workers or slot_id in self._gone \
                or not hostname or not agent_id or all(spec.name != unit for spec in job.spec.units):
            return None
        spec = job.spec.unit(unit)
        return Slot(slot_id, job.id, unit, agent_id, hostname, spec.slot, job.spec.priority_of(spec),
                    job.spec.quota_group, self.clock.now(), room)

    def _end_adoption(self) -> list[Command]:
        """The window closes: running tasks no AppMaster claimed are killed,
        adopted slots the master did not report running are lost."""
        out: list[Command] = []
        # (a claimed slot whose job ended since was killed with its job)
        unclaimed = sorted(self._confirmed - set(self._workers) - self._adopted)
        for task_id in unclaimed:
            out.append(KillSlot(task_id, "no AppMaster claimed this worker after the failover"))
        for slot_id in sorted(self._adopted - self._confirmed):
            worker = self._workers.pop(slot_id, None)
            if worker is not None and self.scheduler.holds(slot_id):
                out += self._absorb(self.scheduler.on_slot_lost(slot_id, "not running after the failover"))
        log.info("adoption window closed: %d slot(s) adopted, %d worker(s) nobody claimed killed",
                 len(self._adopted), len(unclaimed))
        self._recovering, self._adopt_until = False, None
        self._confirmed, self._gone, self._adopted = set(), set(), set()
        for job in self._jobs.values():
            job.recovered = False
        return out

    # ========================================================= hard state
    def _wait_for(self, commands: list[Command], carry_out: Callable[[str], list[Command]],
                  refuse: Callable[[str], list[Command]]) -> list[Command]:
        (persist,) = [command for command in commands if isinstance(command, Persist)]
        self._waiting[persist.waiting] = (carry_out, refuse)
        return commands

    def _persisted(self, event: Persisted) -> list[Command]:
        waiting = self._waiting.pop(event.waiting, None) if event.waiting else None
        return waiting[0]("") if waiting is not None else []

    def _persist_failed(self, event: PersistFailed) -> list[Command]:
        log.error("the scheduler's state could not be written (%s): %s", ", ".join(event.keys), event.error)
        self._retry_at = self.clock.now() + RETRY_PERSIST
        waiting = self._waiting.pop(event.waiting, None) if event.waiting else None
        if waiting is not None:
            return waiting[1](event.error)
        self._dirty.update(event.keys)
        return []

    def _persist_records(self, keys: Iterable[str]) -> list[Command]:
        """A :class:`Persist` of these records as they are now (a forgotten job's is deleted)."""
        if not self.persist:
            return []
        records: dict[str, ServiceRecord | JobRecord] = {}
        deleted = []
        for key in keys:
            self._dirty.discard(key)
            if key == SERVICE_KEY:
                records[key] = self._service_record()
                continue
            job = self._jobs.get(key[len(job_key("")):])
            if job is None:
                deleted.append(key)
            else:
                records[key] = self._job_record(job)
        return [Persist(records, tuple(deleted))] if records or deleted else []

    def _service_record(self) -> ServiceRecord:
        return ServiceRecord(self.framework_id, self.generation, self._next_job,
                             {name: None if group.maximum is None else str(group.maximum)
                              for name, group in sorted(self.scheduler.groups.items())},
                             tuple(sorted(self.scheduler.global_blacklist)), self.scheduler.preemption,
                             {name: group.policy for name, group in sorted(self.scheduler.groups.items())},
                             *self.scheduler.blacklist_reporting)

    def _job_record(self, job: Job, state: JobState | None = None) -> JobRecord:
        state = state or job.state
        return JobRecord(job.id, job.document, job.token, str(state), job.reason, job.submitted, job.ended,
                         job.appmaster, job.appmaster_restarts, job.worker_failures, job.principal)

    def _appmaster_started(self, event: AppMasterStarted) -> list[Command]:
        job = self._jobs.get(event.job_id)
        if job is None or job.appmaster == event.appmaster:
            return []
        job.appmaster = event.appmaster
        return self._persist_records([job_key(job.id)])

    # ============================================================= clients
    def _kill_requested(self, event: JobKillRequested) -> list[Command]:
        job = self.job(event.job_id)
        if job.state is not JobState.RUNNING:
            raise FuxiError(f"job {job.id} has ended already ({job.state})")
        reason = "killed by a client (mesoslike fuxi kill)"
        if not self.persist:
            return self._end(job, JobState.KILLED, reason, event.stimulus_id)
        waiting = f"kill {job.id}"
        if waiting in self._waiting:
            raise FuxiError(f"job {job.id} is being killed already")
        record = attrs.evolve(self._job_record(job, JobState.KILLED), reason=reason, ended=self.clock.now())

        def carry_out(error: str) -> list[Command]:
            if job.state is not JobState.RUNNING:
                return []
            return self._end(job, JobState.KILLED, reason, event.stimulus_id)

        def refuse(error: str) -> list[Command]:
            self._dirty.add(job_key(job.id))   # the record may say killed: write what is true again
            return [Refused(job.id, f"the kill could not be stored, so the job goes on: {error}")]
        return self._wait_for([Persist({job_key(job.id): record}, waiting=waiting)], carry_out, refuse)

    # ========================================================== AppMasters
    def _appmaster(self, event: AppMasterRequest) -> list[Command]:
        request = event.request
        handler = self._requests.get(type(request))
        if handler is None:
            raise FuxiError(f"{getattr(request, 'TYPE', type(request).__name__)} is not an AppMaster request")
        job = self._jobs.get(request.job_id)
        if job is None:
            raise FuxiError(f"unknown job {_cut(repr(request.job_id))}")
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
            raise FuxiError(f"slot {_cut(repr(request.slot))} is not a slot of job {job.id}")
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
        listed = request.host in self.scheduler.global_blacklist
        log.warning("job %s reports %s for the global blacklist", job.id, _cut(request.host))
        # the host joins once enough jobs reported it (the core's GlobalBlacklist): then it is written
        self.scheduler.report_host(job.id, request.host)
        if listed or request.host not in self.scheduler.global_blacklist:
            return []
        return self._persist_records([SERVICE_KEY])

    def _progress(self, job: Job, request: protocol.Progress, stimulus_id: str) -> list[Command]:
        try:
            json.dumps(request.report)
        except (TypeError, ValueError) as exc:
            raise FuxiError(f"a progress report must be JSON-able: {_cut(str(exc))}") from None
        job.report = request.report
        if job.recovered and self._recovering:
            return self._adopt_reported(job, request.report)
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
            raise FuxiError(f"unknown job {_cut(repr(job_id))}")
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
        no_master = ""
        if self._unregistered is not None:
            reason, since = self._unregistered
            no_master = f"no master: {reason} (for {self.clock.now() - since:.0f}s)"
        document = {"jobs": [self._job_status(job, scheduled.get(job.id, {}), no_master) for job in jobs],
                    "quota_groups": live["quota_groups"],
                    "global_blacklist": sorted(self.scheduler.global_blacklist),
                    "framework": {"id": self.framework_id, "registered": self._unregistered is None,
                                  "why_not": no_master, "generation": self.generation,
                                  "recovering": self._recovering}}
        return document

    def _job_status(self, job: Job, scheduled: Mapping[str, dict], no_master: str = "") -> dict[str, Any]:
        report = job.report if isinstance(job.report, Mapping) else {}
        reported = report.get("units")
        reported_units: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
        units = []
        # the AppMaster's last report said what ran then; once the job ended nothing runs or waits to
        ended = {"running": 0, "pending": 0, "workers": 0} if job.state is not JobState.RUNNING else {}
        for spec in job.spec.units:
            core_unit = scheduled.get(spec.name, {})
            reported_unit = reported_units.get(spec.name)
            counts: Mapping[str, Any] = {**(reported_unit if isinstance(reported_unit, Mapping) else {}), **ended}
            units.append({
                "name": spec.name, "slot": str(spec.slot), "command": spec.command,
                "desired": core_unit.get("desired", 0), "granted": core_unit.get("granted", 0),
                "waiting": core_unit.get("waiting", 0), "hosts": core_unit.get("hosts", {}),
                # a scheduler without a master waits for that first, whatever else it waits for
                "why_waiting": no_master if no_master and core_unit.get("waiting", 0) else
                core_unit.get("why_waiting", ""),
                "instances": {"total": counts.get("total", spec.instance_count), "done": counts.get("done", 0),
                              "running": counts.get("running", 0), "pending": counts.get("pending", 0),
                              "failed": counts.get("failed_attempts", 0), "backups": counts.get("backups", 0),
                              "workers": counts.get("workers", 0)}})
        totals = {key: sum(u["instances"][key] for u in units)
                  for key in ("total", "done", "running", "pending", "failed", "backups")}
        end = job.ended if job.ended is not None else self.clock.now()
        return {"id": job.id, "name": job.spec.name, "principal": job.principal, "state": str(job.state),
                "reason": job.reason,
                # FIFO or FAIR is the quota group's (seed 000); a job file rarely names it
                "quota_group": job.spec.quota_group, "priority": job.spec.priority, "policy": self._policy(job),
                "elapsed": round(end - job.submitted, 3), "instances": totals,
                "blacklisted": list(report.get("blacklisted", [])), "units": units}

    def _policy(self, job: Job) -> str:
        group = self.scheduler.groups.get(job.spec.quota_group)
        return group.policy if group is not None else job.spec.policy or "FIFO"

    # =========================================================== internals
    def _absorb(self, commands: Iterable[SchedulerCommand]) -> list[Command]:
        """The scheduler's commands for the service; its job events change the
        workers here and go to the job's AppMaster (the slot's task is
        launched, or killed or lost and its update says so, all the same)."""
        out: list[Command] = []
        for command in commands:
            if isinstance(command, SlotGranted):
                slot = command.slot
                self._workers[slot.id] = _Worker(slot)
                out.append(TellAppMaster(slot.job_id, protocol.SlotGranted(slot.job_id, slot.id, slot.unit,
                                                                           slot.hostname, slot.room)))
            elif isinstance(command, SlotRevoked):
                job = self._jobs.get(command.job_id)
                if job is not None and job.state is JobState.RUNNING:
                    out.append(TellAppMaster(command.job_id, protocol.SlotRevoked(command.job_id, command.slot_id,
                                                                                  command.reason)))
            else:
                out.append(command)
        return out

    def _end(self, job: Job, state: JobState, reason: str, stimulus_id: str) -> list[Command]:
        """The job ends: its worker tasks are no news any more, its slots are
        killed and returned, a failed job's AppMaster is stopped."""
        self._record(job, job.state, state, stimulus_id)
        job.state, job.reason, job.ended = state, reason, self.clock.now()
        job.recovered = False   # nothing of it is adopted any more
        log.info("job %s (%s) %s%s", job.id, job.spec.name, state, f": {reason}" if reason else "")
        out: list[Command] = []
        exiting: set[str] = set()
        for slot_id in [s for s, worker in self._workers.items() if worker.slot.job_id == job.id]:
            if state is JobState.SUCCEEDED:
                # its AppMaster released every worker as it ended the job: they exit by themselves and end
                # TASK_FINISHED, as they really did; killed only if they outlive the release grace
                # (YARN's containers of a finished application are cleaned up after it the same way)
                exiting.add(slot_id)
                self._exiting[slot_id] = self.clock.now() + self.release_grace
            elif self._workers[slot_id].release_deadline is not None:
                # released, its grace period running: the scheduler no longer holds it, so
                # finish_job would not kill it, and its AppMaster, which could tell it to exit, is gone
                # (one whose grace period ran out was killed then: no deadline any more)
                out.append(KillSlot(slot_id, "its job ended"))
            del self._workers[slot_id]   # their kills' updates are not news
        # (a job recovered into a scheduler that cannot take it back was never in it)
        if job.id in self.scheduler.jobs:
            out += [command for command in self._absorb(self.scheduler.finish_job(job.id))
                    if not (isinstance(command, KillSlot) and command.slot_id in exiting)]
        if state is not JobState.SUCCEEDED:
            out.append(StopAppMaster(job.id))   # an AppMaster that ended its job exits by itself
        out.append(JobFinished(job.id, state, reason))
        ended = [j.id for j in self._jobs.values() if j.state is not JobState.RUNNING]
        forgotten = ended[:max(0, len(ended) - self.keep_ended)]
        for job_id in forgotten:
            del self._jobs[job_id]
            out.append(ForgetJob(job_id))
        return out + self._persist_records([job_key(job.id), *map(job_key, forgotten)])

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
        if not self._recovering and (self._adopt_until is not None or self._confirmed or self._gone or self._adopted
                                     or any(job.recovered for job in self._jobs.values())):
            fail("adoption state kept outside a recovery")
        if any(job.recovered and job.state is not JobState.RUNNING for job in self._jobs.values()):
            fail("an ended job waits for adoption")
        if not self.persist and (self._waiting or self._dirty):
            fail("writes wait in a core that does not persist")
        for waiting in self._waiting:
            kind, _, job_id = waiting.partition(" ")
            if kind == "submit" and job_id in self._jobs:
                fail(f"job {job_id} is in before its submission was written")
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
        for slot_id in self._exiting:
            if slot_id in self._workers or self.scheduler.holds(slot_id):
                fail(f"exiting worker task {slot_id} still has its slot")


def parse_slot_id(slot_id: str) -> tuple[str, str]:
    """(job id, unit) of a slot (= worker task) id ``<job>.<unit>.<number>``; ("", "") if it is not one."""
    job_id, dot, rest = slot_id.partition(".")
    unit, dot2, _ = rest.rpartition(".")
    return (job_id, unit) if dot and dot2 and unit else ("", "")


def _job_number(job_id: str) -> int | None:
    prefix, _, number = job_id.partition("-")
    return int(number) if prefix == "job" and number.isdigit() else None


def _cut(text: str, limit: int = 200) -> str:
    """``text``, cut short: what a peer sent is never echoed whole."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _initial_desire(unit: UnitSpec) -> int:
    """A unit's desire until its AppMaster says: its instances (at most its
    slots), none while units it comes after have not finished."""
    return 0 if unit.after else min(unit.slots, unit.instance_count)


def _check_unit(job: Job, unit: str) -> None:
    if all(spec.name != unit for spec in job.spec.units):
        raise FuxiError(f"unknown unit {_cut(repr(unit))} of job {job.id}")


def _check_host(host: str) -> None:
    if not host:
        raise FuxiError("a host must be a non-empty hostname")


def _describe(status: TaskStatus) -> str:
    detail = status.message or status.reason
    return f"{status.state}: {detail}" if detail else status.state

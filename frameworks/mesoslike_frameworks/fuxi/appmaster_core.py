"""The Fuxi AppMaster's core: one job's task scheduling, sans I/O (seed 002).

A job's AppMaster holds *workers* — one per slot the Fuxi scheduler granted
its units (``worker_id`` is the slot id) — and hands them the units'
*instances* (data shards). Pure and deterministic: calls go in
(:meth:`AppMasterCore.worker_joined`, :meth:`~AppMasterCore.worker_left`,
:meth:`~AppMasterCore.progress`, :meth:`~AppMasterCore.instance_done`,
:meth:`~AppMasterCore.tick`), actions come out as lists, to be carried out
in order; time comes from an injected clock. No threads, sockets or files.

The actions are the protocol messages themselves, addressed: :class:`ToWorker`
carries an ASSIGN or KILL of :mod:`.am_protocol` for one worker,
:class:`ToService` a request of :mod:`.protocol` for the Fuxi service
(SET_DESIRE, AVOID_HOSTS, RELEASE_SLOT, BLACKLIST_HOST, REPORT_HOST,
JOB_ENDED); :class:`SnapshotChanged` asks for a checkpoint. There is no
second set of classes to copy them from.

What it does (docs/fuxi-jobs.rst "AppMaster semantics"):

- **Dispatch with data locality**: an idle worker gets the pending instance
  of its unit whose data is "most" on the worker's machine (its hostname
  earliest in the instance's data list), else one with data in the worker's
  engine room, else any; lowest instance number first within a class. Each
  unit keeps its pending instances indexed by data host (sorted by
  ``(position in the data list, instance)``), by room and in one ordered
  fallback set, so a dispatch costs O(log n), not a scan of the instances.
- **Retries**: a failed run goes back to pending until ``unit.max_attempts``
  failed runs; then the job fails and every running copy is killed.
- **Blacklisting**: ``job.blacklist_after`` failed runs on a host stop the job
  using it (BLACKLIST_HOST) for ``job.blacklist_seconds`` (seed 000: "for a
  while"; the scheduler forgets the entry after as long); then the host's
  failure count starts again. ``global_report_after`` failures there report
  it for the scheduler's global blacklist (REPORT_HOST), which lists a host
  once several jobs reported it.
- **Backup instances** for stragglers, once ``backup.min_finished_fraction``
  of the unit finished: an instance running longer than ``slower_factor``
  times the average finished one (1 by default: seed 002's "longer than the
  average"), or progressing ``slower_factor`` times slower than the average
  running copy, gets one more copy on another host; the first copy to
  finish wins, the other is killed.
- **Snapshots and a journal**: :meth:`AppMasterCore.snapshot` (JSON-able)
  keeps finished instances, attempt and failure counts, blacklists;
  :meth:`AppMasterCore.journal` returns what changed since its last call as
  records, O(changes), so a runtime appends those after each change and
  writes a whole snapshot only now and then (:mod:`.checkpoint`). A
  restarted AppMaster replays the journal over the snapshot and rebuilds
  who runs what from the workers as they rejoin.
- **Incremental demand**: SET_DESIRE whenever a unit's wanted slot count
  changes; idle workers with nothing to do are released at once
  (RELEASE_SLOT).
- **A queue of two a worker** for short instances (``queue_below``): while
  the unit's finished instances took under ``queue_below`` seconds on
  average and it has at least as many pending instances as workers, a
  worker that runs an instance is handed its next one as well (an ASSIGN
  it keeps queued and starts the moment the running one ends), so that a
  slot does not wait for the round trip to the AppMaster between two
  instances. A queued copy is no running copy (not in ``slots``' count,
  no straggler, no backup) until the running one's result comes; when its
  worker leaves it goes back to pending, its attempt not counted as
  failed; it is in the snapshot and journal as running.

Calls that come from the network (unknown worker, stale attempt, nonsense
numbers) are logged and change nothing; they never raise.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping, Sequence

import attrs
from sortedcontainers import SortedList, SortedSet

from mesoslike import Clock, MesoslikeError
from mesoslike_frameworks.fuxi import FieldsRepr
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.model import BackupPolicy, JobSpec, UnitSpec

__all__ = ["AppMasterCore", "AppMasterError", "JournalError", "Action", "ToWorker", "ToService", "SnapshotChanged", "RUNNING",
           "SUCCEEDED", "FAILED", "DEFAULT_REJOIN_GRACE", "SNAPSHOT_FORMAT"]

log = logging.getLogger("mesoslike_frameworks.fuxi.appmaster")

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
#: seconds a restarted AppMaster waits for workers to report instances that were running
DEFAULT_REJOIN_GRACE = 5.0
#: seconds between straggler checks by progress rate (:meth:`AppMasterCore.next_wakeup`)
DEFAULT_CHECK_INTERVAL = 1.0
SNAPSHOT_FORMAT = 1
#: pending instances looked at to find one that has not failed on a worker's host
_RETRY_SCAN = 64


class AppMasterError(MesoslikeError, ValueError):
    """A snapshot that does not belong to this job (raised by the constructor only)."""


# ----------------------------------------------------------------- actions
@attrs.frozen(repr=False)
class ToWorker(FieldsRepr):
    """Send ``message`` to the worker in slot ``worker_id``: an ASSIGN (its
    ``command`` is the unit's with ``{instance}`` replaced; its ``env`` has
    ``FUXI_INSTANCE``, ``FUXI_ATTEMPT`` and ``FUXI_DATA_HOSTS``,
    comma-separated) or a KILL. After a KILL the core already counts the
    worker idle: an ASSIGN to it (or its release) may follow in the same
    list. ``reason``: why, for the log (a KILL's)."""
    worker_id: str
    message: amp.Assign | amp.Kill
    reason: str = ""


#: what the core asks of the Fuxi service
ServiceRequest = (protocol.SetDesire | protocol.AvoidHosts | protocol.ReleaseSlot | protocol.BlacklistHost
                  | protocol.ReportHost | protocol.JobEnded)


@attrs.frozen(repr=False)
class ToService(FieldsRepr):
    """Send ``request`` to the Fuxi service. The core fills in the job id;
    ``id`` is 0 and ``token`` empty: the runtime numbers and signs what it
    sends. SET_DESIRE: the unit now wants ``slots`` slots in all (held and
    outstanding). AVOID_HOSTS: the unit's next slots should not be on
    ``hosts``, the machines its stragglers run on (empty: no preference).
    RELEASE_SLOT: the worker's slot is not needed any more; the core forgot
    the worker (the runtime tells it RELEASE). BLACKLIST_HOST: the job stops
    using ``host``. REPORT_HOST: ``host`` is for the scheduler's global
    blacklist. JOB_ENDED: exactly once. ``reason``: why, for the log."""
    request: ServiceRequest
    reason: str = ""


@attrs.frozen(repr=False)
class SnapshotChanged(FieldsRepr):
    """Something worth checkpointing changed (a finish, a failure, a
    blacklist, the end): checkpoint — append :meth:`AppMasterCore.journal`
    (or write :meth:`AppMasterCore.snapshot`)."""


Action = ToWorker | ToService | SnapshotChanged


# ------------------------------------------------------------------- state
@attrs.define(eq=False, repr=False)
class _Copy(FieldsRepr):
    """One run of an instance on a worker."""
    worker_id: str
    hostname: str
    instance: int
    attempt: int
    started: float
    backup: bool = False
    fraction: float | None = None     # last reported progress, None: never reported


@attrs.define(eq=False, repr=False)
class _Worker(FieldsRepr):
    id: str
    unit: str
    hostname: str
    room: str
    copy: _Copy | None = None
    queued: _Copy | None = None       # handed to it to run after ``copy`` (queue_below)


class _Pending:
    """A unit's pending instances, indexed for dispatch.

    ``by_host[h]``: sorted ``(position of h in the instance's data list,
    instance)``; ``by_room[r]``: sorted instances with a data host in room r
    (rooms are learned from workers, see :meth:`learn_room`); ``all``: every
    pending instance in order. :meth:`best` is O(log n); :meth:`add` and
    :meth:`remove` are O(d log n) for d data hosts of the instance.
    """

    def __init__(self, data: Sequence[tuple[str, ...]], rooms: Mapping[str, str], instances: Iterable[int]) -> None:
        self.data = [tuple(dict.fromkeys(hosts)) for hosts in data]
        self.rooms = rooms
        self.all: SortedSet = SortedSet(instances)
        by_host: dict[str, list[tuple[int, int]]] = {}
        by_room: dict[str, set[int]] = {}
        if self.data:
            for i in self.all:
                for pos, host in enumerate(self.data[i]):
                    by_host.setdefault(host, []).append((pos, i))
                    room = rooms.get(host)
                    if room:
                        by_room.setdefault(room, set()).add(i)
        self.by_host: dict[str, SortedList] = {h: SortedList(v) for h, v in by_host.items()}
        self.by_room: dict[str, SortedSet] = {r: SortedSet(v) for r, v in by_room.items()}

    def __len__(self) -> int:
        return len(self.all)

    def __contains__(self, instance: int) -> bool:
        return instance in self.all

    def hosts(self, instance: int) -> tuple[str, ...]:
        return self.data[instance] if self.data else ()

    def add(self, instance: int) -> None:
        if instance in self.all:
            return
        self.all.add(instance)
        for pos, host in enumerate(self.hosts(instance)):
            self.by_host.setdefault(host, SortedList()).add((pos, instance))
            room = self.rooms.get(host)
            if room:
                self.by_room.setdefault(room, SortedSet()).add(instance)

    def remove(self, instance: int) -> None:
        if instance not in self.all:
            return
        self.all.remove(instance)
        for pos, host in enumerate(self.hosts(instance)):
            entries = self.by_host[host]
            entries.remove((pos, instance))
            if not entries:
                del self.by_host[host]
            room = self.rooms.get(host)
            if room and room in self.by_room:
                members = self.by_room[room]
                members.discard(instance)
                if not members:
                    del self.by_room[room]

    def learn_room(self, host: str, room: str) -> None:
        """``host`` turned out to be in ``room``: its pending instances join the room's set."""
        entries = self.by_host.get(host)
        if entries:
            self.by_room.setdefault(room, SortedSet()).update(i for _, i in entries)

    def best(self, host: str, room: str) -> int | None:
        """The pending instance for a worker on ``host`` in ``room``: data on
        the host (earliest in the data list), then data in the room, then
        the lowest pending instance. O(log n)."""
        entries = self.by_host.get(host)
        if entries:
            return entries[0][1]
        members = self.by_room.get(room) if room else None
        if members:
            return members[0]
        return self.all[0] if self.all else None


@attrs.define(eq=False, repr=False)
class _Unit(FieldsRepr):
    spec: UnitSpec
    pending: _Pending
    done: bytearray
    starts: list[int]                 # runs started per instance (the next attempt number is starts + 1)
    failures: list[int]               # failed runs per instance
    done_count: int = 0
    running: dict[int, list[_Copy]] = attrs.field(factory=dict)
    queued: dict[int, _Copy] = attrs.field(factory=dict)  # instance -> its copy queued at a worker
    unknown: set[int] = attrs.field(factory=set)          # running before a restart, not reported yet
    backed_up: set[int] = attrs.field(factory=set)        # got its one backup since it last went pending
    want_backup: SortedSet = attrs.field(factory=SortedSet)   # stragglers waiting for a worker on another host
    idle: dict[str, _Worker] = attrs.field(factory=dict)  # in join order
    workers: int = 0
    busy: int = 0                     # running copies
    finished_seconds: float = 0.0     # summed durations of finished instances (timed ones)
    finished_timed: int = 0
    failed_attempts: int = 0
    backups: int = 0                  # backup copies started
    failed_on: dict[int, set[str]] = attrs.field(factory=dict)  # instance -> hosts where a run of it failed
    to_queue: list[_Worker] = attrs.field(factory=list)   # workers given a run since the last _settle
    # changed since the last journal(): instances (done, starts, failures, running) and the counters
    touched: set[int] = attrs.field(factory=set)
    counters_touched: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def total(self) -> int:
        return len(self.done)

    @property
    def complete(self) -> bool:
        return self.done_count == self.total


class AppMasterCore:
    """One job's AppMaster, sans I/O. Not thread-safe: one caller at a time.

    ``snapshot``: what :meth:`snapshot` returned before a restart, and
    ``journal``: the records :meth:`journal` returned since (replayed over
    it in order; a bad record raises :class:`JournalError`). Finished
    instances stay finished; attempt and failure counts, host failure counts
    and blacklists are kept; instances that were running become *unknown*
    until a worker reports them (:meth:`worker_joined`) and go back to
    pending ``rejoin_grace`` seconds after the restart. Raises
    :class:`AppMasterError` if the snapshot is not of this job.

    ``global_report_after``: failed runs on a host after which it is
    reported (:class:`ReportHost`); default ``2 * job.blacklist_after``.
    ``check_interval``: how often :meth:`next_wakeup` asks for a tick while
    progress rates may reveal a straggler. ``queue_below``: seconds; while a
    unit's finished instances took less on average, a running worker gets
    its next instance queued (0, the default: never; the AppMaster's runtime
    sets it).

    Costs: with n instances in a unit, w workers and r running copies, the
    worker and instance calls are O(log n) plus the idle workers of the unit
    (few: idle workers are released at once); :meth:`tick` and
    :meth:`next_wakeup` are O(r); :meth:`journal` O(changes since its last
    call); :meth:`snapshot` and construction are O(n log n + journal
    records) at most.
    """

    def __init__(self, job_id: str, job: JobSpec, clock: Clock, *, snapshot: dict | None = None,
                 journal: Sequence[Any] = (), global_report_after: int | None = None, rejoin_grace: float = DEFAULT_REJOIN_GRACE,
                 check_interval: float = DEFAULT_CHECK_INTERVAL, queue_below: float = 0.0) -> None:
        if not isinstance(job, JobSpec):
            raise AppMasterError(f"AppMasterCore needs a JobSpec, got {type(job).__name__}")
        self.job_id = job_id
        self.job = job
        self.clock = clock
        self.global_report_after = 2 * job.blacklist_after if global_report_after is None else global_report_after
        self.rejoin_grace = rejoin_grace
        self.check_interval = check_interval
        self.queue_below = queue_below
        self._state = RUNNING
        self._reason = ""
        self._rooms: dict[str, str] = {}                  # hostname -> room, from workers
        self._host_failures: dict[str, int] = {}
        self._blacklisted: dict[str, float] = {}          # host -> until when the job does not use it
        self._reported: set[str] = set()                  # reported since it was last blacklisted
        self._workers: dict[str, _Worker] = {}
        self._host_workers: dict[str, set[str]] = {}
        self._rejoin_deadline: float | None = None
        self._out: list[Action] = []
        self._dirty = False
        self._touched_hosts: set[str] = set()     # failures, blacklist or report changed since the last journal()
        self._new_rooms: list[str] = []           # hosts whose room was learned since
        self._state_touched = False
        self._dependents: dict[str, list[str]] = {u.name: [] for u in job.units}
        for spec in job.units:
            for name in spec.after:
                self._dependents[name].append(spec.name)
        saved = self._check_snapshot(snapshot) if snapshot is not None else None
        replayed = _Replay(self, journal) if journal else None
        self._units: dict[str, _Unit] = {spec.name: self._new_unit(spec, saved, replayed) for spec in job.units}
        if any(u.unknown for u in self._units.values()):
            self._rejoin_deadline = clock.now() + rejoin_grace
        self._desire = self.desired_slots()
        self._avoiding: dict[str, tuple[str, ...]] = {}

    # ============================================================ workers
    def worker_joined(self, worker_id: str, unit: str, hostname: str, room: str = "",
                      running: tuple[int, int] | None = None,
                      finished: Sequence[tuple[int, int, bool, str]] = (),
                      queued: tuple[int, int] | None = None) -> list[Action]:
        """A worker (slot) of ``unit`` on ``hostname`` is ready. ``running``:
        the ``(instance, attempt)`` it runs now (after an AppMaster restart):
        kept unless the instance finished or already runs twice (then
        a KILL); ``queued``: the one it holds to run next, kept as its
        queued copy unless the instance finished, runs or is queued
        elsewhere (then a KILL). ``finished``: ``(instance, attempt, ok, message)``
        results it got while no AppMaster listened; recorded like
        :meth:`instance_done`. Then an idle worker is dispatched or released.
        Idempotent for a known worker (returns ``[]``). O(log n) per
        instance named, plus the unit's idle workers."""
        self._out = []
        if worker_id in self._workers:
            log.debug("worker %s joined again; ignored", worker_id)
            return []
        target = self._units.get(unit) if isinstance(unit, str) else None
        if target is None or not isinstance(hostname, str) or not isinstance(worker_id, str):
            log.warning("job %s: worker %r of unknown unit %r on %r: released", self.job_id, worker_id, unit,
                        hostname)
            return [self._ask(protocol.ReleaseSlot, slot=worker_id)]
        if self._state != RUNNING:
            for pair in (_pair(running), _pair(queued)):
                if pair is not None:
                    self._out.append(ToWorker(worker_id, amp.Kill(*pair), f"job {self._state}"))
            self._out.append(self._ask(protocol.ReleaseSlot, slot=worker_id))
            return self._flush()
        room = room if isinstance(room, str) else ""
        self._learn_room(hostname, room)
        worker = _Worker(worker_id, unit, hostname, room or self._rooms.get(hostname, ""))
        self._workers[worker_id] = worker
        self._host_workers.setdefault(hostname, set()).add(worker_id)
        target.workers += 1
        target.idle[worker_id] = worker
        if running is not None:
            self._adopt(target, worker, running)     # first: a result below may finish that very instance
        if queued is not None:
            self._adopt_queued(target, worker, queued)
        for result in finished or ():
            if not (isinstance(result, (tuple, list)) and len(result) == 4 and _pair(result[:2]) is not None):
                log.warning("job %s: worker %s reported a malformed result %r; ignored", self.job_id, worker_id,
                            result)
                continue
            instance, attempt, ok, message = result
            if self._state == RUNNING and self._valid_instance(target, instance, worker_id):
                self._away_result(target, worker, instance, attempt, bool(ok), str(message))
        self._settle(target)
        return self._flush()

    def worker_left(self, worker_id: str, reason: str) -> list[Action]:
        """The worker is gone (heartbeat lost, preempted, agent lost). Its run
        is abandoned without counting a failure: the instance goes back to
        pending unless another copy runs. O(log n) plus the unit's idle workers."""
        self._out = []
        worker = self._workers.get(worker_id)
        if worker is None:
            log.info("job %s: unknown worker %r left (%s); ignored", self.job_id, worker_id, reason)
            return []
        unit = self._units[worker.unit]
        log.info("job %s: worker %s on %s left: %s", self.job_id, worker_id, worker.hostname, reason)
        copy, queued = worker.copy, worker.queued
        self._forget(worker)
        if queued is not None:
            self._unqueue(unit, worker)
        if self._state == RUNNING:
            for lost in (copy, queued):
                if lost is None:
                    continue
                if lost is copy:
                    self._drop_copy(unit, lost)
                if not unit.done[lost.instance] and not unit.running.get(lost.instance):
                    self._repend(unit, lost.instance)   # (once: pending is a set; its attempt not a failure)
        self._settle(unit)
        return self._flush()

    def progress(self, worker_id: str, instance: int, attempt: int, fraction: float) -> list[Action]:
        """The run reports ``fraction`` (0..1) done; used to spot slow
        progress rates in :meth:`tick`. O(1)."""
        copy = self._copy_of(worker_id, instance, attempt, "progress")
        if copy is None:
            return []
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or math.isnan(fraction):
            log.warning("job %s: worker %s reported progress %r; ignored", self.job_id, worker_id, fraction)
            return []
        copy.fraction = min(1.0, max(0.0, float(fraction)))
        return []

    def instance_done(self, worker_id: str, instance: int, attempt: int, ok: bool, message: str = "") -> list[Action]:
        """The run ``(instance, attempt)`` on the worker ended. ``ok``: the
        instance is finished and any other copy is killed. Failed: counts an
        attempt for the instance and a failure for the host; the instance goes
        back to pending (unless another copy runs) or, after
        ``unit.max_attempts`` failed runs, the job fails. The worker is then
        dispatched or released. A stale attempt is ignored. O(d log n)."""
        self._out = []
        copy = self._copy_of(worker_id, instance, attempt, "a result", queued=True)
        if copy is None:
            return []
        worker = self._workers[worker_id]
        unit = self._units[worker.unit]
        if copy is worker.queued:
            # the queued copy ran, so the running one ended before it: its result is still to come (resent)
            self._unqueue(unit, worker)
        else:
            self._drop_copy(unit, copy)
            self._next_of(unit, worker)
        if ok:
            self._finish(unit, instance, copy)
        else:
            self._failed_run(unit, instance, worker.hostname, str(message))
        self._settle(unit)
        return self._flush()

    def tick(self) -> list[Action]:
        """Time-driven work: instances not reported by any worker within
        ``rejoin_grace`` of a restart go back to pending; stragglers get
        backups. Call it at :meth:`next_wakeup`. O(r + units)."""
        self._out = []
        if self._state != RUNNING:
            return []
        now = self.clock.now()
        if self._rejoin_deadline is not None and now >= self._rejoin_deadline:
            self._rejoin_deadline = None
            for unit in self._units.values():
                for instance in sorted(unit.unknown):
                    log.info("job %s: instance %d of %s not reported after a restart: pending again", self.job_id,
                             instance, unit.name)
                    unit.pending.add(instance)
                unit.touched.update(unit.unknown)
                unit.unknown.clear()
        for unit in self._units.values():
            self._find_stragglers(unit, now)
            self._settle(unit)
        return self._flush()

    def next_wakeup(self) -> float | None:
        """When :meth:`tick` has work: the rejoin deadline, the first time a
        running instance becomes a straggler by runtime, or ``now +
        check_interval`` while progress rates could reveal one. None: no
        time-driven work. O(r)."""
        if self._state != RUNNING:
            return None
        now = self.clock.now()
        times = [] if self._rejoin_deadline is None else [self._rejoin_deadline]
        for unit in self._units.values():
            limits = self._backup_limits(unit, now)
            if limits is None:
                continue
            average, _ = limits
            reporters = sum(1 for copies in unit.running.values() for c in copies if c.fraction is not None)
            policy = self.job.backup
            for instance, copy in self._backup_candidates(unit):
                if average is not None:
                    times.append(_due(copy, policy, average))
                if reporters >= 2:
                    times.append(max(now + self.check_interval, copy.started + policy.min_runtime))
        return min(times) if times else None

    # ============================================================ queries
    @property
    def state(self) -> str:
        """``running``, ``succeeded`` or ``failed``."""
        return self._state

    def desired_slots(self) -> dict[str, int]:
        """Per unit, the slots wanted now: ``min(unit.slots, pending +
        running and queued copies + unknown + backups waiting for a worker)``; 0 while a
        unit in its ``after`` list is unfinished, and after the job ended.
        O(units)."""
        return {name: self._wanted(unit) for name, unit in self._units.items()}

    def progress_report(self) -> dict:
        """The job's state and counts. Per unit: ``total``, ``done``,
        ``running`` (instances with a copy running or queued at a worker), ``pending``, ``unknown``
        (running before a restart, not reported yet), ``failed_attempts``,
        ``backups`` (backup copies started), ``workers``, ``desired``. Job
        totals under ``instances``. O(units)."""
        units = {}
        for name, unit in self._units.items():
            units[name] = {"total": unit.total, "done": unit.done_count,
                           "running": len(unit.running) + len(unit.queued),
                           "pending": len(unit.pending), "unknown": len(unit.unknown),
                           "failed_attempts": unit.failed_attempts, "backups": unit.backups,
                           "workers": unit.workers, "desired": self._wanted(unit)}
        return {"job_id": self.job_id, "name": self.job.name, "state": self._state, "reason": self._reason,
                "units": units,
                "instances": {"done": sum(u["done"] for u in units.values()),
                              "total": sum(u["total"] for u in units.values()),
                              "running": sum(u["running"] for u in units.values()),
                              "failed": sum(u["failed_attempts"] for u in units.values()),
                              "backups": sum(u["backups"] for u in units.values())},
                "blacklisted": self._blacklisted_now()}

    def snapshot(self) -> dict:
        """A JSON-able checkpoint for ``AppMasterCore(..., snapshot=...)``:
        finished instances (as ranges), attempt and failure counts, which
        instances were running, the finished-duration average, host failure
        counts, blacklisted and reported hosts, hosts' rooms. O(n) per unit;
        the runtime writes it on :class:`SnapshotChanged` (and may coalesce
        bursts)."""
        units = {}
        for name, unit in self._units.items():
            units[name] = {
                "instances": unit.total,
                "done": _ranges(i for i in range(unit.total) if unit.done[i]),
                "running": _ranges(sorted(set(unit.running) | unit.unknown | set(unit.queued))),
                "starts": {str(i): n for i, n in enumerate(unit.starts) if n},
                "failures": {str(i): n for i, n in enumerate(unit.failures) if n},
                "finished_seconds": unit.finished_seconds, "finished_timed": unit.finished_timed,
                "backups": unit.backups,
            }
        return {"format": SNAPSHOT_FORMAT, "job_id": self.job_id, "job": self.job.name, "state": self._state,
                "reason": self._reason, "units": units, "host_failures": dict(sorted(self._host_failures.items())),
                "blacklisted": self._blacklisted_now(), "reported": sorted(self._reported),
                "rooms": dict(sorted(self._rooms.items()))}

    def journal(self) -> list[list]:
        """The changes since the last call, as JSON-able records for a
        journal (``AppMasterCore(..., snapshot=..., journal=...)`` replays
        them over the snapshot taken before them): per instance changed, its
        finished flag, start and failure counts and whether it runs; per
        unit whose counters changed, the counters; per host, its failure
        count, blacklisting and report; rooms learned; the end. Each record
        sets what it names (replaying one twice changes nothing). O(changes),
        whatever the job's size: the runtime appends them on
        :class:`SnapshotChanged` and writes a whole :meth:`snapshot` only now
        and then (docs/fuxi-jobs.rst, "Checkpoints")."""
        out: list[list] = []
        if self._state_touched:
            self._state_touched = False
            out.append(["s", self._state, self._reason])
        if self._touched_hosts:
            for host in sorted(self._touched_hosts):
                listed = self._is_blacklisted(host)      # an entry past its time goes now, and is said so
                out.append(["h", host, self._host_failures.get(host, 0), int(listed), int(host in self._reported)])
            self._touched_hosts.clear()
        for host in self._new_rooms:
            out.append(["m", host, self._rooms[host]])
        self._new_rooms.clear()
        for name, unit in self._units.items():
            if unit.touched:
                running, queued = unit.running, unit.queued
                for i in sorted(unit.touched):
                    out.append(["i", name, i, unit.done[i], unit.starts[i], unit.failures[i],
                                int(i in running or i in unit.unknown or i in queued)])
                unit.touched.clear()
            if unit.counters_touched:
                unit.counters_touched = False
                out.append(["u", name, unit.finished_seconds, unit.finished_timed, unit.backups])
        return out

    def restate(self) -> list[Action]:
        """What a (re)started runtime tells the service first: every unit's
        desire (the scheduler may remember another), then JOB_ENDED if the
        job ended before a restart. O(units)."""
        out: list[Action] = [self._ask(protocol.SetDesire, unit=name, slots=slots)
                             for name, slots in sorted(self.desired_slots().items())]
        if self._state != RUNNING:
            out.append(self._ask(protocol.JobEnded, succeeded=self._state == SUCCEEDED, reason=self._reason))
        return out

    # ========================================================== internals
    def _ask(self, request: type[ServiceRequest], why: str = "", **fields: Any) -> ToService:
        """A request of this job for the service (id and token are the runtime's);
        ``fields`` are the request's own (its class checks them)."""
        return ToService(request(id=0, job_id=self.job_id, token="", **fields), why)

    def _flush(self) -> list[Action]:
        if self._dirty:
            self._dirty = False
            self._out.append(SnapshotChanged())
        for name, unit in self._units.items():
            avoid = self._avoid_hosts(unit)
            if avoid != self._avoiding.get(name, ()):
                self._avoiding[name] = avoid
                self._out.append(self._ask(protocol.AvoidHosts, unit=name, hosts=list(avoid)))
            wanted = self._wanted(unit)
            if wanted != self._desire.get(name):
                self._desire[name] = wanted
                self._out.append(self._ask(protocol.SetDesire, unit=name, slots=wanted))
        out, self._out = self._out, []
        return out

    def _avoid_hosts(self, unit: _Unit) -> tuple[str, ...]:
        """Where the unit's stragglers waiting for a backup run: a slot granted
        there cannot take the backup. O(stragglers)."""
        if not unit.want_backup or self._state != RUNNING:
            return ()
        return tuple(sorted({copy.hostname for instance in unit.want_backup
                             for copy in unit.running.get(instance, ())}))

    def _active(self, unit: _Unit) -> bool:
        # most units wait for none: no generator for them (several calls an instance's result)
        return not unit.spec.after or all(self._units[name].complete for name in unit.spec.after)

    def _wanted(self, unit: _Unit) -> int:
        if self._state != RUNNING or unit.complete or not self._active(unit):
            return 0
        need = len(unit.pending) + unit.busy + len(unit.queued) + len(unit.unknown) + len(unit.want_backup)
        return min(unit.spec.slots, need)

    def _usable(self, host: str, unit: _Unit) -> bool:
        return not self._is_blacklisted(host) and host not in unit.spec.blacklist

    def _is_blacklisted(self, host: str) -> bool:
        """Does the job avoid ``host`` now? An entry past its time is
        forgotten, and so are the host's failures and report. O(1)."""
        until = self._blacklisted.get(host)
        if until is None:
            return False
        if until > self.clock.now():
            return True
        del self._blacklisted[host]
        self._host_failures.pop(host, None)
        self._reported.discard(host)
        self._touched_hosts.add(host)
        self._dirty = True
        log.info("job %s: %s is no longer blacklisted (%gs passed)", self.job_id, host, self.job.blacklist_seconds)
        return False

    def _blacklisted_now(self) -> list[str]:
        return sorted(host for host in list(self._blacklisted) if self._is_blacklisted(host))

    # ---------------------------------------------------------- dispatch
    def _settle(self, unit: _Unit) -> None:
        """Give the unit's idle workers work, never more than ``unit.slots``
        runs at once; release the ones with nothing to do (keeping as many as
        there are unknown instances, which may turn pending when the rejoin
        grace ends); then queue the next instance of the workers given a
        run (:meth:`_queue_next`), once every idle one has its own."""
        if self._state == RUNNING and self._active(unit):
            for worker in list(unit.idle.values()):
                if not (unit.pending or unit.want_backup) or unit.busy >= unit.spec.slots:
                    break
                if self._usable(worker.hostname, unit):
                    self._dispatch(unit, worker)
        if unit.to_queue:
            to_queue, unit.to_queue = unit.to_queue, []
            if self.queue_below > 0 and self._state == RUNNING and self._active(unit):
                for worker in to_queue:
                    self._queue_next(unit, worker)
        if not unit.idle:
            return   # (a worker's result that gave it its next run: nothing to release)
        keep = 0
        if self._state == RUNNING and self._active(unit):
            keep = min(len(unit.unknown), unit.spec.slots - unit.busy)
        for worker in list(unit.idle.values()):
            if keep and self._usable(worker.hostname, unit):
                keep -= 1
                continue
            self._release(worker)

    def _dispatch(self, unit: _Unit, worker: _Worker) -> None:
        instance = unit.pending.best(worker.hostname, worker.room)
        if instance is not None and worker.hostname in unit.failed_on.get(instance, ()):
            instance = self._retry_elsewhere(unit, worker, instance)
        if instance is not None:
            unit.pending.remove(instance)
            self._start(unit, worker, instance, backup=False)
            return
        # O(backups waiting whose only copy runs on this host) + O(log n)
        for instance in unit.want_backup:
            copies = unit.running.get(instance, ())
            if len(copies) == 1 and copies[0].hostname != worker.hostname:
                unit.want_backup.remove(instance)
                unit.backed_up.add(instance)
                unit.backups += 1
                unit.counters_touched = True
                self._start(unit, worker, instance, backup=True)
                return

    def _retry_elsewhere(self, unit: _Unit, worker: _Worker, instance: int) -> int | None:
        """``instance`` failed on this worker's host before: rather give the
        worker another pending instance (among the first ``_RETRY_SCAN``),
        or leave ``instance`` to an idle worker on a host where it has not
        failed; only if neither exists does it run here again."""
        failed = unit.failed_on[instance]
        for other in unit.pending.all.islice(0, _RETRY_SCAN):
            if worker.hostname not in unit.failed_on.get(other, ()):
                return other
        if any(w is not worker and w.hostname not in failed and self._usable(w.hostname, unit)
               for w in unit.idle.values()):
            return None
        return instance

    def _start(self, unit: _Unit, worker: _Worker, instance: int, *, backup: bool) -> None:
        unit.starts[instance] += 1
        attempt = unit.starts[instance]
        copy = _Copy(worker.id, worker.hostname, instance, attempt, self.clock.now(), backup=backup)
        self._add_copy(unit, worker, copy)
        unit.to_queue.append(worker)
        self._out.append(ToWorker(worker.id, self._assign(unit, instance, attempt)))

    @staticmethod
    def _assign(unit: _Unit, instance: int, attempt: int) -> amp.Assign:
        hosts = unit.pending.hosts(instance)
        return amp.Assign(instance, attempt, unit.spec.command.replace("{instance}", str(instance)),
                          {"FUXI_INSTANCE": str(instance), "FUXI_ATTEMPT": str(attempt),
                           "FUXI_DATA_HOSTS": ",".join(hosts)})

    def _queue_next(self, unit: _Unit, worker: _Worker) -> None:
        """Hand a worker that runs an instance its next one, to start when
        that one ends: only while the unit's finished instances took under
        ``queue_below`` seconds on average (the round trip between two of
        them is then worth saving), and while it has as many pending
        instances as workers (the last ones go to whichever worker is free
        first, not into a queue behind a run that may take long). The
        worker's host must be usable and the instance must not have failed
        there. O(log n)."""
        if (self._workers.get(worker.id) is not worker or worker.copy is None or worker.queued is not None
                or not unit.finished_timed or unit.finished_seconds >= self.queue_below * unit.finished_timed
                or len(unit.pending) < unit.workers or not self._usable(worker.hostname, unit)):
            return
        instance = unit.pending.best(worker.hostname, worker.room)
        if instance is None or worker.hostname in unit.failed_on.get(instance, ()):
            return
        unit.pending.remove(instance)
        unit.starts[instance] += 1
        attempt = unit.starts[instance]
        copy = _Copy(worker.id, worker.hostname, instance, attempt, self.clock.now())
        unit.queued[instance] = copy
        unit.touched.add(instance)
        worker.queued = copy
        self._out.append(ToWorker(worker.id, self._assign(unit, instance, attempt), "queued"))

    def _unqueue(self, unit: _Unit, worker: _Worker, touch: bool = True) -> _Copy | None:
        """Take the worker's queued copy off it (not pending again: the caller says). ``touch``: journal the
        instance (not when the caller runs the copy at once: its record would say what the last one did)."""
        copy, worker.queued = worker.queued, None
        if copy is not None:
            if unit.queued.get(copy.instance) is copy:
                del unit.queued[copy.instance]
            if touch:
                unit.touched.add(copy.instance)
        return copy

    def _next_of(self, unit: _Unit, worker: _Worker, refill: bool = True) -> None:
        """The worker's run ended (its result came, or it was killed): its
        queued copy runs now — the worker starts it as the other ends —
        else it is idle. ``refill``: queue it the next one (not after a
        KILL: until the killed run is gone the worker still holds the
        promoted one queued, and would refuse a third)."""
        worker.copy = None
        queued = self._unqueue(unit, worker, touch=False)
        if queued is not None:
            if self._state == RUNNING and not unit.done[queued.instance] and not unit.running.get(queued.instance):
                queued.started = self.clock.now()
                # queued or running, its journal record is the same (running 1, the same starts): none for
                # this step — one record an instance fewer when its queueing was journaled already
                self._add_copy(unit, worker, queued, touch=False)
                if refill:
                    unit.to_queue.append(worker)
                return
            unit.touched.add(queued.instance)
            self._out.append(ToWorker(worker.id, amp.Kill(queued.instance, queued.attempt),
                                      f"instance {queued.instance} is not to run any more"))
        unit.idle[worker.id] = worker

    def _add_copy(self, unit: _Unit, worker: _Worker, copy: _Copy, touch: bool = True) -> None:
        unit.running.setdefault(copy.instance, []).append(copy)
        if touch:
            unit.touched.add(copy.instance)
        unit.busy += 1
        unit.idle.pop(worker.id, None)
        worker.copy = copy

    def _drop_copy(self, unit: _Unit, copy: _Copy) -> None:
        copies = unit.running.get(copy.instance, [])
        if copy in copies:
            copies.remove(copy)
            unit.busy -= 1
        if not copies:
            unit.running.pop(copy.instance, None)
            unit.touched.add(copy.instance)
        unit.want_backup.discard(copy.instance)

    def _repend(self, unit: _Unit, instance: int) -> None:
        unit.backed_up.discard(instance)
        unit.pending.add(instance)

    def _release(self, worker: _Worker) -> None:
        self._forget(worker)
        self._out.append(self._ask(protocol.ReleaseSlot, slot=worker.id))

    def _forget(self, worker: _Worker) -> None:
        unit = self._units[worker.unit]
        del self._workers[worker.id]
        on_host = self._host_workers.get(worker.hostname)
        if on_host is not None:
            on_host.discard(worker.id)
            if not on_host:
                del self._host_workers[worker.hostname]
        unit.idle.pop(worker.id, None)
        unit.workers -= 1

    def _learn_room(self, host: str, room: str) -> None:
        if not room:
            return
        known = self._rooms.get(host)
        if known is None:
            self._rooms[host] = room
            self._new_rooms.append(host)
            for unit in self._units.values():
                unit.pending.learn_room(host, room)
        elif known != room:
            log.info("job %s: host %s reported in room %r, seen before in %r; keeping %r", self.job_id, host, room,
                     known, known)

    # ----------------------------------------------------------- results
    def _copy_of(self, worker_id: str, instance: object, attempt: object, what: str,
                 queued: bool = False) -> _Copy | None:
        """The worker's run ``(instance, attempt)`` (with ``queued``, its queued one too), else None (logged)."""
        worker = self._workers.get(worker_id) if isinstance(worker_id, str) else None
        if worker is None:
            log.warning("job %s: %s from unknown worker %r; ignored", self.job_id, what, worker_id)
            return None
        copy = worker.copy
        if queued and worker.queued is not None and (worker.queued.instance, worker.queued.attempt) == (
                instance, attempt):
            copy = worker.queued
        if copy is None or copy.instance != instance or copy.attempt != attempt:
            log.info("job %s: %s from worker %s for instance %r attempt %r, which it does not run (stale); ignored",
                     self.job_id, what, worker_id, instance, attempt)
            return None
        return copy

    def _valid_instance(self, unit: _Unit, instance: object, worker_id: str) -> bool:
        if isinstance(instance, int) and not isinstance(instance, bool) and 0 <= instance < unit.total:
            return True
        log.warning("job %s: worker %s named instance %r of %s, which has %d; ignored", self.job_id, worker_id,
                    instance, unit.name, unit.total)
        return False

    def _finish(self, unit: _Unit, instance: int, copy: _Copy | None) -> None:
        """Instance done: the other copies are killed (their workers turn idle)."""
        if unit.done[instance]:
            return
        unit.done[instance] = 1
        unit.done_count += 1
        unit.touched.add(instance)
        unit.pending.remove(instance)
        unit.unknown.discard(instance)
        unit.backed_up.discard(instance)
        unit.want_backup.discard(instance)
        if copy is not None:
            unit.finished_seconds += self.clock.now() - copy.started
            unit.finished_timed += 1
            unit.counters_touched = True
        for loser in list(unit.running.get(instance, ())):
            self._drop_copy(unit, loser)
            self._out.append(ToWorker(loser.worker_id, amp.Kill(instance, loser.attempt),
                                      f"instance {instance} finished on another copy"))
            self._next_of(unit, self._workers[loser.worker_id], refill=False)
        queued = unit.queued.get(instance)
        if queued is not None:   # (a result a worker held while no AppMaster listened, say)
            self._unqueue(unit, self._workers[queued.worker_id])
            self._out.append(ToWorker(queued.worker_id, amp.Kill(instance, queued.attempt),
                                      f"instance {instance} finished on another copy"))
        self._dirty = True
        if unit.complete:
            log.info("job %s: unit %s finished (%d instances)", self.job_id, unit.name, unit.total)
            if all(u.complete for u in self._units.values()):
                total = sum(u.total for u in self._units.values())
                self._end(True, f"all {total} instances finished")
                return
            for name in self._dependents[unit.name]:
                self._settle(self._units[name])

    def _failed_run(self, unit: _Unit, instance: int, host: str, message: str) -> None:
        """A failed run of ``instance`` on ``host`` (its copy already dropped)."""
        unit.failures[instance] += 1
        unit.failed_attempts += 1
        unit.touched.add(instance)
        unit.failed_on.setdefault(instance, set()).add(host)
        self._dirty = True
        log.info("job %s: instance %d of %s failed on %s (%d/%d): %s", self.job_id, instance, unit.name, host,
                 unit.failures[instance], unit.spec.max_attempts, message)
        self._host_failed(host)
        if unit.done[instance] or unit.running.get(instance):
            return                    # finished meanwhile, or the other copy decides
        if unit.failures[instance] >= unit.spec.max_attempts:
            self._end(False, f"instance {instance} of unit {unit.name} failed {unit.failures[instance]} times: "
                             f"{message}")
            return
        unit.unknown.discard(instance)
        self._repend(unit, instance)

    def _host_failed(self, host: str) -> None:
        listed = self._is_blacklisted(host)          # first: an expired entry starts the count again
        count = self._host_failures.get(host, 0) + 1
        self._host_failures[host] = count
        self._touched_hosts.add(host)
        if count >= self.job.blacklist_after and not listed:
            self._blacklisted[host] = self.clock.now() + self.job.blacklist_seconds
            self._out.append(self._ask(protocol.BlacklistHost, f"{count} failed runs of job {self.job_id} on {host}",
                                       host=host))
            for worker_id in sorted(self._host_workers.get(host, ())):
                worker = self._workers[worker_id]
                if worker.copy is None:
                    self._release(worker)
        if count >= self.global_report_after and host not in self._reported:
            self._reported.add(host)
            self._out.append(self._ask(protocol.ReportHost, f"{count} failed runs of job {self.job_id} on {host}",
                                       host=host))

    def _end(self, succeeded: bool, reason: str) -> None:
        if self._state != RUNNING:
            return
        self._state = SUCCEEDED if succeeded else FAILED
        self._reason = reason
        self._state_touched = True
        self._dirty = True
        self._rejoin_deadline = None
        log.info("job %s %s: %s", self.job_id, self._state, reason)
        for unit in self._units.values():
            for instance, copies in sorted(unit.running.items()):
                for copy in copies:
                    self._out.append(ToWorker(copy.worker_id, amp.Kill(instance, copy.attempt),
                                              f"job {self._state}: {reason}"))
                    self._workers[copy.worker_id].copy = None
            for instance, copy in sorted(unit.queued.items()):
                self._out.append(ToWorker(copy.worker_id, amp.Kill(instance, copy.attempt),
                                          f"job {self._state}: {reason}"))
                self._workers[copy.worker_id].queued = None
            unit.touched.update(unit.running)
            unit.touched.update(unit.queued)
            unit.running.clear()
            unit.queued.clear()
            unit.to_queue.clear()
            unit.busy = 0
            unit.want_backup.clear()
        self._out.append(self._ask(protocol.JobEnded, succeeded=succeeded, reason=reason))
        for worker in list(self._workers.values()):
            self._release(worker)

    # ---------------------------------------------------------- rejoining
    def _away_result(self, unit: _Unit, worker: _Worker, instance: int, attempt: object, ok: bool,
                     message: str) -> None:
        """A result the worker got while no AppMaster listened."""
        if unit.done[instance]:
            return
        if isinstance(attempt, int) and not isinstance(attempt, bool):
            unit.starts[instance] = max(unit.starts[instance], attempt)
            unit.touched.add(instance)
        if ok:
            self._finish(unit, instance, None)
        else:
            self._failed_run(unit, instance, worker.hostname, message)

    def _adopt(self, unit: _Unit, worker: _Worker, running: object) -> None:
        pair = _pair(running)
        if pair is None or not self._valid_instance(unit, pair[0], worker.id):
            log.warning("job %s: worker %s runs %r, not an (instance, attempt) of %s; ignored", self.job_id,
                        worker.id, running, unit.name)
            return
        instance, attempt = pair
        copies = unit.running.get(instance, [])
        if unit.done[instance]:
            reason = f"instance {instance} already finished"
        elif len(copies) >= 2 or any(c.attempt == attempt for c in copies):
            reason = f"instance {instance} already runs {len(copies)} time(s)"
        elif instance in unit.queued:
            reason = f"instance {instance} is already handed out"
        else:
            unit.unknown.discard(instance)
            unit.pending.remove(instance)
            unit.want_backup.discard(instance)
            unit.starts[instance] = max(unit.starts[instance], attempt)
            unit.touched.add(instance)
            backup = bool(copies)
            if backup:
                unit.backed_up.add(instance)
            self._add_copy(unit, worker, _Copy(worker.id, worker.hostname, instance, attempt, self.clock.now(),
                                               backup=backup))
            return
        self._out.append(ToWorker(worker.id, amp.Kill(instance, attempt), reason))

    def _adopt_queued(self, unit: _Unit, worker: _Worker, queued: object) -> None:
        """What a rejoining worker holds queued: its queued copy again, unless
        the instance finished, runs or is queued elsewhere (then a KILL).
        Without a run it would have started it: adopted as running."""
        pair = _pair(queued)
        if pair is None or not self._valid_instance(unit, pair[0], worker.id):
            log.warning("job %s: worker %s holds %r queued, not an (instance, attempt) of %s; ignored",
                        self.job_id, worker.id, queued, unit.name)
            return
        if worker.copy is None:
            self._adopt(unit, worker, pair)
            return
        instance, attempt = pair
        if unit.done[instance]:
            reason = f"instance {instance} already finished"
        elif unit.running.get(instance) or instance in unit.queued:
            reason = f"instance {instance} is already handed out"
        else:
            unit.unknown.discard(instance)
            unit.pending.remove(instance)
            unit.starts[instance] = max(unit.starts[instance], attempt)
            unit.touched.add(instance)
            copy = _Copy(worker.id, worker.hostname, instance, attempt, self.clock.now())
            unit.queued[instance] = worker.queued = copy
            return
        self._out.append(ToWorker(worker.id, amp.Kill(instance, attempt), reason))

    # ------------------------------------------------------------ backups
    def _backup_limits(self, unit: _Unit, now: float) -> tuple[float | None, float | None] | None:
        """``(average finished duration, average progress rate)`` if the unit
        may get backups now, else None."""
        policy = self.job.backup
        if not policy.enabled or not unit.running or not self._active(unit):
            return None
        if unit.done_count < policy.min_finished_fraction * unit.total or unit.done_count == 0:
            return None
        average = unit.finished_seconds / unit.finished_timed if unit.finished_timed else None
        rates = [_rate(c, now) for copies in unit.running.values() for c in copies if c.fraction is not None]
        return average, (sum(rates) / len(rates) if rates else None)

    def _backup_candidates(self, unit: _Unit) -> Iterable[tuple[int, _Copy]]:
        for instance, copies in unit.running.items():
            if len(copies) == 1 and instance not in unit.backed_up and instance not in unit.want_backup:
                yield instance, copies[0]

    def _find_stragglers(self, unit: _Unit, now: float) -> None:
        limits = self._backup_limits(unit, now)
        if limits is None:
            return
        average, average_rate = limits
        policy = self.job.backup
        for instance, copy in list(self._backup_candidates(unit)):
            runtime = now - copy.started
            if now < copy.started + policy.min_runtime:
                continue
            slow = average is not None and now >= _due(copy, policy, average)
            if not slow and copy.fraction is not None and average_rate:
                # below the average (not equal to it, up to rounding)
                slow = _rate(copy, now) * policy.slower_factor < average_rate * (1 - 1e-9)
            if slow:
                log.info("job %s: instance %d of %s straggles (%.1fs, progress %s): wants a backup", self.job_id,
                         instance, unit.name, runtime, copy.fraction)
                unit.want_backup.add(instance)

    # ---------------------------------------------------------- snapshots
    def _new_unit(self, spec: UnitSpec, saved: Mapping | None, replayed: _Replay | None = None) -> _Unit:
        n = spec.instance_count
        done = bytearray(n)
        starts, failures = [0] * n, [0] * n
        unknown: set[int] = set()
        unit_saved = saved["units"][spec.name] if saved is not None else None
        if unit_saved is not None:
            for i in _unranges(unit_saved.get("done", ())):
                done[i] = 1
            for i in _unranges(unit_saved.get("running", ())):
                if not done[i]:
                    unknown.add(i)
            for key, value in unit_saved.get("starts", {}).items():
                starts[int(key)] = int(value)
            for key, value in unit_saved.get("failures", {}).items():
                failures[int(key)] = int(value)
        if replayed is not None:
            for i, (is_done, started, failed, runs) in replayed.instances.get(spec.name, {}).items():
                done[i], starts[i], failures[i] = is_done, started, failed
                if runs and not is_done:
                    unknown.add(i)
                else:
                    unknown.discard(i)
        pending = _Pending(spec.data, self._rooms, (i for i in range(n) if not done[i] and i not in unknown))
        unit = _Unit(spec, pending, done, starts, failures, done_count=sum(done), unknown=unknown)
        if unit_saved is not None:
            unit.finished_seconds = float(unit_saved.get("finished_seconds", 0.0))
            unit.finished_timed = int(unit_saved.get("finished_timed", 0))
            unit.backups = int(unit_saved.get("backups", 0))
        counters = replayed.counters.get(spec.name) if replayed is not None else None
        if counters is not None:
            unit.finished_seconds, unit.finished_timed, unit.backups = counters
        unit.failed_attempts = sum(failures)
        return unit

    def _check_snapshot(self, snapshot: Mapping) -> Mapping:
        """Validate a snapshot against the job; restore its job-wide parts."""
        try:
            if snapshot.get("format") != SNAPSHOT_FORMAT:
                raise AppMasterError(f"snapshot format {snapshot.get('format')!r}, expected {SNAPSHOT_FORMAT}")
            units = snapshot["units"]
            names = {u.name: u.instance_count for u in self.job.units}
            if set(units) != set(names):
                raise AppMasterError(f"snapshot units {sorted(units)} are not the job's {sorted(names)}")
            for name, saved in units.items():
                n = names[name]
                if saved.get("instances") != n:
                    raise AppMasterError(f"snapshot unit {name!r} has {saved.get('instances')!r} instances, "
                                         f"the job {n}")
                for key in ("done", "running"):
                    for i in _unranges(saved.get(key, ())):
                        if not 0 <= i < n:
                            raise AppMasterError(f"snapshot unit {name!r}: {key} instance {i} out of range")
                for key in ("starts", "failures"):
                    for i, count in saved.get(key, {}).items():
                        if not 0 <= int(i) < n or int(count) < 0:
                            raise AppMasterError(f"snapshot unit {name!r}: bad {key} entry {i!r}: {count!r}")
                for key, kind in (("finished_seconds", float), ("finished_timed", int), ("backups", int)):
                    value = kind(saved.get(key, 0))
                    if not math.isfinite(value) or value < 0:
                        raise AppMasterError(f"snapshot unit {name!r}: bad {key} {value!r}")
            self._state = snapshot.get("state", RUNNING)
            if self._state not in (RUNNING, SUCCEEDED, FAILED):
                raise AppMasterError(f"snapshot state {self._state!r}")
            self._reason = str(snapshot.get("reason", ""))
            self._host_failures = {str(h): int(c) for h, c in snapshot.get("host_failures", {}).items()}
            # the clock is this process's: a restored entry counts from now
            until = self.clock.now() + self.job.blacklist_seconds
            self._blacklisted = {str(host): until for host in snapshot.get("blacklisted", ())}
            self._reported = set(snapshot.get("reported", ()))
            self._rooms.update({str(h): str(r) for h, r in snapshot.get("rooms", {}).items() if r})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, AppMasterError):
                raise
            raise AppMasterError(f"not a snapshot of job {self.job_id}: {exc!r}") from None
        return snapshot


class JournalError(AppMasterError):
    """A journal record that is not one :meth:`AppMasterCore.journal` makes
    for this job. ``valid``: how many records before it are good (a runtime
    may replay those and drop the rest)."""

    def __init__(self, message: str, valid: int) -> None:
        super().__init__(message)
        self.valid = valid


_MAX_TEXT = 4096     # characters of a host, room or reason in a journal record


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _flag(value: object) -> bool:
    return type(value) is int and value in (0, 1)


def _text(value: object) -> bool:
    return type(value) is str and len(value) <= _MAX_TEXT


class _Replay:
    """Journal records checked against the job and folded, last one wins:
    per unit, instance -> (done, starts, failures, runs) and its counters;
    the job-wide parts are set on ``core`` at once (they come after its
    snapshot's). Raises :class:`JournalError` at the first bad record,
    before changing anything. O(records)."""

    def __init__(self, core: AppMasterCore, journal: Sequence[Any]) -> None:
        sizes = {u.name: u.instance_count for u in core.job.units}
        self.instances: dict[str, dict[int, tuple[int, int, int, int]]] = {}
        self.counters: dict[str, tuple[float, int, int]] = {}
        state: tuple[str, str] | None = None
        hosts: dict[str, tuple[int, int, int]] = {}
        rooms: dict[str, str] = {}
        for n, record in enumerate(journal):
            if not (isinstance(record, list) and record and self._good(record, sizes)):
                raise JournalError(f"journal record {n} is not one of job {core.job_id}'s: "
                                   f"{str(record)[:200]}", n)
            tag = record[0]
            if tag == "i":
                self.instances.setdefault(record[1], {})[record[2]] = (record[3], record[4], record[5], record[6])
            elif tag == "u":
                self.counters[record[1]] = (float(record[2]), record[3], record[4])
            elif tag == "h":
                hosts[record[1]] = (record[2], record[3], record[4])
            elif tag == "m":
                rooms[record[1]] = record[2]
            else:
                state = (record[1], record[2])
        if state is not None:
            core._state, core._reason = state
        until = core.clock.now() + core.job.blacklist_seconds   # as a snapshot's entries: counted from now
        for host, (failures, listed, reported) in hosts.items():
            core._host_failures.pop(host, None)
            core._blacklisted.pop(host, None)
            core._reported.discard(host)
            if failures:
                core._host_failures[host] = failures
            if listed:
                core._blacklisted[host] = until
            if reported:
                core._reported.add(host)
        core._rooms.update(rooms)

    @staticmethod
    def _good(record: list, sizes: Mapping[str, int]) -> bool:
        tag, fields = record[0], record[1:]
        if tag == "i":
            return (len(fields) == 6 and fields[0] in sizes and type(fields[1]) is int
                    and 0 <= fields[1] < sizes[fields[0]] and _flag(fields[2]) and _count(fields[3])
                    and _count(fields[4]) and _flag(fields[5]))
        if tag == "u":
            return (len(fields) == 4 and fields[0] in sizes and type(fields[1]) in (int, float)
                    and math.isfinite(fields[1]) and fields[1] >= 0 and _count(fields[2]) and _count(fields[3]))
        if tag == "h":
            return len(fields) == 4 and _text(fields[0]) and _count(fields[1]) and _flag(fields[2]) and _flag(fields[3])
        if tag == "m":
            return len(fields) == 2 and _text(fields[0]) and _text(fields[1]) and bool(fields[1])
        if tag == "s":
            return len(fields) == 2 and fields[0] in (RUNNING, SUCCEEDED, FAILED) and _text(fields[1])
        return False


def _due(copy: _Copy, policy: BackupPolicy, average: float) -> float:
    """When a copy becomes a straggler by runtime (the same float in tick and next_wakeup)."""
    return copy.started + max(policy.min_runtime, policy.slower_factor * average)


def _rate(copy: _Copy, now: float) -> float:
    """Progress per second since the copy started (decays while it reports nothing)."""
    return (copy.fraction or 0.0) / max(now - copy.started, 1e-9)


def _pair(value: object) -> tuple[int, int] | None:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value[0], value[1]
    return None


def _ranges(sorted_ints: Iterable[int]) -> list[list[int]]:
    """``[0, 1, 2, 5]`` -> ``[[0, 3], [5, 6]]`` (half-open)."""
    out: list[list[int]] = []
    for i in sorted_ints:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _unranges(ranges: Iterable[Sequence[int]]) -> Iterable[int]:
    for start, end in ranges:
        yield from range(int(start), int(end))

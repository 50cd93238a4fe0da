"""The Fuxi scheduler as a running framework: ``mesoslike fuxi serve``.

:class:`FuxiService` is a :class:`~mesoslike.Scheduler` around one
:class:`~mesoslike.frameworks.fuxi.core.FuxiCore`. It is the imperative
shell of that pure core on two sides:

- **Level 1 (Mesos citizenship).** Offers go into the core; the commands
  that come out become driver calls — :class:`LaunchSlots` a
  ``launch_tasks`` with one task per slot, :class:`DeclineOffers` a
  ``decline_offer`` per offer, :class:`KillSlot` a ``kill_task``,
  suppress/revive the same. Rescinds, lost agents and task updates go back
  into the core.
- **Level 2 (the job runtime).** A simple AppMaster per job lives inside
  the service: every granted slot runs ONE instance of its unit (a task
  whose command is the unit's ``command`` with ``{instance}`` replaced by
  the instance number, and ``FUXI_JOB_ID``, ``FUXI_UNIT``, ``FUXI_SLOT_ID``,
  ``FUXI_INSTANCE`` in its environment). Instances are pending, running,
  finished or failed (or cancelled when their job ends first); a failed instance is retried up to ``max_attempts``
  times, then the job fails and its other slots are killed. When a slot's
  task ends the slot goes back to the core — keeping the unit's desire
  while instances still wait, returning it otherwise — and the unit's desire
  drops to what its pending and running instances still need (the
  incremental protocol: the job returns what it no longer needs).

Threads: the core is not thread-safe. Every entry point (the driver's
callbacks on the driver thread, :meth:`FuxiService.submit` and
:meth:`FuxiService.status` from the job server's thread) runs under one
lock; driver methods are thread-safe, so commands are carried out under it.

:class:`JobServer` answers job clients (:mod:`.protocol`) on its own thread;
:class:`JobClient` is the client side (``mesoslike fuxi submit`` / ``status``).
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import math
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import attrs

from mesoslike import Filters, MesoslikeError, Resources, Scheduler, TaskInfo, TaskState, TaskStatus
from mesoslike.frameworks.fuxi import protocol
from mesoslike.frameworks.fuxi.core import (
    Command,
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
from mesoslike.frameworks.fuxi.model import JobSpec, JobSpecError, UnitSpec, parse_job
from mesoslike.transport import Client, Server, Waker, parse_tcp_address

__all__ = ["FuxiService", "JobServer", "JobClient", "JobRefused", "check_runnable", "QuotaConfig", "QuotaFileError",
           "load_quota_file", "parse_quota", "read_toml", "DEFAULT_PORT", "DEFAULT_MAX_ATTEMPTS", "PENDING", "RUNNING", "FINISHED",
           "FAILED", "CANCELLED", "JOB_RUNNING", "JOB_SUCCEEDED", "JOB_FAILED"]

log = logging.getLogger("mesoslike.frameworks.fuxi.service")

DEFAULT_PORT = 5060
DEFAULT_MAX_ATTEMPTS = 3
#: ended jobs kept for ``status``
KEEP_ENDED_JOBS = 1000

# instance states
PENDING, RUNNING, FINISHED, FAILED, CANCELLED = "pending", "running", "finished", "failed", "cancelled"
# job states
JOB_RUNNING, JOB_SUCCEEDED, JOB_FAILED = "running", "succeeded", "failed"

#: task states that end an attempt as a failure of the instance's command
_FAILURES = (TaskState.FAILED, TaskState.ERROR)


# ------------------------------------------------------------ quota file
class QuotaFileError(MesoslikeError, ValueError):
    """A quota file that cannot be used; the message names the field."""


@attrs.frozen
class QuotaConfig:
    """What ``serve --quota FILE`` configures: quota groups (name -> maximum,
    None = unlimited), the global blacklist, and whether to preempt."""

    groups: Mapping[str, Resources | None] = attrs.field(factory=dict)
    blacklist: frozenset[str] = frozenset()
    preemption: bool = True


def load_quota_file(path: str | Path) -> QuotaConfig:
    """Read a quota file::

        [quota.analytics]          # a quota group and its maximum
        cpus = 8
        mem = 8192
        [quota.adhoc]              # no keys: a group without a maximum
        [blacklist]
        hosts = ["node-3"]         # no slot ever goes to these machines
        [preemption]
        enabled = true             # the default
    """
    return parse_quota(read_toml(path, "quota file", QuotaFileError))


def read_toml(path: str | Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The parsed TOML file at ``path``; ``error`` saying why it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise error(f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def parse_quota(document: Mapping[str, Any]) -> QuotaConfig:
    unknown = sorted(set(document) - {"quota", "blacklist", "preemption"})
    if unknown:
        raise QuotaFileError(f"unknown table(s) {', '.join(map(repr, unknown))}; known: blacklist, preemption, quota")
    quota = document.get("quota", {})
    if not isinstance(quota, Mapping):
        raise QuotaFileError("quota: must be tables like [quota.<group>] with cpus = 8, mem = 8192")
    groups: dict[str, Resources | None] = {}
    for name, table in quota.items():
        where = f"quota.{name}"
        if not isinstance(table, Mapping):
            raise QuotaFileError(f"{where}: must be a table ([{where}] with cpus = 8, mem = 8192)")
        parts = []
        for kind, value in table.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise QuotaFileError(f"{where}.{kind}: must be a number >= 0, got {value!r}")
            parts.append(f"{kind}:{value}")
        try:
            groups[name] = Resources.parse(";".join(parts)) if parts else None
        except MesoslikeError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
    blacklist = document.get("blacklist", {})
    if not isinstance(blacklist, Mapping) or set(blacklist) - {"hosts"}:
        raise QuotaFileError("blacklist: must be a table with hosts = [\"host\", ...]")
    hosts = blacklist.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise QuotaFileError(f"blacklist.hosts: must be a list of hostnames, got {hosts!r}")
    preemption = document.get("preemption", {})
    if not isinstance(preemption, Mapping) or set(preemption) - {"enabled"}:
        raise QuotaFileError("preemption: must be a table with enabled = true|false")
    enabled = preemption.get("enabled", True)
    if not isinstance(enabled, bool):
        raise QuotaFileError(f"preemption.enabled: must be true or false, got {enabled!r}")
    return QuotaConfig(groups, frozenset(hosts), enabled)


# ------------------------------------------------------- the job runtime
@attrs.define
class Instance:
    """One data shard of a unit, run by one slot at a time."""

    index: int
    state: str = PENDING
    attempts: int = 0          # launches
    failures: int = 0          # attempts whose command failed
    slot_id: str = ""
    hostname: str = ""
    reason: str = ""           # why the last attempt failed or was taken back


@attrs.define(eq=False)
class UnitRun:
    """A unit's instances. Counts per state, the pending queue and where
    instances finished are kept up to date as instances move (:meth:`move`),
    so that no event costs time in the number of instances."""

    spec: UnitSpec
    instances: list[Instance]
    desired: int                       # the core's desire for the unit, mirrored
    last_failure: str = ""
    revoked: int = 0                   # slots taken back (preempted, lost) while running an instance
    retries: int = 0                   # launches after an instance's first
    tally: collections.Counter = attrs.field(factory=collections.Counter)
    finished_on: collections.Counter = attrs.field(factory=collections.Counter)
    pending: collections.deque = attrs.field(factory=collections.deque)   # instance numbers, stale ones skipped

    def __attrs_post_init__(self) -> None:
        self.tally[PENDING] = len(self.instances)
        self.pending.extend(range(len(self.instances)))

    def move(self, instance: Instance, state: str) -> None:
        self.tally[instance.state] -= 1
        self.tally[state] += 1
        instance.state = state
        if state == PENDING:
            self.pending.appendleft(instance.index)   # a retried or taken-back instance goes first
        elif state == FINISHED:
            self.finished_on[instance.hostname] += 1

    def next_pending(self) -> Instance | None:
        while self.pending:
            instance = self.instances[self.pending.popleft()]
            if instance.state == PENDING:
                return instance
        return None

    def needed(self) -> int:
        """Slots its pending and running instances still need."""
        return self.tally[PENDING] + self.tally[RUNNING]

    def done(self) -> bool:
        return self.tally[FINISHED] == len(self.instances)

    def counts(self) -> dict[str, int]:
        return {"total": len(self.instances), "done": self.tally[FINISHED], "running": self.tally[RUNNING],
                "pending": self.tally[PENDING], "failed": self.tally[FAILED], "cancelled": self.tally[CANCELLED],
                "retries": self.retries}


@attrs.define(eq=False)
class JobRun:
    """The AppMaster's view of a job."""

    id: str
    spec: JobSpec
    units: dict[str, UnitRun]
    submitted: float
    state: str = JOB_RUNNING
    reason: str = ""
    ended: float | None = None


def check_runnable(job: JobSpec) -> None:
    """What the service needs beyond a valid job: a command in every unit."""
    for i, unit in enumerate(job.units):
        if not unit.command.strip():
            raise JobSpecError(f"job.units[{i}].command: a unit needs a command (what each of its instances runs)")


class FuxiService(Scheduler):
    """The Fuxi scheduler framework: one :class:`FuxiCore` and the job
    runtime, driven by a :class:`~mesoslike.SchedulerDriver` (give it with
    :meth:`attach` before the driver starts) and by job clients
    (:meth:`submit`, :meth:`status`; see :class:`JobServer`).

    ``max_attempts``: launches of an instance whose command fails before
    its job fails. ``on_event(job_id, what)`` is called (under the lock) when
    a job ends.
    """

    def __init__(self, core: FuxiCore, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        self.core = core
        self.max_attempts = max_attempts
        self.on_event = on_event or (lambda job_id, what: None)
        self.driver = None
        self.jobs: dict[str, JobRun] = {}
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self._tasks: dict[str, tuple[str, str, int]] = {}   # slot (= task) id -> job id, unit, instance
        self._lock = threading.RLock()

    def attach(self, driver) -> None:
        """The driver that carries out the core's commands."""
        self.driver = driver

    # ======================================================== job clients
    def submit(self, job: JobSpec | Mapping[str, Any]) -> str:
        """Submit a job (a :class:`JobSpec` or a parsed job file); its id.
        Raises :class:`JobSpecError` for a bad job, :class:`FuxiError` for
        one the scheduler refuses (an unknown quota group); nothing changes then."""
        spec = job if isinstance(job, JobSpec) else parse_job(job)
        check_runnable(spec)
        with self._lock:
            job_id, commands = self.core.submit(spec)
            units = {}
            for unit in spec.units:
                count = unit.instances or unit.slots
                units[unit.name] = UnitRun(unit, [Instance(i) for i in range(count)], unit.slots)
            run = JobRun(job_id, spec, units, time.monotonic())
            self.jobs[job_id] = run
            for unit in units.values():
                commands += self._trim_desire(run, unit)
            self._execute(commands)
            return job_id

    def status(self, job_id: str | None = None) -> dict:
        """Jobs (or one job) with their units: desired and granted slots,
        hosts, why a unit waits, and the instances' progress."""
        with self._lock:
            if job_id is not None and job_id not in self.jobs:
                raise FuxiError(f"unknown job {job_id!r}")
            live = self.core.status()
            scheduled = {job["id"]: {u["name"]: u for u in job["units"]} for job in live["jobs"]}
            runs = [self.jobs[job_id]] if job_id is not None else list(self.jobs.values())
            return {"jobs": [self._job_status(run, scheduled.get(run.id, {})) for run in runs],
                    "quota_groups": live["quota_groups"]}

    def _job_status(self, run: JobRun, scheduled: Mapping[str, dict]) -> dict:
        units = []
        for name, unit in run.units.items():
            core_unit = scheduled.get(name, {})
            units.append({
                "name": name, "slot": str(unit.spec.slot), "command": unit.spec.command,
                "desired": core_unit.get("desired", 0), "granted": core_unit.get("granted", 0),
                "waiting": core_unit.get("waiting", 0), "hosts": core_unit.get("hosts", {}),
                "why_waiting": core_unit.get("why_waiting", ""), "instances": unit.counts(),
                "finished_on": dict(sorted(unit.finished_on.items())), "last_failure": unit.last_failure,
                "revoked": unit.revoked})
        totals = {key: sum(u["instances"][key] for u in units)
                  for key in ("total", "done", "running", "pending", "failed", "cancelled", "retries")}
        end = run.ended if run.ended is not None else time.monotonic()
        return {"id": run.id, "name": run.spec.name, "state": run.state, "reason": run.reason,
                "quota_group": run.spec.quota_group, "priority": run.spec.priority, "policy": run.spec.policy,
                "elapsed": round(end - run.submitted, 3), "instances": totals, "units": units}

    # ========================================================== callbacks
    def registered(self, driver, framework_id, master_info) -> None:
        log.info("registered as framework %s with master %s", framework_id, master_info.address)
        with self._lock:
            self.driver = driver
            if self.core.needs_offers():
                driver.revive_offers()   # a revive made before the subscription was dropped

    def reregistered(self, driver, master_info) -> None:
        with self._lock:
            self.driver = driver
            if self._tasks:
                driver.reconcile_tasks(sorted(self._tasks))   # unknown tasks come back as TASK_LOST
            if self.core.needs_offers():
                driver.revive_offers()

    def resource_offers(self, driver, offers) -> None:
        with self._lock:
            self.driver = driver
            try:
                commands = self.core.on_offers(list(offers))
            except Exception:
                for offer in offers:   # a bug in the core must not hold the cluster's resources
                    driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))
                raise
            self._execute(commands)

    def offer_rescinded(self, driver, offer_id) -> None:
        with self._lock:
            self.core.on_offer_rescinded(offer_id)

    def agent_lost(self, driver, agent_id) -> None:
        with self._lock:
            self._execute(self.core.on_agent_lost(agent_id))

    def status_update(self, driver, status: TaskStatus) -> None:
        with self._lock:
            entry = self._tasks.get(status.task_id)
            if entry is None or not status.terminal:
                return   # a task of an ended job or a slot taken back; or still running
            job_id, unit_name, index = entry
            run = self.jobs[job_id]
            unit = run.units[unit_name]
            instance = unit.instances[index]
            slot_id = status.task_id
            why = _describe(status)
            if status.state == TaskState.FINISHED:
                del self._tasks[slot_id]
                instance.slot_id, instance.reason = "", ""
                unit.move(instance, FINISHED)
                self._slot_done(run, unit, slot_id)
            elif status.state in _FAILURES:
                del self._tasks[slot_id]
                instance.failures += 1
                instance.slot_id, instance.reason = "", why
                unit.last_failure = f"instance {index} on {instance.hostname}: {why}"
                log.info("job %s: %s", job_id, unit.last_failure)
                if instance.failures >= self.max_attempts:
                    unit.move(instance, FAILED)
                    self._slot_done(run, unit, slot_id)
                    self._end_job(run, JOB_FAILED, f"unit {unit_name} instance {index} failed "
                                                   f"{instance.failures} time(s); last: {why}")
                else:
                    unit.move(instance, PENDING)
                    self._slot_done(run, unit, slot_id)
            else:
                # killed, lost, dropped, gone: the slot is gone, not the instance's fault
                commands = self._core_call(self.core.on_slot_lost, slot_id, why)
                if slot_id in self._tasks:   # the core did not know the slot any more
                    self._take_back(slot_id, why)
                self._execute(commands)
            self._check_done(run)

    def error(self, driver, message) -> None:
        log.error("framework error: %s", message)
        self.errors.append(message)

    # ================================================= the job runtime
    def _slot_done(self, run: JobRun, unit: UnitRun, slot_id: str) -> None:
        """The slot's task ended: give the slot back, keeping the unit's
        desire while instances still wait for a slot; then lower the desire
        to what the unit still needs."""
        keep = unit.tally[PENDING] > 0 and run.state == JOB_RUNNING
        commands = self._core_call(self.core.release, slot_id, keep)
        if not keep:
            unit.desired = max(0, unit.desired - 1)
        if run.state == JOB_RUNNING:
            commands += self._trim_desire(run, unit)
        self._execute(commands)

    def _trim_desire(self, run: JobRun, unit: UnitRun) -> list[Command]:
        needed = unit.needed()
        if needed >= unit.desired:
            return []
        unit.desired = needed
        return self._core_call(self.core.update_desire, run.id, unit.spec.name, needed)

    def _check_done(self, run: JobRun) -> None:
        if run.state == JOB_RUNNING and all(unit.done() for unit in run.units.values()):
            self._end_job(run, JOB_SUCCEEDED, "")

    def _end_job(self, run: JobRun, state: str, reason: str) -> None:
        run.state, run.reason, run.ended = state, reason, time.monotonic()
        for unit in run.units.values():
            for instance in unit.instances:
                if instance.state == RUNNING:
                    self._tasks.pop(instance.slot_id, None)   # its kill's update is not news
                    instance.slot_id = ""
                if instance.state in (RUNNING, PENDING):
                    unit.move(instance, CANCELLED)
            unit.pending.clear()
            unit.desired = 0
        log.info("job %s (%s) %s%s", run.id, run.spec.name, state, f": {reason}" if reason else "")
        self._execute(self._core_call(self.core.finish_job, run.id))
        self.on_event(run.id, state)
        ended = [job for job in self.jobs.values() if job.state != JOB_RUNNING]
        for job in ended[:max(0, len(ended) - KEEP_ENDED_JOBS)]:
            del self.jobs[job.id]

    def _assign(self, slot: Slot) -> bool:
        """A granted slot gets the unit's next pending instance; False if
        no instance waits (the slot goes back)."""
        run = self.jobs.get(slot.job_id)
        unit = run.units.get(slot.unit) if run is not None and run.state == JOB_RUNNING else None
        instance = unit.next_pending() if unit is not None else None
        if instance is None:
            return False
        instance.slot_id, instance.hostname = slot.id, slot.hostname
        unit.move(instance, RUNNING)
        instance.attempts += 1
        unit.retries += instance.attempts > 1
        self._tasks[slot.id] = (slot.job_id, slot.unit, instance.index)
        return True

    def _take_back(self, slot_id: str, reason: str) -> None:
        """The slot was revoked (preempted, its agent lost): its instance waits again."""
        entry = self._tasks.pop(slot_id, None)
        if entry is None:
            return
        job_id, unit_name, index = entry
        unit = self.jobs[job_id].units[unit_name]
        instance = unit.instances[index]
        instance.slot_id, instance.reason = "", reason
        unit.move(instance, PENDING)
        unit.revoked += 1

    def _task(self, slot: Slot) -> TaskInfo:
        job_id, unit_name, index = self._tasks[slot.id]
        run = self.jobs[job_id]
        unit = run.units[unit_name]
        return TaskInfo(task_id=slot.id, agent_id=slot.agent_id,
                        command=unit.spec.command.replace("{instance}", str(index)), resources=slot.resources,
                        name=f"{run.spec.name}.{unit_name}.{index}",
                        environment={"FUXI_JOB_ID": job_id, "FUXI_UNIT": unit_name, "FUXI_SLOT_ID": slot.id,
                                     "FUXI_INSTANCE": str(index)})

    # ==================================================== the commands
    def _core_call(self, method, *args) -> list[Command]:
        try:
            return method(*args)
        except FuxiError as exc:   # a slot or job the core no longer knows: nothing to do
            log.warning("%s%r: %s", method.__name__, args, exc)
            return []

    def _execute(self, commands: Iterable[Command]) -> None:
        """Carry out the core's commands in order; what handling one of them
        asks of the core comes after."""
        queue = collections.deque(commands)
        driver = self.driver
        while queue:
            command = queue.popleft()
            if isinstance(command, SlotGranted):
                if not self._assign(command.slot):
                    queue.extend(self._core_call(self.core.release, command.slot.id, False))
            elif isinstance(command, SlotRevoked):
                self._take_back(command.slot_id, command.reason)
            elif driver is None:
                log.warning("no driver attached: %s dropped", type(command).__name__)
            elif isinstance(command, LaunchSlots):
                tasks = [self._task(slot) for slot in command.slots if slot.id in self._tasks]
                driver.launch_tasks(list(command.offer_ids), tasks, Filters(refuse_seconds=command.refuse_seconds))
            elif isinstance(command, DeclineOffers):
                for offer_id in command.offer_ids:
                    driver.decline_offer(offer_id, Filters(refuse_seconds=command.refuse_seconds))
            elif isinstance(command, KillSlot):
                log.info("killing slot %s: %s", command.slot_id, command.reason)
                driver.kill_task(command.slot_id)
            elif isinstance(command, SuppressOffers):
                driver.suppress_offers()
            elif isinstance(command, ReviveOffers):
                driver.revive_offers()
            else:  # pragma: no cover - a command this service does not know
                log.error("unknown command from the core: %r", command)


def _describe(status: TaskStatus) -> str:
    detail = status.message or status.reason
    return f"{status.state}: {detail}" if detail else status.state


# ------------------------------------------------------------ job server
class JobServer:
    """Answers job clients (:mod:`.protocol`) on ``address`` on its own
    thread; every request goes to the service under its lock. A bad request
    gets an ERROR; nothing a client sends stops the server."""

    def __init__(self, service: FuxiService, address: str) -> None:
        self.service = service
        self._server = Server(address, max_message_size=protocol.MAX_FRAME)   # binds now: errors surface here
        self.address = self._server.address
        self._waker = Waker()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fuxi-job-server")

    def start(self) -> JobServer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._waker.wake()
        if self._thread.is_alive():
            self._thread.join(timeout)
        else:
            self._server.close()
        self._waker.close()

    def _loop(self) -> None:
        server = self._server
        try:
            while not self._stopping.is_set():
                if not server.wait(None, self._waker):
                    continue
                for peer, frame in server.receive_frames():
                    if peer is None or not isinstance(frame, (bytes, bytearray)):
                        log.warning("ignoring a malformed request: %s", frame)
                        continue
                    server.socket.send_multipart([peer, self.handle(frame)])
        finally:
            server.close()

    def handle(self, frame: bytes) -> bytes:
        """The answer to one request frame."""
        request_id = 0
        try:
            request = protocol.decode(frame)
            request_id = request.id
            if isinstance(request, protocol.Submit):
                answer = protocol.Submitted(request_id, self.service.submit(request.document))
            elif isinstance(request, protocol.Status):
                document = self.service.status(request.job_id or None)
                answer = protocol.StatusReply(request_id, json.dumps(document))
            else:
                answer = protocol.Error(request_id, f"{request.TYPE} is not a request")
        except (protocol.ProtocolError, JobSpecError, FuxiError) as exc:
            answer = protocol.Error(request_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must not take the service down
            log.exception("request failed")
            answer = protocol.Error(request_id, f"internal error: {type(exc).__name__}: {exc}")
        return protocol.encode(answer)


# ------------------------------------------------------------ job client
class JobRefused(MesoslikeError):
    """The service answered a request with an ERROR (the message is its reason)."""


class JobClient:
    """Talks to a Fuxi service at ``tcp://HOST:PORT``: :meth:`submit` and
    :meth:`status`. Raises :class:`JobRefused` when the service refuses,
    :class:`MesoslikeError` when it does not answer within ``timeout`` s."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        parse_tcp_address(address)
        self.address = address
        self.timeout = timeout
        self._client = Client(address, max_message_size=protocol.MAX_FRAME)
        self._ids = itertools.count(1)

    def submit(self, document: Mapping[str, Any]) -> str:
        """Submit a parsed job file; the job's id."""
        return self._ask(protocol.Submit(next(self._ids), dict(document))).job_id

    def status(self, job_id: str | None = None) -> dict:
        return json.loads(self._ask(protocol.Status(next(self._ids), job_id or "")).document)

    def _ask(self, request):
        self._client.socket.send(protocol.encode(request))
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self._client.wait(left):
                continue
            try:
                answer = protocol.decode(self._client.socket.recv())
            except protocol.ProtocolError as exc:
                raise MesoslikeError(f"bad answer from the Fuxi service at {self.address}: {exc}") from None
            if answer.id not in (request.id, 0):   # 0: the service could not read the request
                continue   # the late answer to an earlier request that timed out
            if isinstance(answer, protocol.Error):
                raise JobRefused(answer.message)
            return answer
        raise MesoslikeError(f"no answer from a Fuxi service at {self.address} within {self.timeout:g}s "
                             "(is `mesoslike fuxi serve` running there?)")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
- **Level 2 (the job runtime).** Every submitted job gets an **AppMaster
  process** (:mod:`.appmaster`, around the pure
  :class:`~mesoslike.frameworks.fuxi.appmaster_core.AppMasterCore`),
  started again — same address, same snapshot — whenever it exits while
  its job runs. Every granted slot runs a **worker task**
  (:mod:`.worker`) that connects to its job's AppMaster and runs the
  instances it is handed. The AppMaster tells the service what the job
  needs over the job server (:mod:`.protocol`): SET_DESIRE (the incremental
  protocol: the unit's outstanding desire), RELEASE_SLOT, BLACKLIST_HOST,
  REPORT_HOST (the global blacklist), PROGRESS (kept for ``status``) and
  JOB_ENDED. A worker task that ends gives its slot back keeping the
  unit's desire (the AppMaster's SET_DESIRE says what the job wants); a
  worker killed or lost is a slot lost (:meth:`FuxiCore.on_slot_lost`).

Threads: the core is not thread-safe. Every entry point (the driver's
callbacks on the driver thread, job clients and AppMasters on the job
server's thread, the AppMaster supervisor's thread) runs under one lock;
driver methods are thread-safe, so commands are carried out under it.

:class:`JobServer` answers job clients and AppMasters on its own thread;
:class:`JobClient` is the client side (``mesoslike fuxi submit`` / ``status``).
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import math
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
from mesoslike.frameworks.fuxi.model import LT_CLUSTER, JobSpec, JobSpecError, parse_job
from mesoslike.transport import Client, Server, Waker, parse_tcp_address

__all__ = ["FuxiService", "JobServer", "JobClient", "JobRefused", "check_runnable", "job_document", "QuotaConfig",
           "QuotaFileError", "load_quota_file", "parse_quota", "read_toml", "DEFAULT_PORT", "JOB_RUNNING",
           "JOB_SUCCEEDED", "JOB_FAILED", "APPMASTER_MODULE", "WORKER_MODULE"]

log = logging.getLogger("mesoslike.frameworks.fuxi.service")

DEFAULT_PORT = 5060
#: ended jobs kept for ``status``
KEEP_ENDED_JOBS = 1000
#: AppMaster restarts after which its job fails
MAX_APPMASTER_RESTARTS = 10
#: worker tasks of a job that may fail (not start, crash) before the job fails
MAX_WORKER_FAILURES = 20
#: seconds a released slot's worker has to exit by itself before its task is killed
RELEASE_GRACE = 5.0
#: seconds between the supervisor's looks at the AppMasters
SUPERVISE_INTERVAL = 0.2
APPMASTER_MODULE = "mesoslike.frameworks.fuxi.appmaster"
WORKER_MODULE = "mesoslike.frameworks.fuxi.worker"

# job states
JOB_RUNNING, JOB_SUCCEEDED, JOB_FAILED = "running", "succeeded", "failed"

#: task states of a worker that ended by itself (any other terminal state: the slot was lost)
_ENDED_BY_ITSELF = (TaskState.FINISHED, TaskState.FAILED, TaskState.ERROR)


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
def check_runnable(job: JobSpec) -> None:
    """What the service needs beyond a valid job: a command in every unit."""
    for i, unit in enumerate(job.units):
        if not unit.command.strip():
            raise JobSpecError(f"job.units[{i}].command: a unit needs a command (what each of its instances runs)")


def job_document(spec: JobSpec) -> dict[str, Any]:
    """The job file (as parsed TOML, DESIGN §3.5) that :func:`parse_job` reads back as ``spec``."""
    units = []
    for unit in spec.units:
        table: dict[str, Any] = {
            "name": unit.name, "slots": unit.slots, "resources": str(unit.slot), "command": unit.command,
            "instances": unit.instances, "all_or_nothing": unit.all_or_nothing,
            "locality": [{"cluster": True, "count": pref.count} if pref.kind == LT_CLUSTER
                         else {pref.kind: pref.target, "count": pref.count} for pref in unit.locality],
            "blacklist": sorted(unit.blacklist), "data": [list(hosts) for hosts in unit.data],
            "after": list(unit.after), "max_attempts": unit.max_attempts}
        if unit.priority is not None:
            table["priority"] = unit.priority
        if unit.max_per_machine is not None:
            table["max_per_machine"] = unit.max_per_machine
        units.append(table)
    return {"job": {"name": spec.name, "quota_group": spec.quota_group, "priority": spec.priority,
                    "policy": spec.policy, "units": units, "backup": attrs.asdict(spec.backup),
                    "blacklist_after": spec.blacklist_after}}


def _initial_desire(unit) -> int:
    """A unit's desire until its AppMaster says: its instances (at most its
    slots), none while units it comes after have not finished."""
    return 0 if unit.after else min(unit.slots, unit.instance_count)


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        return sock.getsockname()[1]


@attrs.define(eq=False)
class AppMasterProcess:
    """A job's AppMaster: the command that starts it (again), its process
    and its log (``<work dir>/<job>/appmaster.log``, appended to by every start)."""

    address: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    restarts: int = 0
    exits: list[str] = attrs.field(factory=list)

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self.popen = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log_file,
                                          stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                                          close_fds=True)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def exited(self) -> int | None:
        """The exit status if the process ended (reaped now), else None."""
        return self.popen.poll() if self.popen is not None else None

    def kill(self, signum: int = signal.SIGTERM) -> None:
        if self.popen is not None and self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def log_tail(self, size: int = 800) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - size))
                return handle.read().decode(errors="replace").strip()
        except OSError:
            return ""


@attrs.define(eq=False)
class WorkerTask:
    """The worker task in a granted slot. ``in_core``: the core still
    counts the slot as granted."""

    slot: Slot
    room: str
    state: str = TaskState.STAGING
    in_core: bool = True
    release_deadline: float | None = None


@attrs.define(eq=False)
class JobRun:
    """The service's view of a job: its AppMaster, its desire per unit (as
    the AppMaster last said) and its last progress report."""

    id: str
    spec: JobSpec
    token: str
    submitted: float
    desire: dict[str, int]
    directory: Path | None = None
    appmaster: AppMasterProcess | None = None
    state: str = JOB_RUNNING
    reason: str = ""
    ended: float | None = None
    report: dict | None = None
    worker_failures: int = 0


class FuxiService(Scheduler):
    """The Fuxi scheduler framework: one :class:`FuxiCore`, driven by a
    :class:`~mesoslike.SchedulerDriver` (give it with :meth:`attach` before
    the driver starts), by job clients (:meth:`submit`, :meth:`status`) and
    by the jobs' AppMasters (:meth:`appmaster_request`; see :class:`JobServer`).

    ``work_dir``: where each job's document, snapshot and AppMaster log go
    (``<work_dir>/<job id>/``; default: a temporary directory removed by
    :meth:`stop`). ``appmaster_ip``: the address AppMasters bind for their
    workers. ``launch_appmasters=False`` starts no processes (the AppMaster
    protocol is then driven by hand, e.g. in tests). ``on_event(job_id,
    what)`` is called (under the lock) when a job ends.
    """

    def __init__(self, core: FuxiCore, *, work_dir: str | os.PathLike | None = None,
                 appmaster_ip: str = "127.0.0.1", launch_appmasters: bool = True, python: str = sys.executable,
                 appmaster_log_level: str = "info", max_appmaster_restarts: int = MAX_APPMASTER_RESTARTS,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.core = core
        self.on_event = on_event or (lambda job_id, what: None)
        self.driver = None
        self.jobs: dict[str, JobRun] = {}
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self.service_address = ""          # the job server's address, for the AppMasters (JobServer sets it)
        self.appmaster_ip = appmaster_ip
        self.launch_appmasters = launch_appmasters
        self.python = python
        self.appmaster_log_level = appmaster_log_level
        self.max_appmaster_restarts = max_appmaster_restarts
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self._own_work_dir = False
        self._workers: dict[str, WorkerTask] = {}   # slot (= task) id -> its worker task
        self._rooms: dict[str, str] = {}             # agent id -> its room (from offers)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def attach(self, driver) -> None:
        """The driver that carries out the core's commands."""
        self.driver = driver

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="mesoslike-fuxi-"))
            self._own_work_dir = True
        return self._work_dir

    # ===================================================== job clients
    def submit(self, job: JobSpec | Mapping[str, Any]) -> str:
        """Submit a job (a :class:`JobSpec` or a parsed job file); its id.
        Raises :class:`JobSpecError` for a bad job, :class:`FuxiError` for
        one the scheduler refuses (an unknown quota group); nothing changes then."""
        spec = job if isinstance(job, JobSpec) else parse_job(job)
        check_runnable(spec)
        document = job_document(spec) if isinstance(job, JobSpec) else dict(job)
        with self._lock:
            if self.launch_appmasters and not self.service_address:
                raise FuxiError("the service has no job server address for AppMasters to reach it")
            job_id, commands = self.core.submit(spec)
            run = JobRun(job_id, spec, secrets.token_hex(16), time.monotonic(),
                         {unit.name: _initial_desire(unit) for unit in spec.units})
            self.jobs[job_id] = run
            for unit in spec.units:
                if run.desire[unit.name] != unit.slots:
                    commands += self.core.update_desire(job_id, unit.name, run.desire[unit.name])
            if self.launch_appmasters:
                try:
                    self._start_appmaster(run, document)
                except OSError as exc:
                    self._end_job(run, JOB_FAILED, f"cannot start the AppMaster: {exc}")
                    raise FuxiError(f"cannot start the AppMaster of {job_id}: {exc}") from None
            self._execute(commands)
            return job_id

    def status(self, job_id: str | None = None) -> dict:
        """Jobs (or one job) with their units: desired and granted slots,
        hosts, why a unit waits, the instances' progress (the AppMaster's
        last report) and the AppMaster process."""
        with self._lock:
            if job_id is not None and job_id not in self.jobs:
                raise FuxiError(f"unknown job {job_id!r}")
            live = self.core.status()
            scheduled = {job["id"]: {u["name"]: u for u in job["units"]} for job in live["jobs"]}
            runs = [self.jobs[job_id]] if job_id is not None else list(self.jobs.values())
            return {"jobs": [self._job_status(run, scheduled.get(run.id, {})) for run in runs],
                    "quota_groups": live["quota_groups"], "global_blacklist": sorted(self.core.global_blacklist)}

    def _job_status(self, run: JobRun, scheduled: Mapping[str, dict]) -> dict:
        report = run.report if isinstance(run.report, Mapping) else {}
        reported_units = report.get("units") if isinstance(report.get("units"), Mapping) else {}
        units = []
        for spec in run.spec.units:
            core_unit = scheduled.get(spec.name, {})
            counts = reported_units.get(spec.name) if isinstance(reported_units.get(spec.name), Mapping) else {}
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
        end = run.ended if run.ended is not None else time.monotonic()
        appmaster = run.appmaster
        return {"id": run.id, "name": run.spec.name, "state": run.state, "reason": run.reason,
                "quota_group": run.spec.quota_group, "priority": run.spec.priority, "policy": run.spec.policy,
                "elapsed": round(end - run.submitted, 3), "instances": totals,
                "blacklisted": list(report.get("blacklisted", [])), "units": units,
                "appmaster": None if appmaster is None else {
                    "pid": appmaster.pid, "address": appmaster.address, "restarts": appmaster.restarts,
                    "running": appmaster.exited() is None, "log": str(appmaster.log_path)}}

    # ====================================================== AppMasters
    def appmaster_request(self, request) -> None:
        """Carry out what a job's AppMaster asks (a :data:`protocol.APPMASTER_REQUESTS`
        message). Raises :class:`FuxiError` for a request it refuses."""
        with self._lock:
            run = self.jobs.get(request.job_id)
            if run is None:
                raise FuxiError(f"unknown job {request.job_id!r}")
            if not secrets.compare_digest(request.token, run.token):
                raise FuxiError(f"wrong token for job {request.job_id}")
            if run.state != JOB_RUNNING:
                return   # the job ended: whatever its AppMaster still says is moot
            units = {unit.name for unit in run.spec.units}
            if isinstance(request, protocol.SetDesire):
                if request.unit not in units:
                    raise FuxiError(f"unknown unit {request.unit!r} of job {run.id}")
                if request.slots < 0:
                    raise FuxiError(f"desired slots must be >= 0, got {request.slots}")
                run.desire[request.unit] = request.slots
                self._execute(self.core.update_desire(run.id, request.unit, request.slots))
            elif isinstance(request, protocol.ReleaseSlot):
                worker = self._workers.get(request.slot)
                if worker is not None and worker.slot.job_id != run.id:
                    raise FuxiError(f"slot {request.slot!r} is not a slot of job {run.id}")
                if worker is not None and worker.in_core:
                    worker.in_core = False
                    worker.release_deadline = time.monotonic() + RELEASE_GRACE
                    self._execute(self._core_call(self.core.release, request.slot, True))
            elif isinstance(request, protocol.AvoidHosts):
                if request.unit not in units:
                    raise FuxiError(f"unknown unit {request.unit!r} of job {run.id}")
                if not all(isinstance(host, str) and host for host in request.hosts):
                    raise FuxiError("hosts must be non-empty hostnames")
                self.core.avoid_hosts(run.id, request.unit, request.hosts)
            elif isinstance(request, (protocol.BlacklistHost, protocol.ReportHost)):
                if not request.host:
                    raise FuxiError("a host must be a non-empty hostname")
                if isinstance(request, protocol.BlacklistHost):
                    log.info("job %s blacklists %s", run.id, request.host)
                    for name in units:
                        self.core.blacklist(run.id, name, request.host)
                else:
                    log.warning("job %s reports %s: added to the global blacklist", run.id, request.host)
                    self.core.global_blacklist.add(request.host)
            elif isinstance(request, protocol.Progress):
                try:
                    json.dumps(request.report)
                except (TypeError, ValueError) as exc:
                    raise FuxiError(f"a progress report must be JSON-able: {exc}") from None
                run.report = request.report
            elif isinstance(request, protocol.JobEnded):
                self._end_job(run, JOB_SUCCEEDED if request.succeeded else JOB_FAILED, request.reason)
            else:
                raise FuxiError(f"{request.TYPE} is not an AppMaster request")

    def _start_appmaster(self, run: JobRun, document: Mapping[str, Any]) -> None:
        directory = self.work_dir / run.id
        directory.mkdir(parents=True, exist_ok=True)
        run.directory = directory
        job_path = directory / "job.json"
        job_path.write_text(json.dumps(document))
        address = f"tcp://{self.appmaster_ip}:{_free_port(self.appmaster_ip)}"
        command = [self.python, "-m", APPMASTER_MODULE, "--service", self.service_address, "--job-id", run.id,
                   "--bind", address, "--snapshot", str(directory / "snapshot.json"), "--job", str(job_path),
                   "--log-level", self.appmaster_log_level]
        env = dict(os.environ)
        env["FUXI_AM_TOKEN"] = run.token
        run.appmaster = AppMasterProcess(address, command, env, directory / "appmaster.log")
        run.appmaster.start()
        log.info("job %s: AppMaster pid %d on %s", run.id, run.appmaster.pid, address)
        self._start_supervisor()

    def _start_supervisor(self) -> None:
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise_loop, daemon=True, name="fuxi-supervisor")
            self._supervisor.start()

    def _supervise_loop(self) -> None:
        while not self._stopping.wait(SUPERVISE_INTERVAL):
            try:
                self.supervise()
            except Exception:  # noqa: BLE001 - the supervisor must go on
                log.exception("supervising the AppMasters failed")

    def supervise(self) -> None:
        """One look: restart the AppMasters that exited while their jobs run
        (a job whose AppMaster exited too often fails); kill worker tasks
        that outlived their release."""
        with self._lock:
            now = time.monotonic()
            for run in list(self.jobs.values()):
                appmaster = run.appmaster
                if appmaster is None:
                    continue
                status = appmaster.exited()   # reaps an AppMaster that ended with its job too
                if status is None or run.state != JOB_RUNNING:
                    continue
                appmaster.exits.append(f"exit status {status}")
                if appmaster.restarts >= self.max_appmaster_restarts:
                    self._end_job(run, JOB_FAILED, f"the AppMaster exited {appmaster.restarts + 1} times "
                                                   f"(last: exit status {status}): {appmaster.log_tail(300)}")
                    continue
                appmaster.restarts += 1
                log.warning("job %s: the AppMaster (pid %d) exited with status %d: restart %d", run.id,
                            appmaster.pid, status, appmaster.restarts)
                try:
                    appmaster.start()
                except OSError as exc:
                    self._end_job(run, JOB_FAILED, f"cannot restart the AppMaster: {exc}")
            for slot_id, worker in list(self._workers.items()):
                if worker.release_deadline is not None and now >= worker.release_deadline and self.driver:
                    worker.release_deadline = None
                    log.info("worker %s did not exit after its release: killing it", slot_id)
                    self.driver.kill_task(slot_id)

    def stop(self) -> None:
        """Stop supervising and stop the AppMasters (the worker tasks end with
        the framework); remove the work directory if it is a temporary one."""
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(5)
        with self._lock:
            appmasters = [run.appmaster for run in self.jobs.values() if run.appmaster is not None]
        for appmaster in appmasters:
            appmaster.kill(signal.SIGTERM)
        for appmaster in appmasters:
            if appmaster.popen is not None:
                try:
                    appmaster.popen.wait(5)
                except subprocess.TimeoutExpired:
                    appmaster.kill(signal.SIGKILL)
        if self._own_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    # ======================================================= callbacks
    def registered(self, driver, framework_id, master_info) -> None:
        log.info("registered as framework %s with master %s", framework_id, master_info.address)
        with self._lock:
            self.driver = driver
            if self.core.needs_offers():
                driver.revive_offers()   # a revive made before the subscription was dropped

    def reregistered(self, driver, master_info) -> None:
        with self._lock:
            self.driver = driver
            if self._workers:
                driver.reconcile_tasks(sorted(self._workers))   # unknown tasks come back as TASK_LOST
            if self.core.needs_offers():
                driver.revive_offers()

    def resource_offers(self, driver, offers) -> None:
        with self._lock:
            self.driver = driver
            for offer in offers:
                self._rooms[offer.agent_id] = str((offer.attributes or {}).get("room", ""))
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
            worker = self._workers.get(status.task_id)
            if worker is None:
                return   # a worker of an ended job
            worker.state = status.state
            if not status.terminal:
                return
            del self._workers[status.task_id]
            slot = worker.slot
            run = self.jobs.get(slot.job_id)
            why = _describe(status)
            if status.state in (TaskState.FAILED, TaskState.ERROR) and run is not None \
                    and run.state == JOB_RUNNING:
                run.worker_failures += 1
                log.warning("job %s: worker %s on %s ended %s", run.id, slot.id, slot.hostname, why)
                if run.worker_failures >= MAX_WORKER_FAILURES:
                    self._end_job(run, JOB_FAILED, f"{run.worker_failures} worker tasks failed; last on "
                                                   f"{slot.hostname}: {why}")
                    return
            if not worker.in_core:
                return
            worker.in_core = False
            if status.state in _ENDED_BY_ITSELF:
                # the slot goes back; the unit keeps the desire its AppMaster last stated
                self._execute(self._core_call(self.core.release, slot.id, True))
            else:
                self._execute(self.core.on_slot_lost(slot.id, why))

    def error(self, driver, message) -> None:
        log.error("framework error: %s", message)
        self.errors.append(message)

    # ================================================= the job runtime
    def _end_job(self, run: JobRun, state: str, reason: str) -> None:
        if run.state != JOB_RUNNING:
            return
        run.state, run.reason, run.ended = state, reason, time.monotonic()
        log.info("job %s (%s) %s%s", run.id, run.spec.name, state, f": {reason}" if reason else "")
        for slot_id, worker in list(self._workers.items()):
            if worker.slot.job_id == run.id:
                worker.in_core = False
                del self._workers[slot_id]   # their kills' updates are not news
        self._execute(self._core_call(self.core.finish_job, run.id))
        if state == JOB_FAILED and run.appmaster is not None:
            run.appmaster.kill(signal.SIGTERM)   # an AppMaster that ended its job exits by itself
        self.on_event(run.id, state)
        ended = [job for job in self.jobs.values() if job.state != JOB_RUNNING]
        for job in ended[:max(0, len(ended) - KEEP_ENDED_JOBS)]:
            del self.jobs[job.id]

    def _granted(self, slot: Slot) -> bool:
        """A granted slot gets a worker task; False if its job is over (the slot goes back)."""
        run = self.jobs.get(slot.job_id)
        if run is None or run.state != JOB_RUNNING:
            return False
        self._workers[slot.id] = WorkerTask(slot, self._rooms.get(slot.agent_id, ""))
        return True

    def _task(self, worker: WorkerTask) -> TaskInfo:
        slot = worker.slot
        run = self.jobs[slot.job_id]
        address = run.appmaster.address if run.appmaster is not None else ""
        return TaskInfo(task_id=slot.id, agent_id=slot.agent_id,
                        command=f"exec {shlex.quote(self.python)} -m {WORKER_MODULE}", resources=slot.resources,
                        name=f"{run.spec.name}.{slot.unit}.worker",
                        environment={"FUXI_APPMASTER": address, "FUXI_SLOT_ID": slot.id, "FUXI_JOB_ID": slot.job_id,
                                     "FUXI_UNIT": slot.unit, "FUXI_HOSTNAME": slot.hostname,
                                     "FUXI_ROOM": worker.room})

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
                if not self._granted(command.slot):
                    queue.extend(self._core_call(self.core.release, command.slot.id, False))
            elif isinstance(command, SlotRevoked):
                worker = self._workers.get(command.slot_id)
                if worker is not None:
                    worker.in_core = False   # the core dropped it; the worker's task is killed or lost
            elif driver is None:
                log.warning("no driver attached: %s dropped", type(command).__name__)
            elif isinstance(command, LaunchSlots):
                tasks = [self._task(self._workers[slot.id]) for slot in command.slots if slot.id in self._workers]
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
    """Answers job clients and AppMasters (:mod:`.protocol`) on ``address``
    on its own thread; every request goes to the service under its lock. A
    bad request gets an ERROR; nothing a client sends stops the server. The
    service's AppMasters are told to reach it here."""

    def __init__(self, service: FuxiService, address: str) -> None:
        self.service = service
        self._server = Server(address, codec=protocol.CODEC)   # binds now: errors surface here
        self.address = self._server.address
        service.service_address = self.address
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
                    server.send_frame(peer, self.handle(frame))
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
            elif isinstance(request, protocol.APPMASTER_REQUESTS):
                self.service.appmaster_request(request)
                answer = protocol.Ok(request_id)
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
        self._client = Client(address, codec=protocol.CODEC)
        self._ids = itertools.count(1)

    def submit(self, document: Mapping[str, Any]) -> str:
        """Submit a parsed job file; the job's id."""
        return self._ask(protocol.Submit(next(self._ids), dict(document))).job_id

    def status(self, job_id: str | None = None) -> dict:
        return json.loads(self._ask(protocol.Status(next(self._ids), job_id or "")).document)

    def _ask(self, request):
        self._client.send(request)
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self._client.wait(left):
                continue
            for _, answer in self._client.receive():
                if isinstance(answer, protocol.ProtocolError):
                    raise MesoslikeError(f"bad answer from the Fuxi service at {self.address}: {answer}")
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

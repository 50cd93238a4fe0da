"""The Fuxi scheduler as a running framework: ``mesoslike fuxi serve``.

:class:`FuxiService` is a :class:`~mesoslike.Scheduler` around one
:class:`~mesoslike.frameworks.fuxi.jobs.JobCore` (which holds the
scheduling :class:`~mesoslike.frameworks.fuxi.core.FuxiCore`). It decides
nothing itself: every stimulus becomes an event for the core, and the
core's commands become driver calls and process actions.

- **Level 1 (Mesos citizenship).** Offers, rescinds, lost agents and task
  updates go into the core; :class:`LaunchSlots` becomes a ``launch_tasks``
  with one worker task per slot, :class:`DeclineOffers` a ``decline_offer``
  per offer, :class:`KillSlot` a ``kill_task``, suppress/revive/reconcile
  the same.
- **Level 2 (the job runtime).** Every submitted job gets an **AppMaster
  process** (:mod:`.appmaster`) — :class:`StartAppMaster`, and
  :class:`RestartAppMaster` (same address, same snapshot) whenever the
  supervisor sees it exit while its job runs. Every granted slot runs a
  **worker task** (:mod:`.worker`) that connects to its job's AppMaster. The
  AppMasters' requests over the job server (:mod:`.protocol`) go into the
  core as they are; what they mean is the core's (docs/fuxi-jobs.rst).

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
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import attrs

from mesoslike import Filters, MesoslikeError, Scheduler, TaskInfo, TaskStatus
from mesoslike.frameworks.fuxi import protocol
from mesoslike.frameworks.fuxi.core import (
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    Slot,
    SuppressOffers,
)
from mesoslike.frameworks.fuxi.jobs import (
    MAX_APPMASTER_RESTARTS,
    AgentLost,
    AppMasterExited,
    AppMasterMessage,
    AppMasterRequest,
    AppMasterStartFailed,
    Command,
    DriverRegistered,
    Event,
    ForgetJob,
    JobAccepted,
    JobCore,
    JobFinished,
    JobState,
    JobSubmitted,
    OfferRescinded,
    OffersReceived,
    ReconcileTasks,
    RestartAppMaster,
    StartAppMaster,
    StopAppMaster,
    Tick,
    WorkerUpdate,
)
from mesoslike.frameworks.fuxi.model import JobSpec, JobSpecError, check_runnable, job_document, parse_job
from mesoslike.transport import Client, Server, Waker, parse_tcp_address

__all__ = ["FuxiService", "AppMasterProcess", "JobServer", "JobClient", "JobRefused", "DEFAULT_PORT",
           "APPMASTER_MODULE", "WORKER_MODULE"]

log = logging.getLogger("mesoslike.frameworks.fuxi.service")

DEFAULT_PORT = 5060
#: seconds between the supervisor's looks at the AppMasters (and ticks of the core)
SUPERVISE_INTERVAL = 0.2
APPMASTER_MODULE = "mesoslike.frameworks.fuxi.appmaster"
WORKER_MODULE = "mesoslike.frameworks.fuxi.worker"
#: commands that are driver calls: dropped (logged) while no driver is attached
_DRIVER_COMMANDS = (LaunchSlots, DeclineOffers, KillSlot, SuppressOffers, ReviveOffers, ReconcileTasks)


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


class FuxiService(Scheduler):
    """The Fuxi scheduler framework: a :class:`JobCore` around ``scheduler``,
    driven by a :class:`~mesoslike.SchedulerDriver` (give it with
    :meth:`attach` before the driver starts), by job clients (:meth:`submit`,
    :meth:`status`) and by the jobs' AppMasters (:meth:`appmaster_request`;
    see :class:`JobServer`).

    ``work_dir``: where each job's document, snapshot and AppMaster log go
    (``<work_dir>/<job id>/``; default: a temporary directory removed by
    :meth:`stop`). ``appmaster_ip``: the address AppMasters bind for their
    workers. ``launch_appmasters=False`` starts no processes (the AppMaster
    protocol is then driven by hand, e.g. in tests). ``on_event(job_id,
    what)`` is called (under the lock) when a job ends.
    """

    def __init__(self, scheduler: FuxiCore, *, work_dir: str | os.PathLike | None = None,
                 appmaster_ip: str = "127.0.0.1", launch_appmasters: bool = True, python: str = sys.executable,
                 appmaster_log_level: str = "info", max_appmaster_restarts: int = MAX_APPMASTER_RESTARTS,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.core = JobCore(scheduler, max_appmaster_restarts=max_appmaster_restarts)
        self.on_event = on_event or (lambda job_id, what: None)
        self.driver: Any = None
        #: job id -> its AppMaster process (while the core keeps the job)
        self.appmasters: dict[str, AppMasterProcess] = {}
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self.service_address = ""          # the job server's address, for the AppMasters (JobServer sets it)
        self.appmaster_ip = appmaster_ip
        self.launch_appmasters = launch_appmasters
        self.python = python
        self.appmaster_log_level = appmaster_log_level
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self._own_work_dir = False
        self._stimuli = itertools.count(1)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        #: command type -> what carries it out (returns the commands of the events that causes)
        self._carry_out: dict[type, Callable[[Any], list[Command]]] = {
            LaunchSlots: self._launch, DeclineOffers: self._decline, KillSlot: self._kill,
            SuppressOffers: self._suppress, ReviveOffers: self._revive, ReconcileTasks: self._reconcile,
            JobAccepted: self._accepted, StartAppMaster: self._start_appmaster,
            RestartAppMaster: self._restart_appmaster, StopAppMaster: self._stop_appmaster,
            JobFinished: self._job_finished, ForgetJob: self._forget_job,
        }

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
        one the scheduler refuses (an unknown quota group; nothing changes
        then) or whose AppMaster cannot start (the job failed)."""
        spec = job if isinstance(job, JobSpec) else parse_job(job)
        check_runnable(spec)
        document = job_document(spec) if isinstance(job, JobSpec) else dict(job)
        with self._lock:
            if self.launch_appmasters and not self.service_address:
                raise FuxiError("the service has no job server address for AppMasters to reach it")
            commands = self.core.handle(JobSubmitted(spec, document, secrets.token_hex(16),
                                                     stimulus_id=self._stimulus("submit")))
            self._execute(commands)
            (job_id,) = [command.job_id for command in commands if isinstance(command, JobAccepted)]
            submitted = self.core.get(job_id)
            if submitted is None or submitted.state is not JobState.RUNNING:
                raise FuxiError(f"{job_id}: {submitted.reason if submitted is not None else 'ended at once'}")
            return job_id

    def status(self, job_id: str | None = None) -> dict:
        """Jobs (or one job) with their units: desired and granted slots,
        hosts, why a unit waits, the instances' progress (the AppMaster's
        last report) and the AppMaster process."""
        with self._lock:
            document = self.core.status(job_id)
            for job in document["jobs"]:
                job["appmaster"] = self._appmaster_status(job["id"])
            return document

    def _appmaster_status(self, job_id: str) -> dict | None:
        appmaster = self.appmasters.get(job_id)
        if appmaster is None:
            return None
        return {"pid": appmaster.pid, "address": appmaster.address,
                "restarts": self.core.job(job_id).appmaster_restarts, "running": appmaster.exited() is None,
                "log": str(appmaster.log_path)}

    # ====================================================== AppMasters
    def appmaster_request(self, request: AppMasterMessage) -> None:
        """Carry out what a job's AppMaster asks (a :data:`protocol.APPMASTER_REQUESTS`
        message). Raises :class:`FuxiError` for a request the core refuses."""
        with self._lock:
            self._handle(AppMasterRequest(request, stimulus_id=self._stimulus(f"appmaster-{request.TYPE}")))

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
        """One look: tell the core which AppMasters exited while their jobs
        run (it restarts them, or fails a job whose AppMaster exited too
        often), then let its time pass (worker tasks that outlived their
        release are killed)."""
        with self._lock:
            for job_id, appmaster in list(self.appmasters.items()):
                status = appmaster.exited()   # reaps an AppMaster that ended with its job too
                job = self.core.get(job_id)
                if status is None or job is None or job.state is not JobState.RUNNING:
                    continue
                self._handle(AppMasterExited(job_id, status, appmaster.log_tail(300),
                                             stimulus_id=self._stimulus("appmaster-exited")))
            self._handle(Tick(stimulus_id=self._stimulus("tick")))

    def stop(self) -> None:
        """Stop supervising and stop the AppMasters (the worker tasks end with
        the framework); remove the work directory if it is a temporary one."""
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(5)
        with self._lock:
            appmasters = list(self.appmasters.values())
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
            self._handle(DriverRegistered(stimulus_id=self._stimulus("registered")))

    def reregistered(self, driver, master_info) -> None:
        with self._lock:
            self.driver = driver
            self._handle(DriverRegistered(reregistered=True, stimulus_id=self._stimulus("reregistered")))

    def resource_offers(self, driver, offers) -> None:
        with self._lock:
            self.driver = driver
            try:
                commands = self.core.handle(OffersReceived(offers, stimulus_id=self._stimulus("offers")))
            except Exception:
                for offer in offers:   # a bug in the core must not hold the cluster's resources
                    driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))
                raise
            self._execute(commands)

    def offer_rescinded(self, driver, offer_id) -> None:
        with self._lock:
            self._handle(OfferRescinded(offer_id, stimulus_id=self._stimulus("rescinded")))

    def agent_lost(self, driver, agent_id) -> None:
        with self._lock:
            self._handle(AgentLost(agent_id, stimulus_id=self._stimulus("agent-lost")))

    def status_update(self, driver, status: TaskStatus) -> None:
        with self._lock:
            self._handle(WorkerUpdate(status, stimulus_id=self._stimulus(f"update-{status.task_id}")))

    def error(self, driver, message) -> None:
        log.error("framework error: %s", message)
        self.errors.append(message)

    # ==================================================== the commands
    def _stimulus(self, what: str) -> str:
        return f"{what}-{next(self._stimuli)}"

    def _handle(self, event: Event) -> None:
        self._execute(self.core.handle(event))

    def _execute(self, commands: Iterable[Command]) -> None:
        """Carry out the core's commands in order; the commands of what that
        causes (an AppMaster that cannot start) come after."""
        queue = collections.deque(commands)
        while queue:
            command = queue.popleft()
            if isinstance(command, _DRIVER_COMMANDS) and self.driver is None:
                log.warning("no driver attached: %s dropped", type(command).__name__)
                continue
            queue.extend(self._carry_out[type(command)](command))

    def _launch(self, command: LaunchSlots) -> list[Command]:
        tasks = [self._task(slot) for slot in command.slots]
        self.driver.launch_tasks(list(command.offer_ids), tasks, Filters(refuse_seconds=command.refuse_seconds))
        return []

    def _task(self, slot: Slot) -> TaskInfo:
        appmaster = self.appmasters.get(slot.job_id)
        return TaskInfo(task_id=slot.id, agent_id=slot.agent_id,
                        command=f"exec {shlex.quote(self.python)} -m {WORKER_MODULE}", resources=slot.resources,
                        name=f"{self.core.job(slot.job_id).spec.name}.{slot.unit}.worker",
                        environment={"FUXI_APPMASTER": appmaster.address if appmaster is not None else "",
                                     "FUXI_SLOT_ID": slot.id, "FUXI_JOB_ID": slot.job_id, "FUXI_UNIT": slot.unit,
                                     "FUXI_HOSTNAME": slot.hostname, "FUXI_ROOM": str(slot.room)})

    def _decline(self, command: DeclineOffers) -> list[Command]:
        for offer_id in command.offer_ids:
            self.driver.decline_offer(offer_id, Filters(refuse_seconds=command.refuse_seconds))
        return []

    def _kill(self, command: KillSlot) -> list[Command]:
        log.info("killing slot %s: %s", command.slot_id, command.reason)
        self.driver.kill_task(command.slot_id)
        return []

    def _suppress(self, command: SuppressOffers) -> list[Command]:
        self.driver.suppress_offers()
        return []

    def _revive(self, command: ReviveOffers) -> list[Command]:
        self.driver.revive_offers()
        return []

    def _reconcile(self, command: ReconcileTasks) -> list[Command]:
        self.driver.reconcile_tasks(list(command.task_ids))   # unknown tasks come back as TASK_LOST
        return []

    def _accepted(self, command: JobAccepted) -> list[Command]:
        return []   # the reply: submit() returns the job id

    def _start_appmaster(self, command: StartAppMaster) -> list[Command]:
        if not self.launch_appmasters:
            return []
        job_id = command.job_id
        try:
            directory = self.work_dir / job_id
            directory.mkdir(parents=True, exist_ok=True)
            job_path = directory / "job.json"
            job_path.write_text(json.dumps(command.document))
            address = f"tcp://{self.appmaster_ip}:{_free_port(self.appmaster_ip)}"
            argv = [self.python, "-m", APPMASTER_MODULE, "--service", self.service_address, "--job-id", job_id,
                    "--bind", address, "--snapshot", str(directory / "snapshot.json"), "--job", str(job_path),
                    "--log-level", self.appmaster_log_level]
            appmaster = self.appmasters[job_id] = AppMasterProcess(address, argv, {**os.environ,
                                                                                  "FUXI_AM_TOKEN": command.token},
                                                                   directory / "appmaster.log")
            appmaster.start()
        except OSError as exc:
            return self.core.handle(AppMasterStartFailed(job_id, str(exc), stimulus_id=self._stimulus("start")))
        log.info("job %s: AppMaster pid %d on %s", job_id, appmaster.pid, address)
        self._start_supervisor()
        return []

    def _restart_appmaster(self, command: RestartAppMaster) -> list[Command]:
        appmaster = self.appmasters[command.job_id]
        log.warning("job %s: the AppMaster (pid %s) exited with status %d: restart %d", command.job_id,
                    appmaster.pid, command.exit_status, command.restart)
        try:
            appmaster.start()
        except OSError as exc:
            return self.core.handle(AppMasterStartFailed(command.job_id, str(exc),
                                                         stimulus_id=self._stimulus("restart")))
        return []

    def _stop_appmaster(self, command: StopAppMaster) -> list[Command]:
        appmaster = self.appmasters.get(command.job_id)
        if appmaster is not None:
            appmaster.kill(signal.SIGTERM)
        return []

    def _job_finished(self, command: JobFinished) -> list[Command]:
        self.on_event(command.job_id, str(command.state))
        return []

    def _forget_job(self, command: ForgetJob) -> list[Command]:
        self.appmasters.pop(command.job_id, None)
        return []


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
        answer: protocol.Message
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

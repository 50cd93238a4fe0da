"""The Fuxi scheduler as a running framework: ``mesoslike fuxi serve``.

:class:`FuxiService` is a :class:`~mesoslike.Scheduler` around one
:class:`~mesoslike_frameworks.fuxi.jobs.JobCore` (which holds the
scheduling :class:`~mesoslike_frameworks.fuxi.core.FuxiCore`). It decides
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

- **Authentication** (docs/security.rst, "The Fuxi service"). With
  ``credentials`` (and its ``keys``) the job server lets in only the keys
  they list and each job's AppMaster key: a job belongs to the principal
  that submitted it (``submit_jobs`` ACL), only it — or a principal the
  ``kill_jobs`` ACL allows — may kill it, and an AppMaster may speak only for
  its own job. Every job has two CURVE key pairs of its own
  (:class:`JobKeys`, in its work directory, secret files mode 0600): its
  AppMaster's, and its workers' (given to the worker tasks, with each slot's
  token, as secret files of their sandbox: :meth:`FuxiService._task`); the
  AppMaster's port lets in only the workers' key. A job's workers run as the
  unix user of its principal (its ``user`` in the credentials, else its
  name: as YARN runs a job's containers as its submitter), so that no job
  reads another's processes or files. Without
  credentials the job server serves anyone, on loopback only unless
  ``insecure``; the AppMaster then proves its job with its token.

- **Hard state.** With a ``store`` (:mod:`.state_store`: files standalone,
  ZooKeeper in HA mode) every :class:`Persist` is written before the core
  hears it was (:class:`Persisted`): a submission is acknowledged, a kill
  carried out, only then. :meth:`FuxiService.recover` gives a new leader's
  core what the store holds; the AppMasters of running jobs are adopted
  (:class:`AdoptAppMaster`: the process still runs on this host under the
  recorded pid) or restarted.

Commands and outcomes: the service carries out the core's commands in
order; what one causes (a write done or failed, an AppMaster started or
that could not start) comes back as an *event* the core handles, whose
commands join the queue. The service never decides, and the core never
does I/O.

Threads: the core is not thread-safe. Every entry point (the driver's
callbacks on the driver thread, job clients and AppMasters on the job
server's thread, the AppMaster supervisor's thread) runs under one lock;
driver methods are thread-safe, so commands are carried out under it. So
are the store's writes: a submission waits for its write.

:class:`JobServer` answers job clients and AppMasters on its own thread;
:class:`JobClient` (:mod:`.client`) is the client side (``mesoslike fuxi submit`` / ``status``).
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

from mesoslike import (ConfigError, ContainerInfo, Filters, Image, MesoslikeError, Scheduler, Secret, TaskInfo,
                       TaskStatus, Volume, VolumeSource)
from mesoslike.credentials import Credentials
from mesoslike.credentials import Refused as NotAuthorized
from mesoslike_frameworks.fuxi import am_protocol, hard_state, protocol
from mesoslike_frameworks.fuxi.client import JobClient, JobRefused, NoAnswer
from mesoslike_frameworks.fuxi.deferred_gc import deferred_collection
from mesoslike_frameworks.fuxi.core import (
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    Slot,
    SuppressOffers,
)
from mesoslike_frameworks.fuxi.hard_state import AppMasterRecord, HardState
from mesoslike_frameworks.fuxi.jobs import (
    ADOPT_WINDOW,
    KEEP_ENDED_JOBS,
    MAX_APPMASTER_RESTARTS,
    AdoptAppMaster,
    AgentLost,
    AppMasterExited,
    AppMasterMessage,
    AppMasterRequest,
    AppMasterStarted,
    AppMasterStartFailed,
    Command,
    DriverDisconnected,
    DriverRegistered,
    Event,
    ForgetJob,
    JobAccepted,
    JobCore,
    JobFinished,
    JobKillRequested,
    JobState,
    JobSubmitted,
    OfferRescinded,
    OffersReceived,
    Persist,
    Persisted,
    PersistFailed,
    ReconcileTasks,
    Recover,
    Refused,
    RestartAppMaster,
    StartAppMaster,
    StopAppMaster,
    TellAppMaster,
    Tick,
    WorkerUpdate,
)
from mesoslike_frameworks.fuxi.model import JobSpec, JobSpecError, check_runnable, job_document, parse_job
from mesoslike_frameworks.fuxi.protocol import STANDBY_REFUSAL
from mesoslike_frameworks.fuxi.state_store import RecordStore
from mesoslike.transport import (
    Authenticator,
    CurveKeys,
    Server,
    Waker,
    load_public_key,
    new_certificate,
    parse_tcp_address,
)

__all__ = ["FuxiService", "AppMasterProcess", "JobServer", "JobClient", "JobRefused", "NoAnswer", "STANDBY_REFUSAL",
           "JobKeys", "DEFAULT_PORT",
           "APPMASTER_MODULE", "WORKER_MODULE", "APPMASTER_PRINCIPAL", "answer", "is_appmaster_of", "worker_command",
           "appmaster_argv", "check_secure"]

log = logging.getLogger("mesoslike_frameworks.fuxi.service")

DEFAULT_PORT = 5060
#: seconds between the supervisor's looks at the AppMasters (and ticks of the core)
SUPERVISE_INTERVAL = 0.2
APPMASTER_MODULE = "mesoslike_frameworks.fuxi.appmaster"
WORKER_MODULE = "mesoslike_frameworks.fuxi.worker"
#: a job's AppMaster authenticates to the job server as this and the job's id (no credentials name may start so)
APPMASTER_PRINCIPAL = "appmaster/"
#: the environment a worker task finds its public keys in (z85): its own, and its AppMaster's
WORKER_PUBLIC_KEY_ENV, APPMASTER_KEY_ENV = "FUXI_WORKER_PUBLIC_KEY", "FUXI_APPMASTER_KEY"
#: a worker's secrets: files of its sandbox (mode 0400, its user's), named in its environment by these
WORKER_SECRET_FILES = {"FUXI_WORKER_TOKEN_FILE": ".fuxi_worker_token",
                       "FUXI_WORKER_SECRET_KEY_FILE": ".fuxi_worker_key_secret"}
#: a job's AppMaster key pair in its work directory: <name>.key (public), <name>.key_secret
APPMASTER_KEY_NAME = "appmaster"
#: requests a just elected job server keeps until it serves (JobServer.hold); more are refused
MAX_HELD = 1000
#: STATUS requests waiting for their job's end at once (``wait``, a long poll); more are answered at once
MAX_WAITING_STATUS = 1000
#: AppMasters whose connection the job server remembers (to tell them of their grants), the newest kept
MAX_APPMASTER_PEERS = 10_000
#: commands that are driver calls: dropped (logged) while no driver is attached
_DRIVER_COMMANDS = (LaunchSlots, DeclineOffers, KillSlot, SuppressOffers, ReviveOffers, ReconcileTasks)


#: what a worker imports from outside the standard library: the packages whose directories its command names
_WORKER_PACKAGES = ("mesoslike", "mesoslike_frameworks", "zmq", "msgpack")


def worker_command(python: str) -> str:
    """The task command of a slot's worker run by ``python``: ``python -S``
    with the directories of the packages the worker imports named in the
    command — the directories this process found them in — when ``python``
    is this process's interpreter, else ``python -m`` the worker module.

    ``-S``: no ``site`` at the start. A worker imports little but the
    transport (ZeroMQ) and MessagePack, and 16 workers start for a job of 16
    slots at once; ``site`` — with an editable installation, its finder and
    ``pathlib`` — was ~8 ms of a worker's ~80 ms of CPU to its HELLO
    (docs/performance.rst, "Fuxi path toward nine tenths of the real
    agents"). Where the packages are not found in those directories (a
    machine installed otherwise), the worker runs ``site`` and imports them
    as ``-m`` would.

    The cyclic garbage collector is off while the worker imports (its
    modules' objects live as long as the process: the ~25 collections an
    import of them set off found next to nothing, ~2-4 ms of CPU a worker),
    and what the imports made is frozen out of later collections
    (``gc.freeze``) before it runs with the collector on
    (docs/performance.rst, "Stop 14: the Fuxi path (fuxi29h)")."""
    if python != sys.executable:
        return f"exec {shlex.quote(python)} -m {WORKER_MODULE}"
    paths = _worker_paths()
    if not paths:
        return f"exec {shlex.quote(python)} -m {WORKER_MODULE}"
    boot = (f"import gc,sys;gc.disable();p={json.dumps(paths)};sys.path+=p\n"
            f"try:import {WORKER_MODULE} as w\n"
            f"except ImportError:del sys.path[-len(p):];import site;site.main();import {WORKER_MODULE} as w\n"
            "gc.freeze();gc.enable();w.main_and_exit()")
    return f"exec {shlex.quote(python)} -S -c {shlex.quote(boot)}"


def appmaster_argv(python: str) -> list[str]:
    """How an AppMaster starts, before its options: ``python -S`` with this
    process's directories of installed packages (its site directories, and
    the directories it found ``mesoslike`` and ``mesoslike_frameworks`` in)
    put on the path, when ``python`` is this process's interpreter, else
    ``python -m`` the AppMaster's module. The module's name stays an argument
    of its own (:func:`is_appmaster_of` finds an AppMaster by it), which the
    boot line takes out before the AppMaster reads its options.

    ``-S``: no ``site`` at the start, as for the workers — ~12 ms of CPU a
    job with an editable installation's finder (docs/performance.rst, "Stop
    12: the Fuxi path, pipelined (fuxi29f)"). Where the AppMaster's module
    is not found that way, its boot runs ``site`` and imports it as ``-m``
    would. As a worker's (:func:`worker_command`), without the cyclic
    garbage collector while it imports, and its modules' objects frozen out
    of later collections; and out without the interpreter's teardown
    (``appmaster.main_and_exit``, as ``-m`` runs it too)."""
    if python != sys.executable:
        return [python, "-m", APPMASTER_MODULE]
    paths = _worker_paths()
    if not paths:
        return [python, "-m", APPMASTER_MODULE]
    import site

    sites = [*site.getsitepackages(), site.getusersitepackages()]
    paths += [entry for entry in sys.path if entry in sites and entry not in paths]
    boot = (f"import gc,sys;gc.disable();p={json.dumps(paths)};sys.path+=p;del sys.argv[1]\n"
            f"try:import {APPMASTER_MODULE} as a\n"
            f"except ImportError:del sys.path[-len(p):];import site;site.main();import {APPMASTER_MODULE} as a\n"
            "gc.freeze();gc.enable();a.main_and_exit()")
    return [python, "-S", "-c", boot, APPMASTER_MODULE]


def _worker_paths() -> list[str]:
    """The directories the packages a worker imports are in, as this process
    found them; [] if one of them is not in a directory of its own name."""
    import importlib.util

    paths: list[str] = []
    for name in _WORKER_PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
        if len(locations) != 1 or os.path.basename(locations[0]) != name:
            return []
        parent = os.path.dirname(os.path.abspath(locations[0]))
        if parent not in paths:
            paths.append(parent)
    return paths


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        return sock.getsockname()[1]


@attrs.frozen
class JobKeys:
    """A job's CURVE key pairs (docs/security.rst, "The Fuxi service"), kept
    in its work directory as ``appmaster.key[_secret]`` and
    ``worker.key[_secret]`` (secret files mode 0600): the AppMaster's — it
    proves the job to the service with it, and serves its workers with it —
    and the workers' (one pair for all the job's slots: a worker proves its
    slot with the slot's token). Never in logs, the hard state or ``status``."""

    directory: Path
    appmaster: CurveKeys
    worker: CurveKeys

    @classmethod
    def of(cls, directory: Path) -> JobKeys:
        """The pairs in ``directory``, made where missing (a new leader finds its predecessor's)."""
        pairs = []
        for name in (APPMASTER_KEY_NAME, "worker"):
            secret = directory / f"{name}.key_secret"
            if not secret.exists():
                (directory / f"{name}.key").unlink(missing_ok=True)
                new_certificate(str(directory), name)
            pairs.append(CurveKeys.load(str(secret)))
        return cls(directory, *pairs)

    @property
    def appmaster_secret_path(self) -> Path:
        return self.directory / f"{APPMASTER_KEY_NAME}.key_secret"

    def forget_secrets(self) -> None:
        """The job ended: no AppMaster or worker of it starts again."""
        for name in ("appmaster", "worker"):
            (self.directory / f"{name}.key_secret").unlink(missing_ok=True)


@attrs.define(eq=False)
class AppMasterProcess:
    """A job's AppMaster: the command that starts it (again), its process
    and its log (``<work dir>/<job>/appmaster.log``, appended to by every start).

    After a failover it may be a process this service did not start
    (``adopted``: the pid of a predecessor's child, in a session of its own):
    it cannot be waited for, so it is watched through ``/proc`` — gone, or a
    zombie, or no longer an AppMaster of this job, it has exited (status -1:
    unknown)."""

    address: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    job_id: str = ""
    popen: subprocess.Popen | None = None
    adopted: int | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self.popen = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log_file,
                                          stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                                          close_fds=True)
        self.adopted = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else self.adopted

    def exited(self) -> int | None:
        """The exit status if the process ended (reaped now), else None."""
        if self.popen is not None:
            return self.popen.poll()
        if self.adopted is not None:
            return None if is_appmaster_of(self.adopted, self.job_id) else -1
        return None

    def kill(self, signum: int = signal.SIGTERM) -> None:
        if self.exited() is None and self.pid is not None:
            try:
                os.killpg(self.pid, signum)   # its own session: the group is the AppMaster and what it started
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


def is_appmaster_of(pid: int, job_id: str) -> bool:
    """Does ``pid`` run (not a zombie) an AppMaster of ``job_id``? (A pid
    may have been reused since it was recorded: the command line says.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X"):
        return False
    return APPMASTER_MODULE.encode() in argv and job_id.encode() in argv


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

    ``store``: where the hard state goes (None: nowhere, the jobs live and
    die with this process). ``appmaster_service``: what AppMasters are told
    to report to (default: the job server's address; a ``zk://`` URL makes
    them follow the leading service). ``orphan_timeout``: AppMasters outlive
    this service by that many seconds (None: they exit with it).
    ``master``: the master's address, for ``status``.

    ``credentials``: who may submit and kill (the job server authenticates
    them, :class:`JobServer`); None: anyone may. ``service_key``: the job
    server's public key (z85), for the AppMasters to check it by (None: the
    job server is not secured, the AppMasters connect in the clear).

    Leadership (``fuxi serve --zk``, :mod:`~mesoslike_frameworks.candidacy`):
    :attr:`records` and :attr:`writes` are what it stored; ``on_stored`` and
    ``on_fenced`` hear of each write; :meth:`pause` and :meth:`resume` stop
    and restart its acting while leadership is in doubt.
    """

    def __init__(self, scheduler: FuxiCore, *, work_dir: str | os.PathLike | None = None,
                 appmaster_ip: str = "127.0.0.1", launch_appmasters: bool = True, python: str = sys.executable,
                 appmaster_log_level: str = "info", max_appmaster_restarts: int = MAX_APPMASTER_RESTARTS,
                 on_event: Callable[[str, str], None] | None = None, store: RecordStore | None = None,
                 appmaster_service: str = "", orphan_timeout: float | None = None, master: str = "",
                 keep_ended: int = KEEP_ENDED_JOBS, adopt_window: float = ADOPT_WINDOW,
                 credentials: Credentials | None = None, service_key: bytes | None = None) -> None:
        self.core = JobCore(scheduler, max_appmaster_restarts=max_appmaster_restarts, persist=store is not None,
                            keep_ended=keep_ended, adopt_window=adopt_window)
        self.store = store
        self.appmaster_service = appmaster_service
        self.orphan_timeout = orphan_timeout
        self.master = master
        self.host = socket.gethostname()
        self.on_event = on_event or (lambda job_id, what: None)
        self.driver: Any = None
        #: job id -> its AppMaster process (while the core keeps the job)
        self.appmasters: dict[str, AppMasterProcess] = {}
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self.service_address = ""          # the job server's address, for the AppMasters (JobServer sets it)
        self.appmaster_ip = appmaster_ip
        self.launch_appmasters = launch_appmasters
        self.python = python
        self._worker_command = worker_command(python)   # the slots' task command (no image), made once
        self._appmaster_argv = appmaster_argv(python)   # how an AppMaster starts, made once
        self.appmaster_log_level = appmaster_log_level
        self.credentials = credentials
        self.service_key = service_key
        #: the key pairs of the jobs whose AppMasters this service started or adopted
        self.job_keys: dict[str, JobKeys] = {}
        #: an AppMaster's public key -> its job (read by the job server's ZAP thread: a dict get is atomic)
        self._appmaster_keys: dict[bytes, str] = {}
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self._own_work_dir = False
        self._stimuli = itertools.count(1)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        #: False while leadership is in doubt (:meth:`pause`): callbacks and ticks are not acted on
        self.serving = True
        #: what the store holds, as this service wrote it (name -> bytes), and its successful writes
        self.records: dict[str, bytes] = {}
        self.writes = 0
        self.on_stored: Callable[[int], None] = lambda writes: None
        self.on_fenced: Callable[[str], None] = lambda reason: None
        #: sends a job's AppMaster news of its slots (the job server's, once it serves this service)
        self.tell_appmaster: Callable[[str, protocol.SlotGranted | protocol.SlotRevoked], None] = \
            lambda job_id, news: None
        #: hears of each job's end (the job server's, once it serves this service: it answers the STATUS
        #: requests waiting for that end). Called under the service's lock, from any thread: must be quick
        self.on_job_finished: Callable[[str], None] = lambda job_id: None
        #: command type -> what carries it out (returns the events of its outcome, for the core)
        self._carry_out: dict[type, Callable[[Any], list[Event]]] = {
            LaunchSlots: self._launch, DeclineOffers: self._decline, KillSlot: self._kill,
            SuppressOffers: self._suppress, ReviveOffers: self._revive, ReconcileTasks: self._reconcile,
            JobAccepted: self._accepted, StartAppMaster: self._start_appmaster,
            RestartAppMaster: self._restart_appmaster, StopAppMaster: self._stop_appmaster,
            JobFinished: self._job_finished, ForgetJob: self._forget_job, Persist: self._persist,
            AdoptAppMaster: self._adopt_appmaster, Refused: self._refused, TellAppMaster: self._tell,
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
    def submit(self, job: JobSpec | Mapping[str, Any], principal: str | None = None) -> str:
        """Submit a job (a :class:`JobSpec` or a parsed job file) as
        ``principal`` (its owner; with credentials it must be one the
        ``submit_jobs`` ACL allows in the job's quota group); its id, once
        the job is stored (with a store). Raises :class:`JobSpecError` for a
        bad job, :class:`FuxiError` for one the scheduler refuses (not
        authorized, an unknown quota group, a store that cannot write it;
        nothing changes then) or whose AppMaster cannot start (the job failed)."""
        spec = job if isinstance(job, JobSpec) else parse_job(job)
        check_runnable(spec)
        document = job_document(spec) if isinstance(job, JobSpec) else dict(job)
        if self.credentials is not None:
            if principal is None:
                raise FuxiError("anonymous submissions are refused: this Fuxi service takes jobs only from "
                                "principals of its credentials (give --key, and --fuxi-key)")
            if principal.startswith(APPMASTER_PRINCIPAL):
                raise FuxiError(f"not authorized: {principal} is an AppMaster's key, which submits no jobs")
            _check(self.credentials, "submit_jobs", principal, spec.quota_group)
        with self._lock:
            if self.launch_appmasters and not self.service_address:
                raise FuxiError("the service has no job server address for AppMasters to reach it")
            done = self._handle(JobSubmitted(spec, document, secrets.token_hex(16), principal or "",
                                             stimulus_id=self._stimulus("submit")))
            _raise_refusal(done)
            (job_id,) = [command.job_id for command in done if isinstance(command, JobAccepted)]
            submitted = self.core.get(job_id)
            if submitted is None or submitted.state is not JobState.RUNNING:
                raise FuxiError(f"{job_id}: {submitted.reason if submitted is not None else 'ended at once'}")
            return job_id

    def kill(self, job_id: str, principal: str | None = None) -> None:
        """End a running job (state ``killed``) for ``principal``: its
        workers and AppMaster are killed — once that is stored (with a
        store). With credentials only the job's owner, or a principal the
        ``kill_jobs`` ACL allows, may. Raises :class:`FuxiError` for an
        unknown or ended job, a kill not authorized, or one that could not be
        stored (the job goes on then)."""
        with self._lock:
            job = self.core.get(job_id)
            if self.credentials is not None and job is not None and job.principal != principal:
                if principal is None or principal.startswith(APPMASTER_PRINCIPAL) or \
                        not self.credentials.allows("kill_jobs", principal):
                    raise FuxiError(f"not authorized: principal {principal or '(anonymous)'} lacks the kill_jobs "
                                    f"permission, and {job_id} is {job.principal or 'an anonymous client'}'s")
            _raise_refusal(self._handle(JobKillRequested(job_id, stimulus_id=self._stimulus("kill"))))

    def status(self, job_id: str | None = None) -> dict:
        """Jobs (or one job) with their units: desired and granted slots,
        hosts, why a unit waits, the instances' progress (the AppMaster's
        last report) and the AppMaster process; the framework's registration."""
        with self._lock:
            document = self.core.status(job_id)
            for job in document["jobs"]:
                job["appmaster"] = self._appmaster_status(job["id"])
            document["framework"]["master"] = self.master
            return document

    def running(self, job_id: str) -> bool:
        """Whether ``job_id`` is a job this service keeps that has not ended."""
        with self._lock:
            job = self.core.get(job_id)
            return job is not None and job.state is JobState.RUNNING

    def recover(self, state: HardState) -> None:
        """Take the hard state a store held (a new leader, or a restart):
        the jobs come back, running ones wait for their AppMasters (adopted
        or restarted) to say what they hold. Call it before the driver starts."""
        with self._lock:
            self._handle(Recover(state.service, list(state.jobs.values()), stimulus_id=self._stimulus("recover")))

    def appmaster_principal(self, public_key: bytes) -> str | None:
        """The principal of an AppMaster's public key (z85): ``appmaster/<job
        id>`` for a job this service started or adopted the AppMaster of,
        else None. Thread-safe (the job server's ZAP thread asks)."""
        job_id = self._appmaster_keys.get(public_key)
        return None if job_id is None else APPMASTER_PRINCIPAL + job_id

    def _appmaster_status(self, job_id: str) -> dict | None:
        appmaster = self.appmasters.get(job_id)
        if appmaster is None:
            return None
        return {"pid": appmaster.pid, "address": appmaster.address,
                "restarts": self.core.job(job_id).appmaster_restarts, "running": appmaster.exited() is None,
                "log": str(appmaster.log_path)}

    # ====================================================== AppMasters
    def appmaster_request(self, request: AppMasterMessage, principal: str | None = None) -> None:
        """Carry out what a job's AppMaster asks (a :data:`protocol.APPMASTER_REQUESTS`
        message) — with credentials, only from that job's AppMaster
        (``principal`` is its key's). Raises :class:`FuxiError` for a request
        the core refuses."""
        if self.credentials is not None and principal != APPMASTER_PRINCIPAL + request.job_id:
            raise FuxiError(f"not authorized: {request.TYPE} for job {protocol.bounded(request.job_id, 100)} from "
                            f"principal {principal or '(anonymous)'}: only that job's AppMaster (its key) may ask")
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
            if not self.serving:
                return
            for job_id, appmaster in list(self.appmasters.items()):
                status = appmaster.exited()   # reaps an AppMaster that ended with its job too
                job = self.core.get(job_id)
                if status is None or job is None or job.state is not JobState.RUNNING:
                    continue
                self._handle(AppMasterExited(job_id, status, appmaster.log_tail(300),
                                             stimulus_id=self._stimulus("appmaster-exited")))
            self._handle(Tick(stimulus_id=self._stimulus("tick")))

    def stop(self, failover: bool = False) -> None:
        """Stop supervising. Unless ``failover`` (the next service — a new
        leader, or this one restarted — adopts them), stop the AppMasters
        (the worker tasks end with the framework). Remove the work directory
        if it is a temporary one."""
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(5)
        with self._lock:
            appmasters = [] if failover else list(self.appmasters.values())
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

    # ====================================================== leadership
    def pause(self) -> None:
        """Stop acting (leadership in doubt): driver callbacks and ticks are
        let go (the master offers again; updates are reconciled on
        :meth:`resume`); the job server holds its requests meanwhile."""
        with self._lock:
            self.serving = False

    def resume(self) -> None:
        """Act again under the same leadership: reconcile the worker tasks, whose updates were let go."""
        with self._lock:
            self.serving = True
            if self.driver is not None:
                self._handle(DriverRegistered(reregistered=True, framework_id=self.driver.framework_id,
                                              stimulus_id=self._stimulus("resumed")))

    # ======================================================= callbacks
    def registered(self, driver, framework_id, master_info) -> None:
        log.info("registered as framework %s with master %s", framework_id, master_info.address)
        with self._lock:
            self.driver = driver
            self._handle(DriverRegistered(framework_id=framework_id, stimulus_id=self._stimulus("registered")))

    def reregistered(self, driver, master_info) -> None:
        with self._lock:
            self.driver = driver
            self._handle(DriverRegistered(reregistered=True, framework_id=driver.framework_id,
                                          stimulus_id=self._stimulus("reregistered")))

    def disconnected(self, driver) -> None:
        with self._lock:
            self._handle(DriverDisconnected("the master stopped answering; subscribing again",
                                            stimulus_id=self._stimulus("disconnected")))

    def resource_offers(self, driver, offers) -> None:
        with self._lock:
            self.driver = driver
            if not self.serving:
                return   # in doubt: let them go (the master rescinds them, or they time out)
            try:
                with deferred_collection():   # a big pass makes many objects: one collection after it
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
        if driver is not None and not driver.connected:
            with self._lock:   # e.g. "cannot find the master": status says why slots do not come
                self._handle(DriverDisconnected(protocol.bounded(message, 300), stimulus_id=self._stimulus("error")))

    # ==================================================== the commands
    def _stimulus(self, what: str) -> str:
        return f"{what}-{next(self._stimuli)}"

    def _handle(self, event: Event) -> list[Command]:
        """Give the core an event and carry out its commands; every command carried out."""
        if not self.serving and not isinstance(event, (JobSubmitted, JobKillRequested, AppMasterRequest, Recover)):
            return []   # in doubt: the world's news waits (reconciled on resume)
        return self._execute(self.core.handle(event))

    def _execute(self, commands: Iterable[Command]) -> list[Command]:
        """Carry out the core's commands in order; the outcome of each (a
        write done, an AppMaster that cannot start) is an event for the
        core, whose commands come after. Every command carried out, in order."""
        queue = collections.deque(commands)
        done: list[Command] = []
        while queue:
            command = queue.popleft()
            done.append(command)
            if isinstance(command, _DRIVER_COMMANDS) and self.driver is None:
                log.warning("no driver attached: %s dropped", type(command).__name__)
                continue
            for outcome in self._carry_out[type(command)](command):
                queue.extend(self.core.handle(outcome))
        return done

    def _persist(self, command: Persist) -> list[Event]:
        keys = (*command.records, *command.deleted)
        if self.store is not None:
            records = {key: hard_state.encode(record) for key, record in command.records.items()}
            try:
                try:
                    self.store.write(records, command.deleted)
                except MesoslikeError as exc:
                    # an outcome unknown (a ZooKeeper timeout) leaves the store unsure of what it holds:
                    # read it again and write once more; fenced off, the read or the write says so
                    log.warning("writing the scheduler's state failed (%s): reading it again to retry", exc)
                    self.store.load()
                    self.store.write(records, command.deleted)
            except MesoslikeError as exc:
                self.on_fenced(f"the hard state could not be written: {exc}")
                return [PersistFailed(tuple(keys), str(exc), command.waiting,
                                      stimulus_id=self._stimulus("persist-failed"))]
            self.records.update(records)
            for key in command.deleted:
                self.records.pop(key, None)
            self.writes += 1
            self.on_stored(self.writes)
        return [Persisted(command.waiting, stimulus_id=self._stimulus("persisted"))]

    def _tell(self, command: TellAppMaster) -> list[Event]:
        self.tell_appmaster(command.job_id, command.news)
        return []

    def _refused(self, command: Refused) -> list[Event]:
        return []   # the reply: submit() / kill() raise it

    def _launch(self, command: LaunchSlots) -> list[Event]:
        tasks = [self._task(slot) for slot in command.slots]
        self.driver.launch_tasks(list(command.offer_ids), tasks, Filters(refuse_seconds=command.refuse_seconds))
        return []

    def _task(self, slot: Slot) -> TaskInfo:
        appmaster = self.appmasters.get(slot.job_id)
        job = self.core.job(slot.job_id)
        keys = self.job_keys.get(slot.job_id)
        public_keys = {} if keys is None else {
            WORKER_PUBLIC_KEY_ENV: keys.worker.public.decode(), APPMASTER_KEY_ENV: keys.appmaster.public.decode()}
        # the token and the secret key: files only the worker's user reads (never an environment, which
        # any process of that user reads in /proc; never in the master's /state, logs or checkpoints)
        secrets = {"FUXI_WORKER_TOKEN_FILE": am_protocol.worker_token(job.token, slot.id).encode(),
                   **({"FUXI_WORKER_SECRET_KEY_FILE": keys.worker.secret} if keys is not None else {})}
        volumes = [Volume(WORKER_SECRET_FILES[name], VolumeSource(VolumeSource.SECRET,
                                                                  secret=Secret(Secret.VALUE, value=value)), "RO")
                   for name, value in secrets.items()]
        # a unit with an image: its worker runs in it, by the image's python3 (docs/containers.rst)
        image = next((unit.image for unit in job.spec.units if unit.name == slot.unit), "")
        command = f"exec python3 -m {WORKER_MODULE}" if image else self._worker_command
        return TaskInfo(task_id=slot.id, agent_id=slot.agent_id, command=command,
                        resources=slot.resources,
                        name=f"{job.spec.name}.{slot.unit}.worker",
                        environment={"FUXI_APPMASTER": appmaster.address if appmaster is not None else "",
                                     "FUXI_SLOT_ID": slot.id, "FUXI_JOB_ID": slot.job_id, "FUXI_UNIT": slot.unit,
                                     "FUXI_HOSTNAME": slot.hostname, "FUXI_ROOM": str(slot.room),
                                     **{name: WORKER_SECRET_FILES[name] for name in secrets}, **public_keys},
                        user=self.worker_user(job.principal),
                        container=ContainerInfo(image=Image(image) if image else None, volumes=volumes))

    def worker_user(self, principal: str) -> str:
        """The unix user a job of ``principal`` runs its workers as: the
        ``user`` of the principal in the service's credentials, else its
        name; "" (the framework's user) for a job without a principal (a
        service without credentials)."""
        if not principal or self.credentials is None:
            return ""
        found = self.credentials.principals.get(principal)
        return found.user if found is not None and found.user else principal

    def _decline(self, command: DeclineOffers) -> list[Event]:
        for offer_id in command.offer_ids:
            self.driver.decline_offer(offer_id, Filters(refuse_seconds=command.refuse_seconds))
        return []

    def _kill(self, command: KillSlot) -> list[Event]:
        log.info("killing slot %s: %s", command.slot_id, command.reason)
        self.driver.kill_task(command.slot_id)
        return []

    def _suppress(self, command: SuppressOffers) -> list[Event]:
        self.driver.suppress_offers()
        return []

    def _revive(self, command: ReviveOffers) -> list[Event]:
        self.driver.revive_offers()
        return []

    def _reconcile(self, command: ReconcileTasks) -> list[Event]:
        self.driver.reconcile_tasks(list(command.task_ids))   # unknown tasks come back as TASK_LOST
        return []

    def _accepted(self, command: JobAccepted) -> list[Event]:
        return []   # the reply: submit() returns the job id

    @property
    def _appmaster_service(self) -> str:
        """What the AppMasters are told to report to."""
        return self.appmaster_service or self.service_address

    def _appmaster_process(self, job_id: str, document: Mapping[str, Any], token: str,
                           address: str | None = None) -> AppMasterProcess:
        """The job's AppMaster (not started): its command, environment and log; its
        workers' address given, or a free port of ``appmaster_ip``. Raises OSError."""
        directory = self.work_dir / job_id
        directory.mkdir(parents=True, exist_ok=True)
        job_path = directory / "job.json"
        job_path.write_text(json.dumps(document))
        address = address or f"tcp://{self.appmaster_ip}:{_free_port(self.appmaster_ip)}"
        try:
            keys = JobKeys.of(directory)
        except ConfigError as exc:
            raise OSError(f"the job's keys: {exc}") from None
        self.job_keys[job_id] = keys
        self._appmaster_keys[keys.appmaster.public] = job_id
        argv = [*self._appmaster_argv, "--service", self._appmaster_service, "--job-id", job_id,
                "--bind", address, "--snapshot", str(directory / "snapshot.json"), "--job", str(job_path),
                "--log-level", self.appmaster_log_level, "--key", str(keys.appmaster_secret_path),
                # "--opt=value": a z85 key may begin with "-"
                f"--worker-key={keys.worker.public.decode()}"]
        if self.service_key is not None:
            argv += [f"--service-key={self.service_key.decode()}"]
        if self.orphan_timeout is not None:
            argv += ["--orphan-timeout", str(self.orphan_timeout)]
        return AppMasterProcess(address, argv, {**os.environ, "FUXI_AM_TOKEN": token}, directory / "appmaster.log",
                                job_id)

    def _started(self, job_id: str, appmaster: AppMasterProcess) -> list[Event]:
        """Tell the core where the job's AppMaster runs now (kept in the hard state)."""
        record = AppMasterRecord(appmaster.address, appmaster.pid or 0, self.host, self._appmaster_service)
        self._start_supervisor()
        return [AppMasterStarted(job_id, record, stimulus_id=self._stimulus("appmaster-started"))]

    def _start_appmaster(self, command: StartAppMaster) -> list[Event]:
        if not self.launch_appmasters:
            return []
        job_id = command.job_id
        try:
            appmaster = self.appmasters[job_id] = self._appmaster_process(job_id, command.document, command.token)
            appmaster.start()
        except OSError as exc:
            return [AppMasterStartFailed(job_id, str(exc), stimulus_id=self._stimulus("start"))]
        log.info("job %s: AppMaster pid %d on %s", job_id, appmaster.pid, appmaster.address)
        return self._started(job_id, appmaster)

    def _restart_appmaster(self, command: RestartAppMaster) -> list[Event]:
        appmaster = self.appmasters.get(command.job_id)
        if appmaster is None:
            return []   # not launching AppMasters
        log.warning("job %s: the AppMaster (pid %s) exited with status %d: restart %d", command.job_id,
                    appmaster.pid, command.exit_status, command.restart)
        try:
            appmaster.start()
        except OSError as exc:
            return [AppMasterStartFailed(command.job_id, str(exc), stimulus_id=self._stimulus("restart"))]
        return self._started(command.job_id, appmaster)

    def _adopt_appmaster(self, command: AdoptAppMaster) -> list[Event]:
        """After a failover: adopt the job's AppMaster if it still runs here
        and reports where this service expects; otherwise start it again
        (same address, same snapshot)."""
        if not self.launch_appmasters:
            return []
        job_id, record = command.job_id, command.appmaster
        try:
            appmaster = self.appmasters[job_id] = self._appmaster_process(
                job_id, command.document, command.token, record.address if record is not None else None)
        except OSError as exc:
            return [AppMasterStartFailed(job_id, str(exc), stimulus_id=self._stimulus("adopt"))]
        if record is None:
            return self._start_appmaster(StartAppMaster(job_id, command.document, command.token))
        if record.host != self.host:
            # on another machine: it cannot be watched from here; it finds this leader by itself
            log.warning("job %s: its AppMaster runs on %s (pid %d); adopted unwatched", job_id, record.host,
                        record.pid)
            return []
        if is_appmaster_of(record.pid, job_id):
            appmaster.adopted = record.pid
            if record.service == self._appmaster_service:
                log.info("job %s: adopted its AppMaster, pid %d on %s", job_id, record.pid, record.address)
                self._start_supervisor()
                return []
            log.info("job %s: its AppMaster (pid %d) reports to %s, not here: started again", job_id, record.pid,
                     record.service)
            appmaster.kill(signal.SIGTERM)
            _wait_gone(record.pid, job_id, 5.0)
            appmaster.adopted = None
        return [AppMasterExited(job_id, -1, "the AppMaster was gone after the failover",
                                stimulus_id=self._stimulus("adopt"))]

    def _stop_appmaster(self, command: StopAppMaster) -> list[Event]:
        appmaster = self.appmasters.get(command.job_id)
        if appmaster is not None:
            appmaster.kill(signal.SIGTERM)
        return []

    def _job_finished(self, command: JobFinished) -> list[Event]:
        keys = self.job_keys.get(command.job_id)
        if keys is not None:   # (its AppMaster, still connected, may say JOB_ENDED again: its key stays listed)
            keys.forget_secrets()
        self.on_event(command.job_id, str(command.state))
        self.on_job_finished(command.job_id)
        return []

    def _forget_job(self, command: ForgetJob) -> list[Event]:
        self.appmasters.pop(command.job_id, None)
        keys = self.job_keys.pop(command.job_id, None)
        if keys is not None:
            self._appmaster_keys.pop(keys.appmaster.public, None)
        return []


def _check(credentials: Credentials, action: str, principal: str, target: str | None = None) -> None:
    """:meth:`Credentials.check` raising :class:`FuxiError` (the job server's ERROR names the permission)."""
    try:
        credentials.check(action, principal, target)
    except NotAuthorized as exc:
        raise FuxiError(str(exc)) from None


def _raise_refusal(done: Iterable[Command]) -> None:
    for command in done:
        if isinstance(command, Refused):
            raise FuxiError(command.reason)


def _wait_gone(pid: int, job_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while is_appmaster_of(pid, job_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_appmaster_of(pid, job_id):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ------------------------------------------------------------ job server
class JobServer:
    """Answers job clients and AppMasters (:mod:`.protocol`) on ``address``
    on its own thread; every request goes to the service under its lock. A
    bad request gets an ERROR, never longer than :data:`protocol.MAX_ERROR`;
    whatever goes wrong with one frame — it cannot be read, handling it
    raises, the answer cannot be encoded — the loop goes on to the next.
    The service's AppMasters are told to reach it here.

    ``service`` may be None (a standby in HA mode, before it leads): then
    every request is answered with an ERROR saying ``refusing`` — unless
    :meth:`hold` was called (it was just elected and loads the jobs): then
    requests wait, unanswered, until :meth:`serve` (at most
    :data:`MAX_HELD` of them; more are refused).

    With ``credentials`` and ``keys`` (the service's CURVE pair) every
    connection is encrypted and only the keys the credentials list, and the
    AppMaster keys of the service's jobs, complete the handshake; each
    request is handled as the principal of its key (see
    :func:`check_secure` for the rule without them).

    A STATUS of a running job with a ``wait`` (a long poll,
    :mod:`.protocol`) waits here, unanswered, until the service says the
    job ended (:attr:`FuxiService.on_job_finished`), its wait is over, or
    the service is gone (a standby's answer then; held as other requests
    are while leadership is in doubt); at most :data:`MAX_WAITING_STATUS`
    wait at once (more are answered at once).
    """

    def __init__(self, service: FuxiService | None, address: str,
                 refusing: str = "this Fuxi scheduler is not ready", *, keys: CurveKeys | None = None,
                 credentials: Credentials | None = None, insecure: bool = False,
                 work_dir: str | os.PathLike | None = None) -> None:
        check_secure(address, credentials, keys, insecure)
        self._principals = credentials.principal_of_key() if credentials is not None else {}
        #: the services' shared work dir: before this one serves, the AppMasters' keys are read there
        self._work_dir = Path(work_dir) if work_dir is not None else None
        authenticator = Authenticator(self._principal_of_key) if credentials is not None else None
        # binds now: errors surface here
        self._server = Server(address, codec=protocol.CODEC, keys=keys, authenticator=authenticator)
        self.address = self._server.address
        self.refusing = refusing
        self.service: FuxiService | None = None
        self._waker = Waker()
        self._holding = threading.Event()
        self._held: collections.deque[tuple[bytes | None, bytes | Exception, str | None]] = collections.deque()
        #: job id -> the connection its AppMaster's last accepted request came over
        self._appmaster_peers: dict[str, bytes] = {}
        #: news for AppMasters from other threads, sent by the server's own
        self._news: collections.deque[protocol.SlotGranted | protocol.SlotRevoked] = collections.deque()
        #: long polls waiting for their job's end (the server's thread only), and the soonest one's deadline
        self._waiting: list[_WaitingStatus] = []
        self._soonest = float("inf")
        #: jobs that ended since the server's thread last looked (appended from any thread)
        self._ended: collections.deque[str] = collections.deque()
        if service is not None:
            self.serve(service)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fuxi-job-server")
        #: frames answered, frames whose answering failed (the loop went on), frames held until serving,
        #: STATUS requests that waited for their job's end
        self.counters = {"requests": 0, "failures": 0, "held": 0, "waited": 0}

    @property
    def secured(self) -> bool:
        return self._server.secured

    def _principal_of_key(self, public_key: bytes) -> str | None:
        """Who a key is: a principal of the credentials, or the AppMaster of one of the service's jobs."""
        found = self._principals.get(public_key)
        service = self.service
        if found is None and service is not None:
            found = service.appmaster_principal(public_key)
        elif found is None and self._work_dir is not None:
            found = self._appmaster_on_disk(public_key)
        return found

    def _appmaster_on_disk(self, public_key: bytes) -> str | None:
        """Before it serves — just elected, loading the jobs — the AppMasters
        of the running jobs, which follow the leader and reconnect at once,
        are known by the public keys in their job directories (a job's secret
        is removed when it ends); refusing them made their handshakes fail
        and be retried, with a warning each. O(jobs in the work dir)."""
        assert self._work_dir is not None
        for secret in self._work_dir.glob(f"*/{APPMASTER_KEY_NAME}.key_secret"):
            try:
                if load_public_key(str(secret.with_name(f"{APPMASTER_KEY_NAME}.key"))) == public_key:
                    return APPMASTER_PRINCIPAL + secret.parent.name
            except (ConfigError, OSError, ValueError):
                continue
        return None

    def serve(self, service: FuxiService) -> None:
        """Answer for ``service`` from now on (a standby that became the
        leader), the requests held since :meth:`hold` first."""
        service.service_address = self.address
        service.tell_appmaster = self.tell
        service.on_job_finished = self._job_finished
        self.service = service
        self._waker.wake()

    def hold(self) -> None:
        """Elected, not serving yet: keep requests for :meth:`serve` instead
        of refusing them as a standby (a client or AppMaster that saw the
        election in ZooKeeper would otherwise be told to go elsewhere).
        Thread-safe and quick: an election callback calls it."""
        self._holding.set()
        self._waker.wake()

    def tell(self, job_id: str, news: protocol.SlotGranted | protocol.SlotRevoked) -> None:
        """Send ``news`` to the job's AppMaster, on the connection its requests
        came over (none yet: it learns from its workers). Any thread; the
        server's thread sends."""
        self._news.append(news)
        self._waker.wake()

    def _job_finished(self, job_id: str) -> None:
        """The service's :attr:`~FuxiService.on_job_finished`: the STATUS
        requests waiting for ``job_id``'s end are answered. Any thread."""
        self._ended.append(job_id)
        self._waker.wake()

    def stand_by(self, hold: bool) -> None:
        """Stop answering for the service: ``hold`` the requests (leadership
        in doubt: answered by :meth:`serve` if it goes on), or refuse them
        as a standby does (the held ones too)."""
        self.service = None
        if hold:
            self._holding.set()
        else:
            self._holding.clear()
        self._waker.wake()

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
                if self.service is not None or not self._holding.is_set():
                    while self._held:   # what came between the election and serving (or a refusal, standing by)
                        self._answer_safely(*self._held.popleft())
                self._send_news()
                self._answer_waiting()
                soonest = self._soonest - time.monotonic() if self._waiting else None
                if not server.wait(None if soonest is None else max(0.0, soonest), self._waker):
                    continue
                for peer, frame in server.receive_frames():
                    self._take(peer, frame, server.principal(peer) if peer is not None else None)
        finally:
            server.close()

    def _send_news(self) -> None:
        while self._news:
            news = self._news.popleft()
            peer = self._appmaster_peers.get(news.job_id)
            if peer is None:
                continue
            try:
                if not self._server.send(peer, news):
                    log.debug("%s for job %s dropped: its AppMaster is gone or slow", news.TYPE, news.job_id)
            except protocol.ProtocolError as exc:
                log.error("cannot send %s: %s", news.TYPE, protocol.bounded(str(exc), 200))

    def _take(self, peer: bytes | None, frame: bytes | Exception, principal: str | None) -> None:
        """Answer a request now — or hold it, while leadership is in doubt
        (:meth:`hold`; at most :data:`MAX_HELD`, more are answered)."""
        if self.service is None and self._holding.is_set() and len(self._held) < MAX_HELD:
            self._held.append((peer, frame, principal))
            self.counters["held"] += 1
            return
        self._answer_safely(peer, frame, principal)

    def _waits(self, peer: bytes, frame: bytes, principal: str | None) -> bool:
        """Keep ``frame`` unanswered if it is a long poll (a STATUS with a
        ``wait``) of a running job; whether it was kept."""
        if b"STATUS" not in frame or b"wait" not in frame or len(self._waiting) >= MAX_WAITING_STATUS:
            return False   # (most frames: an AppMaster's requests, not decoded twice)
        try:
            request = protocol.decode(frame)
        except protocol.ProtocolError:
            return False
        service = self.service
        if not isinstance(request, protocol.Status) or not request.job_id or not request.wait > 0 or \
                service is None or not service.running(request.job_id):
            return False
        deadline = time.monotonic() + min(request.wait, protocol.MAX_STATUS_WAIT)
        self._waiting.append(_WaitingStatus(peer, request.id, request.job_id, principal, deadline))
        self._soonest = min(self._soonest, deadline)
        self.counters["waited"] += 1
        return True

    def _answer_waiting(self) -> None:
        """Answer the long polls whose job ended, whose wait is over, or
        whose service is gone (then as a standby answers). O(waiting) when
        one is due, O(1) otherwise."""
        ended: set[str] = set()
        while self._ended:
            ended.add(self._ended.popleft())
        if not self._waiting:
            return
        now = time.monotonic()
        gone = self.service is None and not self._holding.is_set()
        if not ended and not gone and now < self._soonest:
            return
        due: list[_WaitingStatus] = []
        kept: list[_WaitingStatus] = []
        for waiting in self._waiting:
            (due if gone or waiting.job_id in ended or waiting.deadline <= now else kept).append(waiting)
        self._waiting = kept
        self._soonest = min((waiting.deadline for waiting in self._waiting), default=float("inf"))
        for waiting in due:   # answered as a STATUS without a wait: the job's status now
            self._take(waiting.peer, protocol.encode(protocol.Status(waiting.request_id, waiting.job_id)),
                       waiting.principal)

    def _answer_safely(self, peer: bytes | None, frame: bytes | Exception, principal: str | None) -> None:
        try:
            self._answer(peer, frame, principal)
        except Exception:  # noqa: BLE001 - one frame must not end the serving thread
            self.counters["failures"] += 1
            log.exception("answering a request failed; serving the next")

    def _answer(self, peer: bytes | None, frame: bytes | Exception, principal: str | None) -> None:
        if peer is None:
            return
        if not isinstance(frame, (bytes, bytearray)):
            log.warning("a malformed request: %s", protocol.bounded(str(frame), 200))
            self._server.send(peer, protocol.Error(0, protocol.bounded(str(frame))))
            return
        if self._waits(peer, bytes(frame), principal):
            return
        answer = self.handle(bytes(frame), principal)
        self._server.send_frame(peer, answer)
        self._remember_appmaster(peer, bytes(frame), answer)

    def _remember_appmaster(self, peer: bytes, frame: bytes, answer: bytes) -> None:
        """An AppMaster request the service accepted names the connection its news go to."""
        try:
            request = protocol.decode(frame)
            # (only then the answer: a small OK or ERROR, never a job client's big STATUS_REPLY)
            accepted = isinstance(request, protocol.APPMASTER_REQUESTS) and \
                isinstance(protocol.decode(answer), protocol.Ok)
        except protocol.ProtocolError:
            return
        if accepted:
            peers = self._appmaster_peers
            peers.pop(request.job_id, None)
            peers[request.job_id] = peer
            if len(peers) > MAX_APPMASTER_PEERS:
                del peers[next(iter(peers))]

    def handle(self, frame: bytes, principal: str | None = None) -> bytes:
        """The answer to one request frame from ``principal`` (always an encodable one)."""
        self.counters["requests"] += 1
        return answer(self.service, frame, self.refusing, principal)


@attrs.frozen
class _WaitingStatus:
    """A long poll the job server holds: who asked (the connection and its
    principal), its request's id and job, and when its wait is over
    (``time.monotonic``)."""

    peer: bytes
    request_id: int
    job_id: str
    principal: str | None
    deadline: float


def check_secure(address: str, credentials: Credentials | None, keys: CurveKeys | None, insecure: bool) -> None:
    """Secure by default, as the master (docs/security.rst): a job server
    without credentials binds loopback only, unless ``insecure`` — then it
    warns, at every start. Credentials need the service's keys; no
    credentials principal may be named like an AppMaster's."""
    if credentials is not None:
        if keys is None:
            raise ConfigError("a Fuxi service with --credentials needs --key (its secret certificate: its job "
                              "clients check it by the public one, --fuxi-key)")
        clashing = sorted(name for name in credentials.principals if name.startswith(APPMASTER_PRINCIPAL))
        if clashing:
            raise ConfigError(f"principal names starting with {APPMASTER_PRINCIPAL!r} are the AppMasters': "
                              f"{', '.join(clashing)}")
        return
    host = parse_tcp_address(address)[0]
    if not (host in ("localhost", "::1", "[::1]") or host.startswith("127.")):
        if not insecure:
            raise ConfigError(f"refusing to serve jobs on {host} without --credentials: anyone who reaches it could "
                              "submit jobs and kill them. Give --key and --credentials (docs/security.rst), bind "
                              "127.0.0.1, or pass --insecure")
    if insecure:
        log.warning("INSECURE: this Fuxi service runs without authentication (--insecure): any peer that reaches "
                    "%s may submit and kill jobs", address)


def answer(service: FuxiService | None, frame: bytes, refusing: str = "not serving",
           principal: str | None = None) -> bytes:
    """The encoded answer of ``service`` to one request ``frame`` from
    ``principal`` (an ERROR saying ``refusing`` without a service). Never
    raises; an ERROR's message is at most :data:`protocol.MAX_ERROR` characters."""
    request_id = 0
    reply: protocol.Message
    try:
        request = protocol.decode(frame)
        request_id = request.id
        if service is None:
            reply = protocol.Error(request_id, refusing)
        elif isinstance(request, protocol.Submit):
            reply = protocol.Submitted(request_id, service.submit(request.document, principal))
        elif isinstance(request, protocol.Status):
            if request.wait < 0:
                raise protocol.ProtocolError(f"STATUS.wait: seconds to wait, 0 or more, not {request.wait}")
            reply = protocol.StatusReply(request_id, json.dumps(service.status(request.job_id or None)))
        elif isinstance(request, protocol.KillJob):
            service.kill(request.job_id, principal)
            reply = protocol.Ok(request_id)
        elif isinstance(request, protocol.APPMASTER_REQUESTS):
            service.appmaster_request(request, principal)
            reply = protocol.Ok(request_id)
        else:
            reply = protocol.Error(request_id, f"{request.TYPE} is not a request")
    except (protocol.ProtocolError, JobSpecError, FuxiError) as exc:
        reply = protocol.Error(request_id, protocol.bounded(str(exc)))
    except Exception as exc:  # noqa: BLE001 - a bug must not take the service down
        log.exception("request failed")
        reply = protocol.Error(request_id, protocol.bounded(f"internal error: {type(exc).__name__}: {exc}"))
    try:
        return protocol.encode(reply)
    except protocol.ProtocolError as exc:   # a status too big for one frame, say
        return protocol.encode(protocol.Error(request_id, protocol.bounded(f"the answer cannot be sent: {exc}")))

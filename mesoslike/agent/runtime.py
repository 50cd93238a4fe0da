"""The agent's imperative shell: a loop that feeds the master's messages,
the tasks' events and the passing of time into
:class:`~mesoslike.agent.core.AgentCore` and carries out the commands it
returns — sends, launches and kills (through :class:`.executor.TaskExecutor`
and the tasks' supervisors), and checkpoints (:class:`.checkpoint.CheckpointStore`).

One thread owns the ZeroMQ socket, the core and the executor; the HTTP
endpoints (:mod:`.http`) read them under the loop's lock, and
:meth:`AgentRuntime.stop` and :meth:`AgentRuntime.drain` reach the loop from
any thread (or a signal handler) through a :class:`~mesoslike.transport.Waker`.

Starting, the agent takes its work directory (one agent per work dir),
recovers what an earlier agent process left there (``recover="reconnect"``:
its id, its tasks — still running under their supervisors, or ended with
their exit status — and their unacknowledged updates) and registers;
``recover="cleanup"`` kills whatever an earlier agent left running, forgets
it, and returns.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import random
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Mapping

import msgspec

from mesoslike import __version__
from mesoslike.agent import gc
from mesoslike.agent.checkpoint import CheckpointError, CheckpointStore
from mesoslike.agent.core import (
    check_executor_timeout,
    AgentCore,
    CheckpointAgent,
    CheckpointReservations,
    CheckpointTask,
    Command,
    DeliverMessage,
    ForgetTask,
    KillTask,
    LaunchTask,
    Reconnect,
    SendToExecutor,
    SendToMaster,
    TaskUsers,
    UpdateContainer,
)
from mesoslike.agent.executor import (
    ExecutorEvent,
    Launch,
    FetcherSettings,
    LaunchFailed,
    TaskExecutor,
    TaskExit,
    launch_problem,
    TaskHealth,
    TaskLimited,
    TaskStarted,
    path_component,
)
from mesoslike.advertise import advertised_ip, check_advertise_ip, url_host
from mesoslike.agent.files import SandboxAccess, SandboxFiles, launch_secret_files
from mesoslike.agent.images import IMAGES_DIR, ImageError, ImageStore
from mesoslike.agent.http import AgentHTTPServer
from mesoslike.agent.v1_executor import EXECUTOR_PATH, V1Executors, is_v1_peer
from mesoslike.agent.isolation import DEFAULT_ISOLATION, Isolator, agent_key, select_isolation
from mesoslike.agent.resources_probe import complete_resources, detect_hostname, parse_attributes
from mesoslike.agent.secrets import SecretError, SecretStore, read_sandbox_secret
from mesoslike.agent.settings import AgentSettings
from mesoslike.agent.supervisor import set_autogroup_nice
from mesoslike.agent.views import AgentViews
from mesoslike.acl import Credentials
from mesoslike.clock import Clock, SystemClock
from mesoslike.errors import ConfigError, ResourcesError
from mesoslike.locator import check_master_address, make_locator
from mesoslike.observations import LATENCY_BUCKETS, Histogram
from mesoslike.resources import Resources
from mesoslike.transport import Client, Pollable, Readable, Server, Waker, idle, poll
from mesoslike.v1.shapes import call_body_limit
from mesoslike.wire import WireError
from mesoslike.wire import messages as m
from mesoslike.wire import executor_messages as x
from mesoslike.wire.batching import SEND_WITHIN, batch_frames, batched_messages
from mesoslike.wire.codec import CODEC, sized
from mesoslike.wire.messages import MAX_BATCH
from mesoslike.wire.types import EXECUTOR_RUN_PREFIX, AgentInfo, check_message_size
from mesoslike.young_collections import pass_over_young_objects_less_often

__all__ = ["AgentRuntime", "default_work_dir", "RECOVER_MODES"]

log = logging.getLogger("mesoslike.agent")

RECOVER_MODES = ("reconnect", "cleanup")
#: how often running tasks are polled for events (no SIGCHLD handler: see executor)
TASK_POLL_INTERVAL = 0.05
#: seconds of supervisor starts per loop turn before the agent reads its socket again
LAUNCH_SLICE = 0.05
#: launches prepared, their supervisors asked of the launcher, before its answers are read (one round trip)
LAUNCH_BATCH = 16
#: how often the loop looks at the connection to the master (a restarted master: re-register now)
CONNECTION_CHECK_INTERVAL = 0.25
#: the longest wait between attempts to connect to a master that is down: a restarted one is reached
#: within this long (issue 15: agents back within 2 s)
RECONNECT_MAX = 0.5


def turn_gap_left(busy_turn: float | None, now: float, gap: float, launches_waiting: bool) -> float:
    """How long the loop waits before its next poll (:data:`.settings.TURN_GAP`).

    The tasks, in small-share cgroups, are outranked by the agent, which
    woke for each exit and paid a turn's fixed costs (poll, journal fsync,
    sends, and the master's and framework's turns each frame causes) for
    one or two of them; waiting until ``gap`` after the start of a turn
    that handled news (``busy_turn``), what comes meanwhile shares the
    next turn. After an idle turn (None) the agent answers at once, and
    launches still waiting are never held back."""
    if busy_turn is None or launches_waiting:
        return 0.0
    return max(0.0, busy_turn + gap - now)


def _check_http_secure(ip: str, credentials: Credentials | None, insecure: bool) -> None:
    """Secure by default, as the master (docs/security.rst): without
    credentials the HTTP endpoints (the sandboxes: what tasks print) bind
    loopback only, unless ``insecure`` — then a warning at every start."""
    if credentials is not None:
        return
    if not (ip in ("localhost", "::1") or ip.startswith("127.")) and not insecure:
        raise ConfigError(f"refusing to serve HTTP on {ip} without --credentials: anyone who reaches it could read "
                          "every task's sandbox. Give --credentials (the master's file: docs/security.rst), bind "
                          "127.0.0.1, or pass --insecure")
    if insecure:
        log.warning("INSECURE: this agent serves HTTP on %s without authentication (--insecure): anyone who "
                    "reaches it may read every task's sandbox", ip)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def default_work_dir(hostname: str) -> str:
    """``<tmp>/mesoslike-<uid>/agent-<hostname>``: one per user (other users'
    agents on the machine never share it) and per agent name (several agents
    on one machine never share sandboxes)."""
    return os.path.join(tempfile.gettempdir(), f"mesoslike-{os.getuid()}", f"agent-{path_component(hostname)}")


def _check_work_dir_visible(work_dir: Path, namespaces: tuple[str, ...], shm: str = "/dev/shm") -> None:
    """A task with an IPC namespace gets a fresh ``/dev/shm`` (a tmpfs of its
    own, so that no principal's shared memory is another's): a work
    directory below the host's ``/dev/shm`` would be hidden from its tasks —
    each would run in an empty copy of its sandbox's path and its files be
    lost when it ended. Refused at start. Raises :class:`ConfigError`."""
    if "ipc" not in namespaces or "mount" not in namespaces:
        return
    real, real_shm = os.path.realpath(work_dir), os.path.realpath(shm)
    if real == real_shm or real.startswith(real_shm.rstrip("/") + "/"):
        raise ConfigError(f"--work-dir {work_dir} is below {shm}: each task gets a {shm} of its own "
                          "(namespaces/ipc), which would hide its sandbox; put the work directory elsewhere, or leave "
                          "namespaces/ipc out of --isolation")

class AgentRuntime:
    """A mesoslike agent: registers with a master and runs the tasks it is
    sent, as ``settings`` say (:class:`~mesoslike.agent.settings.AgentSettings`).

    Why one class of some 800 lines: it is the one thread that owns the
    agent's sockets, its core and its task executor, and carries out the
    core's commands between them (a launch batch, a kill, a checkpoint
    before a send); what reads without owning is elsewhere — the HTTP views
    (:mod:`.views`), the v1 executor channel (:mod:`.v1_executor`), the
    settings (:mod:`.settings`).

    :param clock: monotonic clock for every timer (default the system's).
    :param rng: source of status update uuids (default seeded by the OS).
    :param on_serving: called (on the agent's thread) with the HTTP address
        once the endpoints serve.
    """

    def __init__(self, settings: AgentSettings, *, clock: Clock | None = None, rng: random.Random | None = None,
                 on_serving: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.master_address = check_master_address(settings.master)  # raises ConfigError naming the problem
        self.switch_user = os.geteuid() == 0 if settings.switch_user is None else settings.switch_user
        if self.switch_user and os.geteuid() != 0:
            raise ConfigError(f"--switch-user needs the agent to run as root (it runs as uid {os.geteuid()}); "
                              "without it (--no-switch-user) tasks run as the agent's user")
        self.agent_user = _user_name(os.geteuid())
        #: its CURVE pair and the master's public key (docs/security.rst): with
        #: ``master_key`` it talks to, and takes commands from, that master only
        self._keys, self._master_key = settings.keys, settings.master_key
        if settings.recover not in RECOVER_MODES:
            raise ConfigError(f"--recover must be one of {', '.join(RECOVER_MODES)}, got {settings.recover!r}")
        if not settings.recovery_timeout > 0 or not settings.gc_delay >= 0 or not 0 < settings.gc_disk_watermark <= 1:
            raise ConfigError("need recovery_timeout > 0, gc_delay >= 0 and 0 < gc_disk_watermark <= 1")
        for flag, seconds in (("--executor-reregistration-timeout", settings.executor_reregistration_timeout),
                              ("--executor-registration-timeout", settings.executor_registration_timeout)):
            try:
                check_executor_timeout(flag, seconds)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        try:
            #: bytes of data a framework message or status update carries at most (docs/reliability.rst)
            self.max_message_size = check_message_size(settings.max_message_size)
        except ValueError as exc:
            raise ConfigError(f"--max-message-size: {exc}") from None
        #: the master protocol's frames, sized to it
        self._codec = sized(CODEC, self.max_message_size)
        self.hostname = settings.hostname or detect_hostname()
        # absolute: the paths a task's container is described by (its sandbox, private /tmp, volumes) are
        # read by processes that do not share this one's working directory (the namespace init helper)
        self.work_dir = Path(settings.work_dir if settings.work_dir is not None
                             else default_work_dir(self.hostname)).absolute()
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(f"cannot create the work directory {str(self.work_dir)!r}: {exc}") from None
        info = AgentInfo(hostname=self.hostname,
                         resources=complete_resources(_as_resources(settings.resources), self.work_dir),
                         attributes=_attribute_map(settings.attributes), port=settings.port)
        try:
            fetcher = FetcherSettings(settings.fetcher_cache_size, settings.fetcher_timeout, settings.fetcher_max_size)
        except ValueError as exc:
            raise ConfigError(f"bad --fetcher-cache-size, --fetcher-timeout or --fetcher-max-size: {exc}") from None
        try:
            #: the image provisioner's cache (docs/containers.rst, "Images"); launches of tasks with images use it
            self.images = ImageStore(str(self.work_dir / IMAGES_DIR), default_registry=settings.docker_registry,
                                     docker_config=settings.docker_config, insecure_registries=settings.docker_insecure_registries,
                                     cache_size=settings.image_cache_size)
        except (ImageError, ValueError) as exc:
            raise ConfigError(f"bad --docker-registry, --docker-config, --docker-insecure-registries or "
                              f"--image-cache-size: {exc}") from None
        self.clock = clock or SystemClock()
        self.kill_tasks_on_exit = settings.kill_tasks_on_exit
        self.recover_mode = settings.recover
        self.http_port, self.http_ip = settings.http_port, settings.http_ip
        #: the cluster's principals, tokens and ACLs: who may use the HTTP endpoints
        self.credentials = settings.credentials
        _check_http_secure(settings.http_ip if settings.http_port is not None else "127.0.0.1", settings.credentials, settings.insecure)
        self.advertise_ip = check_advertise_ip(settings.advertise_ip) if settings.advertise_ip else None
        self.gc_delay, self.gc_disk_watermark, self.gc_interval = settings.gc_delay, settings.gc_disk_watermark, settings.gc_interval
        #: the GC's book: each ended sandbox's path and when it was last known to be used (None: no pass yet)
        self._ended_sandboxes: dict[str, float] | None = None
        self.drain_timeout = settings.drain_timeout
        if not 0 <= settings.turn_gap <= 1:
            raise ConfigError(f"turn_gap must be 0..1 s, not {settings.turn_gap}")
        self.turn_gap = settings.turn_gap
        if not 0 <= settings.autogroup_nice <= 19:
            raise ConfigError(f"autogroup_nice must be 0..19, not {settings.autogroup_nice}")
        self.autogroup_nice = settings.autogroup_nice
        self._on_serving = on_serving
        #: the Unix socket custom executors connect to (docs/agent.rst, "Custom executors")
        self.executor_socket = executor_socket_path(self.work_dir)
        self.core = AgentCore(self.clock, info, rng=rng, wall_clock=time.time, max_ping_timeouts=settings.max_ping_timeouts,
                              register_backoff=settings.register_backoff, register_backoff_max=settings.register_backoff_max,
                              version=__version__, checkpoint=True, executor_endpoint=f"ipc://{self.executor_socket}",
                              new_secret=lambda: secrets.token_hex(32),
                              executor_reregister_timeout=settings.executor_reregistration_timeout,
                              executor_register_timeout=settings.executor_registration_timeout,
                              task_users=TaskUsers(self.switch_user, self.agent_user, frozenset(settings.shared_task_users)),
                              max_message_size=self.max_message_size)
        self._channel: Server | None = None
        #: what the turn has for executors (sent once its checkpoints are on disk)
        self._executor_outgoing: list[tuple[bytes, object]] = []
        self.isolation = select_isolation(settings.isolation or DEFAULT_ISOLATION, cgroups_root=settings.cgroups_root,
                                          cpu_quota=settings.cgroups_cpu_quota,
                                          probe_cache=self.work_dir / "meta" / "namespaces-probe.json")
        self.isolator: Isolator = self.isolation.resources
        _check_work_dir_visible(self.work_dir, self.isolation.namespaces)
        for path in settings.allowed_host_paths:
            if not os.path.isabs(path):
                raise ConfigError(f"--allowed-host-paths: {path!r} is not an absolute path")
        secret_store = SecretStore(settings.secrets_dir) if settings.secrets_dir is not None else None
        if secret_store is not None:
            try:
                secret_store.check()
            except SecretError as exc:
                raise ConfigError(f"--secrets-dir: {exc}") from None
        self.executor = TaskExecutor(self.work_dir, environment=settings.environment, clock=self.clock,
                                     isolation=self.isolation, allowed_host_paths=settings.allowed_host_paths,
                                     recovery_timeout=settings.recovery_timeout,
                                     container_prefix=agent_key(self.hostname, self.work_dir),
                                     switch_user=self.switch_user, fetcher=fetcher,
                                     image_store=self.images.settings(), hostname=self.hostname,
                                     secrets=secret_store, shared_supervisor=settings.shared_supervisor)
        try:
            self.executor.prepare_directories()
        except OSError as exc:
            raise ConfigError(f"cannot prepare the work directory {str(self.work_dir)!r} for --switch-user: "
                              f"{exc}") from None
        self.checkpoints = CheckpointStore(self.work_dir)
        self.http: AgentHTTPServer | None = None
        #: Mesos's v1 executor API (docs/mesos-api.rst): pymesos's executors speak it
        self.v1_executors = V1Executors(self, self.max_message_size)
        #: checkpoint files that could not be read at the last start (path, problem)
        self.recovery_errors: list[tuple[str, str]] = []
        #: what /metrics counts of this agent's own (several agents may share a process)
        self.counters = {"checkpoint_failures": 0, "sandboxes_collected": 0, "gc_passes": 0, "recovered_tasks": 0,
                         "reregistrations_on_reconnect": 0, "fresh_connections": 0}
        #: tasks whose checkpoint could not be written -> why (their launch fails saying so)
        self._checkpoint_failed: dict[tuple[str, str], str] = {}
        #: tasks the core asked to checkpoint since their records were last written: each journalled once,
        #: with what it is then, before anything that depends on it (_write_checkpoints)
        self._checkpoints_due: dict[tuple[str, str], None] = {}
        #: tasks forgotten since the records were last written: their forget records go first in that write
        #: (a write of their own each was a system call a task); one not written when the agent is killed is
        #: a forget lost, as one that cannot be written: the restarted agent reports the task's end again
        self._forgets_due: list[tuple[str, str]] = []
        self._lock = threading.RLock()   # the loop's state, for the HTTP threads
        #: what the HTTP endpoints read of this agent
        self.views = AgentViews(self, self._lock)
        #: launches the core asked for, not carried out yet: a RUN_TASK is
        #: answered (TASK_STARTING) at once, its supervisor started a little
        #: later, a few at a time between reads (see _launch_some)
        self._launches: deque[LaunchTask] = deque()
        #: what the turn has for the master so far, and the connection it goes on (_send_outgoing)
        self._outgoing: list[object] = []
        self._outgoing_client: Client | None = None
        self._outgoing_since = 0.0   # when the oldest of them was made (time.monotonic)
        #: (framework, task) of each waiting launch -> when the RUN_TASK was read (time.monotonic)
        self._launch_queued_at: dict[tuple[str, str], float] = {}
        #: seconds from a RUN_TASK read to its task's process started (/metrics)
        self.launches_started = Histogram(LATENCY_BUCKETS)
        self._waker: Waker | None = Waker()
        self._waker_lock = threading.Lock()  # stop() may race another stop()
        self._stopping = threading.Event()
        self._drain_requested = threading.Event()
        self._locator_changes = 0
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    # -------------------------------------------------------------- queries
    @property
    def agent_id(self) -> str:
        """The id the master assigned ("" before the first registration)."""
        return self.core.agent_id

    @property
    def registered(self) -> bool:
        return self.core.registered

    @property
    def info(self) -> AgentInfo:
        """What the agent registers with: hostname, resources, attributes."""
        return self.core.info

    @property
    def http_address(self) -> str:
        """``http://HOST:PORT`` of the endpoints once :meth:`run` serves them ("" before, or without)."""
        return self.core.http_address

    # ------------------------------------------------------------ lifecycle
    def start(self) -> AgentRuntime:
        """Run :meth:`run` in a background (daemon) thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("this agent was already started")
        self._thread = threading.Thread(target=self._run_logged, name=f"mesoslike-agent-{self.hostname}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception:
            log.exception("agent %s crashed", self.hostname)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Make :meth:`run` return (killing the tasks first when
        ``kill_tasks_on_exit``). Thread-safe; waits up to ``timeout`` for the
        thread :meth:`start` made."""
        with self._waker_lock:
            self._stopping.set()
            if self._waker is not None:
                self._waker.wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if not self._running.is_set() and (thread is None or not thread.is_alive()):
            self._close_waker()

    def drain(self) -> None:
        """Drain this machine (SIGUSR1 of ``mesoslike agent``): kill every task
        (TASK_KILLED), wait for their updates to be acknowledged (at most
        ``drain_timeout``), unregister from the master, forget the agent's
        checkpoints, and return from :meth:`run`. Thread- and signal-safe."""
        with self._waker_lock:
            self._drain_requested.set()
            if self._waker is not None:
                self._waker.wake()

    def _close_waker(self) -> None:
        with self._waker_lock:
            if self._waker is not None:
                self._waker.close()
                self._waker = None

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread :meth:`start` made."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """Recover, register and serve until :meth:`stop` or a drain (blocking)."""
        if self._running.is_set() or self._waker is None:
            raise RuntimeError("this agent is already running, or was stopped")
        pass_over_young_objects_less_often()   # a launch burst's records live a second or two
        self._running.set()
        try:
            self.checkpoints.lock()
        except BaseException:
            self._running.clear()
            raise
        try:
            self.executor.write_agent_pid()
            log.info("agent %s starting: master %s, resources %s, work dir %s; %s; %s", self.hostname,
                     self.master_address, self.info.resources, self.work_dir, self.isolation.describe(),
                     self.describe_users())
            for warning in self.isolation.warnings:
                log.warning("--isolation %s", warning)
            if self.autogroup_nice:   # below its tasks, as its shared supervisor (docs/agent.rst, "CPU")
                self.executor.link.autogroup_nice = self.autogroup_nice
                if os.getsid(0) == os.getpid():   # the autogroup is the session's: only a session of its own
                    set_autogroup_nice(self.autogroup_nice)
            # the tasks together weigh the cpus offered (up to the machine's), not one process's 1024 shares
            # (docs/agent.rst, "CPU")
            weight = self.isolator.weigh_tasks(self.info.resources)
            if weight is not None:
                log.info("the tasks' parent cgroup weighs %d (cpu.shares; v2: cpu.weight)", weight)
            closed = self.executor.unreachable_ancestors() if self.switch_user else []
            if closed:
                log.warning("--switch-user: other users cannot traverse %s, so tasks reach their sandbox only as "
                            "their working directory, not by its absolute path (MESOSLIKE_SANDBOX)",
                            ", ".join(map(str, closed)))
            if self.recover_mode == "cleanup":
                self._clean_up()
                return
            with self._lock:
                self._recover()
                self._write_checkpoints()
            self._open_executor_channel()
            if self.executor.shared_supervisor:
                # started (or found: a recovered agent's) now, not by the first launch: its start (a Python
                # process and its imports, ~60-80 ms of CPU here) is then not in the first tasks' way
                self.executor.link.ensure()
            self._serve_http()
            self._loop()
        finally:
            self.v1_executors.close()
            if self.http is not None:
                self.http.stop()
            if self._channel is not None:
                self._channel.close()
            self._sync_checkpoints()
            self.checkpoints.close_journal()
            self.checkpoints.unlock()
            self._running.clear()
            log.info("agent %s stopped", self.hostname)

    def _serve_http(self) -> None:
        if self.http_port is None:
            return
        access = SandboxAccess(self.credentials, self.executor.sandbox_owners) if self.credentials else None
        files = SandboxFiles(self.executor.sandbox_root, launch_secret_files(self.work_dir / "meta" / "tasks"))
        self.http = AgentHTTPServer(self.http_ip, self.http_port, self.views, files, access,
                                    handlers=self.v1_executors.handlers,
                                    body_limits={EXECUTOR_PATH: call_body_limit(self.max_message_size)})
        address = advertised_ip(self.http.host, self.advertise_ip)
        host = url_host(address)   # never a wildcard
        self.core.http_address = f"http://{host}:{self.http.port}"
        self.core.ip_address = address   # where its tasks are reachable (Mesos's container_status)
        self.http.start()
        log.info("agent %s serving HTTP on %s", self.hostname, self.core.http_address)
        if self._on_serving is not None:
            self._on_serving(self.core.http_address)

    def _loop(self) -> None:
        assert self._waker is not None
        waker = self._waker
        locator = make_locator(self.master_address, on_change=self._locator_changed)
        client: Client | None = None
        address: str | None = None
        seen_changes = 0
        connections = 0
        next_gc = self.clock.now()
        drain_deadline: float | None = None
        busy_turn: float | None = None   # when the last turn that handled news began (time.monotonic)
        try:
            while not self._stopping.is_set():
                leader = locator.current()
                with self._lock:
                    changes = self._locator_changes
                    if leader != address:  # the first leader, or a failover
                        if client is not None:
                            self._send_outgoing()
                            client.close()
                        client = (Client(leader, codec=self._codec, watch_connection=True,
                                         reconnect_max=RECONNECT_MAX, keys=self._keys, server_key=self._master_key)
                                  if leader else None)
                        connections = 0
                        # the first leader too: a registration attempted before any leader was known went
                        # nowhere, and waiting for its back-off would leave the agent unregistered seconds longer
                        self._carry_out(client, self.core.on_master_changed())
                        address = leader
                    elif changes != seen_changes and address is not None:
                        # the same address leads under a new znode (it lost its ZooKeeper session and won
                        # again): a new master's state, which does not know this agent yet
                        self._carry_out(client, self.core.on_master_changed())
                    seen_changes = changes
                    if client is not None:
                        made = client.connections()
                        if made and connections and self.core.agent_id:
                            # connected again: the master restarted (or the network healed) and may not know us
                            log.info("the connection to the master was made again: re-registering")
                            self.counters["reregistrations_on_reconnect"] += 1
                            self._carry_out(client, self.core.on_master_changed())
                        connections += made
                    if self._drain_requested.is_set() and not self.core.draining:
                        self._carry_out(client, self.core.drain())
                        drain_deadline = self.clock.now() + self.drain_timeout
                    if drain_deadline is not None and (self.core.drained or self.clock.now() >= drain_deadline):
                        self._finish_drain(client)
                        return
                    self._carry_out(client, self.core.tick())
                    if self.clock.now() >= next_gc:
                        next_gc = self.clock.now() + self.gc_interval
                        self._collect_garbage()
                    self._send_outgoing()
                waiting: list[Pollable] = [item for item in (client, self._channel) if item is not None]
                told = self.executor.readable()   # the shared supervisor's news wakes the loop at once
                if told is not None:
                    waiting.append(Readable(told))
                rest = turn_gap_left(busy_turn, time.monotonic(), self.turn_gap, bool(self._launches))
                if rest > 0:
                    idle(waker, rest, clear=False)   # a wake (stop, drain, leader) ends it, and the poll sees it
                if not waiting:
                    idle(waker, min(self._wait_timeout(), 1.0))
                    ready: list[Pollable] = []
                else:
                    ready = poll([*waiting, waker], self._wait_timeout() if client is not None else
                                 min(self._wait_timeout(), 1.0))
                # news (not a timeout, not only the waker): the next poll waits for the gap
                busy_turn = (time.monotonic() if self.turn_gap > 0 and any(item is not waker for item in ready)
                             else None)
                with self._lock:
                    if client is not None:
                        self._receive(client)
                    if self._channel is not None:
                        self._receive_executors(client, self._channel)
                    self._receive_v1_executors(client)
                    self._feed(client, self.executor.poll())
                    self._launch_some(client)
                    self._send_outgoing()
        finally:
            try:
                with self._lock:
                    if self.kill_tasks_on_exit and not self.core.draining:
                        self._kill_everything(client)
                        self.executor.isolator.release()   # the pooled cgroups of the tasks just ended
                    else:
                        self.executor.release()
                    self._send_outgoing()
            finally:
                if client is not None:
                    client.close(linger=1.0 if self.core.draining else 0.0)
                locator.close()

    def _locator_changed(self) -> None:  # the locator's thread
        self._locator_changes += 1
        waker = self._waker
        if waker is not None:
            waker.wake()

    # ------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Rebuild the core from the checkpoints and find each task again."""
        self.recovery_errors = []
        # the dynamic reservations first, whatever else recovers: they outlive an agent id (registering
        # anew, the agent brings them, as a Mesos agent its checkpointed resources); ConfigError if they
        # no longer fit its --resources
        self.core.recover_reservations(self._load_reservations())
        try:
            agent = self.checkpoints.load_agent()
        except CheckpointError as exc:
            self._report(exc)
            log.error("the agent's own checkpoint is unreadable: the tasks it left cannot be re-attached to "
                      "its id and are killed; registering as a new agent")
            self._kill_leftovers()
            return
        checkpoints, errors = self.checkpoints.load_tasks()
        for error in errors:
            self._report(error)
        known = {self.checkpoints.run_dir(c.framework.id, c.task.task_id) for c in checkpoints}
        for run_dir in self.checkpoints.run_dirs():
            if run_dir not in known:
                log.warning("run directory %s has no checkpoint (a task the agent had let go of, or whose "
                            "checkpoint is damaged): whatever runs from it is killed", run_dir)
                self.executor.destroy_run(run_dir)
        if errors:
            self.checkpoints.keep_damaged_journal()
        agent_id = agent.agent_id if agent is not None else ""
        if agent is not None and agent.hostname != self.hostname:
            log.warning("the work dir's agent was %r, this one is %r: recovering it all the same",
                        agent.hostname, self.hostname)
        if not agent_id and checkpoints:
            log.warning("%d tasks checkpointed without an agent id (it was shut down or drained): killed",
                        len(checkpoints))
            self._kill_leftovers()
            return
        self.checkpoints.start_journal(checkpoints)
        self.executor.run_dir_remover.empty_trash()
        self._carry_out(None, self.core.recover(agent_id, checkpoints, agent.receipt if agent is not None else ""))
        for framework_id, task_id in self.core.recovering():
            self._feed(None, self.executor.recover(framework_id, task_id))
        self.counters["recovered_tasks"] = len(checkpoints)
        try:   # leases of containers that ended while no agent ran would keep their layers for ever
            dropped = self.images.prune_leases(keep=self.executor.image_leases())
            if dropped:
                log.info("dropped the image leases of %d containers that are gone", len(dropped))
        except (ImageError, OSError) as exc:
            log.warning("cannot prune the image store's leases: %s", exc)
        if agent_id:
            log.info("recovered agent %s: %d tasks, %s", agent_id, len(checkpoints),
                     ", ".join(f"{t.task_id} {t.state}" for t in self.core.tasks()) or "none")

    def _load_reservations(self) -> Resources:
        """The checkpointed dynamic reservations; :class:`ConfigError` if the
        file cannot be read. Starting without them would drop them for good
        (the master takes a re-registering agent's word), so the agent does
        not start, as a Mesos agent whose checkpointed resources do not
        recover; the operator decides."""
        try:
            return self.checkpoints.load_reservations()
        except CheckpointError as exc:
            self._report(exc)
            raise ConfigError(
                f"the dynamic reservations checkpoint {exc.path} cannot be read ({exc.problem}); the agent does "
                f"not start rather than drop the reservations the master made on it. Remove the file to start "
                f"without them (the master then takes the agent's word: they are gone; an operator can make them "
                f"again with mesoslike reserve)") from None

    def _kill_leftovers(self) -> None:
        for run_dir in self.checkpoints.run_dirs():
            self.executor.destroy_run(run_dir)
        self.checkpoints.clear()
        if self.core.reservations:   # recovered already: the agent registers anew with them, kept
            self._checkpoint_reservations(self.core.reservations)

    def _clean_up(self) -> None:
        """``recover="cleanup"``: kill what an earlier agent left, forget it."""
        count = len(self.checkpoints.run_dirs())
        self._kill_leftovers()
        self.executor.sweep_pool()   # the earlier agent's pooled cgroups and spares: no task of it is left
        log.warning("cleanup: killed and forgot %d tasks of an earlier agent on %s", count, self.work_dir)

    def _report(self, error: CheckpointError) -> None:
        log.error("%s; recovery goes on without it", error)
        self.recovery_errors.append((str(error.path), error.problem))

    # ------------------------------------------------------------ the loop
    def _wait_timeout(self) -> float:
        if self._launches:
            return 0.0   # launches wait: look at the socket, then start more
        wakeup = min(self.core.next_wakeup(), self.executor.next_deadline())
        timeout = max(0.0, wakeup - self.clock.now())
        if self.executor.busy():
            timeout = min(timeout, TASK_POLL_INTERVAL)
        return min(timeout, CONNECTION_CHECK_INTERVAL)

    def _receive(self, client: Client) -> None:
        for _, message in client.receive():
            if isinstance(message, WireError):
                log.warning("bad frame from the master skipped: %s", message)
                continue
            try:
                if isinstance(message, m.Ping):
                    self.core.set_usage(self.executor.usage())
                self._carry_out(client, self.core.on_message(message))
            except Exception:  # one bad message must not take the agent (and its tasks) down
                log.exception("handling %s failed", getattr(message, "TYPE", message))

    def _feed(self, client: Client | None, events: list[ExecutorEvent]) -> None:
        """What happened to the tasks, into the core; carry out what follows."""
        for event in events:
            fw, task = event.framework_id, event.task_id
            if isinstance(event, TaskStarted):
                commands = self.core.on_task_started(fw, task, event.pid, event.container)
            elif isinstance(event, TaskExit):
                commands = self.core.on_task_exited(fw, task, event.exit_code, event.signal, reason=event.reason,
                                                    message=event.message)
            elif isinstance(event, TaskLimited):
                commands = self.core.on_task_limitation(fw, task, event.reason, event.message)
            elif isinstance(event, TaskHealth):
                commands = self.core.on_task_health(fw, task, event.healthy, event.message)
            else:
                assert isinstance(event, LaunchFailed)
                commands = self.core.on_task_launch_failed(fw, task, event.message, why=event.reason)
            self._carry_out(client, commands)

    def _carry_out(self, client: Client | None, commands: list[Command]) -> None:
        """Do what the core asked, in order (a checkpoint before the send it precedes).

        A :class:`CheckpointTask` is not written at once: the task is noted
        and its record written (its checkpoint as it is then) before
        anything that depends on it — a launch, a kill or another command
        that acts outside the agent, the turn's sends and their fsync, the
        end of the half-turn (:meth:`_write_checkpoints`). Nothing outside
        the agent has seen what a record not yet written says, so an agent
        killed before it is written is an agent killed a moment earlier;
        and a task whose update was acknowledged and that started (or
        ended) in the same turn is journalled once, not twice (6.0 records
        a task became ~5 in the benchmark's turns, ~9 µs of encoding and
        writing each)."""
        queue = deque(commands)
        while queue:
            command = queue.popleft()
            if isinstance(command, SendToMaster):
                if client is None:
                    continue  # no leader to tell; registrations and updates are retried
                if client is not self._outgoing_client:
                    self._send_outgoing()
                    self._outgoing_client = client
                if not self._outgoing:
                    self._outgoing_since = time.monotonic()
                self._outgoing.append(command.message)   # sent at the end of the turn (_send_outgoing)
                if len(self._outgoing) >= MAX_BATCH or time.monotonic() - self._outgoing_since >= SEND_WITHIN:
                    # a long turn (5,000 launches checkpointed one by one) must not keep the master
                    # waiting: it takes the agent's silence for its death (any message is a pong)
                    self._send_outgoing()
            elif isinstance(command, Reconnect):
                if client is not None:   # what this turn queued for the master goes over the fresh one
                    client.reconnect()
                    self.counters["fresh_connections"] += 1
            elif isinstance(command, CheckpointTask):
                self._checkpoints_due[command.framework_id, command.task_id] = None
            elif isinstance(command, LaunchTask):   # queued: _launch_batch writes the records due first
                self._launches.append(command)
                self._launch_queued_at[command.framework.id, command.task.task_id] = time.monotonic()
            elif isinstance(command, KillTask):
                self._write_checkpoints()   # (that it was killing: before the kill)
                queue.extend(self._launch_now(command.framework_id, command.task_id))
                self.executor.kill(command.framework_id, command.task_id, command.grace_period)
            elif isinstance(command, DeliverMessage):
                self._write_checkpoints()
                self._deliver(command)
            elif isinstance(command, SendToExecutor):
                self._executor_outgoing.append((command.peer, command.message))
            elif isinstance(command, ForgetTask):
                # its record due, if any, is superseded by the forget (its run directory goes next: the
                # other tasks' records do not depend on that)
                key = (command.framework_id, command.task_id)
                self._checkpoints_due.pop(key, None)
                self._checkpoint_failed.pop(key, None)
                self._forgets_due.append(key)   # journalled with the next records written, before them
                self.executor.forget(command.framework_id, command.task_id)
            elif isinstance(command, CheckpointAgent):
                self._write_checkpoints()
                self._checkpoint_agent(command.agent_id, command.receipt)
            elif isinstance(command, CheckpointReservations):
                self._write_checkpoints()
                self._checkpoint_reservations(command.reservations)
            elif isinstance(command, UpdateContainer):
                self._write_checkpoints()
                self._update_container(command)
            else:  # pragma: no cover - a core/runtime mismatch
                log.error("unknown command %r", command)

    def _send_outgoing(self) -> None:
        """Send what the turn has for the master, its status updates in
        STATUS_UPDATES frames if the master takes them (docs/wire.rst,
        "Batching"). Sent after the checkpoints the core asked for before
        them, as every send now comes after the turn's other commands.
        The records due are written first, sends or none."""
        if self._checkpoints_due or self._forgets_due:
            self._write_checkpoints()
        if self._executor_outgoing:
            self._send_to_executors()
        client, messages = self._outgoing_client, self._outgoing
        if not messages:
            return
        self._outgoing = []
        if client is None:
            return
        self._sync_checkpoints()   # what is reported is on disk first: one fsync for the turn's checkpoints
        for message in batched_messages(messages, self.core.master_accepts_batches):
            try:
                sent = all([client.send_frame(frame) for frame in batch_frames(message, client.codec.encode)])
            except WireError as exc:
                log.error("cannot send %s: %s", getattr(message, "TYPE", message), exc)
                continue
            if not sent:
                log.warning("outgoing queue full: %s dropped (reliable updates are retried)",
                            getattr(message, "TYPE", message))

    # ---------------------------------------------------- custom executors
    def _open_executor_channel(self) -> None:
        """Bind the executor channel (a Unix socket: the agent's user only,
        or anyone with an executor's secret under --switch-user, whose
        executors run as other users)."""
        path = self.executor_socket
        directory = path.parent
        # outside the work dir (a long work dir's path: <tmp>/mesoslike-<uid>/exec-<hash>), the parent is
        # in a directory anyone can write to: one another user made first could swap the channel's directory
        # for one of theirs, and executors would send their secrets to that user's socket
        chain = [directory] if directory.parent == self.work_dir.absolute() else [directory.parent, directory]
        for each in chain:
            each.mkdir(exist_ok=True, mode=0o700)
            info = os.lstat(each)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise ConfigError(f"the executor channel's directory {str(each)!r} is not a directory of the "
                                  "agent's user")
            os.chmod(each, 0o711 if self.switch_user else 0o700)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                path.unlink()   # an earlier agent's (the work dir's lock is ours)
        except FileNotFoundError:
            pass
        self._channel = Server(f"ipc://{path}", codec=sized(x.EXECUTOR_CODEC, self.max_message_size))
        os.chmod(path, 0o666 if self.switch_user else 0o600)
        log.info("agent %s: executor channel %s", self.hostname, path)

    def _receive_executors(self, client: Client | None, channel: Server) -> None:
        for peer, message in channel.receive():
            if peer is None:
                continue
            if isinstance(message, WireError):
                log.warning("bad frame on the executor channel skipped: %s", message)
                self._executor_outgoing.append((peer, x.ExecutorError(f"bad frame: {str(message)[:500]}")))
                continue
            try:
                self._carry_out(client, self.core.on_executor_frame(peer, message))
            except Exception:  # one bad message must not take the agent (and its tasks) down
                log.exception("handling %s from an executor failed", getattr(message, "TYPE", message))

    def _receive_v1_executors(self, client: Client | None) -> None:
        for peer, message in self.v1_executors.take():
            try:
                self._carry_out(client, self.core.on_executor_frame(peer, message))
            except Exception:  # one bad message must not take the agent (and its tasks) down
                log.exception("handling %s from a v1 executor failed", getattr(message, "TYPE", message))

    def executor_secret(self, framework_id: str, executor_id: str) -> str | None:
        run_id = EXECUTOR_RUN_PREFIX + executor_id
        with self._lock:
            secret = self.core.executor_secret(framework_id, executor_id)
            if secret != "":
                return secret
            sandbox = self.executor.sandbox(framework_id, run_id)
        # an executor recovered with the agent: this process never had its secret; its file in the
        # sandbox holds it, taken only if its digest is the checkpointed one (docs/mesos-api.rst)
        found = read_sandbox_secret(sandbox, x.SECRET_FILE)
        with self._lock:
            if found is not None and self.core.restore_executor_secret(framework_id, executor_id, found):
                return found
        log.warning("executor %s of framework %s: its secret file does not hold its secret (changed or gone); "
                    "it cannot use the v1 executor API", executor_id[:200], framework_id[:200])
        return None

    def executor_processes(self, framework_id: str, executor_id: str) -> list[int] | None:
        """The processes of the executor's container now (none if it does not run); None while it is
        starting and the agent does not know its process yet (posix isolation finds them by its session)."""
        with self._lock:
            running = self.executor.container_and_leader(framework_id, EXECUTOR_RUN_PREFIX + executor_id)
        if running is None:
            return []
        container, leader = running
        try:
            processes = self.executor.isolator.processes(container, leader)
        except OSError as exc:
            log.warning("the processes of executor %s of framework %s cannot be read: %s", executor_id[:200],
                        framework_id[:200], exc)
            return []
        return None if not processes and leader is None else processes

    def wake(self) -> None:
        waker = self._waker
        if waker is not None:
            waker.wake()

    def _send_to_executors(self) -> None:
        self._sync_checkpoints()   # an acknowledged update is on disk
        outgoing, self._executor_outgoing = self._executor_outgoing, []
        for peer, message in outgoing:
            if is_v1_peer(peer):
                self.v1_executors.deliver(peer, message)
        outgoing = [(peer, message) for peer, message in outgoing if not is_v1_peer(peer)]
        if self._channel is None:
            return
        for peer, message in outgoing:
            try:
                self._channel.send(peer, message)
            except WireError as exc:
                log.error("cannot send %s to an executor: %s", getattr(message, "TYPE", message), exc)

    def _checkpoint_task(self, framework_id: str, task_id: str) -> None:
        checkpoint = self.core.task_checkpoint(framework_id, task_id)
        if checkpoint is None:
            return
        try:
            self.checkpoints.save_task(checkpoint)
            self._checkpoint_failed.pop((framework_id, task_id), None)
        except OSError as exc:
            self.counters["checkpoint_failures"] += 1
            if (framework_id, task_id) not in self._checkpoint_failed:
                log.error("cannot checkpoint task %s/%s (a restarted agent would not know it): %s",
                          framework_id, task_id, exc)
            self._checkpoint_failed[(framework_id, task_id)] = launch_problem(exc, self.work_dir)

    def _forget_checkpoint(self, framework_id: str, task_id: str) -> None:
        try:
            self.checkpoints.forget_task(framework_id, task_id)
        except OSError as exc:  # a restarted agent reports it again (its update has the same uuid)
            self.counters["checkpoint_failures"] += 1
            log.error("cannot journal that task %s/%s is forgotten: %s", framework_id, task_id, exc)

    def _write_checkpoints(self) -> None:
        """Journal each task noted by a :class:`CheckpointTask` since the last
        call, once, as it is now (see :meth:`_carry_out`), after the tasks
        forgotten since (a task forgotten and then launched again under its id
        ends with its new record)."""
        due, forgotten = self._checkpoints_due, self._forgets_due
        if not due and not forgotten:
            return
        self._checkpoints_due = {}
        self._forgets_due = []
        task_checkpoint = self.core.task_checkpoint
        keys, checkpoints = [], []
        for key in due:
            checkpoint = task_checkpoint(*key)
            if checkpoint is not None:
                keys.append(key)
                checkpoints.append(checkpoint)
        if not checkpoints and not forgotten:
            return
        try:
            self.checkpoints.save_tasks(checkpoints, forgotten)   # one write for them all
        except OSError:   # none written: each on its own, so that those that can be are, and each failure is told
            for key in forgotten:
                self._forget_checkpoint(*key)
            for key in keys:
                self._checkpoint_task(*key)
            return
        if self._checkpoint_failed:
            for key in keys:
                self._checkpoint_failed.pop(key, None)

    def _sync_checkpoints(self) -> None:
        self._write_checkpoints()
        try:
            self.checkpoints.sync()
        except OSError as exc:
            self.counters["checkpoint_failures"] += 1
            log.error("cannot sync the checkpoints to disk (a crash of the machine could lose them): %s", exc)

    def _checkpoint_agent(self, agent_id: str, receipt: str = "") -> None:
        try:
            self.checkpoints.save_agent(agent_id, self.hostname, receipt)
        except OSError as exc:
            self.counters["checkpoint_failures"] += 1
            log.error("cannot checkpoint the agent id %r: %s", agent_id, exc)

    def _checkpoint_reservations(self, reservations: Resources) -> None:
        try:
            self.checkpoints.save_reservations(reservations)
        except OSError as exc:
            self.counters["checkpoint_failures"] += 1
            log.error("cannot checkpoint the dynamic reservations %s (a restarted agent would not have them): %s",
                      reservations, exc)

    def _launch_some(self, client: Client | None) -> None:
        """Start waiting launches for at most LAUNCH_SLICE seconds.

        Starting a task's supervisor costs a process start (tens of ms of
        CPU). Done as each RUN_TASK is read, an ACCEPT of thousands of tasks
        kept the agent from reading the rest — and from answering them — for
        minutes, and the master, hearing nothing of them, sent them again
        and finally wrote them off as lost. Answered first and started in
        slices, every task is confirmed at once and pings are answered
        while the launches go on. O(launches started)."""
        deadline = time.monotonic() + LAUNCH_SLICE
        while self._launches and time.monotonic() < deadline:
            batch = [self._launches.popleft() for _ in range(min(LAUNCH_BATCH, len(self._launches)))]
            self._carry_out(client, self._launch_batch(batch))

    def _update_container(self, command: UpdateContainer) -> None:
        """A custom executor's container takes its new limits; one whose
        launch waits (in ``_launches``) is started with them."""
        key = (command.framework_id, command.task_id)
        if key in self._launch_queued_at:   # O(1) for the usual case: it runs already
            for index, launch in enumerate(self._launches):
                if (launch.framework.id, launch.task.task_id) == key:
                    task = launch.task.replace(resources=command.resources)
                    self._launches[index] = msgspec.structs.replace(launch, task=task)
                    log.debug("the container of %s/%s will start with %s", *key, command.resources)
                    return
        self.executor.resize(command.framework_id, command.task_id, command.resources)

    def _launch_now(self, framework_id: str, task_id: str) -> list[Command]:
        """Start the task now if its launch is waiting (it is to be killed:
        started and killed, it ends as any killed task does)."""
        for command in self._launches:
            if command.framework.id == framework_id and command.task.task_id == task_id:
                self._launches.remove(command)
                return self._launch(command)
        return []

    def _launch(self, command: LaunchTask) -> list[Command]:
        return self._launch_batch([command])

    def _launch_batch(self, commands: list[LaunchTask]) -> list[Command]:
        """Start the tasks of ``commands`` (their supervisors asked of the
        launcher together: :meth:`.TaskExecutor.launch_many`); what the core
        says of those that could not start."""
        out: list[Command] = []
        launches: list[LaunchTask] = []
        self._write_checkpoints()   # a task is journalled before it starts (a failure fails its launch)
        for command in commands:
            framework_id, task_id = command.framework.id, command.task.task_id
            why = self._checkpoint_failed.get((framework_id, task_id))
            if why is not None:
                self._launch_queued_at.pop((framework_id, task_id), None)
                out += self.core.on_task_launch_failed(
                    framework_id, task_id, f"the task could not be checkpointed, so it was not started: {why}")
            else:
                launches.append(command)
        problems = self.executor.launch_many([Launch(c.framework.id, c.task, c.agent_id, c.framework.principal,
                                                     c.secret_files) for c in launches])
        now = time.monotonic()
        for command, problem in zip(launches, problems):
            framework_id, task_id = command.framework.id, command.task.task_id
            queued_at = self._launch_queued_at.pop((framework_id, task_id), None)
            if problem is not None:
                log.warning("task %s/%s could not start: %s", framework_id, task_id, problem)
                out += self.core.on_task_launch_failed(framework_id, task_id, str(problem), why=problem.reason)
            elif queued_at is not None:
                self.launches_started.observe(now - queued_at)
        return out

    def _deliver(self, command: DeliverMessage) -> None:
        try:
            self.executor.deliver_message(command.framework_id, command.task_id, command.data)
        except OSError as exc:
            log.warning("framework message for task %s/%s lost: %s", command.framework_id, command.task_id, exc)

    def _kill_everything(self, client: Client | None) -> None:
        """Stopping with ``kill_tasks_on_exit``: the tasks are killed on purpose (TASK_KILLED)."""
        self._carry_out(client, self.core.kill_all("the agent stopped"))
        if not self.executor.running():
            return
        log.info("killing %d tasks before stopping", len(self.executor.running()))
        events = self.executor.kill_all()
        # best effort: the terminal updates are queued (and checkpointed), most likely never acknowledged
        self._feed(client, events)

    def _finish_drain(self, client: Client | None) -> None:
        if not self.core.drained:
            log.warning("drain: gave up waiting for the tasks' last updates after %.0f s", self.drain_timeout)
        self._carry_out(client, self.core.unregister())
        self._send_outgoing()
        self._kill_leftovers()
        log.warning("agent %s drained and unregistered", self.hostname)

    # ------------------------------------------------------------ sandboxes
    def _collect_garbage(self) -> None:
        """Remove the sandboxes of ended tasks that are due (see :mod:`.gc`):
        the sandbox directories' names listed, the new ended ones booked, a
        sandbox's files walked only when the book says it may be due."""
        self.counters["gc_passes"] += 1
        root = self.executor.sandbox_root
        live = {(path_component(t.framework_id), path_component(t.task_id)) for t in self.core.tasks()}
        live |= {(path_component(f), path_component(t)) for f, t in self.executor.running()}
        now = time.time()
        first = self._ended_sandboxes is None   # this agent's first pass: what earlier runs left
        booked = self._ended_sandboxes or {}
        ended: dict[str, float] = {}
        for framework in _subdirectories(root):
            for task in _subdirectories(framework.path):
                if (framework.name, task.name) in live:
                    continue
                path = task.path
                when = booked.get(path)
                ended[path] = when if when is not None else (_last_use_and_size(path)[0] if first else now)
        self._ended_sandboxes = ended
        if not ended:
            return
        disk = shutil.disk_usage(root)
        chosen, later = gc.plan(ended, now=now, gc_delay=self.gc_delay, disk_used=disk.used, disk_total=disk.total,
                                disk_watermark=self.gc_disk_watermark, measure=_last_use_and_size)
        ended.update(later)
        for sandbox in chosen:
            shutil.rmtree(sandbox.path, ignore_errors=True)
            del ended[sandbox.path]
            self.counters["sandboxes_collected"] += 1
            log.info("sandbox %s collected (last used %.0f s ago)", sandbox.path, now - sandbox.last_used)
            try:
                os.rmdir(os.path.dirname(sandbox.path))  # the framework's directory, once empty
            except OSError:
                pass

    def describe_users(self) -> str:
        """Whom the tasks run as, in words (the start-up line)."""
        shared = self.core.task_users.shared
        sharing = (f"; tasks of different principals may share {'any user' if '*' in shared else 'user(s) ' + ', '.join(sorted(shared))}"
                   " (--shared-task-users)" if shared else "")
        if self.switch_user:
            return f"tasks run as their user (--switch-user){sharing}"
        return f"tasks run as the agent's user ({self.agent_user}; --no-switch-user){sharing}"


def executor_socket_path(work_dir: Path) -> Path:
    """``<work_dir>/executors/channel.sock``; if that is longer than a Unix
    socket's path may be, ``<tmp>/mesoslike-<uid>/exec-<hash of the work
    dir>/channel.sock`` (the same for every agent on this work dir, so a
    running executor finds a restarted agent)."""
    path = work_dir.absolute() / "executors" / "channel.sock"
    if len(str(path).encode()) <= 100:
        return path
    digest = hashlib.sha256(str(work_dir.absolute()).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"mesoslike-{os.getuid()}" / f"exec-{digest}" / "channel.sock"


def _subdirectories(directory: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    """The directories in ``directory`` (not symbolic links to one), by
    name: from the entries' types, no ``stat`` of each (a GC pass lists
    every sandbox's name)."""
    try:
        with os.scandir(directory) as entries:
            found = [entry for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    found.sort(key=lambda entry: entry.name)
    return found


def _last_use_and_size(sandbox: str) -> tuple[float, int]:
    """When anything in ``sandbox`` was last written to, and its size in
    bytes (0 and 0 if it is gone)."""
    try:
        last, size = os.stat(sandbox).st_mtime, 0
    except OSError:
        return 0.0, 0
    for directory, _, files in os.walk(sandbox):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            last, size = max(last, info.st_mtime), size + info.st_size
    return last, size


def _attribute_map(attributes: Mapping[str, str] | str | None) -> dict[str, str]:
    """The canonical attribute map of ``--attributes`` text or a map;
    ConfigError naming the bad one."""
    if isinstance(attributes, str):
        return parse_attributes(attributes)
    text = ";".join(f"{name}:{value}" for name, value in (attributes or {}).items())
    return parse_attributes(text)


def _as_resources(resources: Resources | str | None) -> Resources | None:
    if resources is None:
        return resources
    try:
        parsed = resources if isinstance(resources, Resources) else Resources.parse(resources)
    except ResourcesError as exc:
        raise ConfigError(f"bad --resources {resources!r}: {exc}") from None
    if parsed.dynamically_reserved():   # the master makes those (RESERVE, /reserve); the agent checkpoints them
        raise ConfigError(f"bad --resources {str(resources)!r}: {parsed.dynamically_reserved()} are dynamic "
                          "reservations (name(role,principal)), made through the master, not given to an agent; "
                          "a static reservation is name(role)")
    return parsed

"""The agent's imperative shell: a loop that feeds the master's messages,
task exits and the passing of time into :class:`~mesoslike.agent.core.AgentCore`
and carries out the commands it returns.

One thread owns the ZeroMQ socket and the task processes; :meth:`AgentRuntime.stop`
reaches it from any thread through a :class:`~mesoslike.transport.Waker`.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Mapping

from mesoslike import __version__
from mesoslike.agent.core import AgentCore, Command, DeliverMessage, KillTask, LaunchTask, SendToMaster
from mesoslike.agent.executor import LaunchError, TaskExecutor, path_component
from mesoslike.agent.resources_probe import complete_resources, detect_hostname, parse_attributes
from mesoslike.clock import Clock, SystemClock
from mesoslike.errors import ConfigError, ResourcesError
from mesoslike.resources import Resources
from mesoslike.locator import check_master_address, make_locator
from mesoslike.transport import Client, CurveKeys, Waker, idle
from mesoslike.wire import WireError
from mesoslike.wire.types import AgentInfo

__all__ = ["AgentRuntime", "default_work_dir"]

log = logging.getLogger("mesoslike.agent")

#: how often running tasks are polled for exits (no SIGCHLD handler: see executor)
TASK_POLL_INTERVAL = 0.05


def default_work_dir(hostname: str) -> str:
    """``<tmp>/mesoslike/agent-<hostname>``: distinct per agent name, so
    several agents on one machine (``mesoslike local``) never share sandboxes."""
    return os.path.join(tempfile.gettempdir(), "mesoslike", f"agent-{path_component(hostname)}")


class AgentRuntime:
    """A mesoslike agent: registers with a master and runs the tasks it is sent.

    :param master: the master's address, ``tcp://HOST:PORT``, or ``zk://HOSTS/PATH`` to follow
        whichever master leads that ZooKeeper group (re-registering on a failover).
    :param resources: what the agent offers (a :class:`Resources` or a
        ``"cpus:4;mem:8192"`` string); kinds among cpus, mem, disk and ports
        it leaves out are detected (see :mod:`.resources_probe`); ``None``
        detects everything.
    :param attributes: e.g. ``{"rack": "r1", "room": "er1"}`` or the string
        ``"rack:r1;room:er1"``.
    :param hostname: the name the agent registers under (default: the
        machine's); several agents on one machine need distinct names.
    :param work_dir: sandboxes go to ``<work_dir>/sandboxes``; created if
        missing. Default :func:`default_work_dir` of the hostname.
    :param port: reported in the agent's info (agents do not listen yet).
    :param clock: monotonic clock for every timer (default the system's).
    :param max_ping_timeouts: with the master's ping interval, how long a
        silent master is trusted (must match the master's setting to agree
        on who gave up first; default 5, as Mesos).
    :param register_backoff: first delay between registration attempts,
        doubling to ``register_backoff_max``; each delay is drawn at random
        from its upper half, so agents do not retry in lockstep.
    :param kill_tasks_on_exit: kill every task when :meth:`run` ends (by
        :meth:`stop`, an exception or Ctrl-C); ``mesoslike local`` relies on
        this to leave no process behind.
    :param environment: base environment of the tasks (default: the agent's).
    :param rng: source of status update uuids (default seeded by the OS).
    """

    def __init__(self, master: str, resources: Resources | str | None = None,
                 attributes: Mapping[str, str] | str | None = None, hostname: str | None = None,
                 work_dir: str | os.PathLike | None = None, *, port: int = 0, clock: Clock | None = None,
                 max_ping_timeouts: int = 5, register_backoff: float = 4.0, register_backoff_max: float = 10.0,
                 kill_tasks_on_exit: bool = True, environment: Mapping[str, str] | None = None,
                 rng: random.Random | None = None, keys: CurveKeys | None = None,
                 master_key: bytes | None = None) -> None:
        self.master_address = _check_master_address(master)
        #: its CURVE pair and the master's public key (docs/security.rst): with
        #: ``master_key`` it talks to, and takes commands from, that master only
        self._keys, self._master_key = keys, master_key
        self.hostname = hostname or detect_hostname()
        self.work_dir = Path(work_dir if work_dir is not None else default_work_dir(self.hostname))
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the work directory {str(self.work_dir)!r}: {exc}") from None
        info = AgentInfo(hostname=self.hostname,
                         resources=complete_resources(_as_resources(resources), self.work_dir),
                         attributes=parse_attributes(attributes) if isinstance(attributes, str) else attributes or {},
                         port=port)
        self.clock = clock or SystemClock()
        self.kill_tasks_on_exit = kill_tasks_on_exit
        self.core = AgentCore(self.clock, info, rng=rng, wall_clock=time.time, max_ping_timeouts=max_ping_timeouts,
                              register_backoff=register_backoff, register_backoff_max=register_backoff_max,
                              version=__version__)
        self.executor = TaskExecutor(self.work_dir, environment=environment, clock=self.clock)
        self._waker: Waker | None = Waker()
        self._waker_lock = threading.Lock()  # stop() may race another stop()
        self._stopping = threading.Event()
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
        """Register and serve until :meth:`stop` (blocking). The tasks are
        killed on the way out, whatever the way, when ``kill_tasks_on_exit``."""
        if self._running.is_set() or self._waker is None:
            raise RuntimeError("this agent is already running, or was stopped")
        self._running.set()
        log.info("agent %s starting: master %s, resources %s, work dir %s", self.hostname, self.master_address,
                 self.info.resources, self.work_dir)
        locator = make_locator(self.master_address, on_change=self._waker.wake)
        client: Client | None = None
        address: str | None = None
        try:
            while not self._stopping.is_set():
                leader = locator.current()
                if leader != address:  # the first leader, or a failover
                    if client is not None:
                        client.close()
                    client = Client(leader, keys=self._keys, server_key=self._master_key) if leader else None
                    if address is not None or self.core.agent_id:
                        self._carry_out(client, self.core.on_master_changed())
                    address = leader
                self._carry_out(client, self.core.tick())
                if client is None:
                    idle(self._waker, min(self._wait_timeout(), 1.0))
                    self._reap(client)
                    continue
                client.wait(self._wait_timeout(), self._waker)
                self._receive(client)
                self._reap(client)
        finally:
            try:
                if self.kill_tasks_on_exit:
                    self._kill_everything(client)
            finally:
                if client is not None:
                    client.close()
                locator.close()
                self._running.clear()
                log.info("agent %s stopped", self.hostname)

    # ------------------------------------------------------------ the loop
    def _wait_timeout(self) -> float:
        wakeup = min(self.core.next_wakeup(), self.executor.next_deadline())
        timeout = max(0.0, wakeup - self.clock.now())
        if self.executor.running():
            timeout = min(timeout, TASK_POLL_INTERVAL)
        return min(timeout, 3600.0)

    def _receive(self, client: Client) -> None:
        for _, message in client.receive():
            if isinstance(message, WireError):
                log.warning("bad frame from the master skipped: %s", message)
                continue
            try:
                self._carry_out(client, self.core.on_message(message))
            except Exception:  # one bad message must not take the agent (and its tasks) down
                log.exception("handling %s failed", getattr(message, "TYPE", message))

    def _reap(self, client: Client | None) -> None:
        for exit in self.executor.poll():
            self._carry_out(client, self.core.on_task_exited(exit.framework_id, exit.task_id, exit.exit_code,
                                                             exit.signal))

    def _carry_out(self, client: Client | None, commands: list[Command]) -> None:
        """Do what the core asked; a launch reports back and may ask for more."""
        queue = deque(commands)
        while queue:
            command = queue.popleft()
            if isinstance(command, SendToMaster):
                if client is None:
                    continue  # no leader to tell; registrations and updates are retried
                if not client.send(command.message):
                    log.warning("outgoing queue full: %s dropped (reliable updates are retried)",
                                getattr(command.message, "TYPE", command.message))
            elif isinstance(command, LaunchTask):
                queue.extend(self._launch(command))
            elif isinstance(command, KillTask):
                self.executor.kill(command.framework_id, command.task_id, command.grace_period)
            elif isinstance(command, DeliverMessage):
                self._deliver(command)
            else:  # pragma: no cover - a core/runtime mismatch
                log.error("unknown command %r", command)

    def _launch(self, command: LaunchTask) -> list[Command]:
        framework_id, task_id = command.framework.id, command.task.task_id
        try:
            pid = self.executor.launch(framework_id, command.task, command.agent_id)
        except LaunchError as exc:
            log.warning("task %s/%s could not start: %s", framework_id, task_id, exc)
            return self.core.on_task_launch_failed(framework_id, task_id, str(exc))
        return self.core.on_task_started(framework_id, task_id, pid)

    def _deliver(self, command: DeliverMessage) -> None:
        try:
            self.executor.deliver_message(command.framework_id, command.task_id, command.data)
        except OSError as exc:
            log.warning("framework message for task %s/%s lost: %s", command.framework_id, command.task_id, exc)

    def _kill_everything(self, client: Client | None) -> None:
        if not self.executor.running():
            return
        log.info("killing %d tasks before stopping", len(self.executor.running()))
        for exit in self.executor.kill_all():
            # best effort: the terminal updates are queued, most likely never acknowledged
            self._carry_out(client, [c for c in self.core.on_task_exited(
                exit.framework_id, exit.task_id, exit.exit_code, exit.signal) if isinstance(c, SendToMaster)])


def _check_master_address(master: str) -> str:
    return check_master_address(master)  # raises ConfigError naming the problem


def _as_resources(resources: Resources | str | None) -> Resources | None:
    if resources is None or isinstance(resources, Resources):
        return resources
    try:
        return Resources.parse(resources)
    except ResourcesError as exc:
        raise ConfigError(f"bad --resources {resources!r}: {exc}") from None

"""The agent's decisions, sans I/O: registration, master liveness, task
bookkeeping, resource enforcement, reliable status updates, and what must
be checkpointed for a restarted agent to recover its tasks.

:class:`AgentCore` is a deterministic state machine. A runtime feeds it events
— messages from the master, tasks that started, exited or hit a limit, the
passing of time (:meth:`AgentCore.tick`) — and carries out the commands it
returns (:class:`SendToMaster`, :class:`LaunchTask`, :class:`KillTask`,
:class:`DeliverMessage`, and with ``checkpoint=True`` :class:`CheckpointTask`,
:class:`ForgetTask`, :class:`CheckpointAgent`, always *before* the messages
that depend on them). It never touches a socket, a file or a process and
never reads the time itself: it takes a :class:`~mesoslike.clock.Clock` for
timers, an optional wall clock for status timestamps, and a
``random.Random`` for update uuids. A restarted agent rebuilds it from its
checkpoints with :meth:`AgentCore.recover`.

The conversation it keeps is the "agent" part of ``docs/wire.rst``
("Conversations"); ``docs/agent.rst`` explains the choices.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import random
import signal as signal_module
import uuid
from typing import Any, Callable, Union

import attrs

from mesoslike.backoff import Backoff
from mesoslike.clock import Clock
from mesoslike.delivery import UpdateStreams
from mesoslike.errors import ConfigError
from mesoslike.observations import NOTICE
from mesoslike.resources import Resources
from mesoslike.wire import executor_messages as x
from mesoslike.wire import messages as m
from mesoslike.wire.batching import unbatched
from mesoslike.wire.types import (EXECUTOR_RUN_PREFIX, MAX_FRAMEWORK_MESSAGE, TERMINAL_STATES, WARN_MESSAGE_SIZE,
                                  AgentInfo, ContainerStatus, ExecutorInfo, FrameworkInfo, Label, MasterInfo,
                                  TaskInfo, TaskState, TaskStatus, check_message_size, without_secret_values)

__all__ = [
    "AgentCore", "AgentTask", "TaskCheckpoint", "Command", "SendToMaster", "Reconnect", "LaunchTask", "KillTask",
    "DeliverMessage", "CheckpointTask", "ForgetTask", "CheckpointAgent", "CheckpointReservations", "SendToExecutor",
    "UpdateContainer", "AgentExecutor", "SOURCE_AGENT", "SOURCE_EXECUTOR", "EXECUTOR_REREGISTER_TIMEOUT",
    "MAX_EXECUTOR_REREGISTER_TIMEOUT", "check_executor_timeout", "EXECUTOR_REGISTER_TIMEOUT", "MAX_EXECUTOR_PENDING_UPDATES",
    "MAX_EXECUTORS_PER_FRAMEWORK",
    "REASON_TASK_INVALID", "REASON_TASK_UNAUTHORIZED", "REASON_TASK_UNKNOWN", "TaskUsers", "REASON_COMMAND_EXECUTOR_FAILED",
    "REASON_CONTAINER_LIMITATION_MEMORY", "REASON_EXECUTOR_TERMINATED", "REASON_EXECUTOR_REREGISTRATION_TIMEOUT",
    "REASON_EXECUTOR_REGISTRATION_TIMEOUT", "REASON_AGENT_RESTARTED", "REASON_AGENT_DRAINING", "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED",
    "REASON_CONTAINER_LAUNCH_FAILED", "UPDATE_BACKOFF_INITIAL", "UPDATE_BACKOFF_MAX",
]

log = logging.getLogger("mesoslike.agent")

SOURCE_AGENT = "SOURCE_AGENT"
#: an update a custom executor sent (docs/agent.rst, "Custom executors")
SOURCE_EXECUTOR = "SOURCE_EXECUTOR"
#: how long a recovered agent waits for a custom executor still running to
#: reconnect before it kills it (Mesos's --executor_reregistration_timeout)
EXECUTOR_REREGISTER_TIMEOUT = 10.0
#: the longest such wait (a day): tasks of an executor that never comes back must end
MAX_EXECUTOR_REREGISTER_TIMEOUT = 86_400.0


def check_executor_timeout(name: str, seconds: float) -> None:
    """ValueError naming ``name`` unless 0 < ``seconds`` <= a day (the
    executor registration and re-registration timeouts)."""
    if not 0 < seconds <= MAX_EXECUTOR_REREGISTER_TIMEOUT:
        raise ValueError(f"{name} must be more than 0 and at most {MAX_EXECUTOR_REREGISTER_TIMEOUT:g} s, "
                         f"got {seconds!r}")
#: how long a custom executor's process has, once started, to register on the
#: executor channel before it is killed and its tasks fail (Mesos's
#: --executor_registration_timeout, default 1 min): a process that never
#: connects must not hold its tasks in TASK_STARTING and its resources forever
EXECUTOR_REGISTER_TIMEOUT = 60.0
#: the states an executor may report for its task
_EXECUTOR_STATES = frozenset({TaskState.STARTING, TaskState.RUNNING, TaskState.KILLING, TaskState.FINISHED,
                              TaskState.FAILED, TaskState.KILLED, TaskState.ERROR})
#: characters of an executor's update message and reason the agent keeps
_MAX_EXECUTOR_TEXT = 4096
#: a task's unacknowledged updates beyond which its executor's non-terminal ones are refused (a peer
#: that sends TASK_RUNNING in a loop while no master acknowledges must not grow the agent without bound)
MAX_EXECUTOR_PENDING_UPDATES = 100
#: custom executors one framework may run on one agent: an executor may hold no resources and outlives
#: its tasks, so without a bound a framework could leave an idle process (and the agent's record of it)
#: per executor id it ever named
MAX_EXECUTORS_PER_FRAMEWORK = 256
#: TASK_ERROR: duplicate id, wrong agent, no resources, or more than is free
REASON_TASK_INVALID = "REASON_TASK_INVALID"
#: TASK_ERROR: its unix user runs another principal's tasks on this agent (TaskUsers)
REASON_TASK_UNAUTHORIZED = "REASON_TASK_UNAUTHORIZED"
#: TASK_LOST answering a KILL_TASK for a task this agent does not know
REASON_TASK_UNKNOWN = "REASON_TASK_UNKNOWN"
#: TASK_FAILED for a command that could not be started
REASON_COMMAND_EXECUTOR_FAILED = "REASON_COMMAND_EXECUTOR_FAILED"
#: TASK_FAILED: the task went above its memory limit (cgroups); the message names the limit
REASON_CONTAINER_LIMITATION_MEMORY = "REASON_CONTAINER_LIMITATION_MEMORY"
#: TASK_FAILED: the task's supervisor (its executor) died
REASON_EXECUTOR_TERMINATED = "REASON_EXECUTOR_TERMINATED"
#: TASK_FAILED: the supervisor killed the task because no agent came back in time (--recovery-timeout)
REASON_EXECUTOR_REREGISTRATION_TIMEOUT = "REASON_EXECUTOR_REREGISTRATION_TIMEOUT"
#: TASK_FAILED: the agent restarted between checkpointing a task and starting it
REASON_AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
#: TASK_FAILED: its custom executor did not register in time (--executor-registration-timeout)
REASON_EXECUTOR_REGISTRATION_TIMEOUT = "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
#: TASK_DROPPED: a task sent to an agent that is draining
REASON_AGENT_DRAINING = "REASON_AGENT_DRAINING"
#: TASK_RUNNING whose ``healthy`` changed, and TASK_FAILED of a task its health check killed
REASON_TASK_HEALTH_CHECK_STATUS_UPDATED = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
#: TASK_FAILED: a URI of the task could not be fetched (the message names it)
REASON_CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"

#: status update retries: 0.5 s doubling to 10 s (docs/reliability.rst, "Retries")
UPDATE_BACKOFF_INITIAL = 0.5
UPDATE_BACKOFF_MAX = 10.0
UPDATE_BACKOFF = Backoff(UPDATE_BACKOFF_INITIAL, UPDATE_BACKOFF_MAX, jitter=0.0)

EMPTY = Resources()
TaskKey = tuple[str, str]  # (framework_id, task_id): task ids are unique per framework only


# ================================================================ commands
@attrs.frozen
class SendToMaster:
    """Send ``message`` to the master."""

    message: object


@attrs.frozen
class Reconnect:
    """Throw the connection to the master away and connect anew (a fresh
    TCP connection; what waited in the old one is lost, the core resends
    what matters). The master fell silent, or a registration got no answer:
    the old connection may be stalled in the kernel's retransmission backoff
    (19-28 s after a partition healed), a fresh one is up within a second of
    the heal (docs/reliability.rst, "Partitions")."""


@attrs.frozen
class LaunchTask:
    """Start ``task`` of ``framework`` as a process; report back with
    :meth:`AgentCore.on_task_started` or :meth:`AgentCore.on_task_launch_failed`."""

    framework: FrameworkInfo
    task: TaskInfo
    agent_id: str
    #: files the agent gives the task besides its own secrets (container path -> bytes: a custom
    #: executor's secret), written as its secret files are (never checkpointed, never shown)
    secret_files: dict[str, bytes] = attrs.field(factory=dict, repr=False, eq=False, hash=False)


@attrs.frozen
class KillTask:
    """SIGTERM the task's process group, SIGKILL it after ``grace_period``
    seconds; report the exit with :meth:`AgentCore.on_task_exited`."""

    framework_id: str
    task_id: str
    grace_period: float


@attrs.frozen
class DeliverMessage:
    """Append a framework message's ``data`` to the task's sandbox."""

    framework_id: str
    task_id: str
    data: bytes


@attrs.frozen
class CheckpointTask:
    """Persist :meth:`AgentCore.task_checkpoint` of the task (before the
    commands after this one: an update is checkpointed before it is sent)."""

    framework_id: str
    task_id: str


@attrs.frozen
class ForgetTask:
    """The task's story is told (its terminal update acknowledged, or the
    master wrote it off): remove its checkpoint and what its run left."""

    framework_id: str
    task_id: str


@attrs.frozen
class CheckpointAgent:
    """Persist the agent's id ("" : forget it; the next start registers anew)
    and the master's receipt for it (shown when it re-registers)."""

    agent_id: str
    receipt: str = ""


@attrs.frozen
class CheckpointReservations:
    """Persist the agent's dynamic reservations (all of them, as the master
    sent them): a restarted agent re-registers with its total converted by
    them (docs/agent.rst, "Recovery")."""

    reservations: Resources


@attrs.frozen
class SendToExecutor:
    """Send ``message`` (of :mod:`mesoslike.wire.executor_messages`) to the
    executor connection ``peer``, after the turn's checkpoints are on disk
    (an acknowledgement promises the update is kept)."""

    peer: bytes
    message: object


@attrs.frozen
class UpdateContainer:
    """Set the limits of the running run ``task_id``'s container to
    ``resources`` (Mesos's containerizer ``update``): a custom executor's
    container holds its own resources and those of its live tasks."""

    framework_id: str
    task_id: str
    resources: Resources


Command = Union[SendToMaster, Reconnect, LaunchTask, KillTask, DeliverMessage, CheckpointTask, ForgetTask,
                CheckpointAgent, CheckpointReservations, SendToExecutor, UpdateContainer]


@attrs.frozen
class TaskUsers:
    """Which unix user a task runs as on this agent — its own
    (``TaskInfo.user``) with ``switch_user`` (``--switch-user``), else the
    agent's — and the users tasks of different principals may share
    (``--shared-task-users``; ``"*"``: all). Any other user runs the tasks of
    one principal at a time (docs/security.rst, "One unix user, one principal")."""

    switch_user: bool = False
    agent_user: str = ""
    shared: frozenset[str] = frozenset()

    def unix_user(self, task_user: str) -> str:
        return task_user if self.switch_user and task_user else self.agent_user

    def may_share(self, unix_user: str) -> bool:
        return "*" in self.shared or unix_user in self.shared


@attrs.frozen
class TaskCheckpoint:
    """What a restarted agent needs to know of a task: who it is, its latest
    state, its unacknowledged updates (with their uuids: resent as they
    were), and whether the agent was killing it or it hit a limit."""

    framework: FrameworkInfo
    task: TaskInfo
    state: str
    updates: list[TaskStatus] = attrs.field(factory=list)
    holds_resources: bool = True
    killing: bool = False
    kill_why: str = ""
    limitation: str = ""
    limitation_message: str = ""
    #: its health check's latest verdict (None: none yet)
    healthy: bool | None = None
    #: a custom executor's run: sha256 of its secret (how its frames are known; the secret is its file's)
    executor_secret_digest: str = ""


@attrs.frozen
class AgentTask:
    """A read-only view of a task the agent knows (see :meth:`AgentCore.tasks`)."""

    framework_id: str
    task_id: str
    state: str
    resources: Resources
    pid: int | None
    killing: bool
    pending_updates: int
    #: the unix user the master said it runs as ("" = none named)
    user: str = ""


@attrs.frozen
class AgentExecutor:
    """A read-only view of a custom executor the agent runs (see :meth:`AgentCore.executors`)."""

    framework_id: str
    executor_id: str
    resources: Resources
    pid: int | None
    registered: bool
    tasks: list[str]


# ============================================================ bookkeeping
class _Phase:
    LAUNCHING = "launching"    # LaunchTask emitted, no pid yet
    RECOVERING = "recovering"  # checkpointed by an earlier agent process: is it still there?
    RUNNING = "running"        # a process exists
    TERMINATED = "terminated"  # exited (or never started); waiting for its terminal update's ack


class _Task:
    __slots__ = ("framework", "info", "phase", "state", "pid", "killing", "kill_requested", "kill_why",
                 "holds_resources", "released", "orphaned", "limitation", "limitation_message", "healthy",
                 "executor_uuid", "container_status")

    def __init__(self, framework: FrameworkInfo, info: TaskInfo, holds_resources: bool) -> None:
        self.framework = framework
        self.info = info
        self.phase = _Phase.LAUNCHING if holds_resources else _Phase.TERMINATED
        self.state = TaskState.STAGING
        self.pid: int | None = None
        self.killing = False          # a KillTask went out: the exit is TASK_KILLED
        self.kill_requested = False   # killed before its process existed
        self.kill_why = ""
        self.holds_resources = holds_resources
        #: its framework was shut down: the master gave its resources back at once (as Mesos's does), so
        #: launches no longer wait for them while it dies (see AgentCore.free)
        self.released = False
        self.orphaned = False         # after SHUTDOWN_AGENT: no updates, only resources to free
        self.limitation = ""          # a REASON_CONTAINER_LIMITATION_*: killed for it, ends TASK_FAILED
        self.limitation_message = ""
        self.healthy: bool | None = None  # its health check's latest verdict, carried by its updates
        self.executor_uuid = ""       # the latest update of its custom executor taken (a resend is only acked)
        #: its container (isolators, image, host pid), carried by its updates once its process runs
        self.container_status: ContainerStatus | None = None

    @property
    def alive(self) -> bool:
        return self.phase != _Phase.TERMINATED


class _Executor:
    """A custom executor: its process (a supervised run of id
    ``info.run_id()``: ``run``), its connection and its live tasks."""

    __slots__ = ("framework", "info", "run", "digest", "secret", "phase", "pid", "peer", "tasks", "registered_once",
                 "shutdown_deadline", "reregister_deadline", "register_deadline", "killing", "orphaned", "end_reason", "end_message",
                 "limits", "released", "container_status")

    def __init__(self, framework: FrameworkInfo, run: TaskInfo, digest: str) -> None:
        assert run.executor is not None
        self.framework = framework
        self.info: ExecutorInfo = run.executor
        self.run = run
        self.digest = digest          # sha256 of its secret: how its frames are known
        #: the secret itself, in this agent process's memory only (never checkpointed, never in an
        #: environment): the v1 executor API builds the channel's frames with it; "" after a restart
        self.secret = ""
        self.phase = _Phase.LAUNCHING
        self.pid: int | None = None
        self.peer: bytes | None = None  # the connection it registered on
        self.tasks: set[str] = set()    # its tasks not ended yet
        self.registered_once = False
        self.shutdown_deadline: float | None = None   # SHUTDOWN_EXECUTOR sent: killed at this time
        self.reregister_deadline: float | None = None  # recovered: killed unless it reconnects by then
        self.register_deadline: float | None = None    # started: killed unless it registers by then
        self.killing = False
        self.orphaned = False         # after SHUTDOWN_AGENT: no messages, only its end to wait for
        self.end_reason = ""          # why its tasks fail when it ends (a limitation)
        self.end_message = ""
        self.limits: Resources | None = run.resources   # of its container as last set (None: not known)
        self.released = False         # its framework was shut down (see _Task.released)
        self.container_status: ContainerStatus | None = None   # its container: its tasks' updates carry it

    @property
    def key(self) -> TaskKey:
        return (self.framework.id, self.info.executor_id)


def _secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _executor_id_of_run(task_id: str) -> str | None:
    """The executor id of an executor's run id (None: a task's id)."""
    return task_id[len(EXECUTOR_RUN_PREFIX):] if task_id.startswith(EXECUTOR_RUN_PREFIX) else None


# =================================================================== core
class AgentCore:
    """The agent state machine: events in, :data:`Command` lists out.

    Why one class of some 1,300 lines (Mesos's ``Slave`` is one too): every
    handler — the master's messages, the tasks' and executors' events,
    ``tick`` — reads and changes the same three things, the task table, the
    update streams and the registration, and the checkpoint commands must
    follow each change in the same step. The custom executors' half
    (``on_executor_frame`` … ``_recover_executor_task``, ~400 lines) is the
    part that can leave, into an executor book as the master's books did,
    once the agent's, the executor channel's and the drivers' update streams
    are one (their retries are the same table).

    :param clock: monotonic time for every timer (registration backoff,
        master liveness, update retries).
    :param info: how the agent registers (hostname, total resources,
        attributes, port); ``info.id`` is ignored — the master assigns it.
    :param rng: source of the status update uuids (``random.Random()``
        seeded from the OS when omitted).
    :param wall_clock: ``() -> seconds since the epoch`` for status
        timestamps; defaults to ``clock.now``. The runtime passes
        ``time.time``.
    :param max_ping_timeouts: the master is gone after ``ping_interval x
        max_ping_timeouts`` seconds without any message from it.
    :param register_backoff: first delay between registration attempts; it
        doubles up to ``register_backoff_max``. Each delay is drawn from
        ``[(1 - register_jitter) x d, d]``.
    :param register_jitter: the spread of the delays, in [0, 1). Thousands
        of agents that lose one master come back at the same moment; without
        it they would all retry in lockstep while the new master is still
        answering their first attempt (docs/failover.rst).
    :param version: sent in REGISTER_AGENT / REREGISTER_AGENT.
    :param http_address: the agent's HTTP endpoint, sent when it registers
        (settable later, before the first registration).
    :param checkpoint: emit :class:`CheckpointTask`, :class:`ForgetTask` and
        :class:`CheckpointAgent` so that the runtime can persist what a
        restarted agent needs (off: an agent whose tasks die with it).
    :param executor_reregister_timeout: how long a recovered custom executor
        has to reconnect before it is killed and its tasks fail
        (``REASON_EXECUTOR_REREGISTRATION_TIMEOUT``; Mesos's
        ``--executor_reregistration_timeout``), in seconds.
    :param executor_register_timeout: how long a started custom executor has
        to register before it is killed and its tasks fail
        (``REASON_EXECUTOR_REGISTRATION_TIMEOUT``; Mesos's
        ``--executor_registration_timeout``), in seconds.
    :param max_message_size: bytes of data a framework message (either way)
        or an executor's status update may carry (``--max-message-size``):
        a larger one from an executor is refused (EXECUTOR_ERROR), one for
        an executor dropped (logged); above
        :data:`~mesoslike.wire.types.WARN_MESSAGE_SIZE` an executor's data
        is logged.
    :param task_users: whom tasks run as; a task whose unix user runs
        another principal's tasks here is refused (TASK_ERROR,
        ``REASON_TASK_UNAUTHORIZED``) unless the user may be shared.
    """

    def __init__(self, clock: Clock, info: AgentInfo, *, rng: random.Random | None = None,
                 wall_clock: Callable[[], float] | None = None, max_ping_timeouts: int = 5,
                 register_backoff: float = 4.0, register_backoff_max: float = 10.0, register_jitter: float = 0.5,
                 version: str = "", http_address: str = "", checkpoint: bool = False, executor_endpoint: str = "",
                 new_secret: Callable[[], str] | None = None,
                 executor_reregister_timeout: float = EXECUTOR_REREGISTER_TIMEOUT,
                 executor_register_timeout: float = EXECUTOR_REGISTER_TIMEOUT,
                 task_users: TaskUsers | None = None, max_message_size: int = MAX_FRAMEWORK_MESSAGE) -> None:
        if max_ping_timeouts < 1:
            raise ValueError(f"max_ping_timeouts must be >= 1, got {max_ping_timeouts!r}")
        if not 0 < register_backoff <= register_backoff_max:
            raise ValueError("need 0 < register_backoff <= register_backoff_max")
        if not 0 <= register_jitter < 1:
            raise ValueError(f"register_jitter must be in [0, 1), got {register_jitter!r}")
        check_executor_timeout("executor_reregister_timeout", executor_reregister_timeout)
        check_executor_timeout("executor_register_timeout", executor_register_timeout)
        self.max_message_size = check_message_size(max_message_size)
        self.clock = clock
        self._info = attrs.evolve(info, id="")
        #: the total it was started with (--resources); its dynamic reservations convert part of it
        self._base_total = info.resources
        self._reservations = EMPTY
        self._rng = rng if rng is not None else random.Random()
        self._wall_clock = wall_clock or clock.now
        self.max_ping_timeouts = max_ping_timeouts
        self._register_backoff = Backoff(register_backoff, register_backoff_max, register_jitter)
        self.version = version
        self.http_address = http_address
        self.checkpoint = checkpoint
        #: the address its tasks are reachable at (each status's ``ip_address``: Mesos's container_status);
        #: the runtime sets it to the agent's advertised address
        self.ip_address = ""
        self.executor_reregister_timeout = executor_reregister_timeout
        self.executor_register_timeout = executor_register_timeout
        #: whom tasks run as, and which users principals may share
        self.task_users = task_users or TaskUsers()
        #: unix user -> principal -> its live tasks and executors running as that user here
        self._user_holders: dict[str, dict[str, int]] = {}

        self._agent_id = ""
        #: the master's receipt binding _agent_id to this agent's principal (mesoslike.master.receipts)
        self._receipt = ""
        self._registered = False
        self._registering = False            # an attempt went out and is unanswered
        self._told_unreachable = False       # "master unreachable" logged since the last registration
        self._next_registration: float | None = clock.now()
        self._register_attempts = 0   # since the last answer: how far the back-off has grown
        self._drain_deadline: float | None = None   # after SHUTDOWN_AGENT: register once tasks are gone
        self._master: MasterInfo | None = None
        self._master_accepts_batches = False
        self._ping_interval = 0.0
        self._last_master_contact = clock.now()

        self._tasks: dict[TaskKey, _Task] = {}
        #: each task's updates the master has not acknowledged; the heads go out while registered
        self._streams: UpdateStreams[TaskKey] = UpdateStreams(UPDATE_BACKOFF)
        self._used = EMPTY
        #: the part of _used that dying tasks and executors of shut-down frameworks hold: the master freed it
        #: when it removed the framework, and offers it again at once
        self._released = EMPTY
        self._draining = False
        self._usage: list[m.TaskUsage] = []   # the latest measurement, sent with every PONG
        #: the executor channel custom executors are told to connect to
        self.executor_endpoint = executor_endpoint
        self._new_secret = new_secret or (lambda: f"{self._rng.getrandbits(256):064x}")
        self._executors: dict[TaskKey, _Executor] = {}     # (framework_id, executor_id) -> executor
        self._executor_by_digest: dict[str, TaskKey] = {}   # sha256 of its secret -> its key

    # ------------------------------------------------------------ queries
    @property
    def agent_id(self) -> str:
        """The id the master assigned ("" until the first registration)."""
        return self._agent_id

    @property
    def registered(self) -> bool:
        """True while a master has acknowledged this agent and is alive."""
        return self._registered

    @property
    def master_accepts_batches(self) -> bool:
        """Whether the master this agent registered with takes STATUS_UPDATES:
        then a runtime may send what it has for the master in a turn through
        :func:`mesoslike.wire.batching.batched_messages`."""
        return self._master_accepts_batches

    @property
    def master(self) -> MasterInfo | None:
        """The master that registered this agent last."""
        return self._master

    @property
    def info(self) -> AgentInfo:
        """What the agent registers with (``id`` filled in once assigned)."""
        return attrs.evolve(self._info, id=self._agent_id)

    @property
    def total(self) -> Resources:
        return self._info.resources

    @property
    def reservations(self) -> Resources:
        """The dynamic reservations the master made here (``cpus(role,principal):N``)."""
        return self._reservations

    def recover_reservations(self, reservations: Resources) -> None:
        """Take the checkpointed dynamic reservations, before registering
        (the total registered with includes them). Raises ConfigError if
        they do not fit in the total the agent was started with now (Mesos
        refuses to start an agent whose checkpointed resources are
        incompatible with its --resources)."""
        problem = self._apply_reservations(reservations)
        if problem is not None:
            raise ConfigError(f"the checkpointed dynamic reservations {reservations} do not fit this agent's "
                              f"resources {self._base_total}: {problem}; start it with resources that hold them, "
                              "or with --recover cleanup to start afresh")

    def _apply_reservations(self, reservations: Resources) -> str | None:
        """The total with ``reservations`` made of the base total's
        unreserved part, or why not (nothing changes then)."""
        unreserved = reservations.stripped()
        if reservations != reservations.dynamically_reserved():
            return f"{reservations} are not all dynamic reservations"
        if not self._base_total.contains(unreserved):
            return f"{unreserved} is not in its unreserved resources"
        total = self._base_total - unreserved + reservations
        if not total.contains(self._used):
            return f"its tasks use {self._used}, which the total {total} would not hold"
        self._reservations = reservations
        self._info = attrs.evolve(self._info, resources=total)
        return None

    def _checkpoint_resources(self, msg: m.CheckpointResources) -> list[Command]:
        """The master changed this agent's dynamic reservations."""
        if not self._agent_id or msg.agent_id != self._agent_id:
            log.warning("ignoring CHECKPOINT_RESOURCES for agent %s (this is %s)", msg.agent_id,
                        self._agent_id or "unregistered")
            return []
        problem = self._apply_reservations(msg.reservations)
        if problem is not None:
            # the master's books now hold reservations this agent does not: re-register at once (the master
            # takes an agent's total from its re-registration) rather than have tasks on them refused until
            # some later reconnection
            log.error("cannot take the dynamic reservations %s the master sent: %s; re-registering with what is "
                      "here", msg.reservations, problem)
            self._lose_master(self.clock.now())
            return []
        log.info("dynamic reservations now %s; total %s", msg.reservations or "none", self._info.resources)
        return [CheckpointReservations(msg.reservations)] if self.checkpoint else []

    @property
    def used(self) -> Resources:
        """Resources of the tasks whose processes may still run."""
        return self._used

    @property
    def free(self) -> Resources:
        """What a launch may take: the total less what tasks and executors
        use — except those of frameworks shut down and still dying, whose
        resources the master has already given back and offered again
        (Mesos's agent does not turn those launches away either)."""
        return self._info.resources.subtract_clamped(self._used.subtract_clamped(self._released))

    def tasks(self) -> list[AgentTask]:
        """Every task the agent knows: running, or terminated with updates
        not yet acknowledged (orphans of a shutdown excluded)."""
        views = []
        for key, task in sorted(self._tasks.items()):
            if task.orphaned:
                continue
            views.append(AgentTask(key[0], key[1], task.state, task.info.resources, task.pid, task.killing,
                                   self._streams.depth(key), task.info.user))
        return views

    def pending_updates(self, framework_id: str, task_id: str) -> list[TaskStatus]:
        """The task's unacknowledged updates, oldest (in flight) first."""
        return self._streams.pending((framework_id, task_id))

    def task_checkpoint(self, framework_id: str, task_id: str) -> TaskCheckpoint | None:
        """What to persist of a task (:class:`CheckpointTask`); None if it is not known.
        A custom executor's run is persisted as a task of its run id."""
        executor_id = _executor_id_of_run(task_id)
        if executor_id is not None:
            return self._executor_checkpoint(framework_id, executor_id)
        task = self._tasks.get((framework_id, task_id))
        if task is None or task.orphaned:
            return None
        # a VALUE secret's bytes are the task's alone: a restarted agent never needs them again
        return TaskCheckpoint(task.framework, without_secret_values(task.info), task.state,
                              self.pending_updates(framework_id, task_id),
                              task.holds_resources, task.killing or task.kill_requested, task.kill_why,
                              task.limitation, task.limitation_message, task.healthy)

    @property
    def draining(self) -> bool:
        """:meth:`drain` was called: tasks are being killed before unregistering."""
        return self._draining

    @property
    def drained(self) -> bool:
        """Draining, every task has ended and every update is acknowledged."""
        return (self._draining and not self._live_tasks() and not self._executors
                and not self._streams.count)

    def next_wakeup(self) -> float:
        """When :meth:`tick` has work next (``math.inf``: only events will do)."""
        times = [t for t in (self._next_registration, self._drain_deadline) if t is not None]
        if self._registered:
            if self._ping_interval > 0:
                times.append(self._master_deadline())
            due = self._streams.next_due()
            if due is not None:
                times.append(due)
        times.extend(self._executor_deadlines())
        return min(times, default=math.inf)

    # ------------------------------------------------------------- events
    def tick(self) -> list[Command]:
        """Do whatever time has made due: detect a silent master, (re)send
        registrations and status updates, end a shutdown's drain."""
        now = self.clock.now()
        out: list[Command] = []
        if self._registered and self._ping_interval > 0 and now >= self._master_deadline():
            log.warning("no message from the master for %.1f s: re-registering over a fresh connection",
                        now - self._last_master_contact)
            self._lose_master(now)
            out.append(Reconnect())
        if self._drain_deadline is not None and (now >= self._drain_deadline or not self._live_tasks()):
            self._end_drain(now)
        if self._next_registration is not None and now >= self._next_registration:
            if self._registering:   # the last attempt got no answer: its connection may be stalled
                out.append(Reconnect())
            out.append(self._registration_attempt(now))
        if self._registered:
            out.extend(SendToMaster(m.StatusUpdate(key[0], update)) for key, update in self._streams.due(now))
        if self._executors:
            out.extend(self._executor_timeouts(now))
        return out

    def on_message(self, message: object) -> list[Command]:
        """A message from the master. Any message counts as a sign of life."""
        self._last_master_contact = self.clock.now()
        if type(message) in (m.StatusUpdateAcks, m.RunTasks):
            # each item as if it came alone, in order (docs/wire.rst, "Batching")
            out: list[Command] = []
            for item in unbatched(message):
                out += self._HANDLERS[type(item)](self, item)
            return out
        handler = self._HANDLERS.get(type(message))
        if handler is None:
            log.warning("ignoring unexpected %s from the master", getattr(message, "TYPE", type(message).__name__))
            return []
        return handler(self, message)

    def on_task_started(self, framework_id: str, task_id: str, pid: int,
                        container: ContainerStatus | None = None) -> list[Command]:
        """The task's process exists: TASK_RUNNING (or a kill requested
        meanwhile); ``container``: what its container is (its updates carry
        it from now on). For a recovered task: :meth:`on_task_reattached`."""
        if task_id.startswith(EXECUTOR_RUN_PREFIX):
            return self._executor_started(framework_id, task_id, pid, container)
        task = self._tasks.get((framework_id, task_id))
        if task is not None and task.phase == _Phase.RECOVERING:
            return self.on_task_reattached(framework_id, task_id, pid, container)
        if task is None or task.phase != _Phase.LAUNCHING:
            log.warning("start of unknown or not launching task %s/%s ignored", framework_id, task_id)
            return []
        task.phase = _Phase.RUNNING
        task.pid = pid
        task.container_status = container
        if task.orphaned or task.kill_requested:
            return [self._kill(task)]
        return self._update(task, TaskState.RUNNING, f"started as pid {pid}")

    def on_task_launch_failed(self, framework_id: str, task_id: str, reason: str,
                              why: str = REASON_COMMAND_EXECUTOR_FAILED) -> list[Command]:
        """The task's process could not start (or, recovering, never did):
        TASK_FAILED with the reason (``why``: the update's reason code)."""
        if task_id.startswith(EXECUTOR_RUN_PREFIX):
            return self._executor_ended(framework_id, task_id, f"it could not start: {reason}")
        task = self._tasks.get((framework_id, task_id))
        if task is None or task.phase not in (_Phase.LAUNCHING, _Phase.RECOVERING):
            return []
        if task.kill_requested or task.killing:
            return self._terminate(task, TaskState.KILLED, f"killed before it started ({task.kill_why})")
        return self._terminate(task, TaskState.FAILED, f"could not start the command: {reason}", reason=why)

    def on_task_exited(self, framework_id: str, task_id: str, exit_code: int | None = None,
                       signal: int | None = None, *, reason: str = "", message: str = "") -> list[Command]:
        """The task's process ended with ``exit_code``, or was killed by
        ``signal``. Frees its resources and queues the terminal update.

        ``reason`` (with ``message``) says the task did not end on its own
        (its supervisor died, or killed it when no agent came back): it is
        TASK_FAILED with that reason, unless the agent was killing it. A
        ``message`` alone adds to the update's message (a full disk, say).
        A task killed for a limitation (:meth:`on_task_limitation`) is
        TASK_FAILED with that limitation whatever the exit."""
        if task_id.startswith(EXECUTOR_RUN_PREFIX):
            how = _describe_exit(exit_code, signal).replace("command", "its process", 1)
            return self._executor_ended(framework_id, task_id, f"{message}; {how}" if message else how,
                                        -signal if signal is not None else exit_code)
        task = self._tasks.get((framework_id, task_id))
        if task is None or not task.alive:
            log.warning("exit of unknown or already terminated task %s/%s ignored", framework_id, task_id)
            return []
        how = _describe_exit(exit_code, signal)
        if message:
            how = f"{message}; {how}"
        if task.limitation:
            return self._terminate(task, TaskState.FAILED, f"{task.limitation_message}; {how}",
                                   reason=task.limitation, exit_code=exit_code)
        if task.killing:
            return self._terminate(task, TaskState.KILLED, f"killed by the agent ({task.kill_why}); {how}",
                                   exit_code=exit_code)
        if reason:
            return self._terminate(task, TaskState.FAILED, how, reason=reason, exit_code=exit_code)
        if exit_code == 0:
            return self._terminate(task, TaskState.FINISHED, how, exit_code=0)
        return self._terminate(task, TaskState.FAILED, how, exit_code=exit_code)

    def on_task_limitation(self, framework_id: str, task_id: str, reason: str, message: str) -> list[Command]:
        """The task went over a limit (``reason``, e.g.
        :data:`REASON_CONTAINER_LIMITATION_MEMORY`; ``message`` names the
        limit): it is killed at once and ends TASK_FAILED with that reason,
        as Mesos destroys a container that hits a limitation."""
        if task_id.startswith(EXECUTOR_RUN_PREFIX):
            return self._executor_limited(framework_id, task_id, reason, message)
        task = self._tasks.get((framework_id, task_id))
        if task is None or not task.alive or task.orphaned or task.limitation:
            return []
        task.limitation, task.limitation_message = reason, message
        log.warning("task %s/%s: %s", framework_id, task_id, message)
        out = self._checkpointed(task)
        if task.phase == _Phase.RUNNING:
            task.killing = True
            task.kill_why = task.kill_why or message
            out.append(KillTask(framework_id, task_id, 0.0))
        return out

    def on_task_health(self, framework_id: str, task_id: str, healthy: bool, message: str) -> list[Command]:
        """The task's health check verdict (its supervisor checks it): when
        it changed, a TASK_RUNNING update with ``healthy`` and reason
        :data:`REASON_TASK_HEALTH_CHECK_STATUS_UPDATED`, as Mesos sends. Every
        later update of the task carries the verdict too."""
        task = self._tasks.get((framework_id, task_id))
        if task is None or task.phase != _Phase.RUNNING or task.orphaned or task.healthy is healthy:
            return []
        task.healthy = healthy
        if task.killing:
            return self._checkpointed(task)   # its terminal update carries it
        return self._update(task, TaskState.RUNNING, message, reason=REASON_TASK_HEALTH_CHECK_STATUS_UPDATED)

    def on_task_reattached(self, framework_id: str, task_id: str, pid: int,
                           container: ContainerStatus | None = None) -> list[Command]:
        """A recovered task's supervisor and process are still there: it runs
        on (TASK_RUNNING if the earlier agent had not said so yet); a kill the
        earlier agent had asked for is asked again."""
        if task_id.startswith(EXECUTOR_RUN_PREFIX):
            return self._executor_started(framework_id, task_id, pid, container)
        task = self._tasks.get((framework_id, task_id))
        if task is None or task.phase != _Phase.RECOVERING:
            return []
        task.phase = _Phase.RUNNING
        task.pid = pid
        task.container_status = container
        log.info("task %s/%s recovered: still running as pid %d", framework_id, task_id, pid)
        if task.limitation:
            task.killing = True
            return [KillTask(framework_id, task_id, 0.0)]
        if task.orphaned or task.killing or task.kill_requested:
            return [self._kill(task)]
        if task.state in (TaskState.STAGING, TaskState.STARTING):
            return self._update(task, TaskState.RUNNING, f"running as pid {pid} (recovered)")
        return []

    # ----------------------------------------------------------- recovery
    def recover(self, agent_id: str, checkpoints: list[TaskCheckpoint], receipt: str = "") -> list[Command]:
        """Rebuild from what an earlier agent process checkpointed, before
        the first :meth:`tick`: its id and the master's receipt for it
        (registration is then a REREGISTER_AGENT), its tasks — those that had not ended wait for
        :meth:`on_task_reattached`, :meth:`on_task_exited` or
        :meth:`on_task_launch_failed` — and their unacknowledged updates,
        resent with their original uuids once a master answers."""
        out: list[Command] = []
        self._agent_id, self._receipt = agent_id, receipt if agent_id else ""
        for checkpoint in checkpoints:   # the custom executors first: their tasks join them
            if checkpoint.task.task_id.startswith(EXECUTOR_RUN_PREFIX):
                out.extend(self._recover_executor(checkpoint))
        for checkpoint in checkpoints:
            if checkpoint.task.task_id.startswith(EXECUTOR_RUN_PREFIX):
                continue
            key = (checkpoint.framework.id, checkpoint.task.task_id)
            ended = checkpoint.state in TERMINAL_STATES
            if ended and not checkpoint.updates:
                out.append(ForgetTask(*key))   # its story was told: a leftover
                continue
            task = _Task(checkpoint.framework, checkpoint.task, holds_resources=checkpoint.holds_resources and not ended)
            task.phase = _Phase.TERMINATED if ended or not task.holds_resources else _Phase.RECOVERING
            if task.alive:
                self._hold_user(task.framework.principal, task.info.user, 1)
            task.state = checkpoint.state
            task.killing = checkpoint.killing
            task.kill_why = checkpoint.kill_why
            task.limitation, task.limitation_message = checkpoint.limitation, checkpoint.limitation_message
            task.healthy = checkpoint.healthy
            self._tasks[key] = task
            if task.holds_resources:
                self._used = self._used + task.info.resources
            for update in checkpoint.updates:
                if update.uuid:
                    self._streams.add(key, update)
                else:   # not one this agent wrote: no acknowledgement could name it
                    log.warning("dropping a checkpointed update of %s/%s without a uuid", *key)
            if task.info.executor is not None and task.alive:
                out.extend(self._recover_executor_task(task))
        log.info("recovered agent %s with %d tasks and %d custom executors", agent_id or "(no id)", len(self._tasks),
                 len(self._executors))
        return out

    def recovering(self) -> list[tuple[str, str]]:
        """(framework_id, task_id) of the recovered tasks still waiting to be
        found running or ended."""
        found = [key for key, task in self._tasks.items() if task.phase == _Phase.RECOVERING]
        found += [(key[0], e.info.run_id()) for key, e in self._executors.items() if e.phase == _Phase.RECOVERING]
        return sorted(found)

    # -------------------------------------------------------- stopping
    def kill_all(self, why: str) -> list[Command]:
        """Kill every task on purpose (the agent stops with its tasks, or
        drains): each ends TASK_KILLED."""
        out: list[Command] = []
        for task in list(self._tasks.values()):
            if task.alive and not task.orphaned:
                out.extend(self._request_kill(task, why))
        for executor in list(self._executors.values()):
            out.extend(self._shut_executor_down(executor))
        return out

    def drain(self) -> list[Command]:
        """Drain the machine (SIGUSR1): kill every task (TASK_KILLED), refuse
        new ones; once :attr:`drained` (or given up waiting), :meth:`unregister`."""
        self._draining = True
        log.warning("draining: killing %d tasks, then unregistering", len(self._live_tasks()))
        return self.kill_all("the agent is draining")

    def unregister(self) -> list[Command]:
        """Tell the master this agent is gone for good (it need not wait for
        ping timeouts) and forget the agent id."""
        if not self._agent_id:
            return []
        log.info("unregistering agent %s", self._agent_id)
        out: list[Command] = [SendToMaster(m.UnregisterAgent(self._agent_id, "the agent was drained"))]
        self._agent_id = ""
        self._registered = False
        self._next_registration = None
        if self.checkpoint:
            out.append(CheckpointAgent(""))
        return out

    def set_usage(self, usage: list[m.TaskUsage]) -> None:
        """The tasks' latest usage, sent to the master with every PONG."""
        self._usage = list(usage)

    # ------------------------------------------------------- registration
    def _registration_attempt(self, now: float) -> SendToMaster:
        if self._registering and not self._told_unreachable:   # the last attempt got no answer
            log.log(NOTICE, "master unreachable, retrying: no answer to the registration yet (every %.0f s at most)",
                    self._register_backoff.maximum)
            self._told_unreachable = True
        self._registering = True
        self._next_registration = now + self._register_backoff.delay(self._register_attempts, self._rng)
        self._register_attempts += 1
        if not self._agent_id:
            log.info("registering with the master")
            return SendToMaster(m.RegisterAgent(self.info, version=self.version, http_address=self.http_address,
                                                accepts_batches=True))
        # the tasks it runs, and those that ended but whose terminal update is
        # not acknowledged yet (docs/wire.rst): a master must not think those
        # lost; their pending updates go out once it answers
        still_running = [(key, task) for key, task in sorted(self._tasks.items()) if not task.orphaned]
        running = [m.RunningTask(key[0], task.info, task.state, task.healthy, self._update_state(key))
                   for key, task in still_running]
        executors = [m.RunningExecutor(key[0], e.info) for key, e in sorted(self._executors.items()) if not e.orphaned]
        # each framework as the master last described it, with its principal and the master's receipt for
        # it (checkpointed with its tasks): whose it is, told to a master without a registry too
        frameworks: dict[str, FrameworkInfo] = {}
        for framework in [task.framework for _, task in still_running] + \
                [e.framework for e in self._executors.values() if not e.orphaned]:
            if framework.principal_receipt or framework.id not in frameworks:
                frameworks[framework.id] = framework
        log.info("re-registering as %s with %d tasks", self._agent_id, len(running))
        return SendToMaster(m.ReregisterAgent(self.info, running, list(frameworks.values()), version=self.version,
                                              http_address=self.http_address, accepts_batches=True,
                                              executors=executors, receipt=self._receipt))

    def _update_state(self, key: TaskKey) -> str:
        """The state of the task's oldest unacknowledged update ("" : none):
        what its framework hears next, which a master answers reconciliation
        with until the update stream catches up (RunningTask.update_state)."""
        head = self._streams.head(key)
        return head.state if head is not None else ""

    def _agent_registered(self, msg: m.AgentRegistered) -> list[Command]:
        if self._registered and msg.agent_id == self._agent_id:
            return []  # the answer to a retry we no longer needed
        if not self._registering:
            log.info("ignoring AGENT_REGISTERED(%s): no registration is outstanding", msg.agent_id)
            return []
        if self._agent_id and msg.agent_id != self._agent_id:
            log.warning("the master gave this agent a new id %s (was %s)", msg.agent_id, self._agent_id)
        now = self.clock.now()
        self._agent_id = msg.agent_id
        self._receipt = msg.receipt
        self._registered = True
        self._registering = False
        self._next_registration = None
        self._register_attempts = 0
        self._master = msg.master
        self._ping_interval = msg.ping_interval
        self._master_accepts_batches = msg.accepts_batches
        log.log(NOTICE, "registered with master %s (%s) as %s", msg.master.address, msg.master.id, msg.agent_id)
        self._told_unreachable = False
        out: list[Command] = [CheckpointAgent(msg.agent_id, msg.receipt)] if self.checkpoint else []
        # what waited for a master goes out now
        out.extend(SendToMaster(m.StatusUpdate(key[0], update)) for key, update in self._streams.heads(now))
        return out

    def on_master_changed(self) -> list[Command]:
        """Another master leads now (detected through ZooKeeper): register
        with it at once instead of waiting for the old one's silence."""
        if self._drain_deadline is None and (self._registered or self._registering or self._agent_id):
            log.info("the leading master changed: re-registering")
            self._lose_master(self.clock.now())
        return []

    def _master_deadline(self) -> float:
        return self._last_master_contact + self._ping_interval * self.max_ping_timeouts

    def _lose_master(self, now: float) -> None:
        self._registered = False
        self._register_attempts = 0
        self._next_registration = now

    def _ping(self, msg: m.Ping) -> list[Command]:
        if not self._agent_id:
            return []  # nobody to answer as
        if not msg.connected:
            if self._drain_deadline is None and not self._draining and (self._registered or not self._registering):
                log.info("the master does not know this agent (it restarted or leads anew): re-registering")
                self._lose_master(self.clock.now())
            return []
        return [SendToMaster(m.Pong(self._agent_id, self._usage))]

    def _shutdown_agent(self, msg: m.ShutdownAgent) -> list[Command]:
        log.warning("the master shut this agent down (%s): killing every task, registering anew",
                    msg.reason or "no reason given")
        now = self.clock.now()
        out: list[Command] = []
        grace = 0.0
        for key, task in list(self._tasks.items()):
            if not task.alive:
                del self._tasks[key]
                out.extend(self._forget(key))
                continue
            out.extend(self._forget(key))  # its checkpoint goes now; its run once it has ended
            task.orphaned = True  # the master already told the frameworks: no more updates
            grace = max(grace, task.info.kill_grace_period)
            if task.phase == _Phase.RUNNING and not task.killing:
                task.kill_why = "agent shut down"
                out.append(self._kill(task))
        for key, executor in list(self._executors.items()):
            out.extend(self._forget((key[0], executor.info.run_id())))
            executor.orphaned = True   # its end frees what it holds, nothing more
            executor.peer = None
            if not executor.killing and executor.phase != _Phase.TERMINATED:
                executor.killing = True
                out.append(KillTask(key[0], executor.info.run_id(), 0.0))
        self._streams.clear()
        self._agent_id = ""
        if self.checkpoint:
            out.append(CheckpointAgent(""))
        self._registered = False
        self._registering = False
        self._master = None
        self._next_registration = None
        self._register_attempts = 0
        # register anew once the old tasks are gone, so the master is not
        # offered resources their processes still hold; bounded for stuck ones
        self._drain_deadline = now + grace + 5.0
        return out

    def _end_drain(self, now: float) -> None:
        self._drain_deadline = None
        self._next_registration = now

    # -------------------------------------------------------------- tasks
    def _run_task(self, msg: m.RunTask) -> list[Command]:
        task, framework = msg.task, msg.framework
        key = (framework.id, task.task_id)
        if key in self._tasks:
            # the master sends a task again when it has not heard of it in
            # time (docs/reliability.rst): this one has it, so answer with
            # the task's oldest unacknowledged update, which confirms it
            log.info("RUN_TASK %s/%s again: the task is known here, its update goes out again", *key)
            return self._send_head(key) if self._registered else []
        if not self._agent_id:
            log.warning("RUN_TASK %s/%s while unregistered dropped", *key)
            return []
        if self._draining:
            record = _Task(framework, task, holds_resources=False)
            self._tasks[key] = record
            return self._update(record, TaskState.DROPPED, "the agent is draining", reason=REASON_AGENT_DRAINING)
        if task.executor is not None:
            return self._run_executor_task(framework, task)
        problem, reason = self._launch_problem(task), REASON_TASK_INVALID
        if not problem:
            problem, reason = self._user_problem(framework, task.user), REASON_TASK_UNAUTHORIZED
        if problem:
            log.warning("RUN_TASK %s/%s refused: %s", framework.id, task.task_id, problem)
            record = _Task(framework, task, holds_resources=False)
            self._tasks[key] = record
            return self._update(record, TaskState.ERROR, problem, reason=reason)
        # the launch carries the secrets' values; the record keeps none (what it reports, checkpoints, shows)
        record = _Task(framework, without_secret_values(task), holds_resources=True)
        self._tasks[key] = record
        self._hold_user(framework.principal, task.user, 1)
        self._used = self._used + task.resources
        log.info("launching task %s/%s: %s", framework.id, task.task_id, task.command)
        out = self._update(record, TaskState.STARTING, "")
        out.append(LaunchTask(framework, task, self._agent_id))
        return out

    def _launch_problem(self, task: TaskInfo, executor: Resources = EMPTY) -> str:
        if task.agent_id and task.agent_id != self._agent_id:
            return f"task is for agent {task.agent_id!r}, this is {self._agent_id!r}"
        if task.resources.is_empty():
            return "task has no resources"
        if task.task_id.startswith(EXECUTOR_RUN_PREFIX):
            return "a task id may not begin with the executors' reserved prefix"
        if not self.free.contains(task.resources + executor):
            needs = f"{task.resources} (and {executor} for its executor)" if executor else str(task.resources)
            return f"task needs {needs} but only {self.free} is free on this agent"
        return ""

    def _user_problem(self, framework: FrameworkInfo, user: str) -> str:
        """Why a task of ``framework`` that asks for ``user`` may not run
        here ("" if it may): the unix user it would run as runs tasks or
        executors of another principal (docs/security.rst, "One unix user,
        one principal"), and the operator did not let principals share it.
        O(principals running as that user); nothing in an anonymous cluster."""
        unix_user = self.task_users.unix_user(user)
        if not framework.principal or self.task_users.may_share(unix_user):
            return ""
        if any(principal != framework.principal for principal in self._user_holders.get(unix_user, ())):
            return (f"unix user {unix_user!r} runs tasks of another principal on this agent, and tasks of two "
                    f"principals never share a unix user (each could read the other's processes and files); run "
                    f"as another user, or the operator may let principals share it (--shared-task-users)")
        return ""

    def _hold_user(self, principal: str, user: str, delta: int) -> None:
        """A live task or executor of ``principal`` asking for ``user``
        begins (``delta`` 1) or ends (-1): the index :meth:`_user_problem` reads."""
        unix_user = self.task_users.unix_user(user)
        holders = self._user_holders.setdefault(unix_user, {})
        count = holders.get(principal, 0) + delta
        if count > 0:
            holders[principal] = count
        else:
            holders.pop(principal, None)
            if not holders:
                del self._user_holders[unix_user]

    def _kill_task(self, msg: m.KillTask) -> list[Command]:
        task = self._tasks.get((msg.framework_id, msg.task_id))
        if task is None or task.orphaned:
            if not self._agent_id:
                return []
            # tell the master, reliably, so its bookkeeping of a task it thinks is here ends
            record = _Task(FrameworkInfo(name="", id=msg.framework_id),
                           TaskInfo(msg.task_id, self._agent_id, "", EMPTY), holds_resources=False)
            self._tasks[(msg.framework_id, msg.task_id)] = record
            return self._update(record, TaskState.LOST, "unknown task", reason=REASON_TASK_UNKNOWN)
        return self._request_kill(task, "KILL_TASK")

    def _shutdown_framework(self, msg: m.ShutdownFramework) -> list[Command]:
        out: list[Command] = []
        for (framework_id, _), task in list(self._tasks.items()):
            if framework_id == msg.framework_id and not task.orphaned:
                self._release(task)
                out.extend(self._request_kill(task, "framework shut down"))
        for key, executor in list(self._executors.items()):
            if key[0] == msg.framework_id:
                self._release(executor)
                out.extend(self._shut_executor_down(executor))
        return out

    def _release(self, holder: _Task | _Executor) -> None:
        """The master removed ``holder``'s framework and gave its resources
        back: they no longer stop a launch, though they stay in ``used``
        until the process is gone (a framework's next tasks would otherwise
        be refused TASK_ERROR for the kill grace period)."""
        if holder.released:
            return
        if isinstance(holder, _Task):
            if not holder.holds_resources or not holder.alive:
                return
            resources = holder.info.resources
        else:
            if holder.phase == _Phase.TERMINATED:
                return
            resources = holder.info.resources
        holder.released = True
        self._released = self._released + resources

    def _request_kill(self, task: _Task, why: str) -> list[Command]:
        if not task.alive or task.killing or task.kill_requested:
            return []
        if task.info.executor is not None:
            return self._kill_executor_task(task, why)
        task.kill_why = why
        if task.phase in (_Phase.LAUNCHING, _Phase.RECOVERING):
            task.kill_requested = True  # killed as soon as its pid is known
            return self._checkpointed(task)
        task.killing = True  # before the checkpoint: a restarted agent knows it was killing
        return [*self._checkpointed(task), self._kill(task)]

    def _kill(self, task: _Task) -> KillTask:
        task.killing = True
        task.kill_why = task.kill_why or "agent shut down"
        return KillTask(task.framework.id, task.info.task_id, task.info.kill_grace_period)

    def _checkpointed(self, task: _Task) -> list[Command]:
        if not self.checkpoint or task.orphaned:
            return []
        return [CheckpointTask(task.framework.id, task.info.task_id)]

    def _forget(self, key: TaskKey) -> list[Command]:
        return [ForgetTask(*key)] if self.checkpoint else []

    def _framework_message(self, msg: m.FrameworkMessage) -> list[Command]:
        task = self._tasks.get((msg.framework_id, msg.task_id))
        if msg.executor_id and msg.task_id == msg.executor_id and task is not None and task.info.executor is None \
                and (msg.framework_id, msg.executor_id) not in self._executors:
            msg = attrs.evolve(msg, executor_id="")   # a v1 MESSAGE to a command task's executor: its task's id
        if msg.executor_id or (task is not None and task.info.executor is not None):
            executor_id = msg.executor_id or (task.info.executor.executor_id  # type: ignore[union-attr]
                                              if task is not None else "")
            return self._message_to_executor(msg.framework_id, executor_id, msg.data)
        if task is None or task.phase != _Phase.RUNNING or task.orphaned:
            log.warning("framework message for %s/%r dropped: no such running task", msg.framework_id, msg.task_id)
            return []
        return [DeliverMessage(msg.framework_id, msg.task_id, msg.data)]

    def _terminate(self, task: _Task, state: str, message: str, reason: str = "",
                   exit_code: int | None = None, source: str = SOURCE_AGENT, data: bytes = b"") -> list[Command]:
        if task.alive:
            self._hold_user(task.framework.principal, task.info.user, -1)
        task.phase = _Phase.TERMINATED
        if task.holds_resources:
            task.holds_resources = False
            self._used = self._used.subtract_clamped(task.info.resources)
        if task.released:
            task.released = False
            self._released = self._released.subtract_clamped(task.info.resources)
        key = (task.framework.id, task.info.task_id)
        log.info("task %s/%s: %s (%s)", key[0], key[1], state, message)
        if task.orphaned:
            del self._tasks[key]
            return self._forget(key)
        return self._update(task, state, message, reason=reason, exit_code=exit_code, source=source, data=data)

    def _live_tasks(self) -> list[_Task]:
        return [task for task in self._tasks.values() if task.alive]

    # ---------------------------------------------------- custom executors
    def executors(self) -> list[AgentExecutor]:
        """The custom executors whose processes run (or start)."""
        return [AgentExecutor(key[0], key[1], e.info.resources, e.pid, e.peer is not None, sorted(e.tasks))
                for key, e in sorted(self._executors.items()) if not e.orphaned]

    def on_executor_frame(self, peer: bytes, message: object) -> list[Command]:
        """A message from the executor channel, on connection ``peer``. Which
        executor sent it is known from its secret alone; a frame without a
        known secret is refused (an EXECUTOR_ERROR to ``peer``)."""
        if not isinstance(message, x.EXECUTOR_TO_AGENT):
            return [SendToExecutor(peer, x.ExecutorError(
                f"{getattr(message, 'TYPE', type(message).__name__)} is not a message an executor sends"))]
        digest = _secret_digest(message.secret)
        key = self._executor_by_digest.get(digest)
        executor = self._executors.get(key) if key is not None else None
        if executor is None or not hmac.compare_digest(executor.digest, digest) or executor.orphaned:
            log.warning("executor channel: a %s with an unknown secret refused", message.TYPE)
            return [SendToExecutor(peer, x.ExecutorError("unknown executor secret: refused"))]
        if isinstance(message, x.RegisterExecutor):
            return self._executor_registered(executor, peer, message)
        executor.peer = peer   # its latest connection (the secret says it is this executor)
        data = message.status.data if isinstance(message, x.ExecutorStatus) else message.data
        if len(data) > self.max_message_size:
            what = "a status update's data" if isinstance(message, x.ExecutorStatus) else "a framework message"
            log.warning("executor %s/%r: %s of %d bytes refused (--max-message-size %d)", *executor.key, what,
                        len(data), self.max_message_size)
            return [SendToExecutor(peer, x.ExecutorError(
                f"{what} holds {len(data)} bytes; at most {self.max_message_size} (the agent's --max-message-size): "
                "refused", uuid=message.status.uuid if isinstance(message, x.ExecutorStatus) else ""))]
        if len(data) > WARN_MESSAGE_SIZE:
            log.warning("executor %s/%r sends %d bytes of data (more than %d)", *executor.key, len(data),
                        WARN_MESSAGE_SIZE)
        if isinstance(message, x.ExecutorStatus):
            return self._executor_status(executor, peer, message.status)
        return self._message_to_framework(executor, message.data)

    def _executor_checkpoint(self, framework_id: str, executor_id: str) -> TaskCheckpoint | None:
        executor = self._executors.get((framework_id, executor_id))
        if executor is None or executor.orphaned:
            return None
        state = TaskState.RUNNING if executor.phase == _Phase.RUNNING else TaskState.STAGING
        return TaskCheckpoint(executor.framework, without_secret_values(executor.run), state, [],
                              executor.phase != _Phase.TERMINATED, executor.killing,
                              executor_secret_digest=executor.digest)

    def _new_executor(self, framework: FrameworkInfo, info: ExecutorInfo, user: str,
                      first_task: Resources = EMPTY) -> tuple[_Executor, str]:
        """A new executor's record, and the secret its process gets as a
        file (:data:`~mesoslike.wire.executor_messages.SECRET_FILE`): only
        its digest is kept (and checkpointed)."""
        secret = self._new_secret()
        environment = dict(info.environment)
        environment.update({x.ENDPOINT_ENV: self.executor_endpoint, x.SECRET_FILE_ENV: x.SECRET_FILE,
                            x.EXECUTOR_ID_ENV: info.executor_id, x.MAX_MESSAGE_SIZE_ENV: str(self.max_message_size)})
        environment.update(self._mesos_executor_environment(framework, info))
        run = TaskInfo(info.run_id(), self._agent_id, info.command, info.resources + first_task,
                       name=info.name or info.executor_id,
                       environment=environment, kill_grace_period=info.shutdown_grace_period, user=user,
                       executor=info, environment_secrets=info.environment_secrets)
        return self._add_executor(framework, run, _secret_digest(secret), secret), secret

    def _mesos_executor_environment(self, framework: FrameworkInfo, info: ExecutorInfo) -> dict[str, str]:
        """Mesos's variables of an executor, for v1 executors (pymesos's
        ``MesosExecutorDriver``): where the agent's executor API is
        (``MESOS_AGENT_ENDPOINT``, host:port, without an HTTP server none)
        and who the executor is."""
        environment = {"MESOS_FRAMEWORK_ID": framework.id, "MESOS_EXECUTOR_ID": info.executor_id,
                       "MESOS_AGENT_ID": self._agent_id, "MESOS_SLAVE_ID": self._agent_id,
                       "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": f"{info.shutdown_grace_period:g}secs"}
        # not MESOS_EXECUTOR_AUTHENTICATION_TOKEN: a secret in the environment is readable through
        # /proc (docs/containers.rst, "Secrets"); an executor that calls from elsewhere than the
        # agent's host sends the secret of its file (MESOSLIKE_EXECUTOR_SECRET_FILE) as its bearer token
        if self.http_address:
            environment["MESOS_AGENT_ENDPOINT"] = self.http_address.split("://", 1)[-1].rstrip("/")
        if self.checkpoint:   # the executor waits for a restarted agent (pymesos takes any value as true)
            environment["MESOS_CHECKPOINT"] = "1"
        return environment

    def executor_secret(self, framework_id: str, executor_id: str) -> str | None:
        """The secret of the framework's executor ``executor_id`` while its
        process runs or starts (the v1 executor API builds the channel's
        frames with it): "" while it is not known — a recovered executor's,
        until :meth:`restore_executor_secret` — and None for no such executor."""
        executor = self._executors.get((framework_id, executor_id))
        if executor is None or executor.orphaned or executor.phase == _Phase.TERMINATED:
            return None
        return executor.secret

    def restore_executor_secret(self, framework_id: str, executor_id: str, secret: str) -> bool:
        """Give a recovered executor back its secret (read from its sandbox's
        secret file by the runtime: this agent process never had it) — only
        if its digest is the checkpointed one. True if it was."""
        executor = self._executors.get((framework_id, executor_id))
        if executor is None or not secret or not hmac.compare_digest(_secret_digest(secret), executor.digest):
            return False
        executor.secret = secret
        return True

    def _add_executor(self, framework: FrameworkInfo, run: TaskInfo, digest: str, secret: str = "") -> _Executor:
        executor = _Executor(framework, run, digest)
        executor.secret = secret
        self._hold_user(framework.principal, run.user, 1)
        self._executors[executor.key] = executor
        self._executor_by_digest[executor.digest] = executor.key
        self._used = self._used + executor.info.resources
        return executor

    def _run_executor_task(self, framework: FrameworkInfo, task: TaskInfo) -> list[Command]:
        """RUN_TASK of a task a custom executor runs: the executor is started
        the first time (its resources taken besides the task's), and the
        task handed to it once it has registered."""
        assert task.executor is not None
        key = (framework.id, task.task_id)
        executor = self._executors.get((framework.id, task.executor.executor_id))
        problem = self._launch_problem(task, task.executor.resources if executor is None else EMPTY)
        if not problem and executor is None and sum(k[0] == framework.id for k in self._executors) \
                >= MAX_EXECUTORS_PER_FRAMEWORK:
            problem = (f"framework {framework.id} already runs {MAX_EXECUTORS_PER_FRAMEWORK} custom executors on "
                       "this agent: a task of another executor is refused (reuse an executor id)")
        reason = REASON_TASK_INVALID
        if not problem and executor is None:
            problem, reason = self._user_problem(framework, task.user), REASON_TASK_UNAUTHORIZED
        if not problem and executor is not None:
            if executor.shutdown_deadline is not None or executor.killing or executor.orphaned:
                problem = f"executor {task.executor.executor_id!r} is shutting down"
            elif (executor.info.command, executor.info.resources) != (task.executor.command, task.executor.resources):
                problem = (f"executor {task.executor.executor_id!r} runs here with another command or other "
                           "resources: a framework's tasks naming one executor id must name the same executor")
        if problem:
            log.warning("RUN_TASK %s/%s refused: %s", framework.id, task.task_id, problem)
            record = _Task(framework, task, holds_resources=False)
            self._tasks[key] = record
            out = self._update(record, TaskState.ERROR, problem, reason=reason)
            if executor is None and self._registered:   # the master counted the executor as started: it is not
                out.append(SendToMaster(m.ExecutorExited(self._agent_id, framework.id, task.executor.executor_id,
                                                         "never started: its first task was refused")))
            return out
        record = _Task(framework, task, holds_resources=True)
        self._tasks[key] = record
        self._hold_user(framework.principal, task.user, 1)
        self._used = self._used + task.resources
        out = []
        if executor is None:
            # its container starts with room for its first task too (Mesos's launch, then update)
            executor, secret = self._new_executor(framework, task.executor, task.user, task.resources)
            log.info("starting executor %s/%s for task %s: %s", framework.id, executor.info.executor_id,
                     task.task_id, executor.info.command)
            if self.checkpoint:
                out.append(CheckpointTask(framework.id, executor.info.run_id()))
            out.append(LaunchTask(framework, executor.run, self._agent_id, {x.SECRET_FILE: secret.encode()}))
        executor.tasks.add(task.task_id)
        out.extend(self._resize(executor))
        # no TASK_STARTING of the agent's own: as in Mesos, only the executor reports on its tasks
        out.extend(self._checkpointed(record))
        if executor.peer is not None:
            out.extend(self._hand_over(executor, record))
        return out

    def _resize(self, executor: _Executor) -> list[Command]:
        """Its container's limits to its own resources and its live tasks'
        (when they changed)."""
        limits = executor.info.resources
        for task_id in executor.tasks:
            task = self._tasks.get((executor.framework.id, task_id))
            if task is not None and task.alive:
                limits = limits + task.info.resources
        if limits == executor.limits or executor.killing or executor.phase == _Phase.TERMINATED:
            return []
        executor.limits = limits
        return [UpdateContainer(executor.framework.id, executor.info.run_id(), limits)]

    def _hand_over(self, executor: _Executor, task: _Task) -> list[Command]:
        assert executor.peer is not None
        task.phase = _Phase.RUNNING
        task.pid = executor.pid
        return [SendToExecutor(executor.peer, x.LaunchExecutorTask(task.info))]

    def _executor_registered(self, executor: _Executor, peer: bytes, msg: x.RegisterExecutor) -> list[Command]:
        again = executor.registered_once or executor.reregister_deadline is not None
        executor.peer = peer
        executor.registered_once = True
        executor.reregister_deadline = executor.register_deadline = None
        log.info("executor %s/%s %sregistered", *executor.key, "re" if again else "")
        out: list[Command] = [SendToExecutor(peer, x.ExecutorRegistered(executor.info, executor.framework, self.info,
                                                                       reregistered=again))]
        known = set(msg.tasks)
        for task_id in sorted(executor.tasks):
            task = self._tasks.get((executor.framework.id, task_id))
            if task is None or not task.alive:
                continue
            if task.phase != _Phase.RUNNING or task_id not in known:   # it never had it
                out.extend(self._hand_over(executor, task))
            if task.killing:
                out.append(SendToExecutor(peer, x.KillExecutorTask(task_id)))
        if executor.shutdown_deadline is not None:
            out.append(SendToExecutor(peer, x.ShutdownExecutor()))
        return out

    def _executor_status(self, executor: _Executor, peer: bytes, status: TaskStatus) -> list[Command]:
        """A task's update from its executor: into the task's reliable stream
        (checkpointed, retried to the master, acknowledged by it), then
        acknowledged to the executor."""
        task_id = status.task_id
        task = self._tasks.get((executor.framework.id, task_id))
        if task is None or task.info.executor is None or task.info.executor.executor_id != executor.info.executor_id:
            return [SendToExecutor(peer, x.ExecutorError(f"an update of task {task_id[:200]!r}, which is not this "
                                                         "executor's: refused", uuid=status.uuid))]
        if status.state not in _EXECUTOR_STATES:
            return [SendToExecutor(peer, x.ExecutorError(f"an executor may not report {status.state[:40]!r} "
                                                         f"(task {task_id[:200]!r}): refused", uuid=status.uuid))]
        ack = SendToExecutor(peer, x.ExecutorStatusAck(task_id, status.uuid))
        if not task.alive or (status.uuid and status.uuid == task.executor_uuid):
            return [ack]   # a resend of what the agent has
        waiting = self._streams.depth((executor.framework.id, task_id))
        if waiting >= MAX_EXECUTOR_PENDING_UPDATES and status.state not in TERMINAL_STATES:
            return [SendToExecutor(peer, x.ExecutorError(
                f"task {task_id[:200]!r} has {waiting} updates unacknowledged by the master: a "
                "non-terminal one is refused (send it again later)", uuid=status.uuid, retry=True))]
        task.executor_uuid = status.uuid
        message, reason = status.message[:_MAX_EXECUTOR_TEXT], status.reason[:200]
        if status.healthy is not None:   # as the executor said, on its terminal update too
            task.healthy = status.healthy
        if status.state in TERMINAL_STATES:
            executor.tasks.discard(task_id)
            out = self._terminate(task, status.state, message, reason=reason, source=SOURCE_EXECUTOR,
                                  data=status.data)
            out.extend(self._resize(executor))
        else:
            task.phase = _Phase.RUNNING
            out = self._update(task, status.state, message, reason=reason, source=SOURCE_EXECUTOR, data=status.data)
        out.append(ack)
        return out

    def _message_to_framework(self, executor: _Executor, data: bytes) -> list[Command]:
        if not self._registered:
            log.warning("a framework message of executor %s/%s dropped: no master now", *executor.key)
            return []
        return [SendToMaster(m.FrameworkMessage(executor.framework.id, self._agent_id, data,
                                                executor_id=executor.info.executor_id))]

    def _message_to_executor(self, framework_id: str, executor_id: str, data: bytes) -> list[Command]:
        executor = self._executors.get((framework_id, executor_id))
        if executor is None or executor.peer is None or executor.orphaned:
            log.warning("framework message for executor %s/%r dropped: no such registered executor",
                        framework_id, executor_id[:200])
            return []
        if len(data) > self.max_message_size:
            log.warning("framework message of %d bytes for executor %s/%r dropped: more than %d "
                        "(--max-message-size)", len(data), framework_id, executor_id[:200], self.max_message_size)
            return []
        return [SendToExecutor(executor.peer, x.ExecutorFrameworkMessage(data))]

    def _kill_executor_task(self, task: _Task, why: str) -> list[Command]:
        """Kill a task of a custom executor: the executor's ``kill_task``; one
        it has not been handed yet ends TASK_KILLED here."""
        assert task.info.executor is not None
        task.kill_why = why
        executor = self._executors.get((task.framework.id, task.info.executor.executor_id))
        if executor is None or task.phase != _Phase.RUNNING:
            out = self._terminate(task, TaskState.KILLED, f"killed before its executor had it ({why})")
            if executor is not None:
                executor.tasks.discard(task.info.task_id)
                out.extend(self._resize(executor))
            return out
        task.killing = True
        out = self._checkpointed(task)
        if executor.peer is not None:
            out.append(SendToExecutor(executor.peer, x.KillExecutorTask(task.info.task_id)))
        return out

    def _shut_executor_down(self, executor: _Executor) -> list[Command]:
        """SHUTDOWN_EXECUTOR now, the process killed after its grace period."""
        if executor.shutdown_deadline is not None or executor.killing or executor.phase == _Phase.TERMINATED:
            return []
        executor.shutdown_deadline = self.clock.now() + executor.info.shutdown_grace_period
        log.info("shutting executor %s/%s down", *executor.key)
        return [SendToExecutor(executor.peer, x.ShutdownExecutor())] if executor.peer is not None else []

    def _executor_deadlines(self) -> list[float]:
        return [t for e in self._executors.values() if not e.killing
                for t in (e.shutdown_deadline, e.reregister_deadline, e.register_deadline) if t is not None]

    def _executor_timeouts(self, now: float) -> list[Command]:
        out: list[Command] = []
        for executor in list(self._executors.values()):
            if executor.killing:
                continue
            if executor.shutdown_deadline is not None and now >= executor.shutdown_deadline:
                log.info("executor %s/%s did not end within its grace period: killing it", *executor.key)
            elif executor.reregister_deadline is not None and now >= executor.reregister_deadline:
                log.warning("executor %s/%s did not reconnect within %g s of the agent's restart: killing it",
                            *executor.key, self.executor_reregister_timeout)
                executor.end_reason = REASON_EXECUTOR_REREGISTRATION_TIMEOUT
                executor.end_message = f"it did not reconnect within {self.executor_reregister_timeout:g} s of " \
                                       "the agent's restart (--executor-reregistration-timeout)"
            elif executor.register_deadline is not None and now >= executor.register_deadline:
                log.warning("executor %s/%s did not register within %g s of its start: killing it",
                            *executor.key, self.executor_register_timeout)
                executor.end_reason = REASON_EXECUTOR_REGISTRATION_TIMEOUT
                executor.end_message = f"it did not register within {self.executor_register_timeout:g} s of its " \
                                       "start (--executor-registration-timeout)"
            else:
                continue
            out.extend(self._kill_executor(executor))
        return out

    def _kill_executor(self, executor: _Executor) -> list[Command]:
        executor.killing = True
        return [*self._checkpointed_executor(executor), KillTask(executor.framework.id, executor.info.run_id(), 0.0)]

    def _checkpointed_executor(self, executor: _Executor) -> list[Command]:
        if not self.checkpoint or executor.orphaned:
            return []
        return [CheckpointTask(executor.framework.id, executor.info.run_id())]

    def _executor_of_run(self, framework_id: str, run_id: str) -> _Executor | None:
        executor_id = _executor_id_of_run(run_id)
        return self._executors.get((framework_id, executor_id)) if executor_id is not None else None

    def _executor_started(self, framework_id: str, run_id: str, pid: int,
                          container: ContainerStatus | None = None) -> list[Command]:
        executor = self._executor_of_run(framework_id, run_id)
        if executor is None or executor.phase not in (_Phase.LAUNCHING, _Phase.RECOVERING):
            return []
        recovered = executor.phase == _Phase.RECOVERING
        executor.phase = _Phase.RUNNING
        executor.pid = pid
        executor.container_status = container
        log.info("executor %s/%s %s pid %d", *executor.key, "still runs as" if recovered else "started as", pid)
        if executor.killing or executor.orphaned:
            return [KillTask(framework_id, run_id, 0.0)]
        if recovered and executor.peer is None:
            executor.reregister_deadline = self.clock.now() + self.executor_reregister_timeout
        elif not recovered and executor.peer is None:
            executor.register_deadline = self.clock.now() + self.executor_register_timeout
        return self._checkpointed_executor(executor)

    def _executor_limited(self, framework_id: str, run_id: str, reason: str, message: str) -> list[Command]:
        executor = self._executor_of_run(framework_id, run_id)
        if executor is None or executor.killing or executor.phase == _Phase.TERMINATED:
            return []
        executor.end_reason, executor.end_message = reason, message
        log.warning("executor %s/%s: %s", *executor.key, message)
        return self._kill_executor(executor)

    def _executor_ended(self, framework_id: str, run_id: str, how: str, status: int | None = None) -> list[Command]:
        """The executor's process ended: what it held is free, its tasks that
        had not ended are TASK_FAILED (REASON_EXECUTOR_TERMINATED; KILLED if
        they were being killed), the master is told (EXECUTOR_EXITED)."""
        executor = self._executor_of_run(framework_id, run_id)
        if executor is None or executor.phase == _Phase.TERMINATED:
            return []
        executor.phase = _Phase.TERMINATED
        self._hold_user(executor.framework.principal, executor.run.user, -1)
        del self._executors[executor.key]
        self._executor_by_digest.pop(executor.digest, None)
        self._used = self._used.subtract_clamped(executor.info.resources)
        if executor.released:
            executor.released = False
            self._released = self._released.subtract_clamped(executor.info.resources)
        why = f"{executor.end_message}; {how}" if executor.end_message else how
        log.info("executor %s/%s ended: %s", *executor.key, why)
        out: list[Command] = []
        for task_id in sorted(executor.tasks):
            task = self._tasks.get((framework_id, task_id))
            if task is None or not task.alive:
                continue
            text = f"its executor {executor.info.executor_id!r} ended: {why}"
            if task.killing:
                out.extend(self._terminate(task, TaskState.KILLED, f"killed ({task.kill_why}); {text}"))
            else:
                out.extend(self._terminate(task, TaskState.FAILED, text,
                                           reason=executor.end_reason or REASON_EXECUTOR_TERMINATED))
        if executor.orphaned:
            return out
        if self._registered:
            out.append(SendToMaster(m.ExecutorExited(self._agent_id, framework_id, executor.info.executor_id,
                                                     why[:_MAX_EXECUTOR_TEXT], status)))
        out.extend(self._forget((framework_id, run_id)))
        return out

    def _recover_executor(self, checkpoint: TaskCheckpoint) -> list[Command]:
        run = checkpoint.task
        key = (checkpoint.framework.id, run.task_id)
        # (an agent before secret files kept the secret in the executor's environment)
        old_secret = run.environment.get(x.SECRET_ENV, "")
        digest = checkpoint.executor_secret_digest or (_secret_digest(old_secret) if old_secret else "")
        if run.executor is None or not digest or not checkpoint.holds_resources:
            return [ForgetTask(*key)]   # ended (or damaged): nothing to wait for
        executor = self._add_executor(checkpoint.framework, run, digest)
        executor.limits = None   # as its last update set them: set again with the next change
        executor.phase = _Phase.RECOVERING
        executor.killing = checkpoint.killing
        return []

    def _recover_executor_task(self, task: _Task) -> list[Command]:
        """A recovered task of a custom executor: its executor's fate is its fate."""
        assert task.info.executor is not None
        executor = self._executors.get((task.framework.id, task.info.executor.executor_id))
        if executor is None:
            return self._terminate(task, TaskState.FAILED, f"its executor {task.info.executor.executor_id!r} was "
                                   "not recovered with the agent", reason=REASON_EXECUTOR_TERMINATED)
        task.phase = _Phase.RUNNING   # handed over, as far as the agent knows: re-registration says
        executor.tasks.add(task.info.task_id)
        return []

    # ------------------------------------------------- reliable updates
    def _status(self, framework_id: str, task_id: str, state: str, message: str, reason: str = "",
                exit_code: int | None = None, uuid_: str | None = None, healthy: bool | None = None,
                labels: list[Label] | None = None, source: str = SOURCE_AGENT, data: bytes = b"",
                container: ContainerStatus | None = None) -> TaskStatus:
        if self.ip_address:
            container = attrs.evolve(container or ContainerStatus(), ip_address=self.ip_address)
        return TaskStatus(
            task_id=task_id, state=state, agent_id=self._agent_id, message=message, source=source,
            reason=reason, uuid=self._new_uuid() if uuid_ is None else uuid_, timestamp=self._wall_clock(),
            exit_code=exit_code, framework_id=framework_id, healthy=healthy, labels=labels or [], data=data,
            container_status=container)

    def _new_uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _update(self, task: _Task, state: str, message: str, reason: str = "",
                exit_code: int | None = None, source: str = SOURCE_AGENT, data: bytes = b"") -> list[Command]:
        """Queue a reliable update; send it now if it is the head."""
        framework_id, task_id = task.framework.id, task.info.task_id
        task.state = state
        # the task's labels ride on each of its updates (issue 18 §5b)
        head = self._streams.add((framework_id, task_id), self._status(
            framework_id, task_id, state, message, reason, exit_code, healthy=task.healthy, labels=task.info.labels,
            source=source, data=data, container=self._container_of(task)))
        out = self._checkpointed(task)   # written before it is sent: a sent update is never lost
        if head and self._registered:   # else behind an unacknowledged one, or out on registration
            out.extend(self._send_head((framework_id, task_id)))
        return out

    def _container_of(self, task: _Task) -> ContainerStatus | None:
        """The container a task's updates tell of: its own, or, for a custom
        executor's task, its executor's."""
        if task.info.executor is not None:
            executor = self._executors.get((task.framework.id, task.info.executor.executor_id))
            return executor.container_status if executor is not None else None
        return task.container_status

    def _send_head(self, key: TaskKey) -> list[Command]:
        """Send the task's update in flight (if it has one) now."""
        update = self._streams.send_head(key, self.clock.now())
        return [SendToMaster(m.StatusUpdate(key[0], update))] if update is not None else []

    def _status_update_ack(self, msg: m.StatusUpdateAck) -> list[Command]:
        key = (msg.framework_id, msg.task_id)
        acked = self._streams.acknowledge(key, msg.uuid)
        if acked is None:
            log.debug("ignoring acknowledgement %s of %s/%s: not the update in flight", msg.uuid, *key)
            return []
        task = self._tasks.get(key)
        if acked.terminal:
            self._streams.remove(key)
            if task is not None and not task.alive:
                del self._tasks[key]  # the task's story is told: forget it
                return self._forget(key)
            return []
        out = self._checkpointed(task) if task is not None else []
        if self._registered:
            out.extend(self._send_head(key))
        return out

    def _shutdown_executor(self, msg: m.ShutdownExecutor) -> list[Command]:
        """The framework asks its executor to end (Mesos's SHUTDOWN call)."""
        executor = self._executors.get((msg.framework_id, msg.executor_id))
        if executor is None or executor.orphaned:
            return []
        return self._shut_executor_down(executor)

    def _error(self, msg: m.Error) -> list[Command]:
        (log.error if msg.fatal else log.warning)("the master says: %s", msg.message)
        return []

    def _heartbeat(self, msg: object) -> list[Command]:
        return []  # a sign of life, counted by on_message

    # type -> handler; each handler takes the message of its key's type
    _HANDLERS: dict[type, Callable[[AgentCore, Any], list[Command]]] = {
        m.AgentRegistered: _agent_registered,
        m.Ping: _ping,
        m.RunTask: _run_task,
        m.KillTask: _kill_task,
        m.CheckpointResources: _checkpoint_resources,
        m.StatusUpdateAck: _status_update_ack,
        m.ShutdownAgent: _shutdown_agent,
        m.ShutdownFramework: _shutdown_framework,
        m.FrameworkMessage: _framework_message,
        m.ShutdownExecutor: _shutdown_executor,
        m.Error: _error,
        m.Heartbeat: _heartbeat,
    }




def _describe_exit(exit_code: int | None, signal: int | None) -> str:
    if signal is not None:
        try:
            name = signal_module.Signals(signal).name
        except ValueError:
            name = "unknown"
        return f"command terminated by signal {signal} ({name})"
    if exit_code is None:
        return "command ended (exit status unknown)"
    return f"command exited with status {exit_code}"

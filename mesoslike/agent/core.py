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

import logging
import math
import random
import secrets
import signal as signal_module
from typing import Any, Callable

import attrs
import msgspec

from mesoslike.agent.commands import (CheckpointAgent, CheckpointReservations, CheckpointTask, Command,
                                      DeliverMessage, ForgetTask, KillTask, LaunchTask, Reconnect, SendToExecutor,
                                      SendToMaster, TaskCheckpoint, TaskKey, UpdateContainer)
from mesoslike.agent.executors import (EXECUTOR_REGISTER_TIMEOUT, EXECUTOR_REREGISTER_TIMEOUT, EXECUTOR_STATES,
                                       MAX_EXECUTOR_PENDING_UPDATES, MAX_EXECUTOR_REREGISTER_TIMEOUT,
                                       MAX_EXECUTOR_TEXT, MAX_EXECUTORS_PER_FRAMEWORK,
                                       REASON_EXECUTOR_REGISTRATION_TIMEOUT, REASON_EXECUTOR_REREGISTRATION_TIMEOUT,
                                       SOURCE_EXECUTOR, AgentExecutor, ExecutorBook, ExecutorRecord,
                                       check_executor_timeout, executor_id_of_run)
from mesoslike.backoff import Backoff
from mesoslike.clock import Clock
from mesoslike.delivery import UpdateStreams
from mesoslike.errors import ConfigError
from mesoslike.observations import NOTICE
from mesoslike.resources import Resources
from mesoslike.wire import executor_messages as x
from mesoslike.wire import messages as m
from mesoslike.wire.types import (EXECUTOR_RUN_PREFIX, MAX_FRAMEWORK_MESSAGE, TERMINAL_STATES, AgentInfo,
                                  ContainerStatus, FrameworkInfo, Label, MasterInfo, TaskInfo, TaskState, TaskStatus,
                                  check_message_size, without_secret_values)

# the commands, a task's checkpoint and the executors' names are the agent's public vocabulary: importable
# from here as before (mesoslike.agent.commands and mesoslike.agent.executors define them)
__all__ = [
    "AgentCore", "AgentTask", "TaskCheckpoint", "Command", "SendToMaster", "Reconnect", "LaunchTask", "KillTask",
    "DeliverMessage", "CheckpointTask", "ForgetTask", "CheckpointAgent", "CheckpointReservations", "SendToExecutor",
    "UpdateContainer", "AgentExecutor", "SOURCE_AGENT", "SOURCE_EXECUTOR", "EXECUTOR_REREGISTER_TIMEOUT",
    "MAX_EXECUTOR_REREGISTER_TIMEOUT", "check_executor_timeout", "EXECUTOR_REGISTER_TIMEOUT",
    "MAX_EXECUTOR_PENDING_UPDATES", "MAX_EXECUTORS_PER_FRAMEWORK",
    "REASON_TASK_INVALID", "REASON_TASK_UNAUTHORIZED", "REASON_TASK_UNKNOWN", "TaskUsers",
    "REASON_COMMAND_EXECUTOR_FAILED", "REASON_CONTAINER_LIMITATION_MEMORY", "REASON_EXECUTOR_TERMINATED",
    "REASON_EXECUTOR_REREGISTRATION_TIMEOUT", "REASON_EXECUTOR_REGISTRATION_TIMEOUT", "REASON_AGENT_RESTARTED",
    "REASON_AGENT_DRAINING", "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED", "REASON_CONTAINER_LAUNCH_FAILED",
    "UPDATE_BACKOFF_INITIAL", "UPDATE_BACKOFF_MAX",
]

log = logging.getLogger("mesoslike.agent")

SOURCE_AGENT = "SOURCE_AGENT"
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
#: TASK_FAILED: the agent restarted between checkpointing a task and starting it
REASON_AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
#: TASK_DROPPED: a task sent to an agent that is draining
REASON_AGENT_DRAINING = "REASON_AGENT_DRAINING"
#: TASK_RUNNING whose ``healthy`` changed, and TASK_FAILED of a task its health check killed
REASON_TASK_HEALTH_CHECK_STATUS_UPDATED = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
#: TASK_FAILED: a URI of the task could not be fetched (the message names it)
REASON_CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"

#: status update retries: 10 s doubling to 10 min, as Mesos's agent (its status update manager's
#: ``STATUS_UPDATE_RETRY_INTERVAL_MIN`` and ``_MAX``; docs/reliability.rst, "Retries"). The transport
#: drops nothing for a connected peer and the agent sends every head again at once when it registers
#: again, so a retry is for what the master held back or could not forward; 0.5 s had a busy master
#: handle 2.4-3.6 retries a task besides its three updates (docs/performance.rst)
UPDATE_BACKOFF_INITIAL = 10.0
UPDATE_BACKOFF_MAX = 600.0
UPDATE_BACKOFF = Backoff(UPDATE_BACKOFF_INITIAL, UPDATE_BACKOFF_MAX, jitter=0.0)
#: after a master that does not lead refused a registration (``ERROR`` with ``standby``): the next
#: attempt within [0.5, 1] x this, doubling while refusals go on, at most the registration back-off
STANDBY_RETRY = 0.5

EMPTY = Resources()

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


# ============================================================ bookkeeping
class _Phase:
    LAUNCHING = "launching"    # LaunchTask emitted, no pid yet
    RECOVERING = "recovering"  # checkpointed by an earlier agent process: is it still there?
    RUNNING = "running"        # a process exists
    TERMINATED = "terminated"  # exited (or never started); waiting for its terminal update's ack


class _Task(msgspec.Struct, gc=False):
    """A task the agent knows (:func:`_new_task` makes one). A mutable
    msgspec Struct the collector does not track (``gc=False``: it holds no
    reference back to anything that holds it, so it is in no cycle): one
    lives from a task's launch to its terminal update's acknowledgement,
    and a tracked one was passed over by each young and middle collection
    it outlived; built in C, not by an ``__init__`` of seventeen
    assignments."""

    framework: FrameworkInfo
    info: TaskInfo
    phase: str
    holds_resources: bool
    #: (framework id, task id): its key in the task table and the update streams, made once
    key: TaskKey
    state: str = TaskState.STAGING
    pid: int | None = None
    killing: bool = False          # a KillTask went out: the exit is TASK_KILLED
    kill_requested: bool = False   # killed before its process existed
    kill_why: str = ""
    #: its framework was shut down: the master gave its resources back at once (as Mesos's does), so
    #: launches no longer wait for them while it dies (see AgentCore.free)
    released: bool = False
    orphaned: bool = False         # after SHUTDOWN_AGENT: no updates, only resources to free
    limitation: str = ""           # a REASON_CONTAINER_LIMITATION_*: killed for it, ends TASK_FAILED
    limitation_message: str = ""
    healthy: bool | None = None  # its health check's latest verdict, carried by its updates
    executor_uuid: str = ""        # the latest update of its custom executor taken (a resend is only acked)
    #: its container (isolators, image, host pid), carried by its updates once its process runs
    container_status: ContainerStatus | None = None
    #: (the container its updates told last, the address, that container with the address): its next
    #: updates carry the same object while neither changed (AgentCore._addressed_container)
    addressed: tuple[ContainerStatus | None, str, ContainerStatus | None] | None = None

    @property
    def alive(self) -> bool:
        return self.phase != _Phase.TERMINATED


def _new_task(framework: FrameworkInfo, info: TaskInfo, holds_resources: bool) -> _Task:
    """A task record: launching if it holds resources, else terminated (a refused launch's)."""
    return _Task(framework, info, _Phase.LAUNCHING if holds_resources else _Phase.TERMINATED, holds_resources,
                 (framework.id, info.task_id))


# =================================================================== core
#: the bits of a random (version 4, RFC 4122 variant) UUID that are not random, cleared and set
_UUID4_CLEAR = ~((0xc000 << 48) | (0xf000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def random_uuid4(rng: random.Random) -> str:
    """``str(uuid.UUID(int=rng.getrandbits(128), version=4))`` — the same
    string from the same draw — without the UUID object."""
    h = "%032x" % ((rng.getrandbits(128) & _UUID4_CLEAR) | _UUID4_SET)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


#: the counted part of an update uuid (:class:`UpdateUuids`): its last group, 48 bits
_UUID_COUNTER_LIMIT = 1 << 48


class UpdateUuids:
    """The agent's status update uuids: a random version 4 uuid's text
    drawn once, its last group (48 bits) then counted up, a new one drawn
    when it would wrap. Each uuid names one update (the acknowledgement
    names it back) and must differ from every other update's of the
    agent, of its earlier runs (their unacknowledged updates are recovered)
    and of other agents — which a random prefix of 74 bits plus a counter
    gives as a random draw each does, for one ``%x`` and a concatenation
    an update instead of a draw of 128 bits and five slices (~3 µs, a
    tenth of the simulated agents' profile: stop 19, ctl29p). The text is
    a version 4 uuid's (RFC 4122 variant), as Mesos's random ones are."""

    __slots__ = ("_rng", "_prefix", "_next")

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._prefix = ""
        self._next = _UUID_COUNTER_LIMIT   # drawn at the first use (a core that never updates draws nothing)

    def __call__(self) -> str:
        number = self._next
        if number >= _UUID_COUNTER_LIMIT:
            first = random_uuid4(self._rng)
            self._prefix, number = first[:24], int(first[24:], 16)
        self._next = number + 1
        return self._prefix + "%012x" % number   # (the format a constant: no tuple made)


class AgentCore:
    """The agent state machine: events in, :data:`Command` lists out.

    Why one class of some 1,150 lines (Mesos's ``Slave`` is one too): every
    handler — the master's messages, the tasks' and executors' events,
    ``tick`` — reads and changes the same three things, the task table, the
    update streams and the registration, and the checkpoint commands must
    follow each change in the same step. What is the custom executors' alone
    — their records, the secret that names a frame's sender, the channel's
    refusals, their registration, re-registration and shutdown timers, what
    is checkpointed of their runs — is the executor book's
    (:class:`~mesoslike.agent.executors.ExecutorBook`, with its own
    ``_check()``); what stays here (the "custom executors" section, ~260
    lines) ties executors to their tasks: a task's launch starts its
    executor, an executor's update enters its task's update stream, an
    executor's end ends its tasks, and both hold the agent's resources.

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
        ``[(1 - register_jitter) x d, d]``. 10 s by default, as the maximum:
        the transport loses nothing on a live connection, a new leader of
        100,000 agents takes ~10 s to answer them all, and a retry sooner
        only adds to its load (docs/reliability.rst, "Retries").
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
                 register_backoff: float = 10.0, register_backoff_max: float = 10.0, register_jitter: float = 0.5,
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
        self.max_message_size = check_message_size(max_message_size)
        self.clock = clock
        self._info = info.replace(id="")
        #: the total it was started with (--resources); its dynamic reservations convert part of it
        self._base_total = info.resources
        self._reservations = EMPTY
        self._rng = rng if rng is not None else random.Random()
        self._new_uuid = UpdateUuids(self._rng)
        self._wall_clock = wall_clock or clock.now
        self.max_ping_timeouts = max_ping_timeouts
        self._register_backoff = Backoff(register_backoff, register_backoff_max, register_jitter)
        self.version = version
        self.http_address = http_address
        self.checkpoint = checkpoint
        #: the address its tasks are reachable at (each status's ``ip_address``: Mesos's container_status);
        #: the runtime sets it to the agent's advertised address
        self.ip_address = ""
        self._bare_container: ContainerStatus | None = None   # ContainerStatus(ip_address=ip_address), made once
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
        self._standby_refusals = 0   # since the last answer: refusals by a master that does not lead
        #: this agent core's incarnation, sent with every (re-)registration: random (not from ``rng``, which
        #: tests seed alike: an agent started again must never pass for the one before), so that a master
        #: tells a restarted agent from a delayed report of this one (docs/reliability.rst, "Stale
        #: re-registrations"); settable before the first registration
        self.incarnation = secrets.token_hex(8)
        #: the last REREGISTER_AGENT sent and its number (``sequence``): the number rises when a report
        #: differs from the last one; a retry of the same report repeats it, byte for byte
        self._last_report: m.ReregisterAgent | None = None
        self._report_sequence = 0
        self._drain_deadline: float | None = None   # after SHUTDOWN_AGENT: register once tasks are gone
        self._master: MasterInfo | None = None
        self._master_accepts_batches = False
        self._ping_interval = 0.0
        self._last_master_contact = clock.now()

        self._tasks: dict[TaskKey, _Task] = {}
        #: each task's updates the master has not acknowledged; the heads go out while registered
        self._streams: UpdateStreams[TaskKey] = UpdateStreams(UPDATE_BACKOFF)
        #: what live tasks and executors hold (:attr:`_used`): while it has no ranges, its thousandths kept in
        #: this dict, changed in place a launch and an end (:meth:`_use`, :meth:`_unuse`), the vector built
        #: only when read; with ranges (ports), the vector itself, as before
        self._used_millis: dict[str, int] = {}
        self._used_vector: Resources | None = EMPTY
        self._used_plain = True    # no ranges in it: _used_millis is all of it
        #: the part of _used that dying tasks and executors of shut-down frameworks hold: the master freed it
        #: when it removed the framework, and offers it again at once
        self._released = EMPTY
        self._draining = False
        self._usage: list[m.TaskUsage] = []   # the latest measurement, sent with every PONG
        #: the custom executors (mesoslike.agent.executors): their records, secrets, connections and timers
        self._executors = ExecutorBook(
            clock, checkpoint=checkpoint, register_timeout=executor_register_timeout,
            reregister_timeout=executor_reregister_timeout, endpoint=executor_endpoint,
            max_message_size=self.max_message_size,
            new_secret=new_secret or (lambda: f"{self._rng.getrandbits(256):064x}"))

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
        return self._info.replace(id=self._agent_id)

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
        self._info = self._info.replace(resources=total)
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

    @property
    def _used(self) -> Resources:
        """What live tasks and executors hold (the vector, built from
        :attr:`_used_millis` when it changed since it was last read)."""
        used = self._used_vector
        if used is None:
            used = self._used_vector = Resources.from_millis(self._used_millis)
        return used

    @_used.setter
    def _used(self, used: Resources) -> None:
        self._used_vector = used
        self._used_millis = dict(used.millis())
        self._used_plain = not used.range_names()

    def _use(self, held: Resources) -> None:
        """``self._used = self._used + held`` without the vector while
        neither has ranges (a launch: 1.7 µs a task for a new vector)."""
        if self._used_plain and not held.has_ranges():
            used = self._used_millis
            for name, amount in held.millis().items():
                used[name] = used.get(name, 0) + amount
            self._used_vector = None
        else:
            self._used = self._used + held

    def _unuse(self, held: Resources) -> None:
        """``self._used = self._used.subtract_clamped(held)``, in place while
        the used vector has no ranges (a range of ``held`` then takes nothing
        from it, as ``subtract_clamped`` has it)."""
        if self._used_plain:
            used = self._used_millis
            for name, amount in held.millis().items():
                mine = used.get(name)
                if mine is not None:
                    if mine > amount:
                        used[name] = mine - amount
                    else:
                        del used[name]
            self._used_vector = None
        else:
            self._used = self._used.subtract_clamped(held)

    def _fits(self, need: Resources) -> bool:
        """``self.free.contains(need)`` without building :attr:`free` (two
        vectors a launch: 7 % of the simulated agents' py-spy samples in the
        control round) where only scalars are asked for and nothing is released:
        then ``free`` is ``total - used`` clamped at zero, and ``need`` (its
        quantities all above zero) fits where ``total - used >= need``, kind
        by kind. Ranges (ports), or released resources: :attr:`free` itself.
        (``tests/test_agent_core.py::test_fits_is_free_contains``)"""
        if self._released is not EMPTY and not self._released.is_empty() or need.has_ranges():
            return self.free.contains(need)
        total, used = self._info.resources.millis(), self._used_millis
        for name, amount in need.millis().items():
            if amount > 0 and total.get(name, 0) - used.get(name, 0) < amount:
                return False
        return True

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

    def container_status(self, framework_id: str, run_id: str) -> ContainerStatus | None:
        """What the container of a run is — a task's, or a custom executor's
        (``run_id``: its :meth:`~mesoslike.wire.types.ExecutorInfo.run_id`)
        — as its updates tell it (isolators, image, host pid, the address);
        None while its process has not started or if it is not known."""
        executor_id = executor_id_of_run(run_id)
        if executor_id is not None:
            executor = self._executors.get(framework_id, executor_id)
            container = executor.container_status if executor is not None else None
        else:
            task = self._tasks.get((framework_id, run_id))
            container = task.container_status if task is not None and not task.orphaned else None
        return self._with_address(container) if container is not None else None

    def _with_address(self, container: ContainerStatus | None) -> ContainerStatus | None:
        """``container`` with the address tasks are reachable at, when the agent knows it."""
        if self.ip_address:
            if container is None:   # (a task not started yet: the same bare one for all, made once an address)
                bare = self._bare_container
                if bare is None or bare.ip_address != self.ip_address:
                    bare = self._bare_container = ContainerStatus(ip_address=self.ip_address)
                return bare
            return msgspec.structs.replace(container, ip_address=self.ip_address)
        return container

    def _addressed_container(self, task: _Task) -> ContainerStatus | None:
        """:meth:`_with_address` of the container ``task``'s updates tell of,
        kept with the task: its STARTING, RUNNING and terminal updates made
        one ``attrs.evolve`` between them, not one each (a frozen value,
        shared as the bare one is)."""
        container = self._container_of(task)
        if container is None:   # (not started yet: the bare one, made once an address; no tuple a task)
            return self._with_address(None)
        kept = task.addressed
        if kept is not None and kept[0] is container and kept[1] == self.ip_address:
            return kept[2]
        addressed = self._with_address(container)
        task.addressed = (container, self.ip_address, addressed)
        return addressed

    def pending_updates(self, framework_id: str, task_id: str) -> list[TaskStatus]:
        """The task's unacknowledged updates, oldest (in flight) first."""
        return self._streams.pending((framework_id, task_id))

    def task_checkpoint(self, framework_id: str, task_id: str) -> TaskCheckpoint | None:
        """What to persist of a task (:class:`CheckpointTask`); None if it is not known.
        A custom executor's run is persisted as a task of its run id."""
        executor_id = executor_id_of_run(task_id)
        if executor_id is not None:
            return self._executors.checkpoint_of(framework_id, executor_id)
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
        times.extend(self._executors.deadlines())
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
            out.extend(self._executors.timeouts(now))
        return out

    def on_message(self, message: object) -> list[Command]:
        """A message from the master. Any message counts as a sign of life."""
        now = self._last_master_contact = self.clock.now()
        if type(message) is m.StatusUpdateAcks:
            # each as if it came alone, in order (docs/wire.rst, "Batching"), all of them when the frame came
            out: list[Command] = []
            acknowledge = self._status_update_ack
            for ack in message.acks:
                out += acknowledge(ack, now)
            return out
        if type(message) is m.RunTasks:
            # each item as if it came alone, in order (docs/wire.rst, "Batching"): what _run_task does with the
            # RunTask unbatched makes of it, without the RunTask
            out = []
            framework, launch = message.framework, self._launch
            for task in message.tasks:
                out += launch(framework, task)
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
            return self._executors.started(framework_id, task_id, pid, container)
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
        if task is None or task.phase == _Phase.TERMINATED:   # (not alive: the property's call saved)
            log.warning("exit of unknown or already terminated task %s/%s ignored", framework_id, task_id)
            return []
        how = _EXITED_0 if exit_code == 0 and signal is None else _describe_exit(exit_code, signal)
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
            return self._executors.limited(framework_id, task_id, reason, message)
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
            return self._executors.started(framework_id, task_id, pid, container)
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
            task = _new_task(checkpoint.framework, checkpoint.task,
                             holds_resources=checkpoint.holds_resources and not ended)
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
                self._use(task.info.resources)
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
        found += self._executors.recovering()
        return sorted(found)

    # -------------------------------------------------------- stopping
    def kill_all(self, why: str) -> list[Command]:
        """Kill every task on purpose (the agent stops with its tasks, or
        drains): each ends TASK_KILLED."""
        out: list[Command] = []
        for task in list(self._tasks.values()):
            if task.alive and not task.orphaned:
                out.extend(self._request_kill(task, why))
        for executor in list(self._executors.records.values()):
            out.extend(self._executors.shut_down(executor))
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
                                                accepts_batches=True, incarnation=self.incarnation))
        # the tasks it runs, and those that ended but whose terminal update is
        # not acknowledged yet (docs/wire.rst): a master must not think those
        # lost; their pending updates go out once it answers
        still_running = [(key, task) for key, task in sorted(self._tasks.items()) if not task.orphaned]
        running = [m.RunningTask(key[0], task.info, task.state, task.healthy, self._update_state(key))
                   for key, task in still_running]
        executors = [m.RunningExecutor(key[0], e.info) for key, e in sorted(self._executors.records.items())
                     if not e.orphaned]
        # each framework as the master last described it, with its principal and the master's receipt for
        # it (checkpointed with its tasks): whose it is, told to a master without a registry too
        frameworks: dict[str, FrameworkInfo] = {}
        for framework in [task.framework for _, task in still_running] + \
                [e.framework for e in self._executors.records.values() if not e.orphaned]:
            if framework.principal_receipt or framework.id not in frameworks:
                frameworks[framework.id] = framework
        log.info("re-registering as %s with %d tasks", self._agent_id, len(running))
        report = m.ReregisterAgent(self.info, running, list(frameworks.values()), version=self.version,
                                   http_address=self.http_address, accepts_batches=True, executors=executors,
                                   receipt=self._receipt, incarnation=self.incarnation,
                                   sequence=self._report_sequence)
        if report != self._last_report:   # a new report (not a retry of the last one): the next number
            self._report_sequence += 1
            report = self._last_report = msgspec.structs.replace(report, sequence=self._report_sequence)
        return SendToMaster(report)

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
        self._standby_refusals = 0
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
        """Another master leads now (detected through ZooKeeper), or the
        first one became known: register with it at once instead of waiting
        for the old one's silence or for the back-off of an attempt made
        while no master was known."""
        if self._drain_deadline is None and (self._registered or self._registering or self._agent_id):
            log.info("the leading master changed: %s", "re-registering" if self._agent_id else "registering")
            self._lose_master(self.clock.now())
            if not self._agent_id:   # an attempt made before any master was known is not one it left unanswered
                self._registering = False
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
        out.extend(self._executors.orphan_all())
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
        return self._launch(msg.framework, msg.task)

    def _launch(self, framework: FrameworkInfo, task: TaskInfo) -> list[Command]:
        """RUN_TASK of ``task`` (a RUN_TASKS batch's items come here without a RunTask each)."""
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
            record = _new_task(framework, task, holds_resources=False)
            self._tasks[key] = record
            return self._update(record, TaskState.DROPPED, "the agent is draining", reason=REASON_AGENT_DRAINING)
        if task.executor is not None:
            return self._run_executor_task(framework, task)
        problem, reason = self._launch_problem(task), REASON_TASK_INVALID
        if not problem and framework.principal:   # (_user_problem's first test, without its call a launch)
            problem, reason = self._user_problem(framework, task.user), REASON_TASK_UNAUTHORIZED
        if problem:
            log.warning("RUN_TASK %s/%s refused: %s", framework.id, task.task_id, problem)
            record = _new_task(framework, task, holds_resources=False)
            self._tasks[key] = record
            return self._update(record, TaskState.ERROR, problem, reason=reason)
        # the launch carries the secrets' values; the record keeps none (what it reports, checkpoints, shows):
        # without_secret_values, not called for a task with no secrets and no container (most: it is the task)
        record = _Task(framework, task if not task.environment_secrets and task.container is None
                       else without_secret_values(task), _Phase.LAUNCHING, True, key)
        self._tasks[key] = record
        self._hold_user(framework.principal, task.user, 1)
        self._use(task.resources)
        if log.isEnabledFor(logging.INFO):   # (what log.info asks first, without its call: two a task)
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
        if not self._fits(task.resources if executor is EMPTY else task.resources + executor):   # (no __add__ call)
            needs = f"{task.resources} (and {executor} for its executor)" if executor else str(task.resources)
            return f"task needs {needs} but only {self.free} is free on this agent"
        return ""

    def _user_problem(self, framework: FrameworkInfo, user: str) -> str:
        """Why a task of ``framework`` that asks for ``user`` may not run
        here ("" if it may): the unix user it would run as runs tasks or
        executors of another principal (docs/security.rst, "One unix user,
        one principal"), and the operator did not let principals share it.
        O(principals running as that user); nothing in an anonymous cluster."""
        if not framework.principal:   # (first: nothing to look up in an anonymous cluster)
            return ""
        unix_user = self.task_users.unix_user(user)
        if self.task_users.may_share(unix_user):
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
        holders = self._user_holders.get(unix_user)
        if holders is None:   # (not setdefault: its new dict made on every call, two a task)
            holders = self._user_holders[unix_user] = {}
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
            record = _new_task(FrameworkInfo(name="", id=msg.framework_id),
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
        for key, executor in list(self._executors.records.items()):
            if key[0] == msg.framework_id:
                self._release(executor)
                out.extend(self._executors.shut_down(executor))
        return out

    def _release(self, holder: _Task | ExecutorRecord) -> None:
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
            if holder.ended:
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
                and self._executors.get(msg.framework_id, msg.executor_id) is None:
            msg = msgspec.structs.replace(msg, executor_id="")   # a v1 MESSAGE to a command task's executor: its task's id
        if msg.executor_id or (task is not None and task.info.executor is not None):
            executor_id = msg.executor_id or (task.info.executor.executor_id  # type: ignore[union-attr]
                                              if task is not None else "")
            return self._executors.message_to(msg.framework_id, executor_id, msg.data)
        if task is None or task.phase != _Phase.RUNNING or task.orphaned:
            log.warning("framework message for %s/%r dropped: no such running task", msg.framework_id, msg.task_id)
            return []
        return [DeliverMessage(msg.framework_id, msg.task_id, msg.data)]

    def _terminate(self, task: _Task, state: str, message: str, reason: str = "",
                   exit_code: int | None = None, source: str = SOURCE_AGENT, data: bytes = b"") -> list[Command]:
        if task.phase != _Phase.TERMINATED:   # (alive)
            self._hold_user(task.framework.principal, task.info.user, -1)
        task.phase = _Phase.TERMINATED
        if task.holds_resources:
            task.holds_resources = False
            self._unuse(task.info.resources)
        if task.released:
            task.released = False
            self._released = self._released.subtract_clamped(task.info.resources)
        key = task.key
        if log.isEnabledFor(logging.INFO):
            log.info("task %s/%s: %s (%s)", key[0], key[1], state, message)
        if task.orphaned:
            del self._tasks[key]
            return self._forget(key)
        return self._update(task, state, message, reason=reason, exit_code=exit_code, source=source, data=data)

    def _live_tasks(self) -> list[_Task]:
        return [task for task in self._tasks.values() if task.alive]

    # ---------------------------------------------------- custom executors
    # (the executors' own records, identity and timers are the executor book's, mesoslike.agent.executors;
    # here: what ties them to the tasks they run)
    def executors(self) -> list[AgentExecutor]:
        """The custom executors whose processes run (or start)."""
        return self._executors.views()

    def on_executor_frame(self, peer: bytes, message: object) -> list[Command]:
        """A message from the executor channel, on connection ``peer``. Which
        executor sent it is known from its secret alone; a frame without a
        known secret is refused (an EXECUTOR_ERROR to ``peer``)."""
        executor, refusal = self._executors.admit(peer, message)
        if executor is None:
            return refusal
        if isinstance(message, x.RegisterExecutor):
            return self._executor_registered(executor, peer, message)
        if isinstance(message, x.ExecutorStatus):
            return self._executor_status(executor, peer, message.status)
        assert isinstance(message, x.ExecutorMessage)
        return self._message_to_framework(executor, message.data)

    def executor_secret(self, framework_id: str, executor_id: str) -> str | None:
        """The secret of the framework's executor ``executor_id`` while its
        process runs or starts (the v1 executor API builds the channel's
        frames with it): "" while it is not known — a recovered executor's,
        until :meth:`restore_executor_secret` — and None for no such executor."""
        return self._executors.secret(framework_id, executor_id)

    def restore_executor_secret(self, framework_id: str, executor_id: str, secret: str) -> bool:
        """Give a recovered executor back its secret (read from its sandbox's
        secret file by the runtime: this agent process never had it) — only
        if its digest is the checkpointed one. True if it was."""
        return self._executors.restore_secret(framework_id, executor_id, secret)

    def _holds(self, executor: ExecutorRecord) -> ExecutorRecord:
        """A new executor in the book holds its resources and its unix user here."""
        self._hold_user(executor.framework.principal, executor.run.user, 1)
        self._use(executor.info.resources)
        return executor

    def _run_executor_task(self, framework: FrameworkInfo, task: TaskInfo) -> list[Command]:
        """RUN_TASK of a task a custom executor runs: the executor is started
        the first time (its resources taken besides the task's), and the
        task handed to it once it has registered."""
        assert task.executor is not None
        key = (framework.id, task.task_id)
        executor = self._executors.get(framework.id, task.executor.executor_id)
        problem = self._launch_problem(task, task.executor.resources if executor is None else EMPTY)
        if not problem and executor is None and self._executors.count(framework.id) >= MAX_EXECUTORS_PER_FRAMEWORK:
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
            record = _new_task(framework, task, holds_resources=False)
            self._tasks[key] = record
            out = self._update(record, TaskState.ERROR, problem, reason=reason)
            if executor is None and self._registered:   # the master counted the executor as started: it is not
                out.append(SendToMaster(m.ExecutorExited(self._agent_id, framework.id, task.executor.executor_id,
                                                         "never started: its first task was refused")))
            return out
        record = _new_task(framework, task, holds_resources=True)
        self._tasks[key] = record
        self._hold_user(framework.principal, task.user, 1)
        self._use(task.resources)
        out = []
        if executor is None:
            # its container starts with room for its first task too (Mesos's launch, then update)
            executor, secret = self._executors.start(framework, task.executor, task.user, self._agent_id,
                                                     self.http_address, task.resources)
            self._holds(executor)
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

    def _resize(self, executor: ExecutorRecord) -> list[Command]:
        """Its container's limits to its own resources and its live tasks'
        (when they changed)."""
        limits = executor.info.resources
        for task_id in executor.tasks:
            task = self._tasks.get((executor.framework.id, task_id))
            if task is not None and task.alive:
                limits = limits + task.info.resources
        if limits == executor.limits or executor.killing or executor.ended:
            return []
        executor.limits = limits
        return [UpdateContainer(executor.framework.id, executor.info.run_id(), limits)]

    def _hand_over(self, executor: ExecutorRecord, task: _Task) -> list[Command]:
        assert executor.peer is not None
        task.phase = _Phase.RUNNING
        task.pid = executor.pid
        return [SendToExecutor(executor.peer, x.LaunchExecutorTask(task.info))]

    def _executor_registered(self, executor: ExecutorRecord, peer: bytes, msg: x.RegisterExecutor) -> list[Command]:
        again = self._executors.registered(executor, peer)
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

    def _executor_status(self, executor: ExecutorRecord, peer: bytes, status: TaskStatus) -> list[Command]:
        """A task's update from its executor: into the task's reliable stream
        (checkpointed, retried to the master, acknowledged by it), then
        acknowledged to the executor."""
        task_id = status.task_id
        task = self._tasks.get((executor.framework.id, task_id))
        if task is None or task.info.executor is None or task.info.executor.executor_id != executor.info.executor_id:
            return [SendToExecutor(peer, x.ExecutorError(f"an update of task {task_id[:200]!r}, which is not this "
                                                         "executor's: refused", uuid=status.uuid))]
        if status.state not in EXECUTOR_STATES:
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
        message, reason = status.message[:MAX_EXECUTOR_TEXT], status.reason[:200]
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

    def _message_to_framework(self, executor: ExecutorRecord, data: bytes) -> list[Command]:
        if not self._registered:
            log.warning("a framework message of executor %s/%s dropped: no master now", *executor.key)
            return []
        return [SendToMaster(m.FrameworkMessage(executor.framework.id, self._agent_id, data,
                                                executor_id=executor.info.executor_id))]

    def _kill_executor_task(self, task: _Task, why: str) -> list[Command]:
        """Kill a task of a custom executor: the executor's ``kill_task``; one
        it has not been handed yet ends TASK_KILLED here."""
        assert task.info.executor is not None
        task.kill_why = why
        executor = self._executors.get(task.framework.id, task.info.executor.executor_id)
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

    def _executor_ended(self, framework_id: str, run_id: str, how: str, status: int | None = None) -> list[Command]:
        """The executor's process ended: what it held is free, its tasks that
        had not ended are TASK_FAILED (REASON_EXECUTOR_TERMINATED; KILLED if
        they were being killed), the master is told (EXECUTOR_EXITED)."""
        executor = self._executors.of_run(framework_id, run_id)
        if executor is None or executor.ended:
            return []
        self._executors.remove(executor)
        self._hold_user(executor.framework.principal, executor.run.user, -1)
        self._unuse(executor.info.resources)
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
                                                     why[:MAX_EXECUTOR_TEXT], status)))
        out.extend(self._executors.forget(executor))
        return out

    def _recover_executor(self, checkpoint: TaskCheckpoint) -> list[Command]:
        executor, out = self._executors.recover(checkpoint)
        if executor is not None:
            self._holds(executor)
        return out

    def _recover_executor_task(self, task: _Task) -> list[Command]:
        """A recovered task of a custom executor: its executor's fate is its fate."""
        assert task.info.executor is not None
        executor = self._executors.get(task.framework.id, task.info.executor.executor_id)
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
                container: ContainerStatus | None = None, addressed: bool = False) -> TaskStatus:
        """A new status (``addressed``: ``container`` has the address already, :meth:`_addressed_container`)."""
        if not addressed:
            container = self._with_address(container)
        return TaskStatus(
            task_id=task_id, state=state, agent_id=self._agent_id, message=message, source=source,
            reason=reason, uuid=self._new_uuid() if uuid_ is None else uuid_, timestamp=self._wall_clock(),
            exit_code=exit_code, framework_id=framework_id, healthy=healthy, labels=labels or [], data=data,
            container_status=container)

    def _update(self, task: _Task, state: str, message: str, reason: str = "",
                exit_code: int | None = None, source: str = SOURCE_AGENT, data: bytes = b"") -> list[Command]:
        """Queue a reliable update; send it now if it is the head."""
        key = task.key   # (made once a task: each update's stream entry holds it until acknowledged)
        framework_id, task_id = key
        task.state = state
        # (what _status makes, without its call: three a task) the task's labels ride on each of its updates
        # (issue 18 §5b): the task's own list, not a new empty one an update (a frozen status never changes it)
        status = TaskStatus(
            task_id=task_id, state=state, agent_id=self._agent_id, message=message, source=source,
            reason=reason, uuid=self._new_uuid(), timestamp=self._wall_clock(),
            exit_code=exit_code, framework_id=framework_id, healthy=task.healthy, labels=task.info.labels,
            data=data, container_status=None if task.container_status is None and task.info.executor is None
            and not self.ip_address else self._addressed_container(task))   # (no container, no address: none)
        # sent now if it is the head and the master listens (else behind an unacknowledged one, or out on
        # registration); written before it is sent, below: a sent update is never lost
        registered = self._registered
        head = self._streams.add_and_send(key, status, self.clock if registered else None)
        out: list[Command] = [CheckpointTask(framework_id, task_id)] if self.checkpoint and not task.orphaned else []
        if head is not None and registered:
            out.append(SendToMaster(m.StatusUpdate(framework_id, head)))
        return out

    def _container_of(self, task: _Task) -> ContainerStatus | None:
        """The container a task's updates tell of: its own, or, for a custom
        executor's task, its executor's."""
        if task.info.executor is not None:
            executor = self._executors.get(task.framework.id, task.info.executor.executor_id)
            return executor.container_status if executor is not None else None
        return task.container_status

    def _send_head(self, key: TaskKey, now: float | None = None) -> list[Command]:
        """Send the task's update in flight (if it has one) now (``now``: the clock's, if read already)."""
        update = self._streams.send_head(key, self.clock.now() if now is None else now)
        return [SendToMaster(m.StatusUpdate(key[0], update))] if update is not None else []

    def _status_update_ack(self, msg: m.StatusUpdateAck, now: float | None = None) -> list[Command]:
        """The master's acknowledgement of an update (``now``: when it came, if the clock was read already)."""
        key = (msg.framework_id, msg.task_id)
        if now is None:
            now = self.clock.now()
        # the next update sent at once if the master listens (one lookup of the stream); a terminal one's
        # acknowledgement ends the stream
        answer = self._streams.acknowledge_and_send(key, msg.uuid, now, self._registered, TERMINAL_STATES)
        if answer is None:
            log.debug("ignoring acknowledgement %s of %s/%s: not the update in flight", msg.uuid, *key)
            return []
        acked, update = answer
        if acked.state in TERMINAL_STATES:
            task = self._tasks.get(key)
            if task is not None and task.phase == _Phase.TERMINATED:   # (not alive)
                del self._tasks[key]  # the task's story is told: forget it
                return [ForgetTask(*key)] if self.checkpoint else []
            return []
        out: list[Command] = []
        if self.checkpoint:   # (the task looked up only then: two acknowledgements of a task's three need it not)
            task = self._tasks.get(key)
            if task is not None and not task.orphaned:
                out.append(CheckpointTask(key[0], key[1]))
        if update is not None:
            out.append(SendToMaster(m.StatusUpdate(key[0], update)))
        return out

    def _shutdown_executor(self, msg: m.ShutdownExecutor) -> list[Command]:
        """The framework asks its executor to end (Mesos's SHUTDOWN call)."""
        executor = self._executors.get(msg.framework_id, msg.executor_id)
        if executor is None or executor.orphaned:
            return []
        return self._executors.shut_down(executor)

    def _error(self, msg: m.Error) -> list[Command]:
        if msg.standby and self._registering and self._next_registration is not None:
            # asked a master that does not lead yet: ZooKeeper names the new leader to agents before
            # that master's own election reaches its loop. Ask again soon (jittered, doubling while it
            # keeps refusing), not after the whole back-off (5-10 s by default)
            delay = min(STANDBY_RETRY * 2 ** min(self._standby_refusals, 8), self._register_backoff.maximum)
            self._standby_refusals += 1
            soon = self.clock.now() + delay * self._rng.uniform(0.5, 1.0)
            if soon < self._next_registration:
                self._next_registration = soon
            log.info("the master says: %s; registering again in %.2f s", msg.message, soon - self.clock.now())
            return []
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


#: ``_describe_exit(0, None)``, made once (every task of the control round ends so)
_EXITED_0 = _describe_exit(0, None)

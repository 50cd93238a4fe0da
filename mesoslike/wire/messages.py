"""Messages of the wire protocol, version :data:`PROTOCOL_VERSION`.

Three conversations share one schema:

- scheduler -> master *calls* (SUBSCRIBE, TEARDOWN, ACCEPT, DECLINE, REVIVE,
  SUPPRESS, KILL, ACKNOWLEDGE, RECONCILE, MESSAGE, SHUTDOWN_EXECUTOR,
  UPDATE_FRAMEWORK) and master -> scheduler
  *events* (SUBSCRIBED, OFFERS, RESCIND, UPDATE, MESSAGE, FAILURE, ERROR,
  HEARTBEAT);
- agent <-> master: REGISTER_AGENT / REREGISTER_AGENT, AGENT_REGISTERED,
  PING / PONG (with the tasks' usage), RUN_TASK, KILL_TASK, STATUS_UPDATE,
  STATUS_UPDATE_ACK, FRAMEWORK_TO_AGENT, SHUTDOWN_AGENT, UNREGISTER_AGENT,
  EXECUTOR_EXITED (a custom executor's process ended; the executor channel
  itself is :mod:`mesoslike.wire.executor_messages`);
- any peer: ERROR, HEARTBEAT;
- batches (``docs/wire.rst``, "Batching"): STATUS_UPDATES, UPDATES,
  ACKNOWLEDGEMENTS, STATUS_UPDATE_ACKS and RUN_TASKS carry several of the
  messages above in one frame, each checked as if it came alone; a peer sends
  them only to a peer that said it accepts them (``accepts_batches``).

Each message is a frozen ``msgspec.Struct`` (built, encoded and decoded in
C) with a unique ``TYPE``, registered in :data:`SCHEMA` — those every task
sends several of (``_Hot``), REREGISTER_AGENT and its entries (a new leader
decodes one from every agent) kept out of the collector's passes too; the codec (:mod:`mesoslike.wire.codec`) turns it into
``{"v": 1, "type": TYPE, ...fields}`` and back, checking every field's type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from mesoslike.wire import master_schema
from mesoslike.wire.schema import check_length
from mesoslike.wire.types import (MAX_OPERATIONS, AgentInfo, ExecutorInfo, Filters, FrameworkInfo, MasterInfo, Offer,
                                  Operation, TaskInfo, TaskStatus)

PROTOCOL_VERSION = master_schema.PROTOCOL_VERSION

#: the master protocol (:mod:`mesoslike.wire.master_schema`); its codec is :data:`mesoslike.wire.codec.CODEC`
SCHEMA = master_schema.SCHEMA
#: TYPE -> message class
MESSAGE_TYPES: dict[str, type] = SCHEMA.types
#: class decorator: register a message class under its ``TYPE``
message = SCHEMA.message

#: the most messages one batch frame carries (a batch of more is refused by
#: the codec, naming the field; senders split longer runs)
MAX_BATCH = 1000

#: the most roles one SUBSCRIBE may name as suppressed (a framework has one role)
MAX_SUPPRESSED_ROLES = 16


def _check_batch(items: list[Any], name: str) -> None:
    """A batch's items: 1 to MAX_BATCH (checked when a batch is built, so when
    one is decoded: the codec names the field of an empty or longer one)."""
    if not 1 <= len(items) <= MAX_BATCH:
        bound = "must be >= 1" if len(items) < 1 else f"must be <= {MAX_BATCH}"
        raise ValueError(f"Length of {name!r} {bound}: {len(items)}")


class _Hot(msgspec.Struct, frozen=True, gc=False):
    """The base of the messages every task sends several of (RUN_TASK,
    STATUS_UPDATE and its acknowledgements, UPDATE, their batches): out of
    the collector's passes (``gc=False``: they hold no cycles). The rest
    are tracked as any object is, as the attrs classes they were: an object
    out of the collector's passes does not count towards its next
    collection, which changes when other garbage goes — kept to where it
    was measured."""


# ------------------------------------------------------- scheduler -> master
@message
class Subscribe(msgspec.Struct, frozen=True):
    """First message of a framework, and its re-subscription (with its id).
    ``accepts_batches``: the driver takes UPDATES (several updates a frame).
    ``suppressed_roles``: the framework's roles it wants no offers for, as
    Mesos's ``Call.Subscribe.suppressed_roles``: the master sets the
    framework's suppression to exactly this list at every subscription (a
    role left out is revived), so a scheduler that restarts or fails over
    and the master agree on it. At most ``MAX_SUPPRESSED_ROLES``."""

    TYPE: ClassVar[str] = "SUBSCRIBE"
    framework: FrameworkInfo
    force: bool = False
    accepts_batches: bool = False
    suppressed_roles: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        check_length(self.suppressed_roles, "suppressed_roles", MAX_SUPPRESSED_ROLES)


@message
class Teardown(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "TEARDOWN"
    framework_id: str


@message
class Accept(msgspec.Struct, frozen=True):
    """Apply ``operations`` in order to the offers (all on one agent), then
    launch ``tasks`` (a last LAUNCH); the unused rest is declined with
    ``filters``. An invalid RESERVE or UNRESERVE refuses the whole accept
    (an ERROR; nothing is applied, the offers go back unfiltered)."""

    TYPE: ClassVar[str] = "ACCEPT"
    framework_id: str
    offer_ids: list[str]
    tasks: list[TaskInfo]
    filters: Filters = Filters()
    operations: list[Operation] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        check_length(self.operations, "operations", MAX_OPERATIONS)


@message
class Decline(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "DECLINE"
    framework_id: str
    offer_ids: list[str]
    filters: Filters = Filters()


@message
class Revive(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "REVIVE"
    framework_id: str


@message
class Suppress(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "SUPPRESS"
    framework_id: str


@message
class Kill(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "KILL"
    framework_id: str
    task_id: str
    agent_id: str = ""


@message
class Acknowledge(_Hot, frozen=True, gc=False):
    TYPE: ClassVar[str] = "ACKNOWLEDGE"
    framework_id: str
    agent_id: str
    task_id: str
    uuid: str


class ReconcileTask(msgspec.Struct, frozen=True):
    """One task to reconcile (a part of RECONCILE, not a message of its own)."""

    task_id: str
    agent_id: str = ""


@message
class Reconcile(msgspec.Struct, frozen=True):
    """Ask for the latest state of ``tasks``; empty = every non-terminal task
    of the framework (implicit reconciliation)."""

    TYPE: ClassVar[str] = "RECONCILE"
    framework_id: str
    tasks: list[ReconcileTask] = msgspec.field(default_factory=list)


@message
class FrameworkMessage(msgspec.Struct, frozen=True):
    """Opaque data between a framework and an agent (both directions).
    Scheduler -> agent: for the custom executor ``executor_id`` (its
    ``framework_message`` callback), else for the running task ``task_id``
    (appended to its sandbox's ``messages`` file, or handed to its custom
    executor). Agent -> scheduler: from the executor ``executor_id``.
    ``data``: at most :data:`~mesoslike.wire.types.MAX_FRAMEWORK_MESSAGE` bytes
    on the executor's side."""

    TYPE: ClassVar[str] = "MESSAGE"
    framework_id: str
    agent_id: str
    data: bytes
    task_id: str = ""
    executor_id: str = ""


@message
class ShutdownExecutor(msgspec.Struct, frozen=True):
    """Scheduler -> master -> agent: end the custom executor ``executor_id``
    of the framework on ``agent_id`` (Mesos's SHUTDOWN call): it is asked to
    shut down and killed after its grace period; its tasks end with it."""

    TYPE: ClassVar[str] = "SHUTDOWN_EXECUTOR"
    framework_id: str
    executor_id: str
    agent_id: str


@message
class UpdateFramework(msgspec.Struct, frozen=True):
    """A subscribed framework changes its ``FrameworkInfo`` (Mesos's
    UPDATE_FRAMEWORK): its name, failover timeout, labels, web UI, host
    name and partition awareness; not its id, role, user or principal."""

    TYPE: ClassVar[str] = "UPDATE_FRAMEWORK"
    framework: FrameworkInfo


# ------------------------------------------------------- master -> scheduler
@message
class Subscribed(msgspec.Struct, frozen=True):
    """``accepts_batches``: the master takes ACKNOWLEDGEMENTS."""

    TYPE: ClassVar[str] = "SUBSCRIBED"
    framework_id: str
    heartbeat_interval: float
    master: MasterInfo
    resubscribed: bool = False
    accepts_batches: bool = False


@message
class Offers(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "OFFERS"
    offers: list[Offer]


@message
class RescindOffer(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "RESCIND"
    offer_id: str
    reason: str = ""


@message
class Update(_Hot, frozen=True, gc=False):
    TYPE: ClassVar[str] = "UPDATE"
    status: TaskStatus


@message
class Failure(msgspec.Struct, frozen=True):
    """An agent was lost (``agent_id``), or — with ``executor_id`` — a
    custom executor of the framework on it ended (Mesos's FAILURE event;
    ``status``: its process's exit code, or minus the signal that ended it,
    None if not known)."""

    TYPE: ClassVar[str] = "FAILURE"
    agent_id: str
    reason: str = ""
    executor_id: str = ""
    status: int | None = None


@message
class Error(msgspec.Struct, frozen=True):
    """A request was refused, or the peer is in a state it cannot leave (for
    a framework: torn down). ``fatal`` errors end the conversation."""

    TYPE: ClassVar[str] = "ERROR"
    message: str
    fatal: bool = False
    #: the master answering does not lead (a standby, or one whose election has not reached its loop
    #: yet): a request is to be sent again, to the leader, soon — not after a whole back-off
    standby: bool = False


@message
class Heartbeat(msgspec.Struct, frozen=True):
    TYPE: ClassVar[str] = "HEARTBEAT"


# ---------------------------------------------------------- agent <-> master
class RunningTask(msgspec.Struct, frozen=True, gc=False):
    """A task an agent still runs, reported when it re-registers (a part of
    REREGISTER_AGENT). A frozen ``msgspec.Struct``, as the message that
    carries it: a new leader decodes a million of them after a failover
    (built in C; ``msgspec.structs.replace`` is ``attrs.evolve``'s
    counterpart)."""

    framework_id: str
    task: TaskInfo
    state: str
    #: its health check's latest verdict (None: no check, or none ended): a
    #: new leader shows it in /state before the next change of verdict
    healthy: bool | None = None
    #: the state of its oldest update not acknowledged yet — what its
    #: framework hears next (Mesos's status_update_state); "" when every
    #: update was acknowledged. ``state`` may be ahead of it: a master answers
    #: reconciliation from this, so that an answer never overtakes the
    #: updates still on their way (docs/reliability.rst)
    update_state: str = ""


class RunningExecutor(msgspec.Struct, frozen=True, gc=False):
    """A custom executor whose process an agent still runs, reported when it
    re-registers (a part of REREGISTER_AGENT): its resources stay used. A
    frozen ``msgspec.Struct``, as the message that carries it."""

    framework_id: str
    executor: ExecutorInfo


@message
class ReregisterAgent(msgspec.Struct, frozen=True, gc=False):
    """An agent that has an id registers again (a new master, a restarted
    agent): with the tasks it runs and those whose terminal update is
    unacknowledged. A frozen ``msgspec.Struct`` (as the ``_Hot`` messages):
    after a failover the new leader decodes one from every agent, with its
    tasks (``msgspec.structs.replace`` is ``attrs.evolve``'s counterpart)."""

    TYPE: ClassVar[str] = "REREGISTER_AGENT"
    agent: AgentInfo
    tasks: list[RunningTask] = []
    frameworks: list[FrameworkInfo] = []
    version: str = ""
    http_address: str = ""
    accepts_batches: bool = False
    #: its custom executors' processes still running (their resources are used)
    executors: list[RunningExecutor] = []
    #: the master's receipt for ``agent.id`` (AGENT_REGISTERED's): proves the id is this agent's
    #: principal's to a master without a registry (mesoslike.master.receipts)
    receipt: str = ""
    #: the agent process's incarnation: a random id its agent core made when it started ("": unknown,
    #: as from an older agent or bench/'s simulated ones — then no report is taken for stale)
    incarnation: str = ""
    #: the number of this report within the incarnation: it rises whenever the agent sends a report
    #: that differs from its previous one, and a retry of the same report repeats it (the master
    #: recognises such retries byte for byte). A master that admitted report N of an incarnation
    #: takes a lower one for stale: sent before N, delayed in the network (docs/reliability.rst,
    #: "Stale re-registrations")
    sequence: int = 0


@message
class RunTask(_Hot, frozen=True, gc=False):
    TYPE: ClassVar[str] = "RUN_TASK"
    framework: FrameworkInfo
    task: TaskInfo


@message
class KillTask(_Hot, frozen=True, gc=False):
    TYPE: ClassVar[str] = "KILL_TASK"
    framework_id: str
    task_id: str


@message
class StatusUpdate(_Hot, frozen=True, gc=False):
    """A task's reliable status update, from an agent (or the master)."""

    TYPE: ClassVar[str] = "STATUS_UPDATE"
    framework_id: str
    status: TaskStatus


@message
class StatusUpdateAck(_Hot, frozen=True, gc=False):
    TYPE: ClassVar[str] = "STATUS_UPDATE_ACK"
    agent_id: str
    framework_id: str
    task_id: str
    uuid: str


@message
class PreemptionWarning(msgspec.Struct, frozen=True):
    """Master -> framework: these tasks will be killed in ``seconds`` to give
    their resources to ``role``, which is starved (fair-share preemption,
    docs/preemption.rst). Killing or finishing them sooner releases the
    resources at once; nothing needs to be answered."""

    TYPE: ClassVar[str] = "PREEMPTION_WARNING"
    task_ids: list[str]
    seconds: float
    role: str = ""


# ------------------------------------------------------------------ batches
# Several messages of a loop turn in one frame (issue 14: a task crossed the
# master in 13 frames). The receiver handles each item exactly as the message
# it stands for, in order, with every check; see mesoslike.wire.batching.
@message
class StatusUpdates(_Hot, frozen=True, gc=False):
    """Agent -> master: STATUS_UPDATEs (the heads of several tasks' streams)."""

    TYPE: ClassVar[str] = "STATUS_UPDATES"
    updates: list[StatusUpdate]

    def __post_init__(self) -> None:
        _check_batch(self.updates, 'updates')


@message
class Updates(_Hot, frozen=True, gc=False):
    """Master -> scheduler: UPDATEs, one status each."""

    TYPE: ClassVar[str] = "UPDATES"
    statuses: list[TaskStatus]

    def __post_init__(self) -> None:
        _check_batch(self.statuses, 'statuses')


@message
class Acknowledgements(_Hot, frozen=True, gc=False):
    """Scheduler -> master: ACKNOWLEDGEs."""

    TYPE: ClassVar[str] = "ACKNOWLEDGEMENTS"
    acknowledgements: list[Acknowledge]

    def __post_init__(self) -> None:
        _check_batch(self.acknowledgements, 'acknowledgements')


@message
class StatusUpdateAcks(_Hot, frozen=True, gc=False):
    """Master -> agent: STATUS_UPDATE_ACKs."""

    TYPE: ClassVar[str] = "STATUS_UPDATE_ACKS"
    acks: list[StatusUpdateAck]

    def __post_init__(self) -> None:
        _check_batch(self.acks, 'acks')


@message
class RunTasks(_Hot, frozen=True, gc=False):
    """Master -> agent: RUN_TASKs of one framework."""

    TYPE: ClassVar[str] = "RUN_TASKS"
    framework: FrameworkInfo
    tasks: list[TaskInfo]

    def __post_init__(self) -> None:
        _check_batch(self.tasks, 'tasks')


# ------------------------------------------------- agent <-> master, operator tools
#: the agent's and the operator's messages, which no scheduler uses: made when first needed
#: (mesoslike.wire.cluster_messages)
_CLUSTER_MESSAGES = ("RegisterAgent", "AgentRegistered", "Ping", "TaskUsage", "Pong", "CheckpointResources",
                     "ShutdownAgent", "UnregisterAgent", "ExecutorExited", "ShutdownFramework", "GetState",
                     "StateReply")
SCHEMA.lazy("mesoslike.wire.cluster_messages")

if TYPE_CHECKING:   # the names __getattr__ below makes on first use, for type checkers
    from mesoslike.wire.cluster_messages import (AgentRegistered, CheckpointResources, ExecutorExited, GetState, Ping,
                                                 Pong, RegisterAgent, ShutdownAgent, ShutdownFramework, StateReply,
                                                 TaskUsage, UnregisterAgent)

    _TYPED = (AgentRegistered, CheckpointResources, ExecutorExited, GetState, Ping, Pong, RegisterAgent,   # (used)
              ShutdownAgent, ShutdownFramework, StateReply, TaskUsage, UnregisterAgent)


def __getattr__(name: str) -> object:
    if name in _CLUSTER_MESSAGES:
        from mesoslike.wire import cluster_messages

        value = getattr(cluster_messages, name)
        globals()[name] = value   # once: the next lookup is an ordinary attribute
        return value
    raise AttributeError(f"module 'mesoslike.wire.messages' has no attribute {name!r}")

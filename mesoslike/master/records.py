"""What the master remembers about frameworks, agents and tasks (soft state),
who holds them, and the master's settings and bounds."""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Iterator, KeysView

import attrs

from mesoslike.master.task_lifecycle import CONFIRMED, HOLDING, Phase
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, Label, TaskInfo, TaskState, TaskStatus
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE, TERMINAL_STATES, ExecutorInfo, check_message_size
from mesoslike.wire.messages import TaskUsage

__all__ = ["FrameworkRecord", "AgentRecord", "TaskRecord", "ReportedStatus", "built_status", "CompletedTasks",
           "MasterConfig", "Holdings", "clip",
           "MAX_FAILOVER_TIMEOUT", "MAX_NAME_LENGTH", "MAX_ATTRIBUTES", "LOGGED_INPUT_LIMIT"]


#: a week: how long at most a framework's tasks outlive its disconnection
#: (larger ``failover_timeout`` values are lowered to it)
MAX_FAILOVER_TIMEOUT = 7 * 24 * 3600.0
#: the longest name, role, user or hostname a framework or agent may register
#: with, and the most attributes an agent may carry: the registry keeps them
MAX_NAME_LENGTH = 1024
MAX_ATTRIBUTES = 128
#: what a log line shows at most of one field a peer sent (docs/reliability.rst)
LOGGED_INPUT_LIMIT = 200


@attrs.define
class MasterConfig:
    """Timing, policy and bounds of the master (times in seconds).

    The bounds (docs/reliability.rst, *Bounds*) keep what one peer can make
    the master hold, send and log proportionate: registrations per
    connection, how long a framework's tasks wait for it, the size of a
    reconciliation and how fast it is answered, how long an offer may stay
    unanswered, and the HTTP server's threads and patience."""

    heartbeat_interval: float = 15.0           # master -> framework heartbeats
    framework_timeout_heartbeats: int = 5       # silence (in heartbeats) before a framework is disconnected
    ping_interval: float = 15.0                 # master -> agent pings
    max_agent_ping_timeouts: int = 5            # unanswered pings before an agent is removed
    allocation_interval: float = 1.0
    #: an offer unanswered this long is taken back and counts as declined for
    #: as long again (None: offers never expire, Mesos's default)
    offer_timeout: float | None = 60.0
    min_allocatable: str = "cpus:0.01|mem:32"
    sorter: str = "drf"
    #: the history (docs/operations.rst): ended tasks kept per framework, removed frameworks kept
    #: (Mesos's --max_completed_tasks_per_framework and --max_completed_frameworks, same defaults)
    completed_tasks_per_framework: int = 1000
    max_completed_frameworks: int = 50
    agent_reregister_timeout: float = 600.0     # after a failover: time for known agents to come back
    #: frameworks / agents one connection may hold (a principal, once peers
    #: authenticate: issue 13); a framework or agent belongs to the connection
    #: that last subscribed or registered it until it is removed
    max_frameworks_per_connection: int = 1
    max_agents_per_connection: int = 1
    #: frameworks / agents one principal may hold over all its connections
    #: (secured clusters, docs/security.rst; anonymous peers have none)
    max_frameworks_per_principal: int = 1000
    max_agents_per_principal: int = 100_000
    #: a framework's failover_timeout is lowered to this
    max_failover_timeout: float = MAX_FAILOVER_TIMEOUT
    #: task ids one RECONCILE may name (and a framework may have waiting for an answer)
    max_reconcile_tasks: int = 50_000
    #: reconciliation answers sent per loop turn, over all frameworks; the rest wait for the next turns
    reconcile_answers_per_turn: int = 1000
    #: HTTP (mesoslike.http_server): worker threads, the seconds a connection may take to send its
    #: request head, its body, and each piece of the answer, and the connections held at once
    http_workers: int = 8
    http_timeout: float = 10.0
    http_max_connections: int = 4096
    # a launched task its agent has not confirmed (no status from it) within
    # task_launch_timeout gets its RUN_TASK again, the wait doubling each
    # time; after task_launch_attempts sends it ends TASK_LOST (TASK_DROPPED
    # for partition-aware frameworks). Defaults: resent after 10, 30, 70 s,
    # given up after 150 s (docs/reliability.rst)
    task_launch_timeout: float = 10.0
    task_launch_attempts: int = 4
    #: agents failing health checks are marked unreachable at most at this rate, Mesos's
    #: --agent_removal_rate_limit ("1/20mins"); None: at once (docs/reliability.rst, "Partitions")
    agent_removal_rate_limit: str | None = None
    #: unreachable agents the registry remembers (they may come back): for at most this long, and
    #: at most this many, checked every registry_gc_interval (Mesos's flags, same defaults)
    registry_max_agent_age: float = 14 * 24 * 3600.0
    registry_max_agent_count: int = 100 * 1024
    registry_gc_interval: float = 15 * 60.0
    #: bytes of data one framework message (or status update) carries at most (--max-message-size,
    #: docs/reliability.rst "Message sizes"); the master's frames are sized to it
    max_message_size: int = MAX_FRAMEWORK_MESSAGE

    def validate(self) -> MasterConfig:
        from mesoslike.errors import ConfigError
        from mesoslike.master.partitions import RemovalRateLimit

        for name in ("heartbeat_interval", "ping_interval", "allocation_interval", "agent_reregister_timeout",
                     "max_failover_timeout", "http_timeout", "task_launch_timeout", "registry_max_agent_age",
                     "registry_gc_interval"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        for name in ("framework_timeout_heartbeats", "max_agent_ping_timeouts", "max_frameworks_per_connection",
                     "max_agents_per_connection", "max_frameworks_per_principal",
                     "max_agents_per_principal", "max_reconcile_tasks", "reconcile_answers_per_turn",
                     "http_workers", "http_max_connections", "task_launch_attempts", "registry_max_agent_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("completed_tasks_per_framework", "max_completed_frameworks"):   # 0: keep none
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.offer_timeout is not None and not self.offer_timeout > 0:
            raise ConfigError(f"offer_timeout must be > 0 or unset, got {self.offer_timeout!r}")
        if self.agent_removal_rate_limit is not None:
            RemovalRateLimit.parse(self.agent_removal_rate_limit)
        try:
            check_message_size(self.max_message_size)
        except ValueError as exc:
            raise ConfigError(f"max_message_size: {exc}") from None
        return self


@attrs.define
class TaskRecord:
    """A task the master knows. Its delivery's phase moves only through
    :func:`mesoslike.master.task_lifecycle.process` (the table of
    docs/architecture.rst); the uuids and times below are the data its
    guards and actions read."""

    info: TaskInfo
    framework_id: str
    agent_id: str
    #: its latest status (:attr:`status`): a TaskStatus, or the fields of one the master makes up
    #: (:data:`ReportedStatus`), built when first read
    _status: TaskStatus | ReportedStatus = attrs.field(alias="status", eq=lambda s: built_status(s),
                                                       repr=lambda s: repr(built_status(s)))
    phase: Phase = Phase.LIVE
    launched_at: float = 0.0            # master clock time it was launched (or first reported)
    launch_sends: int = 0               # RUN_TASKs sent for it (while pending)
    acknowledged_uuid: str = ""         # the last update of it the framework acknowledged
    forwarded_uuid: str = ""            # the last update forwarded to the framework: which,
    forwarded_to: bytes | None = None   # to which connection,
    forwarded_at: float = float("-inf")  # and when (master clock)

    @property
    def confirmed(self) -> bool:
        """Whether its agent has said it has it (a status, or it re-registered with it)."""
        return self.phase in CONFIRMED

    @property
    def holds_resources(self) -> bool:
        """Whether what it asked for is used in the allocator (until they go back, once)."""
        return self.phase in HOLDING

    @property
    def id(self) -> str:
        return self.info.task_id

    @property
    def status(self) -> TaskStatus:
        """Its latest status. One the master made up as the task's agent
        re-registered (:data:`ReportedStatus`: a new leader re-admits ~10
        tasks an agent, 1,000,000 after a failover, and most of their
        statuses are never read) is built here the first time it is read,
        the same as it would have been then. O(1)."""
        status = self._status
        if type(status) is tuple:
            status = self._status = built_status(status)
        return status   # type: ignore[return-value]

    @status.setter
    def status(self, status: TaskStatus) -> None:
        self._status = status

    @property
    def state(self) -> str:
        status = self._status
        return status[1] if type(status) is tuple else status.state   # type: ignore[union-attr]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def ended(self) -> bool:
        """Whether the task's story is told: a terminal state, or TASK_UNREACHABLE
        (what a partition-aware framework's task ends as when its agent is removed)."""
        return self.terminal or self.state == TaskState.UNREACHABLE


class CompletedTasks:
    """A framework's ended tasks, most recent last, at most ``keep`` of them
    (the bound is given at each :meth:`add`, so a changed setting applies at
    once), and the latest one of each id. O(1) amortised per task."""

    def __init__(self) -> None:
        self._tasks: deque[TaskRecord] = deque()
        self._by_id: dict[str, TaskRecord] = {}

    def add(self, task: TaskRecord, keep: int) -> None:
        # (ids read from the infos: ``id`` is a property, a call each, three to four a task)
        self._tasks.append(task)
        self._by_id[task.info.task_id] = task
        while len(self._tasks) > keep:
            old = self._tasks.popleft()
            old_id = old.info.task_id
            if self._by_id.get(old_id) is old:   # an id may end twice (reused after it ended)
                del self._by_id[old_id]

    def get(self, task_id: str) -> TaskRecord | None:
        """The most recent ended task with this id still remembered. O(1)."""
        return self._by_id.get(task_id)

    def __iter__(self) -> Iterator[TaskRecord]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def _check(self, keep: int | None = None) -> None:
        assert keep is None or len(self._tasks) <= keep
        assert all(task.ended for task in self._tasks), "only ended tasks are history"
        latest = {task.id: task for task in self._tasks}
        assert self._by_id.keys() == latest.keys()
        assert all(self._by_id[task_id] is task for task_id, task in latest.items())


@attrs.define
class FrameworkRecord:
    info: FrameworkInfo                 # with the assigned id
    peer: bytes | None
    connected: bool = True
    last_heard: float = 0.0             # any message from it
    last_sent: float = 0.0              # any message to it
    failover_deadline: float | None = None
    suppressed: bool = False            # SUPPRESS until REVIVE: it wants no offers
    accepts_batches: bool = False       # its driver takes UPDATES (it said so when it subscribed)
    tasks: dict[str, TaskRecord] = attrs.field(factory=dict)      # live (non-terminal or unacknowledged)
    #: ended tasks, most recent last (the history of docs/operations.rst)
    completed: CompletedTasks = attrs.field(factory=CompletedTasks)
    #: ids of tasks this master did not know and told the framework had ended (a reconciliation's
    #: TASK_LOST/TASK_GONE, "unknown task"), oldest first: should one turn up on an agent coming back,
    #: it is a task of the past — killed, and nothing more said of it (one terminal state per task)
    pronounced_ended: OrderedDict[str, None] = attrs.field(factory=OrderedDict)

    @property
    def id(self) -> str:
        return self.info.id

    def pronounce_ended(self, task_id: str, keep: int) -> None:
        """Remember that the framework was told ``task_id`` ended though this
        master knew no such task, keeping the ``keep`` most recent (the bound
        of completed tasks: a framework cannot grow it). O(1) amortised."""
        self.pronounced_ended[task_id] = None
        self.pronounced_ended.move_to_end(task_id)
        while len(self.pronounced_ended) > keep:
            self.pronounced_ended.popitem(last=False)

    def add_completed(self, task: TaskRecord, keep: int) -> None:
        """Remember an ended task, keeping the ``keep`` most recent. O(1) amortised."""
        self.completed.add(task, keep)

    def completed_task(self, task_id: str) -> TaskRecord | None:
        """The most recent ended task with this id still remembered. O(1)."""
        return self.completed.get(task_id)


@attrs.define
class AgentRecord:
    """A registered agent. It is reachable at ``peer`` until it is marked
    unreachable (after ``max_agent_ping_timeouts`` unanswered pings; see
    :class:`~mesoslike.master.partitions.UnreachableAgent`), removed, or
    re-registers from another connection; there is no disconnected state in
    between."""

    info: AgentInfo                     # with the assigned id
    peer: bytes
    pings_unanswered: int = 0
    registered_at: float = 0.0
    tasks: set[tuple[str, str]] = attrs.field(factory=set)        # (framework_id, task_id)
    http_address: str = ""              # its HTTP endpoints (sandbox files), as it registered
    accepts_batches: bool = False       # it takes STATUS_UPDATE_ACKS, RUN_TASKS (it said so registering)
    usage: dict[tuple[str, str], TaskUsage] = attrs.field(factory=dict)  # its tasks', from its last PONG
    #: its custom executors' processes (framework_id, executor_id) -> their info: their resources are used
    executors: dict[tuple[str, str], ExecutorInfo] = attrs.field(factory=dict)
    #: tasks it brought back from a partition whose frameworks were told they ended (TASK_LOST):
    #: killed, their updates settled by the master, what they hold used until they end
    doomed: dict[tuple[str, str], Resources] = attrs.field(factory=dict)
    #: the core's registry changes (``registry_changes``) once its admission or update was made: until the
    #: registry holds that many, its AGENT_REGISTERED is held and a retry of its registration is ignored
    registry_change: int = 0
    #: the incarnation and the report number (REREGISTER_AGENT's ``incarnation``, ``sequence``) of the
    #: last re-registration admitted ("": none known — a first registration, an older agent): a report of
    #: the same incarnation numbered lower is stale (docs/reliability.rst, "Stale re-registrations")
    incarnation: str = ""
    sequence: int = 0
    #: the incarnation the current one replaced (the agent restarted): its reports are all stale
    earlier_incarnation: str = ""

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def resources(self) -> Resources:
        return self.info.resources


class Holdings:
    """Which owner holds which ids (frameworks or agents), both ways, so a
    per-owner bound costs O(1) to check. An owner is the connection a
    framework subscribed or an agent registered on; once peers authenticate
    (issue 13) it is their principal. An id has at most one owner."""

    def __init__(self) -> None:
        self._owner: dict[str, bytes] = {}
        self._ids: dict[bytes, set[str]] = {}

    def count(self, owner: bytes) -> int:
        return len(self._ids.get(owner, ()))

    def owner(self, item: str) -> bytes | None:
        return self._owner.get(item)

    def of(self, owner: bytes) -> set[str]:
        return set(self._ids.get(owner, ()))

    def items(self) -> KeysView[str]:
        """Every id held (by some owner)."""
        return self._owner.keys()

    def hold(self, owner: bytes, item: str) -> None:
        """``owner`` holds ``item`` now (taken from its former owner, if any)."""
        self.release(item)
        self._owner[item] = owner
        self._ids.setdefault(owner, set()).add(item)

    def release(self, item: str) -> None:
        owner = self._owner.pop(item, None)
        if owner is not None:
            held = self._ids[owner]
            held.discard(item)
            if not held:
                del self._ids[owner]

    def _check(self) -> None:
        assert all(self._owner[item] == owner for owner, items in self._ids.items() for item in items)
        assert sum(len(items) for items in self._ids.values()) == len(self._owner)
        assert all(self._ids.values()), "an owner holding nothing is forgotten"


def clip(value: object, limit: int = LOGGED_INPUT_LIMIT) -> str:
    """What a log line (or an error's text) shows of ``value``, a field a peer
    sent: at most ``limit`` characters of it (its repr if not text), and how
    much was left out. A peer's 8 MiB name must not become 8 MiB of log.
    O(limit) for text and bytes."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value[:limit + 1]))
        if len(value) > limit:
            return f"{text[:limit]}...[{len(value)} bytes]"
        return text
    else:
        text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"


def new_status(task_id: str, state: str, *, agent_id: str = "", framework_id: str = "", message: str = "",
               reason: str = "", timestamp: float = 0.0, labels: list[Label] | None = None,
               healthy: bool | None = None) -> TaskStatus:
    """A status the master makes up (no uuid: nothing to acknowledge);
    ``labels``: the task's, when the master knows it; ``healthy``: its
    latest health verdict, when an agent reported it."""
    return TaskStatus(task_id=task_id, state=state, agent_id=agent_id, message=message, source="SOURCE_MASTER",
                      reason=reason, timestamp=timestamp, framework_id=framework_id, healthy=healthy,
                      labels=labels or [])


#: the fields of a status the master makes up for a task an agent reports
#: (:func:`new_status`'s): ``(task_id, state, agent_id, framework_id,
#: timestamp, labels, healthy)``; a :class:`TaskRecord` built with one makes
#: the status when it is first read
ReportedStatus = tuple[str, str, str, str, float, "list[Label]", "bool | None"]


def built_status(status: TaskStatus | ReportedStatus) -> TaskStatus:
    """``status`` itself, or the status a :data:`ReportedStatus` stands for (made anew: the caller keeps it)."""
    if type(status) is not tuple:
        return status   # type: ignore[return-value]
    task_id, state, agent_id, framework_id, timestamp, labels, healthy = status
    return new_status(task_id, state, agent_id=agent_id, framework_id=framework_id, timestamp=timestamp,
                      labels=labels, healthy=healthy)


STAGING = TaskState.STAGING

"""Public value types of the framework API (DESIGN §3.2), shared by the wire
protocol, the master, the agents and the scheduler driver.

All are immutable attrs classes; field types are checked when a message is
decoded (see :mod:`mesoslike.wire.codec`), so a value that arrives over the
wire has the declared types.
"""

from __future__ import annotations

from typing import Callable, Mapping

import attrs

from mesoslike.allocator.offers import Offer  # the one offer model, made by the allocator (core)
from mesoslike.attributes import check_attributes
from mesoslike.resources import Resources

__all__ = [
    "TaskState", "TERMINAL_STATES", "FrameworkInfo", "TaskInfo", "TaskStatus", "Filters", "Offer",
    "MasterInfo", "AgentInfo", "DEFAULT_REFUSE_SECONDS", "Label", "MAX_LABELS", "MAX_LABEL_KEY", "MAX_LABEL_VALUE",
]

DEFAULT_REFUSE_SECONDS = 5.0


class TaskState:
    """Task states, as in Mesos."""

    STAGING = "TASK_STAGING"
    STARTING = "TASK_STARTING"
    RUNNING = "TASK_RUNNING"
    KILLING = "TASK_KILLING"
    FINISHED = "TASK_FINISHED"
    FAILED = "TASK_FAILED"
    KILLED = "TASK_KILLED"
    ERROR = "TASK_ERROR"
    LOST = "TASK_LOST"
    DROPPED = "TASK_DROPPED"
    GONE = "TASK_GONE"
    UNREACHABLE = "TASK_UNREACHABLE"

    ALL = (STAGING, STARTING, RUNNING, KILLING, FINISHED, FAILED, KILLED, ERROR, LOST, DROPPED, GONE,
           UNREACHABLE)


TERMINAL_STATES = frozenset({TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR,
                             TaskState.LOST, TaskState.DROPPED, TaskState.GONE})


def _names_only(environment: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{name!r}: ..." for name in sorted(environment)) + "}"


def _frozen_dict(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


# ------------------------------------------------------------------ labels
#: labels on one task, framework or status (Mesos's ``Labels``); the master
#: keeps them per task and framework, so they are bounded
MAX_LABELS = 32
#: characters of a label's key / value
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 512


def _label_text(limit: int) -> Callable[[object, "attrs.Attribute[str]", str], None]:
    def check(instance: object, field: attrs.Attribute[str], value: str) -> None:
        if len(value) > limit:
            raise ValueError(f"a label's {field.name} of {len(value)} characters is longer than {limit}")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError(f"a label's {field.name} {value[:40]!r} holds a control character")
    return check


@attrs.frozen
class Label:
    """One key/value pair of a task's, a framework's or a status's
    ``labels`` (Mesos's ``Label``): free-form metadata the cluster carries
    and shows (``/state``) but never interprets. Keys may repeat, as in Mesos."""

    key: str = attrs.field(validator=_label_text(MAX_LABEL_KEY))
    value: str = attrs.field(default="", validator=_label_text(MAX_LABEL_VALUE))

    def __attrs_post_init__(self) -> None:
        if not self.key:
            raise ValueError("a label's key is empty")


def _check_labels(instance: object, field: attrs.Attribute, labels: list[Label]) -> None:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{len(labels)} labels are more than {MAX_LABELS}")
    for label in labels:
        if not isinstance(label, Label):
            raise ValueError(f"a label is a Label(key, value), got {type(label).__name__}")


def _label_list(value: object) -> list[Label]:
    """A list of labels from Labels, ``(key, value)`` pairs or a ``{key: value}`` map."""
    if value is None:
        return []
    if type(value) is list and not value:
        return value   # the common case, taken as it is (status updates are many)
    if isinstance(value, Mapping):
        return [Label(str(key), str(item)) for key, item in value.items()]
    return [item if isinstance(item, Label) else Label(*item) for item in value]  # type: ignore[attr-defined]


def labels_field() -> list[Label]:
    """An attrs field of labels: a list of :class:`Label` (pairs and a map
    are converted), at most :data:`MAX_LABELS`."""
    return attrs.field(factory=list, converter=_label_list, validator=_check_labels)


@attrs.frozen
class FrameworkInfo:
    """Who a framework is. ``id`` is empty on first subscription; the master
    assigns one, and the driver sends it back when it re-subscribes.
    ``failover_timeout``: how long the master keeps the framework's tasks
    running after it disconnects. ``partition_aware``: tasks of a lost agent
    become TASK_UNREACHABLE rather than TASK_LOST."""

    name: str
    role: str = "*"
    failover_timeout: float = 0.0
    id: str = ""
    user: str = ""
    hostname: str = ""
    partition_aware: bool = False
    min_allocatable: str = ""
    #: who registered it, as the master authenticated them (docs/security.rst); set by the master only
    principal: str = ""
    #: free-form key/value metadata (Mesos's ``FrameworkInfo.labels``), shown in ``/state``
    labels: list[Label] = labels_field()


@attrs.frozen
class TaskInfo:
    """A task to launch: a shell ``command`` run by the agent in its own
    process group and sandbox, with ``resources`` taken from one offer."""

    task_id: str
    agent_id: str
    command: str
    resources: Resources
    name: str = ""
    #: its repr names the variables, never their values: a task's environment
    #: may hold secrets, and a repr ends up in logs (docs/security.rst)
    environment: dict[str, str] = attrs.field(factory=dict, converter=_frozen_dict, repr=_names_only)
    kill_grace_period: float = 3.0
    #: the unix user it runs as (default: its framework's ``user``); see docs/security.rst
    user: str = ""
    #: free-form key/value metadata (Mesos's ``TaskInfo.labels``): shown in
    #: ``/state`` and carried in every status update of the task
    labels: list[Label] = labels_field()


@attrs.frozen
class TaskStatus:
    """A task's state change. ``uuid`` identifies a reliable update that must
    be acknowledged; updates the master makes up (reconciliation) have none."""

    task_id: str
    state: str
    agent_id: str = ""
    message: str = ""
    source: str = ""            # SOURCE_MASTER, SOURCE_AGENT, SOURCE_EXECUTOR
    reason: str = ""
    uuid: str = ""
    timestamp: float = 0.0
    exit_code: int | None = None
    framework_id: str = ""
    #: the task's labels (its agent copies them from ``TaskInfo.labels``)
    labels: list[Label] = labels_field()

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@attrs.frozen
class Filters:
    """How long to refuse the declined or unused resources of an offer."""

    refuse_seconds: float = DEFAULT_REFUSE_SECONDS


@attrs.frozen
class MasterInfo:
    """The leading master: id, scheduler/agent address, HTTP address, version."""

    id: str
    address: str
    http_address: str = ""
    version: str = ""


@attrs.frozen
class AgentInfo:
    """An agent as it registers: ``id`` empty on first registration."""

    hostname: str
    resources: Resources
    #: name -> canonical Mesos text of a typed value (mesoslike.attributes), checked against the grammar
    attributes: dict[str, str] = attrs.field(factory=dict, converter=_frozen_dict, validator=check_attributes)
    id: str = ""
    port: int = 0
    #: the agent principal it belongs to (docs/security.rst); set by the master only
    principal: str = ""

"""Public value types of the framework API (docs/framework-api.rst), shared by the wire
protocol, the master, the agents and the scheduler driver.

All are immutable attrs classes; field types are checked when a message is
decoded (see :mod:`mesoslike.wire.codec`), so a value that arrives over the
wire has the declared types.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from mesoslike.allocator.offers import Offer  # the one offer model, made by the allocator (core)
from mesoslike.resources import Resources

__all__ = [
    "TaskState", "TERMINAL_STATES", "FrameworkInfo", "TaskInfo", "TaskStatus", "Filters", "Offer",
    "MasterInfo", "AgentInfo", "DEFAULT_REFUSE_SECONDS",
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
    attributes: dict[str, str] = attrs.field(factory=dict, converter=_frozen_dict)
    id: str = ""
    port: int = 0
    #: the agent principal it belongs to (docs/security.rst); set by the master only
    principal: str = ""

"""The master protocol's messages no scheduler sends or receives: agent <->
master (REGISTER_AGENT, AGENT_REGISTERED, PING / PONG, CHECKPOINT_RESOURCES,
SHUTDOWN_AGENT, UNREGISTER_AGENT, EXECUTOR_EXITED, SHUTDOWN_FRAMEWORK) and the
operator's state (GET_STATE, STATE), frozen ``msgspec.Struct`` types as the
rest; the agent's per-task messages stay in :mod:`mesoslike.wire.messages`.

Part of :data:`mesoslike.wire.messages.SCHEMA` and importable from
:mod:`mesoslike.wire.messages` by name, as the rest, but made when a
process first needs one: it names one, or its codec meets a type it does not
know yet, or the schema's types are listed. A ``mesoslike run`` client makes
none of them.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from mesoslike.resources import Resources
from mesoslike.wire.master_schema import message
from mesoslike.wire.types import AgentInfo, MasterInfo

__all__ = ["RegisterAgent", "AgentRegistered", "Ping", "TaskUsage", "Pong", "CheckpointResources", "ShutdownAgent",
           "UnregisterAgent", "ExecutorExited", "ShutdownFramework", "GetState", "StateReply"]


@message
class RegisterAgent(msgspec.Struct, frozen=True):
    """An agent's first registration. ``http_address``: where its HTTP
    endpoints (sandbox files, usage) answer, "" if it serves none."""

    TYPE: ClassVar[str] = "REGISTER_AGENT"
    agent: AgentInfo
    version: str = ""
    http_address: str = ""
    #: the agent takes STATUS_UPDATE_ACKS and RUN_TASKS
    accepts_batches: bool = False
    #: the agent process's incarnation (REREGISTER_AGENT's: its reports follow, numbered from 1)
    incarnation: str = ""


@message
class AgentRegistered(msgspec.Struct, frozen=True, gc=False):
    """``accepts_batches``: the master takes STATUS_UPDATES. A frozen
    ``msgspec.Struct`` (built and encoded in C): a new leader answers every
    agent with one after a failover — 100,000 in its storm, where the attrs
    class cost ~1 us to make and ~0.5 us more to encode (failover30o). Its
    frames are those of the attrs class but for the order of the map's keys
    (msgspec wrote an attrs object's in name order), which no decoder reads."""

    TYPE: ClassVar[str] = "AGENT_REGISTERED"
    agent_id: str
    master: MasterInfo
    ping_interval: float
    accepts_batches: bool = False
    #: the master's receipt binding ``agent_id`` to the agent's principal ("" in an anonymous
    #: cluster): the agent keeps it and shows it when it re-registers (mesoslike.master.receipts)
    receipt: str = ""


@message
class Ping(msgspec.Struct, frozen=True):
    """Master -> agent liveness. ``connected`` false: the master does not
    know this agent on this connection (it restarted or leads with a fresh
    state): the agent must re-register now (Mesos's ``PingSlaveMessage``)."""

    TYPE: ClassVar[str] = "PING"
    agent_id: str = ""
    connected: bool = True


class TaskUsage(msgspec.Struct, frozen=True):
    """What one task uses, as its agent measured it (a part of PONG, and the
    agent's ``/monitor/statistics``; Mesos's ``ResourceStatistics`` names).
    Limits of 0 mean none; ``enforced`` says whether they are (cgroups)."""

    framework_id: str
    task_id: str
    timestamp: float
    cpus_user_time_secs: float = 0.0
    cpus_system_time_secs: float = 0.0
    cpus_limit: float = 0.0
    mem_rss_bytes: int = 0
    mem_total_bytes: int = 0
    mem_limit_bytes: int = 0
    mem_max_bytes: int = 0
    cpus_nr_throttled: int = 0
    cpus_throttled_time_secs: float = 0.0
    processes: int = 0
    enforced: bool = False

    def statistics(self) -> dict:
        """Everything but the ids, by name (as ``/monitor/statistics`` and
        the master's ``/state`` show it)."""
        return {name: getattr(self, name) for name in self.__struct_fields__ if name not in ("framework_id", "task_id")}


@message
class Pong(msgspec.Struct, frozen=True):
    """The answer to PING, with the agent's latest measurement of its tasks."""

    TYPE: ClassVar[str] = "PONG"
    agent_id: str
    usage: list[TaskUsage] = msgspec.field(default_factory=list)


@message
class CheckpointResources(msgspec.Struct, frozen=True):
    """Master -> agent: the agent's dynamic reservations are now
    ``reservations`` (all of them, ``cpus(role,principal):N`` kinds; Mesos's
    CHECKPOINT_RESOURCES). The agent checkpoints them and re-registers with
    its total converted by them."""

    TYPE: ClassVar[str] = "CHECKPOINT_RESOURCES"
    agent_id: str
    reservations: Resources


@message
class ShutdownAgent(msgspec.Struct, frozen=True):
    """The master removed the agent: it must kill its tasks and stop (or
    register anew)."""

    TYPE: ClassVar[str] = "SHUTDOWN_AGENT"
    reason: str = ""


@message
class UnregisterAgent(msgspec.Struct, frozen=True):
    """Agent -> master: the agent is leaving for good (it was drained, its
    tasks killed): remove it now instead of after the ping timeouts."""

    TYPE: ClassVar[str] = "UNREGISTER_AGENT"
    agent_id: str
    reason: str = ""


@message
class ExecutorExited(msgspec.Struct, frozen=True):
    """Agent -> master: the process of a custom executor ended; its
    resources are free again (Mesos's ``ExitedExecutorMessage``). Best
    effort: a master that misses it learns it from the agent's next
    REREGISTER_AGENT, which lists the executors still running."""

    TYPE: ClassVar[str] = "EXECUTOR_EXITED"
    agent_id: str
    framework_id: str
    executor_id: str
    message: str = ""
    #: its exit code, or minus the signal that ended it (None: not known)
    status: int | None = None


@message
class ShutdownFramework(msgspec.Struct, frozen=True):
    """Kill every task of a framework (it was torn down)."""

    TYPE: ClassVar[str] = "SHUTDOWN_FRAMEWORK"
    framework_id: str


@message
class GetState(msgspec.Struct, frozen=True):
    """Ask a master for its state document (``mesoslike state``)."""

    TYPE: ClassVar[str] = "GET_STATE"


@message
class StateReply(msgspec.Struct, frozen=True):
    """The master's state document, as JSON text (the same as ``/state``)."""

    TYPE: ClassVar[str] = "STATE"
    document: str

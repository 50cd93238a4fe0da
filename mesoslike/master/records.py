"""What the master remembers about frameworks, agents and tasks (soft state)."""

from __future__ import annotations

import attrs

from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire.messages import TaskUsage

__all__ = ["FrameworkRecord", "AgentRecord", "TaskRecord", "MasterConfig"]


@attrs.define
class MasterConfig:
    """Timing and policy knobs of the master (all seconds)."""

    heartbeat_interval: float = 15.0           # master -> framework heartbeats
    framework_timeout_heartbeats: int = 5       # silence (in heartbeats) before a framework is disconnected
    ping_interval: float = 15.0                 # master -> agent pings
    max_agent_ping_timeouts: int = 5            # unanswered pings before an agent is removed
    allocation_interval: float = 1.0
    offer_timeout: float | None = None
    min_allocatable: str = "cpus:0.01|mem:32"
    sorter: str = "drf"
    completed_tasks_per_framework: int = 1000   # terminal tasks kept for /state
    agent_reregister_timeout: float = 600.0     # after a failover: time for known agents to come back

    def validate(self) -> MasterConfig:
        from mesoslike.errors import ConfigError

        for name in ("heartbeat_interval", "ping_interval", "allocation_interval", "agent_reregister_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        for name in ("framework_timeout_heartbeats", "max_agent_ping_timeouts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.offer_timeout is not None and not self.offer_timeout > 0:
            raise ConfigError(f"offer_timeout must be > 0 or unset, got {self.offer_timeout!r}")
        return self


@attrs.define
class TaskRecord:
    info: TaskInfo
    framework_id: str
    agent_id: str
    status: TaskStatus
    resources_recovered: bool = False
    launched_at: float = 0.0            # master clock time it was launched (or first reported)

    @property
    def id(self) -> str:
        return self.info.task_id

    @property
    def state(self) -> str:
        return self.status.state

    @property
    def terminal(self) -> bool:
        return self.status.terminal


@attrs.define
class FrameworkRecord:
    info: FrameworkInfo                 # with the assigned id
    peer: bytes | None
    connected: bool = True
    last_heard: float = 0.0             # any message from it
    last_sent: float = 0.0              # any message to it
    failover_deadline: float | None = None
    suppressed: bool = False            # SUPPRESS until REVIVE: it wants no offers
    tasks: dict[str, TaskRecord] = attrs.field(factory=dict)      # live (non-terminal or unacknowledged)
    completed: list[TaskRecord] = attrs.field(factory=list)       # terminal, most recent last

    @property
    def id(self) -> str:
        return self.info.id


@attrs.define
class AgentRecord:
    """A registered agent. It is reachable at ``peer`` until it is removed
    (after ``max_agent_ping_timeouts`` unanswered pings) or re-registers
    from another connection; there is no disconnected state in between."""

    info: AgentInfo                     # with the assigned id
    peer: bytes
    pings_unanswered: int = 0
    registered_at: float = 0.0
    tasks: set[tuple[str, str]] = attrs.field(factory=set)        # (framework_id, task_id)
    http_address: str = ""              # its HTTP endpoints (sandbox files), as it registered
    usage: dict[tuple[str, str], TaskUsage] = attrs.field(factory=dict)  # its tasks', from its last PONG

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def resources(self) -> Resources:
        return self.info.resources


def new_status(task_id: str, state: str, *, agent_id: str = "", framework_id: str = "", message: str = "",
               reason: str = "", timestamp: float = 0.0) -> TaskStatus:
    """A status the master makes up (no uuid: nothing to acknowledge)."""
    return TaskStatus(task_id=task_id, state=state, agent_id=agent_id, message=message, source="SOURCE_MASTER",
                      reason=reason, timestamp=timestamp, framework_id=framework_id)


STAGING = TaskState.STAGING

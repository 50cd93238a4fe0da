"""What :class:`~mesoslike.agent.core.AgentCore` asks its runtime to do (the
commands, carried out in order, each checkpoint before the messages that
depend on it) and what a checkpoint of a task holds (sans I/O).

The agent's parts — the core and its executor book
(:mod:`mesoslike.agent.executors`) — speak this one vocabulary; the runtime
(:mod:`mesoslike.agent.runtime`) carries it out, :mod:`mesoslike.agent.checkpoint`
persists :class:`TaskCheckpoint`.
"""

from __future__ import annotations

from typing import Union

import attrs
import msgspec

from mesoslike.resources import Resources
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskStatus

__all__ = [
    "Command", "SendToMaster", "Reconnect", "LaunchTask", "KillTask", "DeliverMessage", "CheckpointTask",
    "ForgetTask", "CheckpointAgent", "CheckpointReservations", "SendToExecutor", "UpdateContainer",
    "TaskCheckpoint", "TaskKey",
]

TaskKey = tuple[str, str]  # (framework_id, task_id): task ids are unique per framework only


class SendToMaster(msgspec.Struct, frozen=True, gc=False):
    """Send ``message`` to the master. (A msgspec Struct: the agent makes one for
    every update it sends, and builds it in C at a quarter of a frozen attrs
    class's cost.)"""

    message: object


@attrs.frozen
class Reconnect:
    """Throw the connection to the master away and connect anew (a fresh
    TCP connection; what waited in the old one is lost, the core resends
    what matters). The master fell silent, or a registration got no answer:
    the old connection may be stalled in the kernel's retransmission backoff
    (19-28 s after a partition healed), a fresh one is up within a second of
    the heal (docs/reliability.rst, "Partitions")."""


class LaunchTask(msgspec.Struct, frozen=True):
    """Start ``task`` of ``framework`` as a process; report back with
    :meth:`~mesoslike.agent.core.AgentCore.on_task_started` or
    :meth:`~mesoslike.agent.core.AgentCore.on_task_launch_failed`.

    A msgspec Struct, as :class:`SendToMaster`: the agent makes one a task,
    and a frozen attrs class with a factory cost ~1 µs to build, a Struct a
    sixth of that. :func:`msgspec.structs.replace` makes a changed copy.
    ``secret_files`` is kept out of the repr and of comparisons, as it was."""

    framework: FrameworkInfo
    task: TaskInfo
    agent_id: str
    #: files the agent gives the task besides its own secrets (container path -> bytes: a custom
    #: executor's secret), written as its secret files are (never checkpointed, never shown)
    secret_files: dict[str, bytes] = msgspec.field(default_factory=dict)

    def __repr__(self) -> str:
        return f"LaunchTask(framework={self.framework!r}, task={self.task!r}, agent_id={self.agent_id!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not LaunchTask:
            return NotImplemented
        return (self.framework, self.task, self.agent_id) == (other.framework, other.task, other.agent_id)

    __hash__ = None   # type: ignore[assignment]   # (a FrameworkInfo is not hashable either)


@attrs.frozen
class KillTask:
    """SIGTERM the task's process group, SIGKILL it after ``grace_period``
    seconds; report the exit with :meth:`~mesoslike.agent.core.AgentCore.on_task_exited`."""

    framework_id: str
    task_id: str
    grace_period: float


@attrs.frozen
class DeliverMessage:
    """Append a framework message's ``data`` to the task's sandbox."""

    framework_id: str
    task_id: str
    data: bytes


class CheckpointTask(msgspec.Struct, frozen=True, gc=False):
    """Persist :meth:`~mesoslike.agent.core.AgentCore.task_checkpoint` of the task (before the
    commands after this one: an update is checkpointed before it is sent)."""

    framework_id: str
    task_id: str


class ForgetTask(msgspec.Struct, frozen=True, gc=False):
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


class TaskCheckpoint(msgspec.Struct, frozen=True, gc=False):
    """What a restarted agent needs to know of a task: who it is, its latest
    state, its unacknowledged updates (with their uuids: resent as they
    were), and whether the agent was killing it or it hit a limit.

    A msgspec Struct, as :class:`LaunchTask`: the agent makes one for each
    record of its journal, ~5 a task, and a frozen attrs class of eleven
    fields cost ~2.5 µs to build, a Struct ~0.3. Its journal records hold
    the same fields by name (msgspec wrote the attrs object's in
    alphabetical order, writes the Struct's in this order): a journal of
    either is read alike."""

    framework: FrameworkInfo
    task: TaskInfo
    state: str
    updates: list[TaskStatus] = msgspec.field(default_factory=list)
    holds_resources: bool = True
    killing: bool = False
    kill_why: str = ""
    limitation: str = ""
    limitation_message: str = ""
    #: its health check's latest verdict (None: none yet)
    healthy: bool | None = None
    #: a custom executor's run: sha256 of its secret (how its frames are known; the secret is its file's)
    executor_secret_digest: str = ""


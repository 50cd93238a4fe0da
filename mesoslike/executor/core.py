"""The executor driver's decisions, sans I/O: registration with the agent,
the callbacks to invoke, and the reliable delivery of status updates.

:class:`ExecutorCore` is a deterministic state machine. The driver
(:mod:`mesoslike.executor.driver`) feeds it the agent's messages and
connection changes and the passing of time, and carries out what it
returns: :class:`SendToAgent` and :class:`InvokeCallback` (and
:class:`Stop`). It takes a clock and a uuid source; it never touches a
socket. Updates stay pending until the agent acknowledges them (it does once
they are on its disk) and are sent again on every (re)registration.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Union

import attrs

from mesoslike.clock import Clock
from mesoslike.wire import executor_messages as x
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE, AgentInfo, ExecutorInfo, FrameworkInfo, TaskStatus

__all__ = ["ExecutorCore", "SendToAgent", "InvokeCallback", "Stop", "ExecutorCommand", "REGISTER_RETRY",
           "MAX_PENDING_UPDATES"]

log = logging.getLogger("mesoslike.executor")

#: how often an unanswered registration is sent again (s)
REGISTER_RETRY = 2.0
#: updates waiting for the agent's acknowledgement (more: send_status_update refuses)
MAX_PENDING_UPDATES = 100_000


@attrs.frozen
class SendToAgent:
    message: object


@attrs.frozen
class InvokeCallback:
    """Call the executor's ``name`` callback with ``args`` (after the driver)."""

    name: str
    args: tuple[Any, ...] = ()


@attrs.frozen
class Stop:
    """The executor is done (after SHUTDOWN_EXECUTOR): end the driver."""


ExecutorCommand = Union[SendToAgent, InvokeCallback, Stop]


class ExecutorCore:
    """See the module doc. ``secret``: the executor's secret (from its
    environment); ``new_uuid``: the uuid of each update."""

    def __init__(self, secret: str, clock: Clock, new_uuid: Callable[[], str]) -> None:
        if not secret or len(secret) > x.SECRET_LENGTH:
            raise ValueError(f"an executor's secret has 1 to {x.SECRET_LENGTH} characters")
        self.secret = secret
        self.clock = clock
        self._new_uuid = new_uuid
        self.registered = False
        self._ever_registered = False
        self._next_register: float | None = None
        self.executor_info: ExecutorInfo | None = None
        self.framework_info: FrameworkInfo | None = None
        self.agent_info: AgentInfo | None = None
        #: uuid -> update not yet acknowledged, oldest first
        self._pending: OrderedDict[str, TaskStatus] = OrderedDict()
        #: tasks handed to this executor whose terminal update is not acknowledged
        self._tasks: set[str] = set()

    @property
    def tasks(self) -> list[str]:
        """The ids of the tasks this executor has and has not ended (acknowledged)."""
        return sorted(self._tasks)

    @property
    def pending_updates(self) -> list[TaskStatus]:
        return list(self._pending.values())

    # --------------------------------------------------------------- events
    def on_connected(self) -> list[ExecutorCommand]:
        """The connection to the agent was made (again): register."""
        out: list[ExecutorCommand] = []
        if self.registered:
            self.registered = False
            out.append(InvokeCallback("disconnected"))
        out.append(self._register(self.clock.now()))
        return out

    def tick(self) -> list[ExecutorCommand]:
        now = self.clock.now()
        if not self.registered and self._next_register is not None and now >= self._next_register:
            return [self._register(now)]
        return []

    def next_wakeup(self) -> float | None:
        return None if self.registered else self._next_register

    def _register(self, now: float) -> SendToAgent:
        self._next_register = now + REGISTER_RETRY
        return SendToAgent(x.RegisterExecutor(self.secret, sorted(self._tasks)))

    def on_message(self, message: object) -> list[ExecutorCommand]:
        """A message from the agent."""
        if isinstance(message, x.ExecutorRegistered):
            return self._registered(message)
        if isinstance(message, x.LaunchExecutorTask):
            if message.task.task_id in self._tasks:
                return []   # handed again (a registration crossed the first hand-over)
            self._tasks.add(message.task.task_id)
            return [InvokeCallback("launch_task", (message.task,))]
        if isinstance(message, x.KillExecutorTask):
            return [InvokeCallback("kill_task", (message.task_id,))]
        if isinstance(message, x.ExecutorFrameworkMessage):
            return [InvokeCallback("framework_message", (message.data,))]
        if isinstance(message, x.ExecutorStatusAck):
            acked = self._pending.pop(message.uuid, None)
            if acked is not None and acked.terminal:
                self._tasks.discard(acked.task_id)
            return []
        if isinstance(message, x.ShutdownExecutor):
            return [InvokeCallback("shutdown"), Stop()]
        if isinstance(message, x.ExecutorError):
            return [InvokeCallback("error", (message.message,))]
        log.warning("ignoring unexpected %s from the agent", getattr(message, "TYPE", type(message).__name__))
        return []

    def _registered(self, message: x.ExecutorRegistered) -> list[ExecutorCommand]:
        if self.registered:
            return []   # the answer to a retried registration
        again = self._ever_registered
        self.registered = self._ever_registered = True
        self._next_register = None
        self.executor_info, self.framework_info, self.agent_info = message.executor, message.framework, message.agent
        out: list[ExecutorCommand] = [InvokeCallback("reregistered", (message.agent,)) if again else
                                      InvokeCallback("registered", (message.executor, message.framework,
                                                                    message.agent))]
        out.extend(SendToAgent(x.ExecutorStatus(self.secret, status)) for status in self._pending.values())
        return out

    # ---------------------------------------------------------------- calls
    def send_status_update(self, status: TaskStatus) -> list[ExecutorCommand]:
        """Send a task's update (kept until the agent acknowledges it). A
        status without a uuid gets one; ``source``, ``agent_id`` and
        ``framework_id`` are the agent's to fill in."""
        if not isinstance(status, TaskStatus):
            raise TypeError(f"send_status_update takes a TaskStatus, got {type(status).__name__}")
        if len(self._pending) >= MAX_PENDING_UPDATES:
            raise RuntimeError(f"{MAX_PENDING_UPDATES} updates wait for the agent already")
        if not status.uuid:
            status = attrs.evolve(status, uuid=self._new_uuid())
        self._pending[status.uuid] = status
        if not self.registered:
            return []   # sent on registration
        return [SendToAgent(x.ExecutorStatus(self.secret, status))]

    def send_framework_message(self, data: bytes) -> list[ExecutorCommand]:
        """Send ``data`` to the scheduler (best effort, as in Mesos)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"framework message data must be bytes, got {type(data).__name__}")
        if len(data) > MAX_FRAMEWORK_MESSAGE:
            raise ValueError(f"a framework message holds at most {MAX_FRAMEWORK_MESSAGE} bytes, got {len(data)}")
        return [SendToAgent(x.ExecutorMessage(self.secret, bytes(data)))]

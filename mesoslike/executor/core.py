"""The executor driver's decisions, sans I/O: registration with the agent,
the callbacks to invoke, and the reliable delivery of status updates.

:class:`ExecutorCore` is a deterministic state machine. The driver
(:mod:`mesoslike.executor.driver`) feeds it the agent's messages and
connection changes and the passing of time, and carries out what it
returns: :class:`SendToAgent` and :class:`InvokeCallback` (and
:class:`Stop`). It takes a clock and a uuid source; it never touches a
socket. Updates stay pending until the agent acknowledges them (it does once
they are on its disk). Each task's updates go out in order, one at a time:
only a task's oldest pending update is in flight, and the next is sent when
the agent acknowledges it. The one in flight is sent again on every
(re)registration, after a backoff when the agent refuses it for now
(``EXECUTOR_ERROR`` naming its uuid with ``retry``), and when no answer comes
within :data:`UPDATE_ANSWER_TIMEOUT`. An update the agent refuses for good
(``EXECUTOR_ERROR`` naming it without ``retry``) is dropped, and the
executor's ``error`` callback says so. The streams are the agent's
(:mod:`mesoslike.delivery`); their back-offs are listed in
docs/reliability.rst, "Retries".
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Union

import attrs

from mesoslike.backoff import Backoff
from mesoslike.clock import Clock
from mesoslike.delivery import UpdateStreams
from mesoslike.wire import executor_messages as x
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, AgentInfo, ExecutorInfo, FrameworkInfo, TaskStatus,
                                  check_message_size)

__all__ = ["ExecutorCore", "SendToAgent", "InvokeCallback", "Stop", "ExecutorCommand", "REGISTER_RETRY",
           "MAX_PENDING_UPDATES", "UPDATE_RETRY_MIN", "UPDATE_RETRY_MAX", "UPDATE_ANSWER_TIMEOUT", "REGISTER_BACKOFF",
           "ANSWER_BACKOFF", "REFUSAL_BACKOFF"]

log = logging.getLogger("mesoslike.executor")

#: how often an unanswered registration is sent again (s): its one agent is local, so it does not grow
REGISTER_RETRY = 2.0
REGISTER_BACKOFF = Backoff(REGISTER_RETRY, REGISTER_RETRY, jitter=0.0)
#: updates waiting for the agent's acknowledgement (more: send_status_update refuses)
MAX_PENDING_UPDATES = 100_000
#: the first wait before an update the agent refused for now is sent again (s); doubled per refusal in a row
UPDATE_RETRY_MIN = 1.0
#: the longest wait before a refused update is sent again (s)
UPDATE_RETRY_MAX = 30.0
#: an update in flight that the agent neither acknowledged nor refused is sent again after this (s)
#: (a frame lost, or an agent too old to name the update it refuses)
UPDATE_ANSWER_TIMEOUT = 10.0
#: an update in flight goes out again UPDATE_ANSWER_TIMEOUT after each send without an answer
ANSWER_BACKOFF = Backoff(UPDATE_ANSWER_TIMEOUT, UPDATE_ANSWER_TIMEOUT, jitter=0.0)
#: the waits before an update refused for now is sent again, by refusals in a row
REFUSAL_BACKOFF = Backoff(UPDATE_RETRY_MIN, UPDATE_RETRY_MAX, jitter=0.0)


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

    def __init__(self, secret: str, clock: Clock, new_uuid: Callable[[], str],
                 max_message_size: int = MAX_FRAMEWORK_MESSAGE) -> None:
        if not secret or len(secret) > x.SECRET_LENGTH:
            raise ValueError(f"an executor's secret has 1 to {x.SECRET_LENGTH} characters")
        self.secret = secret
        self.clock = clock
        #: bytes of data a message or an update carries at most (the agent's --max-message-size)
        self.max_message_size = check_message_size(max_message_size)
        self._new_uuid = new_uuid
        self.registered = False
        self._ever_registered = False
        self._next_register: float | None = None
        self._register_attempts = 0
        self.executor_info: ExecutorInfo | None = None
        self.framework_info: FrameworkInfo | None = None
        self.agent_info: AgentInfo | None = None
        #: task id -> its updates not yet acknowledged, the oldest in flight (sent while registered)
        self._streams: UpdateStreams[str] = UpdateStreams(ANSWER_BACKOFF, limit=MAX_PENDING_UPDATES)
        #: task id -> how many times in a row the agent refused its update in flight for now
        self._refusals: dict[str, int] = {}
        #: tasks handed to this executor whose terminal update is not acknowledged
        self._tasks: set[str] = set()

    @property
    def tasks(self) -> list[str]:
        """The ids of the tasks this executor has and has not ended (acknowledged)."""
        return sorted(self._tasks)

    @property
    def pending_updates(self) -> list[TaskStatus]:
        """The updates not yet acknowledged, task by task, each task's oldest first."""
        return list(self._streams.updates())

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
        if not self.registered:
            if self._next_register is not None and now >= self._next_register:
                return [self._register(now)]
            return []
        return [self._status(update) for _, update in self._streams.due(now)]

    def next_wakeup(self) -> float | None:
        if not self.registered:
            return self._next_register
        return self._streams.next_due()

    def _status(self, update: TaskStatus) -> SendToAgent:
        return SendToAgent(x.ExecutorStatus(self.secret, update))

    def _register(self, now: float) -> SendToAgent:
        self._next_register = now + REGISTER_BACKOFF.delay(self._register_attempts)
        self._register_attempts += 1
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
            acked = self._streams.acknowledge(message.task_id, message.uuid)
            if acked is None:
                return []   # the answer to a resend, or not about the update in flight
            if acked.terminal:
                self._tasks.discard(acked.task_id)
            self._refusals.pop(acked.task_id, None)
            return self._next_of(acked.task_id)
        if isinstance(message, x.ShutdownExecutor):
            return [InvokeCallback("shutdown"), Stop()]
        if isinstance(message, x.ExecutorError):
            return self._refused(message)
        log.warning("ignoring unexpected %s from the agent", getattr(message, "TYPE", type(message).__name__))
        return []

    def _next_of(self, task_id: str) -> list[ExecutorCommand]:
        """Send task ``task_id``'s next update, if it has one and the agent listens."""
        update = self._streams.send_head(task_id, self.clock.now()) if self.registered else None
        return [self._status(update)] if update is not None else []

    def _refused(self, message: x.ExecutorError) -> list[ExecutorCommand]:
        error = InvokeCallback("error", (message.message,))
        task_id = self._streams.key_of(message.uuid) if message.uuid else None
        status = self._streams.head(task_id) if task_id is not None else None
        if task_id is None or status is None or status.uuid != message.uuid:
            return [error]   # not about the update in flight (or from an agent that does not say which)
        if message.retry:
            if self.registered:
                refusals = self._refusals.get(task_id, 0)
                self._refusals[task_id] = refusals + 1
                self._streams.postpone(task_id, self.clock.now() + REFUSAL_BACKOFF.delay(refusals))
            log.info("update %s of task %r refused for now: sent again after a backoff", message.uuid, task_id)
            return [error]
        # refused for good: keeping it would hold the task's later updates behind it forever
        log.warning("update %s (%s) of task %r refused by the agent and dropped: %s", message.uuid, status.state,
                    task_id, message.message)
        self._streams.drop(task_id, message.uuid)
        self._refusals.pop(task_id, None)
        return [InvokeCallback("error", (f"{message.message} (update {message.uuid}, {status.state} of task "
                                         f"{task_id!r}, dropped)",)), *self._next_of(task_id)]

    def _registered(self, message: x.ExecutorRegistered) -> list[ExecutorCommand]:
        if self.registered:
            return []   # the answer to a retried registration
        again = self._ever_registered
        self.registered = self._ever_registered = True
        self._next_register = None
        self._register_attempts = 0
        self.executor_info, self.framework_info, self.agent_info = message.executor, message.framework, message.agent
        out: list[ExecutorCommand] = [InvokeCallback("reregistered", (message.agent,)) if again else
                                      InvokeCallback("registered", (message.executor, message.framework,
                                                                    message.agent))]
        out.extend(self._status(update) for _, update in self._streams.heads(self.clock.now()))
        return out

    # ---------------------------------------------------------------- calls
    def check_data(self, data: bytes | bytearray | memoryview, what: str) -> None:
        """ValueError if ``data`` is more than the agent takes (its ``--max-message-size``)."""
        if len(data) > self.max_message_size:
            raise ValueError(f"{what} holds at most {self.max_message_size} bytes (the agent's --max-message-size), "
                             f"got {len(data)}")

    def send_status_update(self, status: TaskStatus) -> list[ExecutorCommand]:
        """Send a task's update (kept until the agent acknowledges it). A
        status without a uuid gets one; ``source``, ``agent_id`` and
        ``framework_id`` are the agent's to fill in."""
        if not isinstance(status, TaskStatus):
            raise TypeError(f"send_status_update takes a TaskStatus, got {type(status).__name__}")
        if self._streams.full:
            raise RuntimeError(f"{MAX_PENDING_UPDATES} updates wait for the agent already")
        self.check_data(status.data, "a status update's data")
        if not status.uuid:
            status = status.replace(uuid=self._new_uuid())
        # False: the same update again (pending, it goes out in its turn), or one behind the task's earlier ones
        if not self._streams.add(status.task_id, status):
            return []
        return self._next_of(status.task_id)   # now, or on registration

    def send_framework_message(self, data: bytes) -> list[ExecutorCommand]:
        """Send ``data`` to the scheduler (best effort, as in Mesos)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"framework message data must be bytes, got {type(data).__name__}")
        self.check_data(data, "a framework message")
        return [SendToAgent(x.ExecutorMessage(self.secret, bytes(data)))]

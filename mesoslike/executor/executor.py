"""The :class:`Executor` interface users implement (docs/framework-api.rst,
"Custom executors"), as mesos.interface's.

Every callback receives the driver first. The driver calls them one at a
time, in the order the events happened, on its own thread. The defaults do
nothing, except :meth:`Executor.error`, which logs. An exception raised in a
callback is logged and reported through :meth:`Executor.error`; it never
ends the executor.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mesoslike.wire.types import AgentInfo, ExecutorInfo, FrameworkInfo, TaskInfo

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from mesoslike.executor.driver import ExecutorDriver

__all__ = ["Executor"]

log = logging.getLogger("mesoslike.executor")


class Executor:
    """Override the callbacks your executor needs; the rest are no-ops."""

    def registered(self, driver: ExecutorDriver, executor_info: ExecutorInfo, framework_info: FrameworkInfo,
                   agent_info: AgentInfo) -> None:
        """The agent that started this process took it: who it is
        (``executor_info``), for which framework, on which agent."""

    def reregistered(self, driver: ExecutorDriver, agent_info: AgentInfo) -> None:
        """The connection to the agent was made again (the agent restarted
        and recovered this executor, or the channel broke and healed).
        Updates not yet acknowledged are sent again by the driver."""

    def disconnected(self, driver: ExecutorDriver) -> None:
        """The connection to the agent dropped (the agent stopped or
        restarted); the driver is reconnecting. Tasks run on; calls made
        meanwhile are sent once the agent is back."""

    def launch_task(self, driver: ExecutorDriver, task: TaskInfo) -> None:
        """Run ``task`` (handed to this executor by the agent). Report its
        progress with :meth:`ExecutorDriver.send_status_update` — at least a
        terminal state. Do not block here for long: the driver calls the
        callbacks one at a time."""

    def kill_task(self, driver: ExecutorDriver, task_id: str) -> None:
        """The framework (or the agent) wants the task killed: end it and
        send its terminal update (TASK_KILLED)."""

    def framework_message(self, driver: ExecutorDriver, data: bytes) -> None:
        """Data the scheduler sent with ``SchedulerDriver.send_framework_message``."""

    def shutdown(self, driver: ExecutorDriver) -> None:
        """The framework was torn down (or the agent is stopping): end the
        tasks. The driver stops after this callback returns; the agent kills
        the process after the executor's ``shutdown_grace_period``."""

    def error(self, driver: ExecutorDriver, message: str) -> None:
        """The agent refused something this executor sent, or a callback raised."""
        log.error("executor error: %s", message)

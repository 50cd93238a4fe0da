"""The :class:`Scheduler` interface users implement (docs/framework-api.rst).

Every callback receives the driver first. The driver calls them one at a
time, in the order the events happened, on its own thread (see
``docs/framework-api.rst``). The defaults do nothing, except :meth:`error`,
which logs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mesoslike.wire.types import MasterInfo, Offer, TaskStatus

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from mesoslike.driver.driver import SchedulerDriver

__all__ = ["Scheduler"]

log = logging.getLogger("mesoslike.driver")


class Scheduler:
    """Override the callbacks your framework needs; the rest are no-ops."""

    def registered(self, driver: SchedulerDriver, framework_id: str, master_info: MasterInfo) -> None:
        """The master accepted this driver's first subscription and gave the
        framework ``framework_id`` (the one in ``FrameworkInfo.id`` if it
        had one and the master still knew it)."""

    def reregistered(self, driver: SchedulerDriver, master_info: MasterInfo) -> None:
        """The driver subscribed again, keeping its framework id, after it
        had lost its master. Offers made before are void. Reconcile your
        tasks: updates sent while you were away may come again, or not at all."""

    def disconnected(self, driver: SchedulerDriver) -> None:
        """The master went silent (no message for 5 heartbeat intervals). The
        driver is already re-subscribing. Calls made until
        :meth:`reregistered` are dropped."""

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        """New offers. Answer each one with ``launch_tasks`` or ``decline_offer``
        (an offer you ignore stays allocated to you until it is rescinded)."""

    def offer_rescinded(self, driver: SchedulerDriver, offer_id: str) -> None:
        """An offer is no longer valid; launching on it gives TASK_DROPPED."""

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        """A task changed state. With implicit acknowledgements the driver
        acknowledges the update after this returns (even if it raises)."""

    def framework_message(self, driver: SchedulerDriver, agent_id: str, data: bytes) -> None:
        """Opaque data sent to the framework from an agent."""

    def executor_message(self, driver: SchedulerDriver, executor_id: str, agent_id: str, data: bytes) -> None:
        """Data the custom executor ``executor_id`` on agent ``agent_id``
        sent (``ExecutorDriver.send_framework_message``). By default it
        calls :meth:`framework_message` (without the executor id): override
        this one to know which executor spoke."""
        self.framework_message(driver, agent_id, data)

    def agent_lost(self, driver: SchedulerDriver, agent_id: str) -> None:
        """An agent was removed. Its tasks come as TASK_LOST (or
        TASK_UNREACHABLE) status updates as well."""

    def executor_lost(self, driver: SchedulerDriver, executor_id: str, agent_id: str, status: int | None) -> None:
        """The process of the custom executor ``executor_id`` on agent
        ``agent_id`` ended (``status``: its exit code, minus the signal that
        killed it, or None if not known). Its tasks that had not ended come
        as TASK_FAILED updates too."""

    def preemption_warning(self, driver: SchedulerDriver, task_ids: list[str], seconds: float) -> None:
        """The master will kill these tasks in ``seconds`` to give a starved
        role its fair share (fair-share preemption). Checkpoint them, or kill
        them yourself to release their resources sooner."""

    def error(self, driver: SchedulerDriver, message: str) -> None:
        """Something went wrong: the master refused a request, a callback
        raised, or a launch was dropped. If the master's error was fatal,
        ``driver.status`` is already DRIVER_ABORTED and no further callbacks
        follow."""
        log.error("framework error: %s", message)

"""A one-shot command framework, like ``mesos-execute``: run a shell command
as N task instances, report progress, end with their outcome.

Built only on the public API (``mesoslike``), like every bundled framework.
``mesoslike run`` is its command line.
"""

from __future__ import annotations

import threading
from typing import Callable

from mesoslike import Filters, FrameworkInfo, Resources, Scheduler, TaskInfo, TaskState, TaskStatus

__all__ = ["CommandScheduler", "Progress", "instance_of"]


class Progress:
    """Counts of the instances by what happened to them."""

    def __init__(self, instances: int) -> None:
        self.instances = instances
        self.launched = 0
        self.states: dict[str, str] = {}       # task id -> latest state
        self.exit_codes: dict[str, int | None] = {}
        self.messages: dict[str, str] = {}     # task id -> the message of its latest status
        self.agents: dict[str, str] = {}       # task id -> the agent it runs (ran) on

    def count(self, *states: str) -> int:
        return sum(1 for state in self.states.values() if state in states)

    @property
    def finished(self) -> int:
        return self.count(TaskState.FINISHED)

    @property
    def running(self) -> int:
        return self.count(TaskState.RUNNING, TaskState.STARTING, TaskState.STAGING, TaskState.KILLING)

    @property
    def failed(self) -> int:
        return sum(1 for state in self.states.values() if state != TaskState.FINISHED and _terminal(state))

    @property
    def done(self) -> bool:
        return self.finished + self.failed == self.instances

    def failures(self) -> list[str]:
        """The ids of the instances that ended other than TASK_FINISHED, in instance order."""
        return sorted((task_id for task_id, state in self.states.items()
                       if state != TaskState.FINISHED and _terminal(state)), key=_instance_order)

    def summary(self) -> str:
        return (f"{self.finished}/{self.instances} finished, {self.failed} failed, {self.running} running, "
                f"{self.instances - self.launched} waiting")


def _terminal(state: str) -> bool:
    return TaskStatus(task_id="", state=state).terminal


def instance_of(task_id: str) -> int | None:
    """The instance number of a task id ``<name>-<n>`` (None for another id)."""
    number = task_id.rpartition("-")[2]
    return int(number) if number.isdigit() else None


def _instance_order(task_id: str) -> tuple[int, str]:
    number = instance_of(task_id)
    return (number if number is not None else -1, task_id)


class CommandScheduler(Scheduler):
    """Launches ``instances`` copies of ``command`` (as many per offer as fit),
    declines what it cannot use, suppresses offers once everything is
    launched, and stops the driver when every instance has ended.

    ``on_change(progress, status)`` is called on the driver thread after each
    status update (``status`` None for other progress changes).
    """

    def __init__(self, command: str, resources: Resources, instances: int = 1, name: str = "run",
                 on_change: Callable[[Progress, TaskStatus | None], None] | None = None,
                 environment: dict[str, str] | None = None) -> None:
        self.command = command
        self.resources = resources
        self.name = name
        self.environment = dict(environment or {})
        self.progress = Progress(instances)
        self.on_change = on_change or (lambda progress, status: None)
        self.errors: list[str] = []
        self.finished = threading.Event()
        self.framework_id = ""

    def registered(self, driver, framework_id, master_info) -> None:
        self.framework_id = framework_id
        self.on_change(self.progress, None)

    def reregistered(self, driver, master_info) -> None:
        driver.reconcile_tasks([])

    def resource_offers(self, driver, offers) -> None:
        progress = self.progress
        for offer in offers:
            tasks, free = [], offer.resources
            while progress.launched < progress.instances and free.contains(self.resources):
                task_id = f"{self.name}-{progress.launched}"
                tasks.append(TaskInfo(task_id=task_id, agent_id=offer.agent_id, command=self.command,
                                      resources=self.resources, name=self.name, environment=self.environment))
                progress.states[task_id] = TaskState.STAGING
                progress.launched += 1
                free = free - self.resources
            if tasks:
                driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=1.0))
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=5.0))
        if progress.launched >= progress.instances:
            driver.suppress_offers()
        self.on_change(progress, None)

    def status_update(self, driver, status: TaskStatus) -> None:
        progress = self.progress
        if status.task_id not in progress.states:
            return
        progress.states[status.task_id] = status.state
        progress.messages[status.task_id] = status.message
        if status.agent_id:
            progress.agents[status.task_id] = status.agent_id
        if status.terminal:
            progress.exit_codes[status.task_id] = status.exit_code
            if status.state in (TaskState.LOST, TaskState.DROPPED) and progress.launched <= progress.instances:
                pass  # reported as failed; a one-shot runner does not retry
        self.on_change(progress, status)
        if progress.done:
            self.finished.set()
            driver.stop()

    def error(self, driver, message: str) -> None:
        self.errors.append(message)

    def exit_code(self) -> int:
        """0 if every instance finished successfully; else the exit code of
        a failed instance when it had one, else 1."""
        if self.progress.finished == self.progress.instances:
            return 0
        for task_id, state in sorted(self.progress.states.items()):
            code = self.progress.exit_codes.get(task_id)
            if state != TaskState.FINISHED and code:
                return code if 0 < code < 256 else 1
        return 1


def framework_info(name: str, role: str) -> FrameworkInfo:
    return FrameworkInfo(name=name, role=role, failover_timeout=0.0)

"""What the agent's HTTP endpoints read of it (:class:`~mesoslike.agent.http.AgentView`):
``/health``, ``/state``, ``/monitor/statistics``, ``/containers`` and ``/metrics``, each
taken under the loop's lock from the runtime's core, executor and counters
(docs/agent.rst, docs/observability.rst). The runtime only runs the agent;
what an operator reads of it is put together here.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from mesoslike import __version__
from mesoslike.agent.core import AgentCore
from mesoslike.agent.executor import TaskExecutor, path_component
from mesoslike.agent.executors import executor_id_of_run
from mesoslike.agent.files import MayRead
from mesoslike.agent.http import AgentHTTPServer
from mesoslike.agent.isolation import Isolation, Isolator
from mesoslike.attributes import attributes_json
from mesoslike.metrics import exposition, metrics_registry
from mesoslike.observations import Histogram, Metric, metric
from mesoslike.v1.shapes import container_status_message
from mesoslike.wire.messages import TaskUsage
from mesoslike.wire.types import ContainerStatus

__all__ = ["AgentViews", "ViewedAgent"]


class ViewedAgent(Protocol):
    """What the views read of an agent — the runtime
    (:class:`~mesoslike.agent.runtime.AgentRuntime`) is one. Said here, where
    it is read, so that the views need not know the runtime that holds them."""

    core: AgentCore
    executor: TaskExecutor
    isolation: Isolation
    isolator: Isolator
    http: AgentHTTPServer | None
    hostname: str
    switch_user: bool
    agent_user: str
    work_dir: Path
    executor_socket: Path
    recovery_errors: list[tuple[str, str]]
    counters: dict[str, int]
    launches_started: Histogram


class AgentViews:
    """The agent's documents and metrics, for its HTTP server's threads.

    :param agent: the runtime whose state they show.
    :param lock: the loop's lock (it guards the core and the executor).
    """

    def __init__(self, agent: ViewedAgent, lock: threading.RLock) -> None:
        self._agent = agent
        self._lock = lock
        self._metrics_registry = metrics_registry(self.metrics)

    def health_document(self) -> dict:
        agent = self._agent
        with self._lock:
            return {"healthy": True, "registered": agent.core.registered, "agent_id": agent.core.agent_id,
                    "draining": agent.core.draining}

    def state_document(self) -> dict:
        agent = self._agent
        with self._lock:
            core = agent.core
            master = core.master
            tasks = []
            for task in core.tasks():
                sandbox = agent.executor.sandbox(task.framework_id, task.task_id)
                container = agent.executor.container(task.framework_id, task.task_id)
                isolation, image = agent.executor.isolation_of(task.framework_id, task.task_id)
                tasks.append({"framework_id": task.framework_id, "id": task.task_id, "state": task.state,
                              "resources": str(task.resources), "pid": task.pid, "killing": task.killing,
                              "pending_updates": task.pending_updates, "sandbox": str(sandbox),
                              "user": task.user if agent.switch_user and task.user else agent.agent_user,
                              "sandbox_path": f"{path_component(task.framework_id)}/{path_component(task.task_id)}",
                              "cgroups": dict(container.cgroups) if container is not None else {},
                              "isolation": list(isolation), "image": image})
            return {
                "id": core.agent_id, "hostname": agent.hostname, "registered": core.registered,
                "master": {"id": master.id, "address": master.address} if master is not None else None,
                "http_address": core.http_address, "version": __version__,
                "resources": str(core.total), "used": str(core.used), "attributes": attributes_json(core.info.attributes),
                "work_dir": str(agent.work_dir), "sandbox_root": str(agent.executor.sandbox_root),
                "isolation": {"name": agent.isolator.name, "enforcing": agent.isolator.enforcing,
                              "description": agent.isolation.describe(), **agent.isolation.to_json()},
                "switch_user": agent.switch_user,
                "draining": core.draining, "tasks": tasks, "executor_channel": f"ipc://{agent.executor_socket}",
                "executors": [{"framework_id": e.framework_id, "id": e.executor_id, "resources": str(e.resources),
                               "pid": e.pid, "registered": e.registered, "tasks": e.tasks} for e in core.executors()],
                "recovery_errors": [{"path": path, "problem": problem} for path, problem in agent.recovery_errors],
            }

    def statistics_document(self) -> list[dict]:
        agent = self._agent
        with self._lock:
            rows = agent.executor.usage()
        return [{"framework_id": u.framework_id, "executor_id": u.task_id, "task_id": u.task_id,
                 "source": agent.hostname, "statistics": u.statistics()} for u in rows]

    def containers_document(self, may_read: MayRead | None = None, container_id: str | None = None) -> list[dict]:
        """``/containers`` (Mesos's agent endpoint): an entry per running
        container — each task's (its command's) and each custom executor's —
        of the frameworks whose sandboxes ``may_read`` admits (None: all),
        only ``container_id``'s if given. Its ``statistics`` are what
        ``/monitor/statistics`` measures (a container whose process has not
        started, or ended while it was read, is left out, as there);
        ``container_id`` is the run's name on the agent, ``FRAMEWORK/RUN``
        (its sandbox below the sandbox root: ``/state``'s ``sandbox_path``,
        ``/files``'s ``path``)."""
        agent = self._agent

        def shown(framework_id: str, run_id: str) -> bool:
            return (may_read is None or may_read(path_component(framework_id))) and \
                (container_id is None or _container_id(framework_id, run_id) == container_id)

        with self._lock:
            rows = agent.executor.usage(shown)
            names = {(e.framework_id, e.executor_id): e.name for e in agent.core.executors()}
            # its container as its updates tell it; before the core has heard of its start, what the executor knows
            statuses = [agent.core.container_status(u.framework_id, u.task_id) or _started_container(agent, u)
                        for u in rows]
        entries = []
        for usage, container in zip(rows, statuses):
            framework_id, run_id = usage.framework_id, usage.task_id
            name = _container_id(framework_id, run_id)
            executor_id = executor_id_of_run(run_id)
            # Mesos's ContainerStatus (container_id, executor_pid, network_infos), and the isolators it got and
            # its image, as the master's /state shows them
            status = {"container_id": {"value": name}, **container_status_message(container),
                      "isolators": list(container.isolators), "image": container.image}
            entries.append({
                "container_id": name, "framework_id": framework_id,
                "executor_id": executor_id if executor_id is not None else run_id,
                # a task's own command runs as Mesos's command executor would: named for it, its source the task
                "executor_name": names.get((framework_id, executor_id), "") if executor_id is not None
                else f"Command Executor (Task: {run_id})",
                "source": "" if executor_id is not None else run_id,
                "status": status, "statistics": usage.statistics()})
        return entries

    def metrics_text(self) -> str:
        """``/metrics``: what :meth:`metrics` reads, through prometheus_client (mesoslike.metrics)."""
        return exposition(self._metrics_registry).decode()

    def metrics(self) -> list[Metric]:
        """Every metric of this agent now (the registry's collector calls it at each scrape)."""
        agent = self._agent
        with self._lock:
            states: dict[str, int] = {}
            for task in agent.core.tasks():
                states[task.state] = states.get(task.state, 0) + 1
            counters = dict(agent.counters)
            registered = int(agent.core.registered)
            started = agent.launches_started.copy()
        refused = agent.http.counters.snapshot() if agent.http is not None else {}
        return [
            metric("agent_registered", "gauge", "1 while a master has registered this agent.", registered),
            metric("agent_tasks", "gauge", "Tasks the agent knows, by state.",
                   [({"state": state}, count) for state, count in sorted(states.items())]),
            metric("agent_files_refused_total", "counter",
                   "Requests to /files refused for leading out of the sandboxes, by kind.",
                   [({"reason": kind}, count) for kind, count in sorted(refused.items())]),
            metric("agent_sandboxes_collected_total", "counter", "Sandboxes of ended tasks removed by the GC.",
                   counters["sandboxes_collected"]),
            metric("agent_checkpoint_failures_total", "counter", "Checkpoint writes that failed (a full disk?).",
                   counters["checkpoint_failures"]),
            metric("agent_recovery_errors", "gauge", "Checkpoint files unreadable at the last start.",
                   len(agent.recovery_errors)),
            metric("agent_reregistrations_on_reconnect_total", "counter",
                   "Re-registrations because the connection to the master was made again.",
                   counters["reregistrations_on_reconnect"]),
            metric("agent_fresh_connections_total", "counter",
                   "Connections to the master thrown away and made anew because the master fell silent or a "
                   "registration got no answer (docs/reliability.rst, \"Partitions\").",
                   counters["fresh_connections"]),
            metric("agent_task_start_seconds", "histogram",
                   "Tasks by the time from their RUN_TASK read to their process started (launches wait in "
                   "line while many arrive at once).", started),
        ]


def _container_id(framework_id: str, run_id: str) -> str:
    """``/containers``'s id of a run's container: ``FRAMEWORK/RUN`` as its sandbox is named."""
    return f"{path_component(framework_id)}/{path_component(run_id)}"


def _started_container(agent: ViewedAgent, usage: TaskUsage) -> ContainerStatus:
    """A running container the core has not yet been told of (its start is the loop's next turn): its
    isolators, image and process as the executor knows them."""
    isolators, image = agent.executor.isolation_of(usage.framework_id, usage.task_id)
    pid = agent.executor.pid(usage.framework_id, usage.task_id) or 0
    return ContainerStatus(list(isolators), image, pid, agent.core.ip_address)

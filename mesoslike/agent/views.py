"""What the agent's HTTP endpoints read of it (:class:`~mesoslike.agent.http.AgentView`):
``/health``, ``/state``, ``/monitor/statistics`` and ``/metrics``, each
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
from mesoslike.agent.http import AgentHTTPServer
from mesoslike.agent.isolation import Isolation, Isolator
from mesoslike.attributes import attributes_json
from mesoslike.metrics import exposition, metrics_registry
from mesoslike.observations import Histogram, Metric, metric

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

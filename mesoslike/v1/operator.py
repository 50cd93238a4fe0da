"""Mesos's v1 operator API on the master, answered from its state
(docs/mesos-api.rst, "Operator API"): ``GET_HEALTH``, ``GET_VERSION``,
``GET_STATE``, ``GET_AGENTS``, ``GET_FRAMEWORKS``, ``GET_TASKS``,
``GET_EXECUTORS``, ``GET_MASTER`` from a :class:`StateSnapshot`; the
``SUBSCRIBE`` stream's events from the differences between two
:class:`OperatorView` of successive snapshots (so a change and its undoing
between two looks are not seen). Pure.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from mesoslike.master.state import StateSnapshot
from mesoslike.resources import Resources
from mesoslike.v1.calls import CallError
from mesoslike.v1.shapes import (Message, framework_message, id_message, labels_message, master_info_message,
                                 resources_message, status_message)
from mesoslike.wire.types import TERMINAL_STATES, AgentInfo, MasterInfo

__all__ = ["CALLS", "MESOS_VERSION", "answer", "OperatorView", "view_of", "changes", "subscribed_event"]

#: the Mesos version whose API this one speaks (GET_VERSION, ``/version``)
MESOS_VERSION = "1.11.0"
#: the calls answered (the rest are Mesos's too, but not mesoslike's: 501)
CALLS = ("GET_HEALTH", "GET_VERSION", "GET_STATE", "GET_AGENTS", "GET_FRAMEWORKS", "GET_TASKS", "GET_EXECUTORS",
         "GET_MASTER", "SUBSCRIBE")
_EMPTY = Resources()


def _seconds(value: float) -> Message:
    return {"nanoseconds": int(value * 1e9)}


def _agent_info(info: AgentInfo) -> Message:
    message: Message = {"id": id_message(info.id), "hostname": info.hostname,
                        "resources": resources_message(info.resources)}
    if info.port:
        message["port"] = info.port
    if info.attributes:
        message["attributes"] = [{"name": name, "type": "TEXT", "text": {"value": value}}
                                 for name, value in sorted(info.attributes.items())]
    return message


def _task(info: Any, status: Any, agent_id: str, framework_id: str) -> Message:
    task: Message = {"name": info.name or info.task_id, "task_id": id_message(info.task_id),
                     "framework_id": id_message(framework_id), "agent_id": id_message(agent_id),
                     "state": status.state, "resources": resources_message(info.resources),
                     "statuses": [status_message(status)], "status_update_state": status.state}
    if info.executor is not None:
        task["executor_id"] = id_message(info.executor.executor_id)
    if info.labels:
        task["labels"] = labels_message(info.labels)
    if info.user:
        task["user"] = info.user
    return task


def _tasks(snap: StateSnapshot) -> Message:
    live: list[Message] = []
    completed: list[Message] = []
    for line in sorted(snap.frameworks, key=lambda line: line.info.id):
        for info, status, agent_id, _ in sorted(line.tasks, key=lambda task: task[0].task_id):
            (completed if status.state in TERMINAL_STATES else live).append(_task(info, status, agent_id,
                                                                                  line.info.id))
        completed += [_task(record.info, record.status, record.agent_id, line.info.id) for record in line.completed]
    for framework in snap.completed_frameworks:
        completed += [_task(record.info, record.status, record.agent_id, framework.info.id)
                      for record in framework.tasks]
    return {"pending_tasks": [], "tasks": live, "unreachable_tasks": [], "completed_tasks": completed,
            "orphan_tasks": []}


def _framework(line: Any, offered: Resources, used: Resources) -> Message:
    return {"framework_info": framework_message(line.info), "active": line.connected, "connected": line.connected,
            "recovered": False, "allocated_resources": resources_message(used),
            "offered_resources": resources_message(offered)}


def _frameworks(snap: StateSnapshot) -> Message:
    offered: dict[str, Resources] = {}
    for offer in snap.offers:
        offered[offer.framework_id] = offered.get(offer.framework_id, _EMPTY) + offer.resources
    frameworks = []
    for line in sorted(snap.frameworks, key=lambda line: line.info.id):
        used = Resources.sum([info.resources for info, status, _, _ in line.tasks
                              if status.state not in TERMINAL_STATES])
        frameworks.append(_framework(line, offered.get(line.info.id, _EMPTY), used))
    completed = [{"framework_info": framework_message(framework.info), "active": False, "connected": False,
                  "recovered": False} for framework in reversed(snap.completed_frameworks)]
    return {"frameworks": frameworks, "completed_frameworks": completed}


def _agents(snap: StateSnapshot) -> Message:
    used: dict[str, Resources] = {}
    for line in snap.frameworks:
        for info, status, agent_id, _ in line.tasks:
            if status.state not in TERMINAL_STATES:
                used[agent_id] = used.get(agent_id, _EMPTY) + info.resources
    offered: dict[str, Resources] = {}
    for offer in snap.offers:
        offered[offer.agent_id] = offered.get(offer.agent_id, _EMPTY) + offer.resources
    agents = [{"agent_info": _agent_info(info), "active": info.id not in snap.drains,
               "deactivated": info.id in snap.drains, "pid": f"slave(1)@{_host_port(http)}",
               "total_resources": resources_message(info.resources),
               "allocated_resources": resources_message(used.get(info.id, _EMPTY)),
               "offered_resources": resources_message(offered.get(info.id, _EMPTY))}
              for info, _, http in sorted(snap.agents, key=lambda agent: agent[0].id)]
    return {"agents": agents, "recovered_agents": [_agent_info(info) for info in snap.recovered_agents]}


def _executors(snap: StateSnapshot) -> Message:
    seen: dict[tuple[str, str, str], Message] = {}
    for line in snap.frameworks:
        for info, status, agent_id, _ in line.tasks:
            if info.executor is not None and status.state not in TERMINAL_STATES:
                executor = info.executor
                seen[(line.info.id, agent_id, executor.executor_id)] = {
                    "executor_info": {"executor_id": id_message(executor.executor_id),
                                      "framework_id": id_message(line.info.id), "name": executor.name,
                                      "command": {"value": executor.command},
                                      "resources": resources_message(executor.resources)},
                    "agent_id": id_message(agent_id)}
    return {"executors": [seen[key] for key in sorted(seen)]}


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/") or "0.0.0.0:0"


def _state(snap: StateSnapshot) -> Message:
    return {"get_tasks": _tasks(snap), "get_executors": _executors(snap), "get_frameworks": _frameworks(snap),
            "get_agents": _agents(snap)}


def version_info(mesoslike_version: str) -> Message:
    return {"version": MESOS_VERSION, "mesoslike_version": mesoslike_version}


def answer(kind: str, snap: StateSnapshot | None, master: MasterInfo, healthy: bool, version: str,
           start_time: float) -> Message:
    """The answer to the operator call ``kind`` (not SUBSCRIBE); ``snap``:
    the leading master's state (None on a master that does not lead, which
    answers only GET_HEALTH and GET_VERSION). CallError for other calls."""
    if kind == "GET_HEALTH":
        return {"type": kind, "get_health": {"healthy": healthy}}
    if kind == "GET_VERSION":
        return {"type": kind, "get_version": {"version_info": version_info(version)}}
    if kind not in CALLS or kind == "SUBSCRIBE":
        raise CallError(501, f"the operator call {kind[:40]!r} is not one mesoslike answers "
                             f"({', '.join(CALLS)}; docs/mesos-api.rst)")
    if snap is None:
        raise CallError(503, "this master does not lead")
    if kind == "GET_MASTER":
        return {"type": kind, "get_master": {"master_info": master_info_message(master, http=True),
                                             "start_time": start_time}}
    body = {"GET_STATE": _state, "GET_AGENTS": _agents, "GET_FRAMEWORKS": _frameworks, "GET_TASKS": _tasks,
            "GET_EXECUTORS": _executors}[kind](snap)
    return {"type": kind, kind.lower(): body}


def subscribed_event(snap: StateSnapshot, heartbeat_interval: float) -> Message:
    return {"type": "SUBSCRIBED", "subscribed": {"get_state": _state(snap),
                                                 "heartbeat_interval_seconds": heartbeat_interval}}


# ------------------------------------------------------------- the stream
@attrs.frozen
class OperatorView:
    """What the event stream compares: tasks by (framework, task) with their
    latest status, agents and frameworks by id."""

    tasks: Mapping[tuple[str, str], tuple[Any, Any, str]]
    agents: Mapping[str, Message]
    frameworks: Mapping[str, Message]


def view_of(snap: StateSnapshot) -> OperatorView:
    tasks = {(line.info.id, record.info.task_id): (record.info, record.status, record.agent_id)
             for line in snap.frameworks for record in line.completed}   # ended: their last status
    tasks.update({(line.info.id, info.task_id): (info, status, agent_id)
                  for line in snap.frameworks for info, status, agent_id, _ in line.tasks})
    agents = {agent["agent_info"]["id"]["value"]: agent for agent in _agents(snap)["agents"]}
    frameworks = {framework["framework_info"]["id"]["value"]: framework
                  for framework in _frameworks(snap)["frameworks"]}
    return OperatorView(tasks, agents, frameworks)


def changes(before: OperatorView, after: OperatorView) -> list[Message]:
    """The operator events that take ``before`` to ``after``, in Mesos's
    kinds: AGENT_ADDED/REMOVED, FRAMEWORK_ADDED/UPDATED/REMOVED,
    TASK_ADDED/UPDATED: a task's changes between two looks are one
    TASK_UPDATED with its latest status (a task seen first when it has
    ended is one TASK_ADDED with its terminal state)."""
    events: list[Message] = []
    for agent_id, agent in after.agents.items():
        if agent_id not in before.agents:
            events.append({"type": "AGENT_ADDED", "agent_added": {"agent": agent}})
    for agent_id in before.agents.keys() - after.agents.keys():
        events.append({"type": "AGENT_REMOVED", "agent_removed": {"agent_id": id_message(agent_id)}})
    for framework_id, framework in after.frameworks.items():
        old = before.frameworks.get(framework_id)
        if old is None:
            events.append({"type": "FRAMEWORK_ADDED", "framework_added": {"framework": framework}})
        elif (old["framework_info"], old["connected"]) != (framework["framework_info"], framework["connected"]):
            events.append({"type": "FRAMEWORK_UPDATED", "framework_updated": {"framework": framework}})
    for framework_id in before.frameworks.keys() - after.frameworks.keys():
        events.append({"type": "FRAMEWORK_REMOVED",
                        "framework_removed": {"framework_info": before.frameworks[framework_id]["framework_info"]}})
    for key, (info, status, agent_id) in after.tasks.items():
        was = before.tasks.get(key)
        if was is None:
            events.append({"type": "TASK_ADDED", "task_added": {"task": _task(info, status, agent_id, key[0])}})
        elif was[1] != status:
            events.append({"type": "TASK_UPDATED", "task_updated": {
                "framework_id": id_message(key[0]), "status": status_message(status), "state": status.state}})
    return events

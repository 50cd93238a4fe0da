"""Mesos's v1 executor API, translated (docs/mesos-api.rst, "Executor
API"): an executor's JSON calls become the executor channel's messages
(:mod:`mesoslike.wire.executor_messages`), each carrying the executor's
secret as if the executor had sent it over the channel, so the agent's core
handles both front ends alike; what the core sends the executor becomes
Mesos's executor events. Pure: the runtime is
:mod:`mesoslike.agent.v1_executor`.
"""

from __future__ import annotations

from typing import Any, Mapping

from mesoslike.v1.calls import CallError
from mesoslike.v1.shapes import (MAX_STATUS_DATA, Message, ShapeError, agent_message, data_from, encode_data,
                                 encode_uuid, executor_message, executor_task_message, framework_message, id_message,
                                 status_from_executor, value_of)
from mesoslike.wire import executor_messages as x

__all__ = ["CALLS", "executor_of", "channel_messages", "events", "MAX_UNACKNOWLEDGED"]

#: the calls an executor makes
CALLS = ("SUBSCRIBE", "UPDATE", "MESSAGE", "HEARTBEAT")
#: tasks and updates one SUBSCRIBE may list as unacknowledged
MAX_UNACKNOWLEDGED = 10_000


def _bad(what: str) -> CallError:
    return CallError(400, f"Failed to validate Executor::Call: {what}")


def executor_of(call: Mapping[str, Any]) -> tuple[str, str]:
    """(framework id, executor id) a call names; CallError 400 without them
    or for a call type the API does not have."""
    if call.get("type") not in CALLS:
        raise _bad(f"unknown call type {str(call.get('type'))[:40]!r}")
    try:
        return (value_of(call.get("framework_id"), "framework_id"),
                value_of(call.get("executor_id"), "executor_id"))
    except ShapeError as exc:
        raise _bad(str(exc)) from None


def _body(call: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    body = call.get(name)
    if not isinstance(body, Mapping):
        raise _bad(f"Expecting '{name}' to be present")
    return body


def channel_messages(call: Mapping[str, Any], secret: str, max_data: int = MAX_STATUS_DATA) -> list[object]:
    """The executor channel's messages a call stands for, in order (HEARTBEAT:
    none). SUBSCRIBE re-sends the updates it lists as unacknowledged after
    registering (the agent takes a resent one only once). Data (an update's,
    a message's) is at most ``max_data`` bytes (the agent's
    ``--max-message-size``): more is a 400."""
    kind = call.get("type")
    try:
        if kind == "SUBSCRIBE":
            body = call.get("subscribe") or {}
            if not isinstance(body, Mapping):
                raise _bad("'subscribe' must be an object")
            tasks, updates = body.get("unacknowledged_tasks") or [], body.get("unacknowledged_updates") or []
            if not isinstance(tasks, list) or not isinstance(updates, list) \
                    or len(tasks) + len(updates) > MAX_UNACKNOWLEDGED:
                raise _bad(f"'subscribe' lists at most {MAX_UNACKNOWLEDGED} unacknowledged tasks and updates")
            task_ids = [value_of(task.get("task_id") if isinstance(task, Mapping) else None,
                                 "subscribe.unacknowledged_tasks[].task_id") for task in tasks]
            resent = [x.ExecutorStatus(secret, status_from_executor(
                _body(update, "status") if isinstance(update, Mapping) else update, max_data)) for update in updates]
            return [x.RegisterExecutor(secret, task_ids), *resent]
        if kind == "UPDATE":
            return [x.ExecutorStatus(secret, status_from_executor(_body(call, "update").get("status"), max_data))]
        if kind == "MESSAGE":
            payload = data_from(_body(call, "message").get("data"), "message.data")
            if len(payload) > max_data:
                raise _bad(f"message.data holds {len(payload)} bytes; at most {max_data} (the agent's "
                           "--max-message-size)")
            return [x.ExecutorMessage(secret, payload)]
        return []
    except ShapeError as exc:
        raise _bad(str(exc)) from None
    except (TypeError, ValueError) as exc:   # a bound of the channel's messages (a message's size)
        raise _bad(str(exc)) from None


def events(message: object) -> list[Message]:
    """The executor events a message of the agent's core to the executor stands for."""
    if isinstance(message, x.ExecutorRegistered):
        framework_id = message.framework.id
        return [{"type": "SUBSCRIBED", "subscribed": {
            "executor_info": executor_message(message.executor, framework_id, message.executor.environment),
            "framework_info": framework_message(message.framework),
            "agent_info": agent_message(message.agent),
            "container_id": id_message(message.executor.run_id().replace("\x1b", ""))}}]
    if isinstance(message, x.LaunchExecutorTask):
        task = message.task
        executor = executor_message(task.executor, "", task.executor.environment) if task.executor else {}
        executor.pop("framework_id", None)
        return [{"type": "LAUNCH", "launch": {"task": executor_task_message(task, executor)}}]
    if isinstance(message, x.KillExecutorTask):
        return [{"type": "KILL", "kill": {"task_id": id_message(message.task_id)}}]
    if isinstance(message, x.ExecutorFrameworkMessage):
        return [{"type": "MESSAGE", "message": {"data": encode_data(message.data)}}]
    if isinstance(message, x.ExecutorStatusAck):
        return [{"type": "ACKNOWLEDGED", "acknowledged": {"task_id": id_message(message.task_id),
                                                          "uuid": encode_uuid(message.uuid)}}]
    if isinstance(message, x.ShutdownExecutor):
        return [{"type": "SHUTDOWN"}]
    if isinstance(message, x.ExecutorError):
        return [{"type": "ERROR", "error": {"message": message.message}}]
    return []

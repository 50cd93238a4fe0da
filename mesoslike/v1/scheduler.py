"""Mesos's v1 scheduler API, translated (docs/mesos-api.rst, "Scheduler
API"): a scheduler's JSON calls become the master protocol's messages
(:mod:`mesoslike.wire.messages`), which the master's core handles exactly as
if they had come over ZeroMQ; the core's messages to the framework become
Mesos's JSON events. Pure: the runtime that streams them is
:mod:`mesoslike.master.v1_api`.

What the core says that Mesos has no event for stays out of the stream:
PREEMPTION_WARNING (mesoslike's fair-share preemption), and a non-fatal
ERROR (a refused call: Mesos answers those with HTTP statuses or task
updates, and its ERROR event means the framework is done for) — those are
logged by the runtime.
"""

from __future__ import annotations

from typing import Any, Mapping

from mesoslike.v1.calls import CallError
from mesoslike.v1.shapes import (Message, ShapeError, data_from, decode_uuid, encode_data, filters_from, framework_info,
                                 id_message, master_info_message, offer_message, operations_from, status_message,
                                 value_of)
from mesoslike.wire import messages as m
from mesoslike.wire.types import MasterInfo, TaskStatus

__all__ = ["CALLS", "NO_OPS", "subscribe_message", "call_message", "events", "MAX_RECONCILE_TASKS"]

#: the calls this API takes (docs/mesos-api.rst); ``UNKNOWN`` and others are refused
CALLS = ("SUBSCRIBE", "TEARDOWN", "ACCEPT", "DECLINE", "ACCEPT_INVERSE_OFFERS", "DECLINE_INVERSE_OFFERS", "REVIVE",
         "KILL", "SHUTDOWN", "ACKNOWLEDGE", "ACKNOWLEDGE_OPERATION_STATUS", "RECONCILE", "RECONCILE_OPERATIONS",
         "MESSAGE", "REQUEST", "SUPPRESS", "UPDATE_FRAMEWORK")
#: calls accepted and with nothing to do: mesoslike makes no inverse offers, has no operation feedback,
#: and, as Mesos's allocator, ignores resource requests
NO_OPS = ("ACCEPT_INVERSE_OFFERS", "DECLINE_INVERSE_OFFERS", "ACKNOWLEDGE_OPERATION_STATUS", "RECONCILE_OPERATIONS",
          "REQUEST")
#: tasks one RECONCILE may name
MAX_RECONCILE_TASKS = 100_000


def _bad(what: str) -> CallError:
    return CallError(400, f"Failed to validate scheduler::Call: {what}")


def _body(call: Mapping[str, Any], name: str, required: bool = True) -> Mapping[str, Any]:
    body = call.get(name)
    if body is None and not required:
        return {}
    if not isinstance(body, Mapping):
        raise _bad(f"Expecting '{name}' to be present")
    return body


def subscribe_message(call: Mapping[str, Any]) -> m.Subscribe:
    """SUBSCRIBE as the master's ``Subscribe``. A top-level ``framework_id``
    must be the framework info's ``id`` (Mesos checks the same)."""
    body = _body(call, "subscribe")
    try:
        info = framework_info(body.get("framework_info"))
        if call.get("framework_id") is not None:
            named = value_of(call.get("framework_id"), "framework_id")
            if named != info.id:
                raise _bad("'framework_id' differs from 'subscribe.framework_info.id'")
    except ShapeError as exc:
        raise _bad(str(exc)) from None
    return m.Subscribe(info, force=False, accepts_batches=False)


def call_message(call: Mapping[str, Any], framework_id: str) -> object | None:
    """The master message a call other than SUBSCRIBE stands for, from the
    framework subscribed as ``framework_id`` (None: a call with nothing to
    do, :data:`NO_OPS`); CallError 400 for a malformed call."""
    kind = call.get("type")
    if kind not in CALLS or kind == "SUBSCRIBE":
        raise CallError(501 if kind == "UNKNOWN" else 400,
                        f"Failed to validate scheduler::Call: unknown call type {str(kind)[:40]!r}"
                        if kind != "SUBSCRIBE" else "SUBSCRIBE is answered with a stream")
    try:
        if value_of(call.get("framework_id"), "framework_id") != framework_id:
            raise _bad(f"'framework_id' is not the framework subscribed on stream ({framework_id})")
        if kind in NO_OPS:
            return None
        return _TRANSLATIONS[str(kind)](call, framework_id)
    except ShapeError as exc:
        raise _bad(str(exc)) from None


def _ids(items: object, what: str) -> list[str]:
    if not isinstance(items, list):
        raise _bad(f"'{what}' must be a list of {{'value': ID}}")
    return [value_of(item, what) for item in items]


def _accept(call: Mapping[str, Any], framework_id: str) -> m.Accept:
    body = _body(call, "accept")
    filters = filters_from(body.get("filters"))
    return m.Accept(framework_id, _ids(body.get("offer_ids"), "accept.offer_ids"), [],
                    **({"filters": filters} if filters is not None else {}),
                    operations=operations_from(body.get("operations") or [], "accept.operations"))


def _decline(call: Mapping[str, Any], framework_id: str) -> m.Decline:
    body = _body(call, "decline")
    filters = filters_from(body.get("filters"))
    return m.Decline(framework_id, _ids(body.get("offer_ids"), "decline.offer_ids"),
                     **({"filters": filters} if filters is not None else {}))


def _kill(call: Mapping[str, Any], framework_id: str) -> m.Kill:
    body = _body(call, "kill")
    agent = body.get("agent_id")
    return m.Kill(framework_id, value_of(body.get("task_id"), "kill.task_id"),
                  value_of(agent, "kill.agent_id") if agent else "")


def _shutdown(call: Mapping[str, Any], framework_id: str) -> m.ShutdownExecutor:
    body = _body(call, "shutdown")
    return m.ShutdownExecutor(framework_id, value_of(body.get("executor_id"), "shutdown.executor_id"),
                              value_of(body.get("agent_id"), "shutdown.agent_id"))


def _acknowledge(call: Mapping[str, Any], framework_id: str) -> m.Acknowledge:
    body = _body(call, "acknowledge")
    uuid = body.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise _bad("'acknowledge.uuid' must be the update's uuid (base64)")
    return m.Acknowledge(framework_id, value_of(body.get("agent_id"), "acknowledge.agent_id"),
                         value_of(body.get("task_id"), "acknowledge.task_id"), decode_uuid(uuid))


def _reconcile(call: Mapping[str, Any], framework_id: str) -> m.Reconcile:
    tasks = _body(call, "reconcile", required=False).get("tasks") or []
    if not isinstance(tasks, list) or len(tasks) > MAX_RECONCILE_TASKS:
        raise _bad(f"'reconcile.tasks' must be a list of at most {MAX_RECONCILE_TASKS} tasks")
    items = []
    for index, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise _bad(f"'reconcile.tasks[{index}]' must be {{'task_id': ..., 'agent_id': ...}}")
        agent = task.get("agent_id")
        items.append(m.ReconcileTask(value_of(task.get("task_id"), f"reconcile.tasks[{index}].task_id"),
                                     value_of(agent, f"reconcile.tasks[{index}].agent_id") if agent else ""))
    return m.Reconcile(framework_id, items)


def _message(call: Mapping[str, Any], framework_id: str) -> m.FrameworkMessage:
    """MESSAGE to an executor: a custom executor of that id if the agent runs
    one, else the command task of that id (Mesos's command executor has its
    task's id), whose sandbox's ``messages`` file gets it."""
    body = _body(call, "message")
    executor = value_of(body.get("executor_id"), "message.executor_id")
    payload = data_from(body.get("data"), "message.data")
    return m.FrameworkMessage(framework_id, value_of(body.get("agent_id"), "message.agent_id"), payload,
                              task_id=executor, executor_id=executor)


def _update_framework(call: Mapping[str, Any], framework_id: str) -> m.UpdateFramework:
    info = framework_info(_body(call, "update_framework").get("framework_info"))
    if info.id != framework_id:
        raise _bad("'update_framework.framework_info.id' must be the subscribed framework's id")
    return m.UpdateFramework(info)


_TRANSLATIONS = {
    "TEARDOWN": lambda call, framework_id: m.Teardown(framework_id),
    "ACCEPT": _accept,
    "DECLINE": _decline,
    "REVIVE": lambda call, framework_id: m.Revive(framework_id),
    "SUPPRESS": lambda call, framework_id: m.Suppress(framework_id),
    "KILL": _kill,
    "SHUTDOWN": _shutdown,
    "ACKNOWLEDGE": _acknowledge,
    "RECONCILE": _reconcile,
    "MESSAGE": _message,
    "UPDATE_FRAMEWORK": _update_framework,
}


# ------------------------------------------------------------------ events
def _status_event(status: TaskStatus) -> Message:
    return {"type": "UPDATE", "update": {"status": status_message(status)}}


def events(message: object, framework_id: str, master: MasterInfo) -> list[Message]:
    """The Mesos events a master message to the framework ``framework_id``
    stands for (none for what Mesos has no event for: see the module doc)."""
    if isinstance(message, m.Update):
        return [_status_event(message.status)]
    if isinstance(message, m.Updates):
        return [_status_event(status) for status in message.statuses]
    if isinstance(message, m.Offers):
        return [{"type": "OFFERS", "offers": {"offers": [offer_message(offer, framework_id)
                                                         for offer in message.offers]}}]
    if isinstance(message, m.RescindOffer):
        return [{"type": "RESCIND", "rescind": {"offer_id": id_message(message.offer_id)}}]
    if isinstance(message, m.Heartbeat):
        return [{"type": "HEARTBEAT"}]
    if isinstance(message, m.Subscribed):
        return [{"type": "SUBSCRIBED", "subscribed": {
            "framework_id": id_message(message.framework_id),
            "heartbeat_interval_seconds": message.heartbeat_interval,
            "master_info": master_info_message(master, http=True)}}]
    if isinstance(message, m.FrameworkMessage):
        return [{"type": "MESSAGE", "message": {"agent_id": id_message(message.agent_id),
                                                "executor_id": id_message(message.executor_id or message.task_id),
                                                "data": encode_data(message.data)}}]
    if isinstance(message, m.Failure):
        failure: Message = {"agent_id": id_message(message.agent_id)}
        if message.executor_id:
            failure["executor_id"] = id_message(message.executor_id)
            if message.status is not None:
                failure["status"] = message.status
        return [{"type": "FAILURE", "failure": failure}]
    if isinstance(message, m.Error) and message.fatal:
        return [{"type": "ERROR", "error": {"message": message.message}}]
    return []

"""Mesos's v1 HTTP APIs, the pure half (docs/mesos-api.rst).

The master serves Mesos's scheduler API (``POST /api/v1/scheduler``) and
operator API (``POST /api/v1``), the agent its executor API (``POST
/api/v1/executor``) — a second front end on the same cores as the native
ZeroMQ protocol, so that unmodified Mesos clients (pymesos from PyPI) run.
This package is what those front ends share, with no I/O:

- :mod:`mesoslike.v1.shapes` — Mesos's JSON messages (offers, tasks,
  statuses, frameworks, executors, resources) and mesoslike's value types,
  both ways; also what :mod:`mesoslike.compat.pymesos` hands its callers;
- :mod:`mesoslike.v1.recordio` — the RecordIO framing of event streams;
- :mod:`mesoslike.v1.calls` — a request's checks (media types, the
  JSON body) and the errors as HTTP statuses;
- :mod:`mesoslike.v1.scheduler` — scheduler calls to the master
  protocol's messages, its events to Mesos's events;
- :mod:`mesoslike.v1.executor` — executor calls to the executor
  channel's messages and back;
- :mod:`mesoslike.v1.operator` — operator calls answered from the master's
  state, and its event stream from changes of that state;
- :mod:`mesoslike.v1.identity` — who a request's ``Authorization`` header
  names (HTTP Basic and bearer tokens).

The runtimes that mount them are :mod:`mesoslike.master.v1_api` and
:mod:`mesoslike.agent.v1_executor`. The names below are public (a
framework library may use them, as the pymesos shim does).
"""

from mesoslike.v1.recordio import DEFAULT_MAX_RECORD, RecordDecoder, RecordIOError, encode as encode_record
from mesoslike.v1.shapes import (
    EXECUTOR_VARIABLE,
    MAX_LAUNCH_SIZE,
    TASK_VARIABLE,
    Message,
    ShapeError,
    agent_message,
    decode_data,
    decode_uuid,
    encode_data,
    encode_uuid,
    executor_info,
    executor_message,
    executor_task_message,
    filters_from,
    framework_info,
    framework_message,
    id_message,
    known_state,
    labels_message,
    master_info_message,
    offer_id_list,
    offer_message,
    operations_from,
    resources_from,
    resources_message,
    status_from_executor,
    status_from_message,
    status_message,
    task_info,
    value_of,
)

__all__ = [
    "DEFAULT_MAX_RECORD", "RecordDecoder", "RecordIOError", "encode_record",
    "EXECUTOR_VARIABLE", "MAX_LAUNCH_SIZE", "TASK_VARIABLE", "Message", "ShapeError", "agent_message", "decode_data",
    "decode_uuid", "encode_data", "encode_uuid", "executor_info", "executor_message", "executor_task_message",
    "filters_from", "framework_info", "framework_message", "id_message", "known_state", "labels_message",
    "master_info_message", "offer_id_list", "offer_message", "operations_from", "resources_from", "resources_message",
    "status_from_executor", "status_from_message", "status_message", "task_info", "value_of",
]

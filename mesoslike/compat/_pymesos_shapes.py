"""pymesos's message shapes and mesoslike's value types, both ways.

pymesos hands a scheduler the JSON of Mesos' v1 HTTP API as dicts (or addict
``Dict`` objects): an offer is ``{"id": {"value": ...}, "agent_id": {...},
"hostname": ..., "resources": [{"name": "cpus", "type": "SCALAR", "scalar":
{"value": 1.0}}, ...]}``, and the scheduler answers with task dicts of the
same kind. These functions turn one into the other. What they are given by
the scheduler is checked: a malformed dict, or one asking for a Mesos
feature mesoslike does not have, raises :class:`PymesosCompatError` naming
the field, in the caller's thread — never a silent half-translation.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import binascii
import json
import math
import shlex
import uuid as uuid_module
from typing import Any, Callable, Iterable, Mapping

from mesoslike import (
    Attribute,
    ConfigError,
    Filters,
    FrameworkInfo,
    MasterInfo,
    MesoslikeError,
    Offer,
    Resources,
    ResourcesError,
    TaskInfo,
    TaskState,
    TaskStatus,
)

__all__ = [
    "PymesosCompatError", "Message", "encode_data", "decode_data", "id_message", "value_of", "offer_id_list",
    "offer_message", "status_message", "status_from_message", "filters_from", "framework_info", "master_address",
    "master_info_message", "task_info", "resources_from", "addict_class", "known_state", "LAUNCH_VARIABLE", "MAX_LAUNCH_SIZE",
]

#: a JSON object as pymesos passes it (a plain dict, or an addict ``Dict``)
Message = dict[str, Any]

#: the environment variable that carries a task's pymesos launch (task, executor,
#: framework and agent info, as JSON) to its executor process (``MesosExecutorDriver``)
LAUNCH_VARIABLE = "MESOSLIKE_PYMESOS_LAUNCH"
#: the largest launch JSON: one environment string of Linux is at most 128 KiB
#: (MAX_ARG_STRLEN); beyond it the task could not even be started
MAX_LAUNCH_SIZE = 120 * 1024

#: pymesos fills in this failover timeout when the framework dict has none
PYMESOS_FAILOVER_TIMEOUT = 100.0
#: the port of a pymesos-style master address without one (``"host"``)
DEFAULT_MESOS_PORT = 5050

_RESOURCE_ORDER = {"cpus": 0, "gpus": 1, "mem": 2, "disk": 3}


class PymesosCompatError(MesoslikeError, ValueError):
    """A pymesos-shaped dict that is malformed, or that asks for something
    mesoslike does not do (``docs/framework-api.rst``, "pymesos
    compatibility", lists what)."""


# ---------------------------------------------------------------- data
def encode_data(data: bytes | bytearray | memoryview | str) -> str:
    """Base64 text of ``data``, as pymesos's ``encode_data`` (the form of
    ``TaskInfo.data`` and framework messages). A ``str`` is taken as UTF-8
    — pymesos on Python 3 refuses one, yet its own example passes one."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"encode_data takes bytes, got {type(data).__name__}")
    return binascii.b2a_base64(bytes(data)).strip().decode("ascii")


def decode_data(data: str | bytes) -> bytes:
    """The bytes of base64 ``data``, as pymesos's ``decode_data``; malformed
    base64 raises ``binascii.Error`` (a ``ValueError``)."""
    if not isinstance(data, (str, bytes)):
        raise TypeError(f"decode_data takes base64 text, got {type(data).__name__}")
    return binascii.a2b_base64(data)


def encode_uuid(text: str) -> str:
    """A status update's uuid as pymesos shows it: base64 of its 16 bytes.
    mesoslike agents make canonical UUID strings; anything else (never seen)
    is carried as base64 of its UTF-8."""
    try:
        parsed = uuid_module.UUID(text)
    except ValueError:
        return encode_data(text.encode("utf-8"))
    if str(parsed) != text:
        return encode_data(text.encode("utf-8"))
    return encode_data(parsed.bytes)


def decode_uuid(text: str) -> str:
    """The inverse of :func:`encode_uuid`."""
    try:
        raw = decode_data(text)
    except (ValueError, TypeError):
        raise PymesosCompatError(f"status uuid {text!r} is not base64") from None
    if len(raw) == 16:
        return str(uuid_module.UUID(bytes=raw))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PymesosCompatError(f"status uuid {text!r} is not one this driver gave") from None


# ------------------------------------------------------------------ ids
def id_message(value: str) -> Message:
    """``{"value": value}``: Mesos' ``FrameworkID``, ``OfferID``, ``TaskID`` ..."""
    return {"value": value}


def value_of(field: object, what: str) -> str:
    """The id in ``{"value": "..."}`` (a bare string is taken too)."""
    value: object = field
    if isinstance(field, Mapping):
        value = field.get("value")
        if not isinstance(value, str):
            raise PymesosCompatError(f"{what}.value must be a string, got {type(value).__name__}")
    if not isinstance(value, str):
        raise PymesosCompatError(f"{what} must be {{'value': ID}}, got {type(field).__name__}")
    if not value:
        raise PymesosCompatError(f"{what}.value is empty")
    return value


def offer_id_list(offer_ids: object) -> list[str]:
    """pymesos takes one offer id (``offer.id``) or a list of them."""
    if isinstance(offer_ids, (Mapping, str)):
        return [value_of(offer_ids, "offer id")]
    if not isinstance(offer_ids, Iterable):
        raise PymesosCompatError(f"offer ids must be {{'value': ID}} or a list of them, got "
                                 f"{type(offer_ids).__name__}")
    return [value_of(item, "offer id") for item in offer_ids]


def _optional(message: Mapping, name: str) -> Any:
    """A field that is present and not empty (an addict ``Dict`` reads a
    missing field as an empty one), else None."""
    value = message.get(name)
    if value is None or (isinstance(value, (Mapping, list, str)) and not value):
        return None
    return value


def _mapping(value: object, what: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise PymesosCompatError(f"{what} must be a dict, got {type(value).__name__}")
    return value


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PymesosCompatError(f"{what} must be a finite number, got {value!r}")
    return float(value)


# ------------------------------------------------------------ resources
def _sort_key(name: str) -> tuple[int, str]:
    return _RESOURCE_ORDER.get(name, len(_RESOURCE_ORDER)), name


def resources_message(resources: Resources) -> list[Message]:
    """A ``Resources`` vector as Mesos' list of ``Resource`` messages:
    scalars as SCALAR, ports and other range kinds as RANGES; reserved kinds
    as Mesos writes them without reservation refinement — ``role`` the
    reservation's, and for a dynamic one ``reservation.principal`` — the
    others with role ``"*"``."""
    items: list[Message] = []
    scalars = resources.scalars()
    for name in sorted(scalars, key=_sort_key):
        items.append({**_reservation_fields(name), "type": "SCALAR", "scalar": {"value": scalars[name]}})
    for name in resources.range_names():
        ranges = [{"begin": lo, "end": hi} for lo, hi in resources.ranges(name)]
        items.append({**_reservation_fields(name), "type": "RANGES", "ranges": {"range": ranges}})
    return items


def _reservation_fields(kind: str) -> Message:
    """``cpus(a,alice)`` -> name ``cpus``, role ``a``, reservation principal ``alice``."""
    name, _, reservation = kind.partition("(")
    if not reservation:
        return {"name": name, "role": "*"}
    role, dynamic, principal = reservation[:-1].partition(",")
    return {"name": name, "role": role, **({"reservation": {"principal": principal}} if dynamic else {})}


def resources_from(items: object, what: str) -> Resources:
    """A list of Mesos ``Resource`` dicts (SCALAR and RANGES) as ``Resources``."""
    if isinstance(items, (str, Mapping)) or not isinstance(items, Iterable):
        raise PymesosCompatError(f"{what} must be a list of resource dicts, got {type(items).__name__}")
    scalars: dict[str, float] = {}
    ranges: dict[str, list[tuple[int, int]]] = {}
    for index, item in enumerate(items):
        where = f"{what}[{index}]"
        item = _mapping(item, where)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise PymesosCompatError(f"{where}.name must be a resource name, got {name!r}")
        name = _reserved_kind(item, name, where)
        for unsupported in ("disk", "shared", "revocable", "provider_id"):
            if _optional(item, unsupported) is not None:
                raise PymesosCompatError(f"{where}.{unsupported} ({name}) is not supported by mesoslike")
        kind = item.get("type") or ("RANGES" if _optional(item, "ranges") is not None else "SCALAR")
        if kind == "SCALAR":
            scalar = _mapping(item.get("scalar"), f"{where}.scalar")
            scalars[name] = scalars.get(name, 0.0) + _number(scalar.get("value"), f"{where}.scalar.value")
        elif kind == "RANGES":
            body = _mapping(item.get("ranges"), f"{where}.ranges").get("range", [])
            if not isinstance(body, list):
                raise PymesosCompatError(f"{where}.ranges.range must be a list")
            for bounds in body:
                bounds = _mapping(bounds, f"{where}.ranges.range[]")
                begin, end = bounds.get("begin"), bounds.get("end")
                if not isinstance(begin, int) or not isinstance(end, int) or isinstance(begin, bool) \
                        or isinstance(end, bool):
                    raise PymesosCompatError(f"{where}.ranges: begin and end must be integers, got {dict(bounds)!r}")
                ranges.setdefault(name, []).append((begin, end))
        else:
            raise PymesosCompatError(f"{where} ({name}) has type {kind!r}: mesoslike has SCALAR and RANGES resources")
    try:
        return Resources(scalars, ranges=ranges)
    except ResourcesError as exc:
        raise PymesosCompatError(f"{what}: {exc}") from None


def _reserved_kind(item: Mapping[str, Any], name: str, where: str) -> str:
    """The kind of a Mesos ``Resource`` dict: ``name``, ``name(role)`` (a
    static reservation) or ``name(role,principal)`` (``reservation`` set: a
    dynamic one). Refined reservations (``reservations``) are refused."""
    if _optional(item, "reservations"):
        raise PymesosCompatError(f"{where} ({name}) has refined reservations: mesoslike has none")
    role = _optional(item, "role")
    reservation = _optional(item, "reservation")
    if role is None or role == "*":
        if reservation is not None:
            raise PymesosCompatError(f"{where} ({name}) has a reservation but no role")
        return name
    if not isinstance(role, str):
        raise PymesosCompatError(f"{where}.role must be a string, got {type(role).__name__}")
    if reservation is None:
        return f"{name}({role})"
    principal = _mapping(reservation, f"{where}.reservation").get("principal") or ""
    if not isinstance(principal, str):
        raise PymesosCompatError(f"{where}.reservation.principal must be a string")
    return f"{name}({role},{principal})"


def _attribute_message(attribute: Attribute) -> Message:
    """A typed agent attribute as Mesos's ``Attribute`` JSON (issue 18 §5)."""
    message: Message = {"name": attribute.name, "type": attribute.type}
    if attribute.type == "SCALAR":
        message["scalar"] = {"value": attribute.value}
    elif isinstance(attribute.value, tuple) and attribute.type == "RANGES":
        message["ranges"] = {"range": [{"begin": pair[0], "end": pair[1]} for pair in attribute.value]}
    elif isinstance(attribute.value, tuple):   # SET
        message["set"] = {"item": list(attribute.value)}
    else:
        message["text"] = {"value": attribute.value}
    return message


# --------------------------------------------------------- master -> us
def offer_message(offer: Offer, framework_id: str) -> Message:
    """An ``Offer`` as pymesos shows it."""
    return {
        "id": id_message(offer.id),
        "framework_id": id_message(offer.framework_id or framework_id),
        "agent_id": id_message(offer.agent_id),
        "hostname": offer.hostname,
        "resources": resources_message(offer.resources),
        "attributes": [_attribute_message(attribute) for _, attribute in sorted(offer.typed_attributes.items())],
    }


def status_message(status: TaskStatus) -> Message:
    """A ``TaskStatus`` as pymesos shows it: Mesos' ``TaskStatus`` JSON, the
    uuid in base64 (present only on updates that need an acknowledgement)."""
    message: Message = {"task_id": id_message(status.task_id), "state": status.state, "message": status.message}
    if status.agent_id:
        message["agent_id"] = id_message(status.agent_id)
    if status.source:
        message["source"] = status.source
    if status.reason:
        message["reason"] = status.reason
    if status.uuid:
        message["uuid"] = encode_uuid(status.uuid)
    if status.timestamp:
        message["timestamp"] = status.timestamp
    if status.labels:   # Mesos's Labels JSON
        message["labels"] = {"labels": [{"key": label.key, "value": label.value} for label in status.labels]}
    return message


def status_from_message(status: object, what: str = "status") -> TaskStatus:
    """The ``TaskStatus`` a pymesos status dict stands for (to acknowledge or
    reconcile it): its task id, agent id, state and uuid."""
    status = _mapping(status, what)
    agent = _optional(status, "agent_id")
    uuid = _optional(status, "uuid")
    state = status.get("state") or ""
    if not isinstance(state, str):
        raise PymesosCompatError(f"{what}.state must be a string, got {type(state).__name__}")
    if uuid is not None and not isinstance(uuid, str):
        raise PymesosCompatError(f"{what}.uuid must be base64 text, got {type(uuid).__name__}")
    return TaskStatus(task_id=value_of(status.get("task_id"), f"{what}.task_id"), state=state,
                      agent_id=value_of(agent, f"{what}.agent_id") if agent is not None else "",
                      uuid=decode_uuid(uuid) if uuid is not None else "")


def master_info_message(info: MasterInfo | None) -> Message:
    """Mesos' ``MasterInfo``: id, hostname, port, address, version."""
    if info is None:
        return {}
    host, _, port = info.address.removeprefix("tcp://").rpartition(":")
    number = int(port) if port.isdigit() else 0
    message: Message = {"id": info.id, "hostname": host, "port": number,
                        "address": {"hostname": host, "port": number}}
    if info.version:
        message["version"] = info.version
    return message


# ---------------------------------------------------------- us -> master
def filters_from(filters: object) -> Filters | None:
    """``{"refuse_seconds": N}`` (or None, or a ``Filters``) as ``Filters``."""
    if filters is None or isinstance(filters, Filters):
        return filters
    filters = _mapping(filters, "filters")
    if "refuse_seconds" not in filters:
        return Filters()
    seconds = _number(filters["refuse_seconds"], "filters.refuse_seconds")
    if seconds < 0:
        raise PymesosCompatError(f"filters.refuse_seconds must be >= 0, got {seconds!r}")
    return Filters(refuse_seconds=seconds)


def master_address(master: str) -> str:
    """pymesos's master forms as mesoslike's: ``host:port`` (``host`` alone
    means port 5050) becomes ``tcp://host:port``; ``zoo://`` is ``zk://``;
    ``tcp://`` and ``zk://`` are kept."""
    if not isinstance(master, str) or not master.strip():
        raise ConfigError(f"bad master address {master!r}: expected HOST:PORT, tcp://HOST:PORT or zk://HOSTS/PATH")
    master = master.strip()
    if master.startswith(("tcp://", "zk://")):
        return master
    if master.startswith("zoo://"):
        return "zk://" + master[len("zoo://"):]
    if "://" in master:
        raise ConfigError(f"bad master address {master!r}: expected HOST:PORT, tcp://HOST:PORT or zk://HOSTS/PATH")
    if ":" not in master:
        master = f"{master}:{DEFAULT_MESOS_PORT}"
    return "tcp://" + master


def framework_info(framework: object) -> FrameworkInfo:
    """A pymesos framework dict (Mesos' ``FrameworkInfo``) as ``FrameworkInfo``.
    Without ``failover_timeout`` it is 100 s, as pymesos makes it."""
    framework = _mapping(framework, "framework")
    name = framework.get("name")
    if not isinstance(name, str) or not name:
        raise PymesosCompatError(f"framework.name must be a non-empty string, got {name!r}")
    role = _optional(framework, "role")
    roles = _optional(framework, "roles")
    if roles is not None:
        if isinstance(roles, str) or not isinstance(roles, list) or len(roles) != 1:
            raise PymesosCompatError(f"framework.roles {roles!r}: mesoslike frameworks have exactly one role")
        if role is not None and role != roles[0]:
            raise PymesosCompatError(f"framework.role {role!r} and framework.roles {roles!r} disagree")
        role = roles[0]
    capabilities = framework.get("capabilities") or []
    if not isinstance(capabilities, list):
        raise PymesosCompatError("framework.capabilities must be a list of {'type': NAME}")
    kinds = {_mapping(item, "framework.capabilities[]").get("type") for item in capabilities}
    failover = framework.get("failover_timeout", PYMESOS_FAILOVER_TIMEOUT)
    framework_id = _optional(framework, "id")
    for field in ("user", "hostname"):
        if not isinstance(framework.get(field) or "", str):
            raise PymesosCompatError(f"framework.{field} must be a string")
    return FrameworkInfo(
        name=name, role=role if isinstance(role, str) else "*",
        failover_timeout=_number(failover, "framework.failover_timeout"),
        id=value_of(framework_id, "framework.id") if framework_id is not None else "",
        user=framework.get("user") or "", hostname=framework.get("hostname") or "",
        partition_aware="PARTITION_AWARE" in kinds)


def _environment(command: Mapping, what: str) -> dict[str, str]:
    environment = _optional(command, "environment")
    if environment is None:
        return {}
    variables = _mapping(environment, f"{what}.environment").get("variables") or []
    if not isinstance(variables, list):
        raise PymesosCompatError(f"{what}.environment.variables must be a list")
    result: dict[str, str] = {}
    for index, variable in enumerate(variables):
        where = f"{what}.environment.variables[{index}]"
        variable = _mapping(variable, where)
        if variable.get("type", "VALUE") != "VALUE":
            raise PymesosCompatError(f"{where}: only VALUE variables are supported (no secrets)")
        name, value = variable.get("name"), variable.get("value", "")
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise PymesosCompatError(f"{where} must have a string name and value")
        result[name] = value
    return result


def _command(command: object, what: str) -> tuple[str, dict[str, str], str]:
    """A Mesos ``CommandInfo`` as (shell command line, environment, user)."""
    command = _mapping(command, what)
    if _optional(command, "uris") is not None:
        raise PymesosCompatError(f"{what}.uris: mesoslike has no fetcher yet; put the files in place another way")
    value = command.get("value") or ""
    arguments = command.get("arguments") or []
    if not isinstance(value, str) or not isinstance(arguments, list) or \
            not all(isinstance(argument, str) for argument in arguments):
        raise PymesosCompatError(f"{what}.value must be a string and {what}.arguments a list of strings")
    if command.get("shell", True):
        line = value          # run by the shell; Mesos ignores the arguments then
    else:
        # Mesos execs ``value`` with ``arguments`` as argv (argv[0] first)
        line = shlex.join([value, *arguments[1:]]) if value else ""
    if not line.strip():
        raise PymesosCompatError(f"{what}.value is empty: nothing to run")
    user = command.get("user") or ""
    if not isinstance(user, str):
        raise PymesosCompatError(f"{what}.user must be a string")
    return line, _environment(command, what), user


def task_info(task: object, framework: Mapping, framework_id: str,
              agent_info: Callable[[str], Message]) -> TaskInfo:
    """A pymesos task dict (Mesos' ``TaskInfo``) as a ``TaskInfo``.

    A task with ``command`` runs it. A task with an ``executor`` runs the
    executor's command as its process, with the executor's resources added to
    the task's, and the whole launch (task, executor, framework and agent
    info) in ``$MESOSLIKE_PYMESOS_LAUNCH`` for ``MesosExecutorDriver``:
    one executor process per task (mesoslike has no long-lived executors yet).
    ``agent_info(agent_id)`` is the agent's ``AgentInfo`` for that launch.
    """
    task = _mapping(task, "task")
    task_id = value_of(task.get("task_id"), "task.task_id")
    what = f"task {task_id}"
    agent_id = value_of(task.get("agent_id"), f"{what}: agent_id")
    name = task.get("name") or ""
    if not isinstance(name, str):
        raise PymesosCompatError(f"{what}: name must be a string")
    for unsupported, feature in (("container", "containers (Docker, Mesos images)"), ("health_check", "health checks"),
                                 ("check", "checks"), ("discovery", "service discovery info")):
        if _optional(task, unsupported) is not None:
            raise PymesosCompatError(f"{what}: {unsupported} — mesoslike has no {feature} yet")
    resources = resources_from(task.get("resources") or [], f"{what}: resources")
    command, executor = _optional(task, "command"), _optional(task, "executor")
    if (command is None) == (executor is None):
        raise PymesosCompatError(f"{what} must have exactly one of command and executor, as in Mesos")
    environment: dict[str, str]
    if command is not None:
        line, environment, user = _command(command, f"{what}: command")
    else:
        executor = _mapping(executor, f"{what}: executor")
        value_of(executor.get("executor_id"), f"{what}: executor.executor_id")
        if _optional(executor, "container") is not None:
            raise PymesosCompatError(f"{what}: executor.container — mesoslike has no containers yet")
        line, environment, user = _command(executor.get("command"), f"{what}: executor.command")
        resources += resources_from(executor.get("resources") or [], f"{what}: executor.resources")
        environment[LAUNCH_VARIABLE] = _launch_json(task, executor, framework, framework_id, agent_info(agent_id))
    grace = 3.0
    kill_policy = _optional(task, "kill_policy")
    if kill_policy is not None:
        period = _optional(_mapping(kill_policy, f"{what}: kill_policy"), "grace_period")
        if period is not None:
            nanoseconds = _number(_mapping(period, f"{what}: kill_policy.grace_period").get("nanoseconds"),
                                  f"{what}: kill_policy.grace_period.nanoseconds")
            grace = max(0.0, nanoseconds / 1e9)
    try:
        return TaskInfo(task_id=task_id, agent_id=agent_id, command=line, resources=resources, name=name,
                        environment=environment, kill_grace_period=grace, user=user)
    except (TypeError, ValueError) as exc:
        raise PymesosCompatError(f"{what}: {exc}") from None


def _launch_json(task: Mapping, executor: Mapping, framework: Mapping, framework_id: str,
                 agent: Message) -> str:
    framework_message = dict(framework)
    framework_message["id"] = id_message(framework_id)
    launch = {"task": task, "executor": executor, "framework_info": framework_message, "agent_info": agent}
    try:
        text = json.dumps(launch, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PymesosCompatError(f"task {task.get('task_id')!r}: the task or its executor is not JSON "
                                 f"(pymesos sends them as JSON too): {exc}") from None
    if len(text.encode("utf-8")) > MAX_LAUNCH_SIZE:
        raise PymesosCompatError(f"task {task.get('task_id')!r}: task, executor and framework info take "
                                 f"{len(text)} bytes as JSON; at most {MAX_LAUNCH_SIZE} fit the executor's "
                                 "environment (keep TaskInfo.data small)")
    return text


def addict_class() -> Callable[[Message], Any]:
    """addict's ``Dict`` (for ``use_addict=True``), with a clear error without it."""
    try:
        from addict import Dict
    except ImportError:
        raise PymesosCompatError("use_addict=True needs the addict package (pip install addict)") from None
    return Dict


def known_state(state: object, what: str) -> str:
    if state not in TaskState.ALL:
        raise PymesosCompatError(f"{what} {state!r} is not a task state ({', '.join(TaskState.ALL)})")
    return str(state)

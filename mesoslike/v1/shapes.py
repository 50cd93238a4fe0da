"""Mesos's v1 JSON shapes and mesoslike's value types, both ways.

The v1 HTTP APIs (docs/mesos-api.rst) and pymesos (which hands a scheduler
that same JSON as dicts, or addict ``Dict`` objects) speak Mesos's
protobuf messages as JSON: an offer is ``{"id": {"value": ...},
"agent_id": {...}, "hostname": ..., "resources": [{"name": "cpus", "type":
"SCALAR", "scalar": {"value": 1.0}}, ...]}``; tasks, statuses, frameworks
and executors likewise. These functions turn one into the other. What they
are given is checked: a malformed message, or one asking for a Mesos feature
mesoslike does not have, raises :class:`ShapeError` naming the field —
never a silent half-translation.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import shlex
import uuid as uuid_module
from typing import Any, Iterable, Mapping

from mesoslike.attributes import Attribute
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources, ResourcesError
from mesoslike.v1.recordio import DEFAULT_MAX_RECORD
from mesoslike.wire.types import (CommandURI, ContainerInfo, ContainerStatus, DockerInfo, Image, Secret, SecretReference,
                                  Volume, VolumeSource, ExecutorInfo, Filters, FrameworkInfo, HealthCheck, HTTPCheck, Label,
                                  MasterInfo, Offer, Operation, TaskInfo, TaskState, TaskStatus, TCPCheck)
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE, Launch, Reserve, Unreserve

__all__ = [
    "ShapeError", "Message", "encode_data", "decode_data", "encode_uuid", "decode_uuid", "id_message", "value_of",
    "offer_id_list", "offer_message", "status_message", "status_from_message", "filters_from", "framework_info",
    "master_info_message", "task_info", "executor_info", "resources_from", "resources_message", "known_state",
    "labels_message", "executor_message", "framework_message", "agent_message", "executor_task_message",
    "status_from_executor", "operations_from", "data_from", "MAX_STATUS_DATA",
    "MIN_CALL_BODY", "call_body_limit", "stream_buffer_limit", "TASK_VARIABLE", "EXECUTOR_VARIABLE", "MAX_LAUNCH_SIZE",
]

#: a JSON object (a plain dict, or an addict ``Dict``)
Message = dict[str, Any]

#: the variable of a mesoslike ``TaskInfo.environment`` that carries the
#: Mesos task JSON (with its ``data``) to a v1 executor's ``LAUNCH`` (and to
#: pymesos's ``launchTask`` on the compat shim): mesoslike's ``TaskInfo`` has
#: no ``data``; an executor task's environment is handed to its executor,
#: never exported to a process
TASK_VARIABLE = "MESOSLIKE_PYMESOS_TASK"
#: the variable of the executor process's environment that carries the Mesos
#: ``ExecutorInfo`` JSON (with its ``data``) to the executor's ``SUBSCRIBED``
EXECUTOR_VARIABLE = "MESOSLIKE_PYMESOS_EXECUTOR"
#: the largest ExecutorInfo JSON text: an environment string of Linux is at
#: most 128 KiB (MAX_ARG_STRLEN)
MAX_LAUNCH_SIZE = 120 * 1024
#: the most bytes of ``data`` one status update carries by default (it is checkpointed, retried and kept by
#: the agent until acknowledged, and crosses the master in one frame): the agent's ``--max-message-size``
MAX_STATUS_DATA = MAX_FRAMEWORK_MESSAGE
#: the least a call's body or an event's record may be, whatever the data bound (an ACCEPT of many operations)
MIN_CALL_BODY = 72 * 1024 * 1024
#: what a call or event holds besides its base64 data, at most
_CALL_OVERHEAD = 8 * 1024 * 1024


def call_body_limit(max_data: int) -> int:
    """The largest call body (or event record) that carries at most ``max_data``
    bytes of data (a MESSAGE, an UPDATE): its base64 text and room for the rest."""
    return max(MIN_CALL_BODY, 4 * -(-max_data // 3) + _CALL_OVERHEAD)


def stream_buffer_limit(max_data: int) -> int:
    """Bytes an event stream keeps for a client reading slower than events come
    (more: the stream is closed): room for the largest event and then some."""
    return max(DEFAULT_MAX_RECORD, call_body_limit(max_data)) + 32 * 1024 * 1024


#: the largest task JSON text handed to an executor (its ``data`` included)
MAX_TASK_JSON = 1024 * 1024

_RESOURCE_ORDER = {"cpus": 0, "gpus": 1, "mem": 2, "disk": 3}


class ShapeError(MesoslikeError, ValueError):
    """A Mesos JSON message that is malformed, or that asks for something
    mesoslike does not do (docs/mesos-api.rst lists what)."""


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
        raise ShapeError(f"status uuid {text!r} is not base64") from None
    if len(raw) == 16:
        return str(uuid_module.UUID(bytes=raw))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ShapeError(f"status uuid {text!r} is not one this driver gave") from None


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
            raise ShapeError(f"{what}.value must be a string, got {type(value).__name__}")
    if not isinstance(value, str):
        raise ShapeError(f"{what} must be {{'value': ID}}, got {type(field).__name__}")
    if not value:
        raise ShapeError(f"{what}.value is empty")
    return value


def offer_id_list(offer_ids: object) -> list[str]:
    """pymesos takes one offer id (``offer.id``) or a list of them."""
    if isinstance(offer_ids, (Mapping, str)):
        return [value_of(offer_ids, "offer id")]
    if not isinstance(offer_ids, Iterable):
        raise ShapeError(f"offer ids must be {{'value': ID}} or a list of them, got "
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
        raise ShapeError(f"{what} must be a dict, got {type(value).__name__}")
    return value


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ShapeError(f"{what} must be a finite number, got {value!r}")
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
    """``cpus(a,alice)`` -> name ``cpus``, role ``a``, reservation principal
    ``alice``; ``cpus(a,alice,k=v)``: with the reservation's labels."""
    name, _, reservation = kind.partition("(")
    if not reservation:
        return {"name": name, "role": "*"}
    role, dynamic, principal = reservation[:-1].partition(",")
    if not dynamic:
        return {"name": name, "role": role}
    principal, _, labels = principal.partition(",")
    info: Message = {"principal": principal}
    if labels:
        info["labels"] = {"labels": [{"key": key, "value": value}
                                     for key, _, value in (pair.partition("=") for pair in labels.split("&"))]}
    return {"name": name, "role": role, "reservation": info}


def resources_from(items: object, what: str) -> Resources:
    """A list of Mesos ``Resource`` dicts (SCALAR and RANGES) as ``Resources``."""
    if isinstance(items, (str, Mapping)) or not isinstance(items, Iterable):
        raise ShapeError(f"{what} must be a list of resource dicts, got {type(items).__name__}")
    scalars: dict[str, float] = {}
    ranges: dict[str, list[tuple[int, int]]] = {}
    for index, item in enumerate(items):
        where = f"{what}[{index}]"
        item = _mapping(item, where)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ShapeError(f"{where}.name must be a resource name, got {name!r}")
        name = _reserved_kind(item, name, where)
        for unsupported in ("disk", "shared", "revocable", "provider_id"):
            if _optional(item, unsupported) is not None:
                raise ShapeError(f"{where}.{unsupported} ({name}) is not supported by mesoslike")
        kind = item.get("type") or ("RANGES" if _optional(item, "ranges") is not None else "SCALAR")
        if kind == "SCALAR":
            scalar = _mapping(item.get("scalar"), f"{where}.scalar")
            scalars[name] = scalars.get(name, 0.0) + _number(scalar.get("value"), f"{where}.scalar.value")
        elif kind == "RANGES":
            body = _mapping(item.get("ranges"), f"{where}.ranges").get("range", [])
            if not isinstance(body, list):
                raise ShapeError(f"{where}.ranges.range must be a list")
            for bounds in body:
                bounds = _mapping(bounds, f"{where}.ranges.range[]")
                begin, end = bounds.get("begin"), bounds.get("end")
                if not isinstance(begin, int) or not isinstance(end, int) or isinstance(begin, bool) \
                        or isinstance(end, bool):
                    raise ShapeError(f"{where}.ranges: begin and end must be integers, got {dict(bounds)!r}")
                ranges.setdefault(name, []).append((begin, end))
        else:
            raise ShapeError(f"{where} ({name}) has type {kind!r}: mesoslike has SCALAR and RANGES resources")
    try:
        return Resources(scalars, ranges=ranges)
    except ResourcesError as exc:
        raise ShapeError(f"{what}: {exc}") from None


def _reserved_kind(item: Mapping[str, Any], name: str, where: str) -> str:
    """The kind of a Mesos ``Resource`` dict: ``name``, ``name(role)`` (a
    static reservation) or ``name(role,principal)`` (``reservation`` set: a
    dynamic one). Refined reservations (``reservations``) are refused."""
    if _optional(item, "reservations"):
        raise ShapeError(f"{where} ({name}) has refined reservations: mesoslike has none")
    role = _optional(item, "role")
    reservation = _optional(item, "reservation")
    if role is None or role == "*":
        if reservation is not None:
            raise ShapeError(f"{where} ({name}) has a reservation but no role")
        return name
    if not isinstance(role, str):
        raise ShapeError(f"{where}.role must be a string, got {type(role).__name__}")
    if reservation is None:
        return f"{name}({role})"
    reservation = _mapping(reservation, f"{where}.reservation")
    principal = reservation.get("principal") or ""
    if not isinstance(principal, str):
        raise ShapeError(f"{where}.reservation.principal must be a string")
    labels = _mapping(reservation.get("labels") or {}, f"{where}.reservation.labels").get("labels") or []
    if not isinstance(labels, list) or not all(isinstance(label, Mapping) and isinstance(label.get("key"), str)
                                               and isinstance(label.get("value", ""), str) for label in labels):
        raise ShapeError(f"{where}.reservation.labels.labels must be a list of {{key, value}} text")
    written = "&".join(f"{label['key']}={label.get('value', '')}" for label in labels)
    return f"{name}({role},{principal}{',' + written if written else ''})"


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
    if status.healthy is not None:
        message["healthy"] = status.healthy
    if status.labels:
        message["labels"] = labels_message(status.labels)
    if status.data:
        message["data"] = encode_data(status.data)
    if status.container_status is not None:
        message["container_status"] = container_status_message(status.container_status)
    return message


def container_status_message(container: ContainerStatus) -> Message:
    """Mesos's ``ContainerStatus`` JSON for what we know of a container: its
    address (``network_infos``) and its executor's pid."""
    message: Message = {}
    if container.ip_address:
        message["network_infos"] = [{"ip_addresses": [{"ip_address": container.ip_address}]}]
    if container.executor_pid:
        message["executor_pid"] = container.executor_pid
    return message


def status_from_message(status: object, what: str = "status") -> TaskStatus:
    """The ``TaskStatus`` a pymesos status dict stands for (to acknowledge or
    reconcile it): its task id, agent id, state and uuid."""
    status = _mapping(status, what)
    agent = _optional(status, "agent_id")
    uuid = _optional(status, "uuid")
    state = status.get("state") or ""
    if not isinstance(state, str):
        raise ShapeError(f"{what}.state must be a string, got {type(state).__name__}")
    if uuid is not None and not isinstance(uuid, str):
        raise ShapeError(f"{what}.uuid must be base64 text, got {type(uuid).__name__}")
    return TaskStatus(task_id=value_of(status.get("task_id"), f"{what}.task_id"), state=state,
                      agent_id=value_of(agent, f"{what}.agent_id") if agent is not None else "",
                      uuid=decode_uuid(uuid) if uuid is not None else "")


def master_info_message(info: MasterInfo | None, http: bool = False) -> Message:
    """Mesos' ``MasterInfo``: id, hostname, port, address, version — and
    for an IPv4 address, ``ip`` (Mesos's uint32: the address's bytes in
    network order, read as a little-endian integer), ``address.ip`` and
    ``pid`` (``master@IP:PORT``); with ``http`` the master's HTTP address
    (where v1 clients reach it)."""
    if info is None:
        return {}
    address = info.http_address if http and info.http_address else info.address
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    number = int(port) if port.isdigit() else 0
    message: Message = {"id": info.id, "hostname": host, "port": number,
                        "address": {"hostname": host, "port": number}}
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        ip = None
    if ip is not None:
        message["address"]["ip"] = host
        message["ip"] = int.from_bytes(ip.packed, "little")
        message["pid"] = f"master@{host}:{number}"
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
        raise ShapeError(f"filters.refuse_seconds must be >= 0, got {seconds!r}")
    return Filters(refuse_seconds=seconds)


def framework_info(framework: object, default_failover: float = 0.0) -> FrameworkInfo:
    """A Mesos ``FrameworkInfo`` dict as ``FrameworkInfo``. Without
    ``failover_timeout`` it is ``default_failover`` (Mesos's 0; pymesos
    fills in 100 s before sending). Its ``principal`` is ignored: the
    master sets the one the framework authenticated as."""
    framework = _mapping(framework, "framework")
    name = framework.get("name")
    if not isinstance(name, str) or not name:
        raise ShapeError(f"framework.name must be a non-empty string, got {name!r}")
    role = _optional(framework, "role")
    roles = _optional(framework, "roles")
    if roles is not None:
        if isinstance(roles, str) or not isinstance(roles, list) or len(roles) != 1:
            raise ShapeError(f"framework.roles {roles!r}: mesoslike frameworks have exactly one role")
        if role is not None and role != roles[0]:
            raise ShapeError(f"framework.role {role!r} and framework.roles {roles!r} disagree")
        role = roles[0]
    if role is not None and not isinstance(role, str):
        raise ShapeError(f"framework.role must be a string, got {type(role).__name__}")
    capabilities = framework.get("capabilities") or []
    if not isinstance(capabilities, list):
        raise ShapeError("framework.capabilities must be a list of {'type': NAME}")
    kinds = {_mapping(item, "framework.capabilities[]").get("type") for item in capabilities}
    failover = framework.get("failover_timeout", default_failover)
    framework_id = _optional(framework, "id")
    for field in ("user", "hostname", "webui_url"):
        if not isinstance(framework.get(field) or "", str):
            raise ShapeError(f"framework.{field} must be a string")
    try:
        return FrameworkInfo(
            name=name, role=role or "*", failover_timeout=_number(failover, "framework.failover_timeout"),
            id=value_of(framework_id, "framework.id") if framework_id is not None else "",
            user=framework.get("user") or "", hostname=framework.get("hostname") or "",
            partition_aware="PARTITION_AWARE" in kinds,
            labels=_labels(_optional(framework, "labels"), "framework.labels"),
            webui_url=framework.get("webui_url") or "")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ShapeError):
            raise
        raise ShapeError(f"framework: {exc}") from None


def _environment(command: Mapping, what: str) -> dict[str, str]:
    environment = _optional(command, "environment")
    if environment is None:
        return {}
    variables = _mapping(environment, f"{what}.environment").get("variables") or []
    if not isinstance(variables, list):
        raise ShapeError(f"{what}.environment.variables must be a list")
    result: dict[str, str] = {}
    for index, variable in enumerate(variables):
        where = f"{what}.environment.variables[{index}]"
        variable = _mapping(variable, where)
        if variable.get("type", "VALUE") != "VALUE":
            raise ShapeError(f"{where}: only VALUE variables are supported (no secrets)")
        name, value = variable.get("name"), variable.get("value", "")
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ShapeError(f"{where} must have a string name and value")
        result[name] = value
    return result


def _command_line(command: Mapping, what: str) -> str:
    """The shell command line of a Mesos ``CommandInfo``."""
    value = command.get("value") or ""
    arguments = command.get("arguments") or []
    if not isinstance(value, str) or not isinstance(arguments, list) or \
            not all(isinstance(argument, str) for argument in arguments):
        raise ShapeError(f"{what}.value must be a string and {what}.arguments a list of strings")
    if command.get("shell", True):
        line = value          # run by the shell; Mesos ignores the arguments then
    else:
        # Mesos execs ``value`` with ``arguments`` as argv (argv[0] first)
        line = shlex.join([value, *arguments[1:]]) if value else ""
    if not line.strip():
        raise ShapeError(f"{what}.value is empty: nothing to run")
    return line


def _command(command: object, what: str) -> tuple[str, dict[str, str], str]:
    """A Mesos ``CommandInfo`` as (shell command line, environment, user)."""
    command = _mapping(command, what)
    line = _command_line(command, what)
    return line, _environment(command, what), _user(command, what)


def _user(command: Mapping, what: str) -> str:
    user = command.get("user") or ""
    if not isinstance(user, str):
        raise ShapeError(f"{what}.user must be a string")
    return user


def _exec_form(command: Mapping, what: str) -> dict[str, Any]:
    """A ``CommandInfo`` with ``shell`` false as ``TaskInfo``'s ``command``
    (Mesos's ``value``, maybe empty), ``shell`` and ``arguments``."""
    value = command.get("value") or ""
    arguments = command.get("arguments") or []
    if not isinstance(value, str) or not isinstance(arguments, list) or \
            not all(isinstance(argument, str) for argument in arguments):
        raise ShapeError(f"{what}.value must be a string and {what}.arguments a list of strings")
    return {"command": value, "shell": False, "arguments": list(arguments)}


def container_info(container: object, what: str = "container") -> ContainerInfo:
    """Mesos's ``ContainerInfo`` JSON as mesoslike's (docs/containers.rst):
    ``MESOS`` with a Docker ``image``, ``DOCKER`` with ``docker.image`` and
    network ``HOST`` or ``NONE``, volumes (``host_path``; ``source`` of type
    ``SANDBOX_PATH`` (``SELF``), ``SECRET``; ``image``), ``hostname``. What
    mesoslike cannot give — a bridge or CNI network, port mappings,
    privileged Docker containers, ``docker run`` parameters, APPC images —
    is refused, naming it."""
    container = _mapping(container, what)
    kind = container.get("type") or "MESOS"
    for field, feature in (("network_infos", "container networks (CNI)"), ("linux_info", "linux_info (capabilities)"),
                           ("rlimit_info", "rlimits"), ("tty_info", "terminals")):
        if _optional(container, field):
            raise ShapeError(f"{what}.{field} — mesoslike has no {feature}")
    try:
        volumes = [_volume(item, f"{what}.volumes[{index}]")
                   for index, item in enumerate(_optional(container, "volumes") or [])]
        hostname = container.get("hostname") or ""
        if kind == "DOCKER":
            docker = _mapping(container.get("docker"), f"{what}.docker")
            network = docker.get("network") or "HOST"
            for field, feature in (("port_mappings", "port mappings"), ("parameters", "docker run parameters"),
                                   ("privileged", "privileged containers"), ("volume_driver", "volume drivers")):
                if _optional(docker, field):
                    raise ShapeError(f"{what}.docker.{field} — mesoslike has no {feature}")
            if network not in ("HOST", "NONE"):
                raise ShapeError(f"{what}.docker.network {network} — mesoslike has no bridge or user "
                                         "network: HOST or NONE")
            return ContainerInfo("DOCKER", docker=DockerInfo(_string(docker, "image", f"{what}.docker"), network=network,
                                                             force_pull_image=bool(docker.get("force_pull_image"))),
                                 volumes=volumes, hostname=hostname)
        if kind != "MESOS":
            raise ShapeError(f"{what}.type must be MESOS or DOCKER, got {kind!r:.40}")
        mesos = _optional(container, "mesos")
        image = _image(_mapping(mesos, f"{what}.mesos").get("image"), f"{what}.mesos.image") if mesos else None
        return ContainerInfo("MESOS", image=image, volumes=volumes, hostname=hostname)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ShapeError):
            raise
        raise ShapeError(f"{what}: {exc}") from None


def _image(image: object, what: str) -> Image | None:
    """Mesos's ``Image`` JSON (``DOCKER`` only)."""
    if image is None:
        return None
    image = _mapping(image, what)
    if (image.get("type") or "DOCKER") != "DOCKER":
        raise ShapeError(f"{what}.type {image.get('type')!r:.40} — mesoslike runs Docker/OCI images only")
    return Image(_string(_mapping(image.get("docker"), f"{what}.docker"), "name", f"{what}.docker"),
                 cached=image.get("cached", True) is not False)


def _volume(volume: object, what: str) -> Volume:
    """Mesos's ``Volume`` JSON."""
    volume = _mapping(volume, what)
    mode = volume.get("mode") or "RW"
    source = _optional(volume, "source")
    if volume.get("host_path"):
        kind = VolumeSource("HOST_PATH", path=volume["host_path"])
    elif _optional(volume, "image") is not None:
        kind = VolumeSource("IMAGE", image=_image(volume["image"], f"{what}.image"))
    elif source is not None:
        source = _mapping(source, f"{what}.source")
        if source.get("type") == "SANDBOX_PATH":
            sandbox = _mapping(source.get("sandbox_path"), f"{what}.source.sandbox_path")
            if (sandbox.get("type") or "SELF") != "SELF":
                raise ShapeError(f"{what}.source.sandbox_path.type PARENT — mesoslike has no nested containers")
            kind = VolumeSource("SANDBOX_PATH", path=_string(sandbox, "path", f"{what}.source.sandbox_path"))
        elif source.get("type") == "SECRET":
            kind = VolumeSource("SECRET", secret=_secret(source.get("secret"), f"{what}.source.secret"))
        else:
            raise ShapeError(f"{what}.source.type {source.get('type')!r:.40} — mesoslike mounts SANDBOX_PATH "
                                     "and SECRET sources (and host_path, image)")
    else:
        raise ShapeError(f"{what} has no host_path, image or source")
    return Volume(_string(volume, "container_path", what), kind, mode)


def _string(message: Mapping, name: str, what: str) -> str:
    value = message.get(name)
    if not isinstance(value, str):
        raise ShapeError(f"{what}.{name} must be a string")
    return value


def _secret(secret: object, what: str) -> Secret:
    """Mesos's ``Secret`` JSON (its value base64, as Mesos's JSON has bytes)."""
    secret = _mapping(secret, what)
    if secret.get("type") == "REFERENCE":
        reference = _mapping(secret.get("reference"), f"{what}.reference")
        return Secret("REFERENCE", reference=SecretReference(_string(reference, "name", f"{what}.reference"),
                                                             reference.get("key") or ""))
    value = _mapping(secret.get("value"), f"{what}.value").get("data")
    try:
        data = base64.b64decode(value, validate=True) if isinstance(value, str) else None
    except binascii.Error:
        data = None
    if data is None:
        raise ShapeError(f"{what}.value.data must be base64 bytes")
    return Secret("VALUE", value=data)


def _uris(command: Mapping, what: str) -> list[CommandURI]:
    """``CommandInfo.uris`` as ``CommandURI`` (the agent's fetcher, issue 18 §3)."""
    items = _optional(command, "uris") or []
    if not isinstance(items, list):
        raise ShapeError(f"{what}.uris must be a list of {{'value': URI, ...}}")
    uris: list[CommandURI] = []
    for index, item in enumerate(items):
        where = f"{what}.uris[{index}]"
        item = _mapping(item, where)
        flags = {name: item.get(name, default) for name, default in
                 (("extract", True), ("executable", False), ("cache", False))}
        output_file = item.get("output_file") or ""
        if not all(isinstance(flag, bool) for flag in flags.values()) or not isinstance(output_file, str):
            raise ShapeError(f"{where}: extract, executable and cache must be booleans, output_file a string")
        try:
            uris.append(CommandURI(item.get("value"), output_file=output_file, **flags))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ShapeError(f"{where}: {exc}") from None
    return uris


def _seconds(message: Mapping, name: str, default: float, what: str) -> float:
    value = message.get(name)
    return default if value is None else _number(value, f"{what}.{name}")


def _health_check(check: object, what: str) -> HealthCheck:
    """A Mesos ``HealthCheck`` dict as ``HealthCheck``; without ``type`` (Mesos
    before 1.2) the kind is the one of ``command``, ``http`` or ``tcp`` given."""
    check = _mapping(check, what)
    kind = check.get("type") or next((name.upper() for name in ("command", "http", "tcp")
                                      if _optional(check, name) is not None), None)
    command, http, tcp = "", None, None
    try:
        if kind == HealthCheck.COMMAND:
            body = _mapping(check.get("command"), f"{what}.command")
            if _optional(body, "environment") is not None or _optional(body, "uris") is not None:
                raise ShapeError(f"{what}.command: a check runs with its task's environment; its own "
                                         "environment and uris are not supported")
            command = _command_line(body, f"{what}.command")
        elif kind == HealthCheck.HTTP:
            body = _mapping(check.get("http"), f"{what}.http")
            if (body.get("protocol") or "HTTP1") != "HTTP1":
                raise ShapeError(f"{what}.http.protocol {body.get('protocol')!r}: only HTTP1 is supported")
            http = HTTPCheck(body.get("port", 0), path=body.get("path") or "/", scheme=body.get("scheme") or "http",
                             statuses=list(body.get("statuses") or []))
        elif kind == HealthCheck.TCP:
            tcp = TCPCheck(_mapping(check.get("tcp"), f"{what}.tcp").get("port", 0))
        else:
            raise ShapeError(f"{what}.type {kind!r}: mesoslike checks are COMMAND, HTTP and TCP")
        failures = check.get("consecutive_failures", 3)
        if isinstance(failures, bool) or not isinstance(failures, int):
            raise ShapeError(f"{what}.consecutive_failures must be an integer, got {failures!r}")
        return HealthCheck(kind, command=command, http=http, tcp=tcp,
                           delay_seconds=_seconds(check, "delay_seconds", 15.0, what),
                           interval_seconds=_seconds(check, "interval_seconds", 10.0, what),
                           timeout_seconds=_seconds(check, "timeout_seconds", 20.0, what),
                           consecutive_failures=failures,
                           grace_period_seconds=_seconds(check, "grace_period_seconds", 10.0, what))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ShapeError):
            raise
        raise ShapeError(f"{what}: {exc}") from None


def _labels(labels: object, what: str) -> list[Label]:
    """Mesos's ``Labels`` JSON, ``{"labels": [{"key", "value"}]}``, as ``Label``s."""
    if labels is None:
        return []
    items = _mapping(labels, what).get("labels") or []
    if not isinstance(items, list):
        raise ShapeError(f"{what}.labels must be a list of {{'key', 'value'}}")
    try:
        return [Label(_mapping(item, f"{what}.labels[{index}]").get("key", ""), item.get("value") or "")
                for index, item in enumerate(items)]
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{what}: {exc}") from None


def labels_message(labels: Iterable[Label]) -> Message:
    """``Label``s as Mesos's ``Labels`` JSON."""
    return {"labels": [{"key": label.key, "value": label.value} for label in labels]}


def _duration(message: Mapping, name: str, default: float, what: str) -> float:
    """A Mesos ``DurationInfo`` (``{"nanoseconds": N}``) field in seconds."""
    duration = _optional(message, name)
    if duration is None:
        return default
    nanoseconds = _number(_mapping(duration, f"{what}.{name}").get("nanoseconds"), f"{what}.{name}.nanoseconds")
    return max(0.0, nanoseconds / 1e9)


def executor_info(executor: object, what: str = "executor") -> tuple[ExecutorInfo, str]:
    """A pymesos ``ExecutorInfo`` dict as a mesoslike ``ExecutorInfo`` and the
    user its ``command`` names. The dict itself travels as JSON in the
    executor's ``$MESOSLIKE_PYMESOS_EXECUTOR``, for its ``registered``."""
    executor = _mapping(executor, what)
    executor_id = value_of(executor.get("executor_id"), f"{what}.executor_id")
    container = _optional(executor, "container")
    command = _mapping(executor.get("command"), f"{what}.command")
    if _optional(command, "uris") is not None:
        raise ShapeError(f"{what}.command.uris: mesoslike fetches URIs for command tasks only, not for "
                                 "a custom executor; put its files in place another way")
    line, environment, user = _command(command, f"{what}.command")
    name = executor.get("name") or ""
    if not isinstance(name, str):
        raise ShapeError(f"{what}.name must be a string")
    environment[EXECUTOR_VARIABLE] = _bounded_json(executor, what, MAX_LAUNCH_SIZE)
    try:
        info = ExecutorInfo(executor_id, line, resources_from(executor.get("resources") or [], f"{what}.resources"),
                            environment=environment, name=name,
                            container=container_info(container, f"{what}.container") if container is not None else None,
                            labels=_labels(_optional(executor, "labels"), f"{what}.labels"),
                            shutdown_grace_period=_duration(executor, "shutdown_grace_period", 5.0, what))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ShapeError):
            raise
        raise ShapeError(f"{what}: {exc}") from None
    return info, user


def task_info(task: object) -> TaskInfo:
    """A pymesos task dict (Mesos' ``TaskInfo``) as a ``TaskInfo``.

    A task with ``command`` runs it (with its ``uris`` fetched and its
    ``health_check`` run by the agent). A task with an ``executor`` is handed
    to that mesoslike custom executor (``ExecutorInfo``), which the agent
    starts with the first such task; the task dict itself (its ``data``)
    travels as JSON in the task's ``environment`` (``$MESOSLIKE_PYMESOS_TASK``)
    to ``MesosExecutorDriver``, which gives it to ``launchTask``.
    """
    task = _mapping(task, "task")
    task_id = value_of(task.get("task_id"), "task.task_id")
    what = f"task {task_id}"
    agent_id = value_of(task.get("agent_id"), f"{what}: agent_id")
    name = task.get("name") or ""
    if not isinstance(name, str):
        raise ShapeError(f"{what}: name must be a string")
    for unsupported, feature in (("check", "general checks"), ("discovery", "service discovery info")):
        if _optional(task, unsupported) is not None:
            raise ShapeError(f"{what}: {unsupported} — mesoslike has no {feature}")
    resources = resources_from(task.get("resources") or [], f"{what}: resources")
    command, executor = _optional(task, "command"), _optional(task, "executor")
    if (command is None) == (executor is None):
        raise ShapeError(f"{what} must have exactly one of command and executor, as in Mesos")
    check = _optional(task, "health_check")
    health_check = _health_check(check, f"{what}: health_check") if check is not None else None
    labels = _labels(_optional(task, "labels"), f"{what}: labels")
    container_message = _optional(task, "container")
    container = container_info(container_message, f"{what}: container") if container_message is not None else None
    environment: dict[str, str]
    info: ExecutorInfo | None = None
    uris: list[CommandURI] = []
    argv: dict[str, Any] = {}
    if command is not None and container is not None and container.image_name() \
            and not _mapping(command, f"{what}: command").get("shell", True):
        # in an image, Mesos's shell false keeps value and arguments apart: no value runs the image's
        # entrypoint with the arguments (docs/containers.rst, "Running images")
        argv = _exec_form(_mapping(command, f"{what}: command"), f"{what}: command")
        line, environment, user = argv.pop("command"), _environment(command, f"{what}: command"), \
            _user(command, f"{what}: command")
        uris = _uris(command, f"{what}: command")
    elif command is not None:
        line, environment, user = _command(command, f"{what}: command")
        uris = _uris(command, f"{what}: command")
    else:
        # the executor runs the task and its checks (as a Mesos custom executor: the
        # agent runs checks for command tasks only): the health check is in the dict
        info, user = executor_info(executor, f"{what}: executor")
        line, health_check = "", None
        environment = {TASK_VARIABLE: _bounded_json(task, what, MAX_TASK_JSON)}
    grace = _duration(_mapping(_optional(task, "kill_policy") or {}, f"{what}: kill_policy"), "grace_period", 3.0,
                      f"{what}: kill_policy")
    try:
        return TaskInfo(task_id=task_id, agent_id=agent_id, command=line, resources=resources, name=name,
                        environment=environment, kill_grace_period=grace, user=user, health_check=health_check,
                        uris=uris, labels=labels, executor=info, container=container, **argv)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{what}: {exc}") from None


def operations_from(operations: object, what: str = "operations") -> list[Operation]:
    """Mesos ``Offer.Operation`` dicts as ``Operation``s: ``LAUNCH``
    (``launch.task_infos``), ``RESERVE`` (resources with the role they are
    for; their ``reservation.principal`` is ignored: the framework's own is
    used) and ``UNRESERVE`` (resources as offered); others raise ShapeError."""
    if isinstance(operations, (Mapping, str, bytes)) or not isinstance(operations, Iterable):
        raise ShapeError(f"{what} must be a list of operation dicts")
    items: list[Operation] = []
    for index, operation in enumerate(operations):
        where = f"{what}[{index}]"
        operation = _mapping(operation, where)
        kind = operation.get("type")
        if kind == "LAUNCH":
            launch = operation.get("launch")
            infos = launch.get("task_infos") if isinstance(launch, Mapping) else None
            if not isinstance(infos, list):
                raise ShapeError(f"{where}.launch.task_infos must be a list of tasks")
            items.append(Launch([task_info(task) for task in infos]))
        elif kind in ("RESERVE", "UNRESERVE"):
            body = operation.get(kind.lower())
            resources = resources_from(body.get("resources") if isinstance(body, Mapping) else None,
                                       f"{where}.{kind.lower()}.resources")
            items.append(_reserve(resources, where) if kind == "RESERVE" else Unreserve(resources))
        else:
            raise ShapeError(f"{where}: {str(kind)[:40]!r} is not supported by mesoslike; only LAUNCH, RESERVE and "
                             "UNRESERVE are")
    return items


def _reserve(resources: Resources, where: str) -> Operation:
    """A Mesos RESERVE (resources with the role they are for) as ``Reserve``."""
    roles = resources.reservation_roles()
    if len(roles) != 1 or resources.unreserved():
        raise ShapeError(f"{where}: a RESERVE's resources name the one role they are for, got {resources}")
    # cpus(role,principal,k=v&k2=v2): the reservation's labels, the same for all of them
    labels = {(kind.partition("(")[2][:-1].split(",", 2) + [""] * 2)[2]
              for kind in (*resources.scalars(), *resources.range_names())}
    if len(labels) > 1:
        raise ShapeError(f"{where}: a RESERVE's resources carry one set of labels, got {resources}")
    pairs = [tuple(pair.partition("=")[::2]) for label in labels if label for pair in label.split("&")]
    return Reserve(resources.stripped(), role=roles[0], labels=pairs)


def _bounded_json(message: Mapping, what: str, limit: int) -> str:
    try:
        text = json.dumps(message, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{what} is not JSON: {exc}") from None
    if len(text.encode("utf-8")) > limit:
        raise ShapeError(f"{what} takes {len(text)} bytes as JSON; at most {limit} reach an executor (keep its "
                         "data small)")
    return text


# --------------------------------------------------- the executor's side
def executor_message(info: Any, framework_id: str, environment: Mapping[str, str]) -> Message:
    """The ``ExecutorInfo`` dict ``registered`` gets: the scheduler's own
    (``$MESOSLIKE_PYMESOS_EXECUTOR``) if it is there, else one made from
    the mesoslike ``ExecutorInfo``; with its ``framework_id``, as Mesos's."""
    message = _json_object(environment.get(EXECUTOR_VARIABLE, ""))
    if message is None or message.get("executor_id") != id_message(info.executor_id):
        message = {"executor_id": id_message(info.executor_id), "name": info.name,
                   "command": {"value": info.command}, "resources": resources_message(info.resources),
                   "shutdown_grace_period": {"nanoseconds": int(info.shutdown_grace_period * 1e9)}}
        if info.labels:
            message["labels"] = labels_message(info.labels)
    message["framework_id"] = id_message(framework_id)
    return message


def framework_message(info: FrameworkInfo) -> Message:
    """A ``FrameworkInfo`` as Mesos's JSON."""
    message: Message = {"id": id_message(info.id), "name": info.name, "user": info.user, "hostname": info.hostname,
                        "role": info.role, "roles": [info.role], "failover_timeout": info.failover_timeout}
    if info.partition_aware:
        message["capabilities"] = [{"type": "PARTITION_AWARE"}]
    if info.labels:
        message["labels"] = labels_message(info.labels)
    return message


def agent_message(info: Any) -> Message:
    """An agent's ``AgentInfo`` as Mesos's JSON (id, hostname, port, resources)."""
    message: Message = {"id": id_message(info.id), "hostname": info.hostname,
                        "resources": resources_message(info.resources)}
    if info.port:
        message["port"] = info.port
    return message


def executor_task_message(task: TaskInfo, executor: Message) -> Message:
    """The task dict ``launchTask`` gets: the scheduler's own
    (``$MESOSLIKE_PYMESOS_TASK``) if it is there, else one made from the
    ``TaskInfo`` (a task a mesoslike scheduler gave the executor)."""
    message = _json_object(task.environment.get(TASK_VARIABLE, ""))
    if message is not None and message.get("task_id") == id_message(task.task_id):
        return message
    message = {"task_id": id_message(task.task_id), "agent_id": id_message(task.agent_id), "name": task.name,
               "resources": resources_message(task.resources), "executor": executor}
    if task.command:
        message["data"] = encode_data(task.command)   # what such a task asks its executor to do
    if task.labels:
        message["labels"] = labels_message(task.labels)
    return message


def _json_object(text: str) -> Message | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def status_from_executor(status: object, max_data: int = MAX_STATUS_DATA) -> TaskStatus:
    """An executor's status dict (``task_id``, ``state``, ``message``,
    ``reason``, ``healthy``, ``uuid``, ``data``, ``labels``) as a
    ``TaskStatus`` for its agent; ``data`` is base64 (any bytes, NUL
    included), at most ``max_data`` bytes. The rest of a status is the agent's to say."""
    status = _mapping(status, "status")
    message, reason = status.get("message") or "", status.get("reason") or ""
    healthy = status.get("healthy")
    if not isinstance(message, str) or not isinstance(reason, str):
        raise ShapeError("status.message and status.reason must be strings")
    if healthy is not None and not isinstance(healthy, bool):
        raise ShapeError(f"status.healthy must be a boolean, got {healthy!r}")
    uuid = _optional(status, "uuid")
    if uuid is not None and not isinstance(uuid, str):
        raise ShapeError(f"status.uuid must be base64 text, got {type(uuid).__name__}")
    data = _data(status, "status.data")
    if len(data) > max_data:
        raise ShapeError(f"status.data holds {len(data)} bytes; at most {max_data} travel with an update "
                         "(the agent's --max-message-size)")
    return TaskStatus(task_id=value_of(status.get("task_id"), "status.task_id"),
                      state=known_state(status.get("state"), "status.state"), message=message, reason=reason,
                      healthy=healthy, uuid=decode_uuid(uuid) if uuid is not None else "",
                      data=data, labels=_labels(_optional(status, "labels"), "status.labels"))


def _data(message: Mapping, what: str) -> bytes:
    """A ``bytes`` field of Mesos's JSON (base64 text) as bytes; absent: b""."""
    value = message.get(what.rsplit(".", 1)[-1])
    if value is None or value == "":
        return b""
    return data_from(value, what)


def data_from(value: object, what: str) -> bytes:
    """Base64 text (Mesos's JSON form of ``bytes``) as bytes, strictly:
    ShapeError for anything else."""
    if not isinstance(value, str):
        raise ShapeError(f"{what} must be base64 text, got {type(value).__name__}")
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ShapeError(f"{what} is not base64") from None


def known_state(state: object, what: str) -> str:
    if state not in TaskState.ALL:
        raise ShapeError(f"{what} {state!r} is not a task state ({', '.join(TaskState.ALL)})")
    return str(state)

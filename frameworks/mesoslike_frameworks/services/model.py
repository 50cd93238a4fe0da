"""An app definition as Marathon's REST API takes it (``/v2/apps``), checked
field by field.

Pure (no I/O, no clock). :func:`parse_app` turns a JSON document into an
:class:`AppDefinition` or raises :class:`ValidationError` whose
``details`` name every field that is wrong, in Marathon's shape::

    {"message": "Object is not valid",
     "details": [{"path": "/instances", "errors": ["got -1, expected 0 or more"]}]}

:meth:`AppDefinition.to_json` gives the document back as Marathon shows it
(``GET /v2/apps/{id}``), every field with its default filled in.

What mesoslike cannot do is refused here, by name, rather than accepted and
ignored: more than one health check, readiness checks, residency (local
volumes), IP-per-task networking, bridge networks and port mappings. A
``container`` with an image runs on the agents' OCI runtime
(``core.container_info``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping

import attrs

from mesoslike import Image, SecretReference
from mesoslike_frameworks.constraints import Constraint, ConstraintError

__all__ = [
    "AppDefinition", "PortDefinition", "HealthCheckDefinition", "UpgradeStrategy", "ValidationError",
    "parse_app", "merge_app", "normalize_id", "check_id", "format_timestamp", "KILL_SELECTIONS",
    "MAX_INSTANCES", "MAX_APP_DOCUMENT", "HEALTH_PROTOCOLS", "READ_ONLY_FIELDS", "secret_reference",
]

#: instances of one app, at most (the scheduler keeps a record of each)
MAX_INSTANCES = 10_000
#: characters of an app id
MAX_ID = 256
#: environment variables, labels, constraints, URIs of one app, at most
MAX_ENV = 256
MAX_LABELS = 32
MAX_CONSTRAINTS = 32
MAX_FETCH = 100
MAX_PORTS = 64
#: bytes of one app's JSON document, at most
MAX_APP_DOCUMENT = 256 * 1024
KILL_SELECTIONS = ("YOUNGEST_FIRST", "OLDEST_FIRST")
#: Marathon's health check protocols; the agent runs each (MESOS_* are the same checks)
HEALTH_PROTOCOLS = ("HTTP", "HTTPS", "TCP", "COMMAND", "MESOS_HTTP", "MESOS_HTTPS", "MESOS_TCP")
#: fields a client may send back as GET gave them; they are the server's and are ignored
READ_ONLY_FIELDS = frozenset({
    "version", "versionInfo", "tasks", "tasksRunning", "tasksStaged", "tasksHealthy", "tasksUnhealthy",
    "deployments", "lastTaskFailure", "taskStats", "readinessCheckResults", "counts",
})
#: fields mesoslike refuses unless empty: it has no such feature
_UNSUPPORTED = {
    "readinessChecks": "readiness checks are not supported",
    "residency": "resident apps (local persistent volumes) are not supported",
    "networks": "networks other than the host's are not supported",
    "ipAddress": "IP-per-task networking is not supported",
    "storeUrls": "store URLs are not supported",
}
_ID_SEGMENT = re.compile(r"^(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_ROLE = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$|^\*$")


class ValidationError(ValueError):
    """An app document that is not valid: ``details`` is a list of
    ``(path, [error, ...])``, the path in Marathon's notation (``/instances``,
    ``/constraints(0)``, ``/healthChecks(0)/portIndex``)."""

    def __init__(self, details: list[tuple[str, list[str]]], message: str = "Object is not valid") -> None:
        self.details = details
        self.message = message
        super().__init__("; ".join(f"{path}: {', '.join(errors)}" for path, errors in details) or message)

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "details": [{"path": path, "errors": list(errors)}
                                                     for path, errors in self.details]}


class _Problems:
    """Errors collected while checking a document, by path."""

    def __init__(self) -> None:
        self.details: dict[str, list[str]] = {}

    def add(self, path: str, error: str) -> None:
        self.details.setdefault(path, []).append(error)

    def raise_if_any(self) -> None:
        if self.details:
            raise ValidationError(sorted(self.details.items()))


def normalize_id(app_id: str, base: str = "/") -> str:
    """An absolute app id: ``web`` -> ``/web``; ``../x`` and ``./x`` relative
    to ``base``, as Marathon resolves them. Not checked (see :func:`check_id`)."""
    parts = [] if app_id.startswith("/") else [p for p in base.split("/") if p]
    for part in app_id.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def check_id(app_id: str) -> str | None:
    """Why ``app_id`` (absolute) is not an app id, or None."""
    if len(app_id) > MAX_ID:
        return f"an id is at most {MAX_ID} characters"
    segments = [part for part in app_id.split("/") if part]
    if not segments:
        return "the root group is not an app: give an id such as /team/web"
    for segment in segments:
        if not _ID_SEGMENT.fullmatch(segment):
            return (f"{segment!r} must fully match regular expression '{_ID_SEGMENT.pattern}' (lowercase letters, "
                    "digits, hyphens and dots; a letter or digit at each end)")
    return None


def format_timestamp(seconds: float) -> str:
    """Epoch seconds as Marathon writes a time: ``2015-04-17T04:00:14.171Z``."""
    import datetime

    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# ------------------------------------------------------------------ values
@attrs.frozen
class PortDefinition:
    """One port of an app: ``port`` is the service port the app declares
    (0: any); each instance gets a host port from its offer (the same one
    with ``requirePorts``), given to it as ``$PORT<i>`` and ``$PORT_<NAME>``."""

    port: int = 0
    protocol: str = "tcp"
    name: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"port": self.port, "protocol": self.protocol}
        if self.name:
            document["name"] = self.name
        if self.labels:
            document["labels"] = dict(self.labels)
        return document


@attrs.frozen
class HealthCheckDefinition:
    """One of Marathon's health checks; the agent runs it (the task's
    ``healthy`` comes back in its status updates), and kills the task after
    ``max_consecutive_failures`` failures in a row (0: never)."""

    protocol: str = "HTTP"
    path: str = "/"
    port_index: int | None = 0
    port: int | None = None
    command: str = ""
    grace_period_seconds: float = 300.0
    interval_seconds: float = 60.0
    timeout_seconds: float = 20.0
    max_consecutive_failures: int = 3
    delay_seconds: float = 15.0
    ignore_http1xx: bool = False

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "protocol": self.protocol, "gracePeriodSeconds": _number(self.grace_period_seconds),
            "intervalSeconds": _number(self.interval_seconds), "timeoutSeconds": _number(self.timeout_seconds),
            "maxConsecutiveFailures": self.max_consecutive_failures, "delaySeconds": _number(self.delay_seconds),
        }
        if self.protocol.endswith("HTTP") or self.protocol.endswith("HTTPS"):
            document["path"] = self.path
            document["ignoreHttp1xx"] = self.ignore_http1xx
        if self.protocol == "COMMAND":
            document["command"] = {"value": self.command}
        elif self.port is not None:
            document["port"] = self.port
        else:
            document["portIndex"] = self.port_index
        return document


@attrs.frozen
class UpgradeStrategy:
    """How a rolling upgrade or restart goes: at least
    ``ceil(instances * minimum_health_capacity)`` instances stay healthy, at
    most ``floor(instances * (1 + maximum_over_capacity))`` run at once."""

    minimum_health_capacity: float = 1.0
    maximum_over_capacity: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {"minimumHealthCapacity": _number(self.minimum_health_capacity),
                "maximumOverCapacity": _number(self.maximum_over_capacity)}


def _frozen_map(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen
class AppDefinition:
    """A service: ``instances`` copies of ``cmd`` (or ``args``), each with
    ``cpus``/``mem``/``disk``/``gpus`` and host ports, kept running.
    ``version`` and the two ``version_info`` times are the server's."""

    id: str
    cmd: str | None = None
    args: tuple[str, ...] | None = None
    user: str | None = None
    env: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map)      # name -> str or {"secret": s}
    secrets: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map)  # name -> {"source": ...}
    instances: int = 1
    cpus: float = 1.0
    mem: float = 128.0
    disk: float = 0.0
    gpus: int = 0
    constraints: tuple[tuple[str, ...], ...] = ()
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    port_definitions: tuple[PortDefinition, ...] = (PortDefinition(name="default"),)
    require_ports: bool = False
    health_checks: tuple[HealthCheckDefinition, ...] = ()
    upgrade_strategy: UpgradeStrategy = UpgradeStrategy()
    backoff_seconds: float = 1.0
    backoff_factor: float = 1.15
    max_launch_delay_seconds: float = 300.0
    kill_selection: str = "YOUNGEST_FIRST"
    role: str = ""                          # "": the service's own role
    accepted_resource_roles: tuple[str, ...] = ()
    container: Mapping[str, Any] | None = None
    fetch: tuple[Mapping[str, Any], ...] = ()
    task_kill_grace_period_seconds: float | None = None
    unreachable_inactive_after_seconds: float | None = 0.0   # None: "disabled", never replaced
    unreachable_expunge_after_seconds: float = 0.0
    dependencies: tuple[str, ...] = ()
    executor: str = ""
    version: str = ""
    last_scaling_at: str = ""
    last_config_change_at: str = ""

    @property
    def image(self) -> str | None:
        """The container image the app asks for, if any."""
        container = self.container or {}
        for kind in ("docker", "appc"):
            inner = container.get(kind)
            if isinstance(inner, Mapping) and inner.get("image"):
                return str(inner["image"])
        return None

    def parsed_constraints(self) -> list[Constraint]:
        return [Constraint(c[0], c[1].upper(), c[2] if len(c) > 2 else "") for c in self.constraints]

    def config(self) -> AppDefinition:
        """The definition less what a scale changes (``instances``) and the
        server's fields: two versions with equal configs run the same tasks."""
        return attrs.evolve(self, instances=0, version="", last_scaling_at="", last_config_change_at="")

    def to_json(self) -> dict[str, Any]:
        """Marathon's app document (``GET /v2/apps/{id}``'s ``app`` without
        the embedded counts and tasks)."""
        document: dict[str, Any] = {
            "id": self.id, "cmd": self.cmd, "args": list(self.args) if self.args is not None else None,
            "user": self.user, "env": dict(self.env), "instances": self.instances, "cpus": _number(self.cpus),
            "mem": _number(self.mem), "disk": _number(self.disk), "gpus": self.gpus, "executor": self.executor,
            "constraints": [list(c) for c in self.constraints], "uris": [], "fetch": [dict(f) for f in self.fetch],
            "storeUrls": [], "backoffSeconds": _number(self.backoff_seconds),
            "backoffFactor": _number(self.backoff_factor),
            "maxLaunchDelaySeconds": _number(self.max_launch_delay_seconds),
            "container": dict(self.container) if self.container is not None else None,
            "healthChecks": [check.to_json() for check in self.health_checks], "readinessChecks": [],
            "dependencies": list(self.dependencies), "upgradeStrategy": self.upgrade_strategy.to_json(),
            "labels": dict(self.labels), "acceptedResourceRoles": list(self.accepted_resource_roles) or None,
            "version": self.version, "secrets": dict(self.secrets),
            "killSelection": self.kill_selection, "requirePorts": self.require_ports,
            "portDefinitions": [port.to_json() for port in self.port_definitions],
            "unreachableStrategy": ("disabled" if self.unreachable_inactive_after_seconds is None else
                                    {"inactiveAfterSeconds": _number(self.unreachable_inactive_after_seconds),
                                     "expungeAfterSeconds": _number(self.unreachable_expunge_after_seconds)}),
            "role": self.role,
        }
        if self.task_kill_grace_period_seconds is not None:
            document["taskKillGracePeriodSeconds"] = _number(self.task_kill_grace_period_seconds)
        if self.version:
            document["versionInfo"] = {"lastScalingAt": self.last_scaling_at or self.version,
                                       "lastConfigChangeAt": self.last_config_change_at or self.version}
        return document


def _number(value: float) -> float | int:
    """A whole float as an int in JSON (``1`` rather than ``1.0``), as Marathon writes them."""
    return int(value) if float(value).is_integer() and abs(value) < 2 ** 53 else value


# ------------------------------------------------------------------ parsing
def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    """Reads fields of one document, recording what is wrong."""

    def __init__(self, document: Mapping[str, Any], problems: _Problems) -> None:
        self.document = document
        self.problems = problems

    def number(self, field: str, default: float, low: float = 0.0, high: float = math.inf,
               integer: bool = False) -> float:
        value = self.document.get(field)
        if value is None:
            return default
        if not (_is_int(value) if integer else _is_number(value)):
            self.problems.add(f"/{field}", f"got {_describe(value)}, expected {'an integer' if integer else 'a number'}")
            return default
        if value < low:
            self.problems.add(f"/{field}", f"got {value}, expected {low:g} or more")
            return default
        if value > high:
            self.problems.add(f"/{field}", f"got {value}, expected {high:g} or less")
            return default
        return value

    def string(self, field: str, default: str | None = None, limit: int = 4096) -> str | None:
        value = self.document.get(field)
        if value is None:
            return default
        if not isinstance(value, str):
            self.problems.add(f"/{field}", f"got {_describe(value)}, expected a string")
            return default
        if len(value) > limit or "\0" in value:
            self.problems.add(f"/{field}", f"must be at most {limit} characters, without NUL")
            return default
        return value

    def boolean(self, field: str, default: bool) -> bool:
        value = self.document.get(field)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problems.add(f"/{field}", f"got {_describe(value)}, expected true or false")
            return default
        return value

    def string_list(self, field: str, limit: int) -> tuple[str, ...] | None:
        value = self.document.get(field)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.problems.add(f"/{field}", "expected an array of strings")
            return None
        if len(value) > limit:
            self.problems.add(f"/{field}", f"at most {limit} items, got {len(value)}")
            return None
        return tuple(value)


def parse_app(document: object, *, app_id: str | None = None, framework_role: str = "*",
              base: AppDefinition | None = None) -> AppDefinition:
    """The app ``document`` describes (with ``base``: the fields it gives
    replace those of ``base``, the others are kept — a PUT or PATCH of some
    fields). ``app_id``: the id the URL names (it wins over the document's,
    which must then agree). Raises :class:`ValidationError`."""
    problems = _Problems()
    if not isinstance(document, Mapping):
        raise ValidationError([("/", ["expected a JSON object"])])
    if base is not None:
        merged = base.to_json()
        for field in ("versionInfo", "version"):
            merged.pop(field, None)
        if "ports" in document or "portDefinitions" in document:
            merged.pop("portDefinitions", None)
        if "uris" in document:
            merged.pop("fetch", None)
        if ("cmd" in document and document["cmd"] is not None) or ("args" in document and document["args"] is not None):
            merged.pop("cmd", None)
            merged.pop("args", None)
        merged.update({key: value for key, value in document.items()})
        document = merged
    read = _Reader(document, problems)
    for field in sorted(set(document) - _KNOWN_FIELDS - READ_ONLY_FIELDS):
        problems.add(f"/{field}", "unknown field")
    for field, why in _UNSUPPORTED.items():
        if document.get(field) not in (None, [], {}, ""):
            problems.add(f"/{field}", why)

    raw_id = app_id if app_id is not None else document.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip("/"):
        problems.add("/id", "an app needs an id (a path such as /team/web)")
        the_id = "/"
    else:
        the_id = normalize_id(raw_id)
        problem = check_id(the_id)
        if problem:
            problems.add("/id", problem)
        given = document.get("id")
        if app_id is not None and isinstance(given, str) and given and normalize_id(given) != the_id:
            problems.add("/id", f"the document's id {given!r} is not the URL's {app_id!r}")

    cmd = read.string("cmd", limit=65536)
    args = read.string_list("args", limit=1024)
    container = _container(document.get("container"), problems)
    if cmd is not None and args is not None:
        problems.add("/", "AppDefinition must either contain one of 'cmd' or 'args', not both")
    if cmd is None and args is None and container is None:
        problems.add("/", "AppDefinition must either contain one of 'cmd' or 'args', and/or a 'container'.")
    if cmd is not None and not cmd.strip():
        problems.add("/cmd", "must not be empty")

    instances = int(read.number("instances", 1, 0, MAX_INSTANCES, integer=True))
    cpus = read.number("cpus", 1.0, 0, 1_000_000)
    mem = read.number("mem", 128.0, 0, 1 << 40)
    disk = read.number("disk", 0.0, 0, 1 << 40)
    gpus = int(read.number("gpus", 0, 0, 1024, integer=True))
    if cpus <= 0 and mem <= 0 and disk <= 0 and gpus <= 0:
        problems.add("/", "an instance needs some resources: cpus, mem, disk or gpus above 0")

    env, secrets = _env(document.get("env"), document.get("secrets"), problems)
    user = read.string("user", limit=256)
    labels = _labels(document.get("labels"), "/labels", problems)
    constraints = _constraints(document.get("constraints"), problems)
    ports, require_ports = _ports(document, read, problems)
    health = _health_checks(document.get("healthChecks"), len(ports), problems)
    strategy = _upgrade_strategy(document.get("upgradeStrategy"), problems)
    backoff = read.number("backoffSeconds", 1.0, 0, 86400)
    factor = read.number("backoffFactor", 1.15, 1.0, 100)
    max_delay = read.number("maxLaunchDelaySeconds", 300.0, 0, 86400 * 7)
    kill_selection = read.string("killSelection", "YOUNGEST_FIRST")
    if kill_selection not in KILL_SELECTIONS:
        problems.add("/killSelection", f"got {_describe(kill_selection)}, expected one of {', '.join(KILL_SELECTIONS)}")
        kill_selection = "YOUNGEST_FIRST"
    role = read.string("role", "", limit=128) or ""
    if role and role != framework_role:
        problems.add("/role", f"got {_describe(role)}, expected {framework_role!r}: apps run in the service's role "
                              "(its --role)")
    accepted = read.string_list("acceptedResourceRoles", limit=8) or ()
    for item in accepted:
        if item not in ("*", framework_role):
            problems.add("/acceptedResourceRoles", f"{item!r} is neither '*' nor the service's role {framework_role!r}")
    fetch = _fetch(document, problems)
    grace = document.get("taskKillGracePeriodSeconds")
    kill_grace: float | None = None
    if grace is not None:
        kill_grace = read.number("taskKillGracePeriodSeconds", 3.0, 0, 3600)
    inactive_after, expunge_after = _unreachable(document.get("unreachableStrategy"), problems)
    dependencies = read.string_list("dependencies", limit=64) or ()
    executor = read.string("executor", "", limit=256) or ""
    if executor not in ("", "//cmd"):
        problems.add("/executor", "custom executors are not supported: leave it empty (or //cmd)")
    problems.raise_if_any()
    return AppDefinition(
        id=the_id, cmd=cmd, args=args, user=user, env=env, secrets=secrets, instances=instances, cpus=cpus, mem=mem,
        disk=disk, gpus=gpus, constraints=constraints, labels=labels, port_definitions=ports,
        require_ports=require_ports, health_checks=health, upgrade_strategy=strategy, backoff_seconds=backoff,
        backoff_factor=factor, max_launch_delay_seconds=max_delay, kill_selection=kill_selection,
        role=role or framework_role, accepted_resource_roles=accepted, container=container, fetch=fetch,
        task_kill_grace_period_seconds=kill_grace, unreachable_inactive_after_seconds=inactive_after,
        unreachable_expunge_after_seconds=expunge_after, dependencies=dependencies, executor=executor,
        version=base.version if base is not None else "",
        last_scaling_at=base.last_scaling_at if base is not None else "",
        last_config_change_at=base.last_config_change_at if base is not None else "")


def merge_app(base: AppDefinition, document: object, framework_role: str = "*") -> AppDefinition:
    """``base`` with the fields ``document`` gives (a partial update)."""
    return parse_app(document, app_id=base.id, framework_role=framework_role, base=base)


_KNOWN_FIELDS = frozenset({
    "id", "cmd", "args", "user", "env", "secrets", "instances", "cpus", "mem", "disk", "gpus", "constraints",
    "labels", "ports", "portDefinitions", "requirePorts", "healthChecks", "upgradeStrategy", "backoffSeconds",
    "backoffFactor", "maxLaunchDelaySeconds", "killSelection", "role", "acceptedResourceRoles", "container",
    "fetch", "uris", "taskKillGracePeriodSeconds", "unreachableStrategy", "dependencies", "executor",
    *_UNSUPPORTED,
})


def _container(value: object, problems: _Problems) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.add("/container", "expected an object")
        return None
    kind = value.get("type", "DOCKER")
    if kind not in ("DOCKER", "MESOS"):
        problems.add("/container/type", f"got {_describe(kind)}, expected DOCKER or MESOS")
    docker = value.get("docker")
    if docker is not None:
        if not isinstance(docker, Mapping):
            problems.add("/container/docker", "expected an object")
        elif not isinstance(docker.get("image"), str) or not docker["image"].strip():
            problems.add("/container/docker/image", "a docker container needs an image")
        else:
            try:
                Image(docker["image"])
            except ValueError as exc:
                problems.add("/container/docker/image", str(exc))
            network = docker.get("network", "HOST")
            if network not in ("HOST", "NONE"):
                problems.add("/container/docker/network", f"got {_describe(network)}: the agents run containers "
                             "on the host's network (HOST) or none (NONE), with no bridge")
            for field in ("portMappings", "parameters", "privileged"):
                if docker.get(field):
                    problems.add(f"/container/docker/{field}", "not supported: the agents run images on runc, with "
                                 "no Docker daemon, bridge or privileged containers")
    if kind == "DOCKER" and docker is None:
        problems.add("/container/docker", "a DOCKER container needs docker.image")
    volumes = value.get("volumes") or []
    if not isinstance(volumes, list):
        problems.add("/container/volumes", "expected an array")
    else:
        for index, volume in enumerate(volumes):
            where = f"/container/volumes/{index}"
            if not isinstance(volume, Mapping) or not isinstance(volume.get("containerPath"), str) \
                    or not volume["containerPath"]:
                problems.add(where, 'expected {"containerPath": PATH, "hostPath": PATH, "mode": "RO"|"RW"}')
            elif not isinstance(volume.get("hostPath"), str) or not volume["hostPath"]:
                problems.add(f"{where}/hostPath", "only host volumes are supported (no persistent or external ones)")
            elif volume.get("mode", "RW") not in ("RO", "RW"):
                problems.add(f"{where}/mode", f"got {_describe(volume.get('mode'))}, expected RO or RW")
    return dict(value)


def _env(value: object, secrets_value: object, problems: _Problems) -> tuple[dict[str, Any], dict[str, Any]]:
    secrets: dict[str, Any] = {}
    if secrets_value is not None:
        if not isinstance(secrets_value, Mapping) or len(secrets_value) > MAX_ENV:
            problems.add("/secrets", f"expected an object of at most {MAX_ENV} secrets")
        else:
            for name, secret in secrets_value.items():
                if not isinstance(secret, Mapping) or not isinstance(secret.get("source"), str) \
                        or not secret["source"]:
                    problems.add(f"/secrets/{name}", 'expected {"source": "NAME"}')
                    continue
                try:
                    secret_reference(secret["source"])
                except ValueError as exc:
                    problems.add(f"/secrets/{name}/source", str(exc))
                else:
                    secrets[str(name)] = {"source": secret["source"]}
    env: dict[str, Any] = {}
    if value is None:
        return env, secrets
    if not isinstance(value, Mapping) or len(value) > MAX_ENV:
        problems.add("/env", f"expected an object of at most {MAX_ENV} variables")
        return env, secrets
    for name, item in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            problems.add(f"/env/{name}", "a variable's name is letters, digits and underscores, not a digit first")
        elif isinstance(item, str):
            if "\0" in item or len(item) > 65536:
                problems.add(f"/env/{name}", "at most 65536 characters, without NUL")
            else:
                env[name] = item
        elif isinstance(item, Mapping) and isinstance(item.get("secret"), str):
            if item["secret"] not in secrets:
                problems.add(f"/env/{name}", f"references an undefined secret {item['secret']!r}")
            env[name] = {"secret": item["secret"]}
        else:
            problems.add(f"/env/{name}", 'expected a string or {"secret": "NAME"}')
    return env, secrets


def secret_reference(source: str) -> SecretReference:
    """The agent's reference for a secret's ``source`` (Marathon's secret
    store path, ``/db/password`` or ``db/password``; ``db@PASSWORD`` selects
    a key in the file): the agent reads it from its secrets directory under
    the service's principal (docs/containers.rst, "Secrets"). Raises
    ValueError naming what is wrong."""
    name, _, key = source.lstrip("/").partition("@")
    return SecretReference(name, key=key)


def _labels(value: object, path: str, problems: _Problems) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_LABELS:
        problems.add(path, f"expected an object of at most {MAX_LABELS} string labels")
        return {}
    labels: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str) or not key or len(key) > 128 or len(item) > 512 \
                or any(ord(c) < 32 for c in key + item):
            problems.add(f"{path}/{key}", "a label is a key of 1-128 and a value of at most 512 printable characters")
        else:
            labels[key] = item
    return labels


def _constraints(value: object, problems: _Problems) -> tuple[tuple[str, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CONSTRAINTS:
        problems.add("/constraints", f"expected an array of at most {MAX_CONSTRAINTS} constraints")
        return ()
    parsed: list[tuple[str, ...]] = []
    for index, item in enumerate(value):
        path = f"/constraints({index})"
        if isinstance(item, str):
            item = item.split(":", 2)
        if not isinstance(item, list) or not 2 <= len(item) <= 3 or not all(isinstance(p, str) for p in item):
            problems.add(path, 'expected ["field", "OPERATOR"] or ["field", "OPERATOR", "value"]')
            continue
        try:
            Constraint(item[0], item[1].upper(), item[2] if len(item) > 2 else "")
        except ConstraintError as exc:
            problems.add(path, str(exc))
            continue
        parsed.append((item[0], item[1].upper(), *item[2:]))
    return tuple(parsed)


def _ports(document: Mapping[str, Any], read: _Reader, problems: _Problems
           ) -> tuple[tuple[PortDefinition, ...], bool]:
    require = read.boolean("requirePorts", False)
    if "ports" in document and "portDefinitions" in document and document["ports"] is not None \
            and document["portDefinitions"] is not None:
        problems.add("/", "give ports or portDefinitions, not both")
        return (), require
    definitions: list[PortDefinition] = []
    if document.get("ports") is not None:
        ports = document["ports"]
        if not isinstance(ports, list) or len(ports) > MAX_PORTS \
                or not all(_is_int(p) and 0 <= p <= 65535 for p in ports):
            problems.add("/ports", f"expected an array of at most {MAX_PORTS} ports in [0, 65535]")
            return (), require
        definitions = [PortDefinition(port) for port in ports]
    elif "portDefinitions" in document:
        items = document["portDefinitions"] or []
        if not isinstance(items, list) or len(items) > MAX_PORTS:
            problems.add("/portDefinitions", f"expected an array of at most {MAX_PORTS} port definitions")
            return (), require
        for index, item in enumerate(items):
            path = f"/portDefinitions({index})"
            if not isinstance(item, Mapping):
                problems.add(path, "expected an object")
                continue
            port = item.get("port", 0)
            if not _is_int(port) or not 0 <= port <= 65535:
                problems.add(f"{path}/port", f"got {_describe(port)}, expected a port in [0, 65535]")
                continue
            protocol = item.get("protocol", "tcp")
            if protocol not in ("tcp", "udp", "udp,tcp", "tcp,udp"):
                problems.add(f"{path}/protocol", "expected tcp, udp or udp,tcp")
                continue
            name = item.get("name") or ""
            if not isinstance(name, str) or (name and not _PORT_NAME.fullmatch(name)):
                problems.add(f"{path}/name", "a port's name is lowercase letters, digits and hyphens")
                continue
            definitions.append(PortDefinition(port, protocol, name, _labels(item.get("labels"), f"{path}/labels",
                                                                            problems)))
    else:
        definitions = [PortDefinition(name="default")]
    names = [d.name for d in definitions if d.name]
    if len(names) != len(set(names)):
        problems.add("/portDefinitions", "port names must be unique")
    fixed = [d.port for d in definitions if d.port]
    if len(fixed) != len(set(fixed)):
        problems.add("/portDefinitions", "ports must be unique")
    if require and any(d.port == 0 for d in definitions):
        problems.add("/requirePorts", "requirePorts needs every port given (not 0)")
    return tuple(definitions), require


def _health_checks(value: object, ports: int, problems: _Problems) -> tuple[HealthCheckDefinition, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add("/healthChecks", "expected an array")
        return ()
    if len(value) > 1:
        problems.add("/healthChecks", "at most one health check per app (the agent runs one per task)")
        return ()
    checks = []
    for index, item in enumerate(value):
        path = f"/healthChecks({index})"
        if not isinstance(item, Mapping):
            problems.add(path, "expected an object")
            continue
        inner = _Problems()
        read = _Reader(item, inner)
        protocol = read.string("protocol", "HTTP")
        if protocol not in HEALTH_PROTOCOLS:
            inner.add("/protocol", f"got {_describe(protocol)}, expected one of {', '.join(HEALTH_PROTOCOLS)}")
            protocol = "HTTP"
        command = ""
        if protocol == "COMMAND":
            raw = item.get("command")
            value = raw.get("value") if isinstance(raw, Mapping) else raw
            if not isinstance(value, str) or not value.strip():
                inner.add("/command", 'a COMMAND check needs {"value": "a shell command"}')
            else:
                command = value
        port = item.get("port")
        port_index = item.get("portIndex")
        if protocol != "COMMAND":
            if port is not None:
                if not _is_int(port) or not 1 <= port <= 65535:
                    inner.add("/port", "expected a port in [1, 65535]")
                    port = None
                elif port_index is not None:
                    inner.add("/", "give port or portIndex, not both")
            else:
                port_index = 0 if port_index is None else port_index
                if not _is_int(port_index) or not 0 <= port_index < max(ports, 1) or ports == 0:
                    inner.add("/portIndex", f"got {_describe(port_index)}: the app has {ports} port(s); "
                                            "give an index into them, or a port")
                    port_index = 0
        path_value = read.string("path", "/") or "/"
        if not path_value.startswith("/") or any(c.isspace() for c in path_value):
            inner.add("/path", "must start with '/', without spaces")
        check = HealthCheckDefinition(
            protocol=protocol, path=path_value, port_index=port_index if port is None else None, port=port,
            command=command, grace_period_seconds=read.number("gracePeriodSeconds", 300.0, 0, 86400),
            interval_seconds=read.number("intervalSeconds", 60.0, 0.1, 86400),
            timeout_seconds=read.number("timeoutSeconds", 20.0, 0.1, 86400),
            max_consecutive_failures=int(read.number("maxConsecutiveFailures", 3, 0, 1000, integer=True)),
            delay_seconds=read.number("delaySeconds", 15.0, 0, 86400),
            ignore_http1xx=read.boolean("ignoreHttp1xx", False))
        for inner_path, errors in inner.details.items():
            for error in errors:
                problems.add(path + ("" if inner_path == "/" else inner_path), error)
        checks.append(check)
    return tuple(checks)


def _upgrade_strategy(value: object, problems: _Problems) -> UpgradeStrategy:
    if value is None:
        return UpgradeStrategy()
    if not isinstance(value, Mapping):
        problems.add("/upgradeStrategy", "expected an object")
        return UpgradeStrategy()
    inner = _Problems()
    read = _Reader(value, inner)
    strategy = UpgradeStrategy(read.number("minimumHealthCapacity", 1.0, 0, 1),
                               read.number("maximumOverCapacity", 1.0, 0, 1))
    for path, errors in inner.details.items():
        for error in errors:
            problems.add("/upgradeStrategy" + path, error)
    return strategy


def _fetch(document: Mapping[str, Any], problems: _Problems) -> tuple[Mapping[str, Any], ...]:
    items: list[Mapping[str, Any]] = []
    uris = document.get("uris")
    if uris is not None:
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            problems.add("/uris", "expected an array of strings")
        else:
            items += [{"uri": uri} for uri in uris]
    fetch = document.get("fetch")
    if fetch is not None:
        if not isinstance(fetch, list):
            problems.add("/fetch", "expected an array")
        else:
            items += fetch
    if len(items) > MAX_FETCH:
        problems.add("/fetch", f"at most {MAX_FETCH} URIs")
        return ()
    checked = []
    for index, item in enumerate(items):
        path = f"/fetch({index})"
        if not isinstance(item, Mapping) or not isinstance(item.get("uri"), str):
            problems.add(path, 'expected {"uri": "...", "extract": true, "executable": false, "cache": false}')
            continue
        entry: dict[str, Any] = {"uri": item["uri"], "extract": item.get("extract", True),
                                 "executable": item.get("executable", False), "cache": item.get("cache", False)}
        if item.get("outputFile"):
            entry["outputFile"] = item["outputFile"]
        for flag in ("extract", "executable", "cache"):
            if not isinstance(entry[flag], bool):
                problems.add(f"{path}/{flag}", "expected true or false")
        if not entry["uri"].startswith(("file://", "http://", "https://")):
            problems.add(f"{path}/uri", "a file://, http:// or https:// URI")
        checked.append(entry)
    return tuple(checked)


def _unreachable(value: object, problems: _Problems) -> tuple[float | None, float]:
    if value is None:
        return 0.0, 0.0
    if value == "disabled":
        return None, 0.0
    if not isinstance(value, Mapping):
        problems.add("/unreachableStrategy", 'expected "disabled" or {"inactiveAfterSeconds": N, '
                                             '"expungeAfterSeconds": M}')
        return 0.0, 0.0
    inner = _Problems()
    read = _Reader(value, inner)
    inactive = read.number("inactiveAfterSeconds", 0.0, 0, 86400 * 7)
    expunge = read.number("expungeAfterSeconds", 0.0, 0, 86400 * 7)
    if expunge and expunge < inactive:
        inner.add("/expungeAfterSeconds", "must be at least inactiveAfterSeconds")
    for path, errors in inner.details.items():
        for error in errors:
            problems.add("/unreachableStrategy" + path, error)
    return inactive, expunge


def app_ids_under(ids: Iterable[str], prefix: str) -> list[str]:
    """The app ids in ``ids`` that are ``prefix`` or in its group."""
    prefix = prefix.rstrip("/")
    return [i for i in ids if i == prefix or i.startswith(prefix + "/")]

"""Public value types of the framework API (docs/framework-api.rst), shared by the wire
protocol, the master, the agents and the scheduler driver.

All are frozen ``msgspec.Struct`` types (built, encoded and decoded in C);
field types are checked when a message is decoded (see
:mod:`mesoslike.wire.codec`), so a value that arrives over the wire has the
declared types, and each checks its values in ``__post_init__`` (or, a
:class:`ConvertedWhenMade` one, ``_convert``) whether a caller makes it or
the codec decodes it. ``msgspec.structs.replace`` copies one with changes
without checking them: the classes whose fields need converting have a
``replace`` that does.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping, TypeVar

import msgspec

from mesoslike.allocator.offers import Offer  # the one offer model, made by the allocator (core)
from mesoslike.attributes import check_attributes
from mesoslike.converted_structs import ConvertedWhenMade
from mesoslike.resources import Resources

__all__ = [
    "TaskState", "TERMINAL_STATES", "FrameworkInfo", "TaskInfo", "TaskStatus", "Filters", "Offer",
    "MasterInfo", "AgentInfo", "DEFAULT_REFUSE_SECONDS", "HealthCheck", "HTTPCheck", "TCPCheck", "CommandURI",
    "MAX_TASK_URIS", "Label", "MAX_LABELS", "MAX_LABEL_KEY", "MAX_LABEL_VALUE", "ExecutorInfo",
    "MAX_FRAMEWORK_MESSAGE", "MAX_MESSAGE_SIZE_CEILING", "MIN_MESSAGE_SIZE", "WARN_MESSAGE_SIZE",
    "check_message_size", "MAX_EXECUTOR_ID", "EXECUTOR_RUN_PREFIX",
    "Operation", "OperationType", "Launch", "Reserve", "Unreserve", "MAX_OPERATIONS",
    "Secret", "SecretReference", "MAX_SECRET_BYTES", "MAX_TASK_SECRETS", "Image", "Volume", "VolumeSource",
    "DockerInfo", "ContainerInfo", "ContainerStatus", "MAX_VOLUMES",
]

DEFAULT_REFUSE_SECONDS = 5.0


class TaskState:
    """Task states, as in Mesos."""

    STAGING = "TASK_STAGING"
    STARTING = "TASK_STARTING"
    RUNNING = "TASK_RUNNING"
    KILLING = "TASK_KILLING"
    FINISHED = "TASK_FINISHED"
    FAILED = "TASK_FAILED"
    KILLED = "TASK_KILLED"
    ERROR = "TASK_ERROR"
    LOST = "TASK_LOST"
    DROPPED = "TASK_DROPPED"
    GONE = "TASK_GONE"
    #: the operator marked the task's agent gone (Mesos's MARK_AGENT_GONE; docs/reliability.rst)
    GONE_BY_OPERATOR = "TASK_GONE_BY_OPERATOR"
    UNREACHABLE = "TASK_UNREACHABLE"

    ALL = (STAGING, STARTING, RUNNING, KILLING, FINISHED, FAILED, KILLED, ERROR, LOST, DROPPED, GONE,
           GONE_BY_OPERATOR, UNREACHABLE)


TERMINAL_STATES = frozenset({TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR,
                             TaskState.LOST, TaskState.DROPPED, TaskState.GONE, TaskState.GONE_BY_OPERATOR})


class _NoItems(list):
    """The one empty list a field of a value type holds when it holds
    nothing (:data:`NO_ITEMS`): a task's URIs, labels and arguments, a
    framework's labels. Shared by every such value (a new leader decodes a
    million tasks after a failover: ~60 bytes and an allocation each, three
    a task), so it can be changed by nobody."""

    __slots__ = ()

    def _shared(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("the shared empty list of a wire value cannot be changed")

    append = extend = insert = remove = pop = clear = sort = reverse = _shared
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _shared


class _NoEntries(dict):
    """The one empty map a field of a value type holds when it holds nothing
    (:data:`NO_ENTRIES`): a task's environment and secret environment, an
    agent's attributes. Shared, as :class:`_NoItems`: changed by nobody."""

    __slots__ = ()

    def _shared(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("the shared empty map of a wire value cannot be changed")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _shared


#: the default of the value types' list and map fields (TaskInfo, FrameworkInfo, AgentInfo): one empty
#: object for all. msgspec makes a fresh copy of an empty ``[]``/``{}`` default for every value it
#: decodes or makes — five a task, ~300 MB for the 1,000,000 tasks of a 100,000-agent failover, and
#: ~2-5 us of decoding an agent's ten (docs/performance.rst, "Stop 18: failover (failover30o)") — but takes any
#: other default as it is; and it leaves a field out of a frame when it holds its default *itself*, so
#: an empty one is made this one when the value is made (``_convert``): frames stay as they were
NO_ITEMS: list[Any] = _NoItems()
NO_ENTRIES: dict[str, Any] = _NoEntries()


def _set_converted(made: msgspec.Struct, name: str, value: object, convert: Callable[[Any], Any],
                   shared: object) -> None:
    """Field ``name`` of a value being made, ``value`` (not ``shared`` itself, or not empty): converted
    and checked, or, empty, the ``shared`` empty one (a value that is not a list or a map goes through
    ``convert`` first: what it refuses is refused)."""
    if value:
        msgspec.structs.force_setattr(made, name, convert(value))
        return
    if type(value) not in (list, dict):
        convert(value)
    msgspec.structs.force_setattr(made, name, shared)


def _made_anew(value: Any, changes: dict[str, Any]) -> Any:
    """A new value of ``value``'s class with its fields, ``changes`` over them, made by a call: converted
    and checked as any made so (the ``replace`` of the types whose fields are converted when made)."""
    return type(value)(**{**{name: getattr(value, name) for name in value.__struct_fields__}, **changes})


def _names_only(environment: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{name!r}: ..." for name in sorted(environment)) + "}"


def _frozen_dict(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})




# ------------------------------------------------------------------ labels
#: labels on one task, framework or status (Mesos's ``Labels``); the master
#: keeps them per task and framework, so they are bounded
MAX_LABELS = 32
#: characters of a label's key / value
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 512


def _check_label_text(value: str, name: str, limit: int) -> None:
    if len(value) > limit:
        raise ValueError(f"a label's {name} of {len(value)} characters is longer than {limit}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"a label's {name} {value[:40]!r} holds a control character")


class Label(msgspec.Struct, frozen=True):
    """One key/value pair of a task's, a framework's or a status's
    ``labels`` (Mesos's ``Label``): free-form metadata the cluster carries
    and shows (``/state``) but never interprets. Keys may repeat, as in Mesos."""

    key: str
    value: str = ""

    def __post_init__(self) -> None:
        _check_label_text(self.key, "key", MAX_LABEL_KEY)
        _check_label_text(self.value, "value", MAX_LABEL_VALUE)
        if not self.key:
            raise ValueError("a label's key is empty")


def _label_list(value: object) -> list[Label]:
    """A list of labels from Labels, ``(key, value)`` pairs or a ``{key: value}``
    map; at most :data:`MAX_LABELS`. (The bound is checked here, not by a
    validator: the codec runs this converter on decoded labels too, and an
    empty list — most statuses' — costs it one test.)"""
    if value is None:
        return []
    if type(value) is list and not value:
        return value   # the common case, taken as it is (status updates are many)
    if isinstance(value, Mapping):
        labels = [Label(str(key), str(item)) for key, item in value.items()]
    else:
        labels = [item if isinstance(item, Label) else Label(*item) for item in value]  # type: ignore[attr-defined]
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{len(labels)} labels are more than {MAX_LABELS}")
    return labels


class FrameworkInfo(msgspec.Struct, frozen=True, gc=False, metaclass=ConvertedWhenMade):
    """Who a framework is. ``id`` is empty on first subscription; the master
    assigns one, and the driver sends it back when it re-subscribes.
    ``failover_timeout``: how long the master keeps the framework's tasks
    running after it disconnects. ``partition_aware``: tasks of a lost agent
    become TASK_UNREACHABLE rather than TASK_LOST.

    A frozen ``msgspec.Struct`` (every re-registering agent carries those of
    its tasks' frameworks: decoded in C), not an attrs class: :meth:`replace`
    is ``attrs.evolve``'s counterpart. ``labels`` may be given as
    :class:`Label` objects, ``(key, value)`` pairs or a ``{key: value}`` map,
    at most :data:`MAX_LABELS`; ``webui_url`` is checked — when one is made
    and when one is decoded alike (:class:`ConvertedWhenMade`)."""

    name: str
    role: str = "*"
    failover_timeout: float = 0.0
    id: str = ""
    user: str = ""
    hostname: str = ""
    partition_aware: bool = False
    min_allocatable: str = ""
    #: who registered it, as the master authenticated them (docs/security.rst); set by the master only
    principal: str = ""
    #: free-form key/value metadata (Mesos's ``FrameworkInfo.labels``), shown in ``/state``
    labels: list[Label] = NO_ITEMS
    #: the framework's own web page (Mesos's ``FrameworkInfo.webui_url``): the dashboard links to it
    webui_url: str = ""
    #: the master's receipt binding ``id`` to ``principal`` (mesoslike.master.receipts): agents keep it
    #: with the framework's tasks and show it when they re-register; set by the master only
    principal_receipt: str = ""

    #: what a decoded framework's fields need converted and checked, when not empty (ConvertedWhenMade)
    __wire_converters__: ClassVar[dict[str, Callable[[Any], Any]]]

    def _convert(self) -> None:
        # what attrs's converter and validator did; most frameworks have neither labels nor a web page
        labels = self.labels
        if labels or labels is not NO_ITEMS:   # (none: the shared empty list, left out of its frames)
            _set_converted(self, "labels", labels, _label_list, NO_ITEMS)
        _webui_url(self.webui_url)

    def replace(self, **changes: Any) -> "FrameworkInfo":
        """A copy with ``changes`` (fields by name); new ``labels`` and ``webui_url`` are converted and
        checked as a new framework's are."""
        if "labels" in changes or "webui_url" in changes:
            return _made_anew(self, changes)
        return msgspec.structs.replace(self, **changes)


def _webui_url(url: str) -> str:
    if url or type(url) is not str:   # (none: most frameworks)
        _problem(isinstance(url, str) and len(url) <= _MAX_PATH and url.startswith(("http://", "https://")),
                 "webui_url must be an http:// or https:// URL of at most 4096 characters")
    return url


FrameworkInfo.__wire_converters__ = {"labels": _label_list, "webui_url": _webui_url}


# ------------------------------------------------------------ health checks
#: bounds of a health check's timings (s): hostile values (a zero interval: a busy loop) are refused
_MAX_CHECK_SECONDS = 86400.0
_MIN_CHECK_INTERVAL = 0.1
_MAX_CHECK_FAILURES = 1000
#: a check command, an HTTP path, a URI, an output file name: at most this many characters
_MAX_CHECK_COMMAND = 65536
_MAX_PATH = 4096
#: URIs one task may fetch
MAX_TASK_URIS = 100


def _problem(condition: bool, text: str) -> None:
    if not condition:
        raise ValueError(text)


def _check_port(port: int, what: str) -> None:
    _problem(isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535,
             f"{what}.port must be in [1, 65535], got {port!r}")


def _printable(text: str) -> bool:
    return text.isprintable() and not any(c.isspace() for c in text)


class HTTPCheck(msgspec.Struct, frozen=True):
    """An HTTP health check: ``GET {scheme}://127.0.0.1:{port}{path}``
    succeeds with a status among ``statuses`` (default 200-399, as Mesos).
    ``https`` does not verify the certificate (Mesos neither)."""

    port: int
    path: str = "/"
    scheme: str = "http"
    statuses: list[int] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _check_port(self.port, "http")
        _problem(self.scheme in ("http", "https"), f"http.scheme must be 'http' or 'https', got {self.scheme!r}")
        _problem(isinstance(self.path, str) and self.path.startswith("/") and len(self.path) <= _MAX_PATH
                 and _printable(self.path),
                 f"http.path must start with '/', without spaces or control characters, at most {_MAX_PATH} "
                 "characters")
        _problem(len(self.statuses) <= 100 and all(isinstance(s, int) and 100 <= s <= 599 for s in self.statuses),
                 "http.statuses must be at most 100 HTTP status codes in [100, 599]")


class TCPCheck(msgspec.Struct, frozen=True):
    """A TCP health check: a connection to ``127.0.0.1:{port}`` is accepted."""

    port: int

    def __post_init__(self) -> None:
        _check_port(self.port, "tcp")


class HealthCheck(msgspec.Struct, frozen=True):
    """Mesos's ``HealthCheck`` (docs/framework-api.rst): a ``COMMAND``
    (``command``, run by ``/bin/sh -c`` as the task's user in its sandbox,
    healthy when it exits 0), ``HTTP`` (``http``) or ``TCP`` (``tcp``)
    check, first run ``delay_seconds`` after the task started, then every
    ``interval_seconds``; a check not done within ``timeout_seconds`` has
    failed. Failures within ``grace_period_seconds`` of the start do not
    count until a check has passed; ``consecutive_failures`` counted ones
    in a row kill the task (TASK_FAILED,
    ``REASON_TASK_HEALTH_CHECK_STATUS_UPDATED``). Defaults as Mesos's."""

    COMMAND: ClassVar[str] = "COMMAND"
    HTTP: ClassVar[str] = "HTTP"
    TCP: ClassVar[str] = "TCP"

    type: str
    command: str = ""
    http: HTTPCheck | None = None
    tcp: TCPCheck | None = None
    delay_seconds: float = 15.0
    interval_seconds: float = 10.0
    timeout_seconds: float = 20.0
    consecutive_failures: int = 3
    grace_period_seconds: float = 10.0

    def __post_init__(self) -> None:
        kinds = (self.COMMAND, self.HTTP, self.TCP)
        _problem(self.type in kinds, f"health_check.type must be one of {', '.join(kinds)}, got {self.type!r}")
        _problem((self.type == self.COMMAND) == bool(self.command),
                 "health_check.command is required for a COMMAND check, and only for it")
        _problem((self.type == self.HTTP) == (self.http is not None),
                 "health_check.http is required for an HTTP check, and only for it")
        _problem((self.type == self.TCP) == (self.tcp is not None),
                 "health_check.tcp is required for a TCP check, and only for it")
        _problem(len(self.command) <= _MAX_CHECK_COMMAND and "\0" not in self.command,
                 f"health_check.command must be at most {_MAX_CHECK_COMMAND} characters, without NUL")
        for name, low in (("delay_seconds", 0.0), ("interval_seconds", _MIN_CHECK_INTERVAL),
                          ("timeout_seconds", _MIN_CHECK_INTERVAL), ("grace_period_seconds", 0.0)):
            value = getattr(self, name)
            _problem(isinstance(value, (int, float)) and not isinstance(value, bool)
                     and low <= value <= _MAX_CHECK_SECONDS,
                     f"health_check.{name} must be in [{low:g}, {_MAX_CHECK_SECONDS:g}], got {value!r}")
        _problem(isinstance(self.consecutive_failures, int) and not isinstance(self.consecutive_failures, bool)
                 and 1 <= self.consecutive_failures <= _MAX_CHECK_FAILURES,
                 f"health_check.consecutive_failures must be in [1, {_MAX_CHECK_FAILURES}], "
                 f"got {self.consecutive_failures!r}")

    def describe(self) -> str:
        """The check in a few words, for messages."""
        if self.type == self.HTTP and self.http is not None:
            return f"HTTP check {self.http.scheme}://127.0.0.1:{self.http.port}{self.http.path}"
        if self.type == self.TCP and self.tcp is not None:
            return f"TCP check 127.0.0.1:{self.tcp.port}"
        return f"command check {self.command!r}"


# ---------------------------------------------------------------- the fetcher
_URI_SCHEMES = ("file://", "http://", "https://")


class CommandURI(msgspec.Struct, frozen=True):
    """Mesos's ``CommandInfo.URI``: fetched into the task's sandbox before
    it starts (docs/agent.rst, "The fetcher"). ``value``: a ``file://``,
    ``http://`` or ``https://`` URI. ``extract``: unpack a ``.tar.gz``,
    ``.tgz``, ``.tar`` or ``.zip`` into the sandbox (other files are kept
    as they are). ``executable``: make the file executable (not extracted).
    ``output_file``: the name it gets in the sandbox (default: the URI's
    last path component). ``cache``: keep it in the agent's fetcher cache,
    keyed by URI (and user), and serve later fetches from there."""

    value: str
    extract: bool = True
    executable: bool = False
    output_file: str = ""
    cache: bool = False

    def __post_init__(self) -> None:
        _problem(isinstance(self.value, str) and self.value.startswith(_URI_SCHEMES),
                 f"uri.value must be a file://, http:// or https:// URI, got {_preview(self.value)}")
        _problem(len(self.value) <= _MAX_PATH and self.value.isprintable() and " " not in self.value,
                 f"uri.value must be at most {_MAX_PATH} printable characters without spaces")
        name = self.output_file
        _problem(len(name) <= 255 and "/" not in name and name not in (".", "..") and "\0" not in name
                 and name.isprintable(),
                 f"uri.output_file must be a plain file name (no '/', not '.' or '..'), got {_preview(name)}")
        if not name:
            _problem(self.file_name() not in ("", ".", ".."),
                     f"uri {_preview(self.value)} names no file: give it an output_file")

    def file_name(self) -> str:
        """The name of the fetched file in the sandbox."""
        if self.output_file:
            return self.output_file
        rest = self.value.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
        path = rest[rest.find("/"):] if "/" in rest else ""   # after the host
        return path.rstrip("/").rsplit("/", 1)[-1]


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _uri_list(value: list[CommandURI] | None) -> list[CommandURI]:
    uris = list(value or [])
    _problem(len(uris) <= MAX_TASK_URIS, f"a task fetches at most {MAX_TASK_URIS} URIs, got {len(uris)}")
    return uris


# ------------------------------------------------------------------ secrets
#: bytes of one secret's value; secrets in one task (environment and files)
MAX_SECRET_BYTES = 1024 * 1024
MAX_TASK_SECRETS = 64
_SECRET_REFERENCE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/")
_ENV_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class SecretReference(msgspec.Struct, frozen=True):
    """Mesos's ``Secret.Reference``: a secret the agent resolves by
    ``name`` (and optional ``key`` within it) from its secrets directory
    (docs/containers.rst, "Secrets"): the value never crosses the wire."""

    name: str
    key: str = ""

    def __post_init__(self) -> None:
        for what, text, required in (("name", self.name, True), ("key", self.key, False)):
            _problem(isinstance(text, str) and (bool(text) or not required) and len(text) <= 255
                     and set(text) <= _SECRET_REFERENCE_CHARS and ".." not in text.split("/")
                     and not text.startswith("/"),
                     f"secret.reference.{what} must be {'1' if required else '0'} to 255 characters of "
                     f"[A-Za-z0-9._-/], relative, without '..', got {_preview(text)}")


class Secret(msgspec.Struct, frozen=True):
    """Mesos's ``Secret``: ``type`` ``VALUE`` carries the bytes in
    ``value`` (they travel to the agent inside the launch, never shown in
    ``/state``, logs or a repr); ``REFERENCE`` names one the agent holds
    (``reference``). Used for environment variables
    (:attr:`TaskInfo.environment_secrets`) and files
    (a :class:`Volume` whose source is ``SECRET``)."""

    VALUE: ClassVar[str] = "VALUE"
    REFERENCE: ClassVar[str] = "REFERENCE"

    type: str
    #: its repr shows "..." for it, never the bytes
    value: bytes | None = None
    reference: SecretReference | None = None

    def __repr__(self) -> str:
        return (f"Secret(type={self.type!r}, value={'...' if self.value is not None else 'None'}, "
                f"reference={self.reference!r})")

    def __rich_repr__(self) -> Any:
        yield "type", self.type
        yield "value", _Shown("..." if self.value is not None else "None")
        yield "reference", self.reference

    def __post_init__(self) -> None:
        _problem(self.type in (self.VALUE, self.REFERENCE),
                 f"secret.type must be VALUE or REFERENCE, got {_preview(self.type)}")
        _problem((self.type == self.VALUE) == (self.value is not None),
                 "secret.value is required for a VALUE secret, and only for it")
        _problem((self.type == self.REFERENCE) == (self.reference is not None),
                 "secret.reference is required for a REFERENCE secret, and only for it")
        _problem(self.value is None or (isinstance(self.value, bytes) and len(self.value) <= MAX_SECRET_BYTES),
                 f"secret.value must be bytes, at most {MAX_SECRET_BYTES}")


def _secret_environment(value: Mapping[str, Secret] | None) -> dict[str, Secret]:
    if not value:
        return {}
    secrets = dict(value)
    _problem(len(secrets) <= MAX_TASK_SECRETS,
             f"a task has at most {MAX_TASK_SECRETS} secret environment variables, got {len(secrets)}")
    for name in secrets:
        _problem(isinstance(name, str) and 0 < len(name) <= 255 and set(name) <= _ENV_NAME_CHARS
                 and not name[0].isdigit(),
                 f"a secret environment variable's name must be a shell variable name, got {_preview(name)}")
    return secrets


def _argument_list(value: list[str] | None) -> list[str]:
    if not value:
        return []   # most tasks have none: no generator walked (each TaskInfo a framework makes)
    arguments = list(value)
    _problem(len(arguments) <= 4096 and sum(len(a) for a in arguments) <= _MAX_CHECK_COMMAND
             and all(isinstance(a, str) and "\0" not in a for a in arguments),
             f"task.arguments must be at most 4096 strings of {_MAX_CHECK_COMMAND} characters in all, without NUL")
    return arguments


# --------------------------------------------------------------- containers
#: volumes of one container
MAX_VOLUMES = 32
_IMAGE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@+")


def _check_container_path(path: str, what: str) -> None:
    _problem(isinstance(path, str) and 0 < len(path) <= _MAX_PATH and "\0" not in path and path.isprintable()
             and ".." not in path.split("/"),
             f"{what} must be a path of 1 to {_MAX_PATH} printable characters without '..', got {_preview(path)}")


class Image(msgspec.Struct, frozen=True):
    """Mesos's ``Image`` of type ``DOCKER``: ``name`` is a Docker/OCI
    reference (``busybox``, ``registry:5000/team/app:1.2``,
    ``app@sha256:…``), pulled from the agent's default registry
    (``--docker-registry``) unless the name says another. ``cached``:
    False forces a fresh look at the registry (the tag may have moved)."""

    DOCKER: ClassVar[str] = "DOCKER"

    name: str
    type: str = "DOCKER"
    cached: bool = True

    def __post_init__(self) -> None:
        _problem(self.type == self.DOCKER, f"image.type must be DOCKER, got {_preview(self.type)}")
        _problem(isinstance(self.name, str) and 0 < len(self.name) <= 512 and set(self.name) <= _IMAGE_NAME_CHARS,
                 f"image.name must be a Docker image reference (1 to 512 characters of [a-zA-Z0-9._-/:@+]), "
                 f"got {_preview(self.name)}")


class VolumeSource(msgspec.Struct, frozen=True):
    """Mesos's ``Volume.Source``: ``SANDBOX_PATH`` (``path`` relative to the
    task's sandbox), ``HOST_PATH`` (``path`` on the agent, allowed only under
    the operator's allow-list), ``SECRET`` (``secret`` written as a file of
    mode 0400 owned by the task's user) or ``IMAGE`` (``image``'s root
    filesystem mounted read-only)."""

    SANDBOX_PATH: ClassVar[str] = "SANDBOX_PATH"
    HOST_PATH: ClassVar[str] = "HOST_PATH"
    SECRET: ClassVar[str] = "SECRET"
    IMAGE: ClassVar[str] = "IMAGE"

    type: str
    path: str = ""
    secret: Secret | None = None
    image: Image | None = None

    def __post_init__(self) -> None:
        kinds = (self.SANDBOX_PATH, self.HOST_PATH, self.SECRET, self.IMAGE)
        _problem(self.type in kinds, f"volume.source.type must be one of {', '.join(kinds)}, got {_preview(self.type)}")
        _problem((self.type in (self.SANDBOX_PATH, self.HOST_PATH)) == bool(self.path),
                 "volume.source.path is required for SANDBOX_PATH and HOST_PATH volumes, and only for them")
        if self.path:
            _check_container_path(self.path, "volume.source.path")
            _problem(self.type != self.HOST_PATH or self.path.startswith("/"),
                     "volume.source.path of a HOST_PATH volume must be absolute")
            _problem(self.type != self.SANDBOX_PATH or not self.path.startswith("/"),
                     "volume.source.path of a SANDBOX_PATH volume must be relative to the sandbox")
        _problem((self.type == self.SECRET) == (self.secret is not None),
                 "volume.source.secret is required for a SECRET volume, and only for it")
        _problem((self.type == self.IMAGE) == (self.image is not None),
                 "volume.source.image is required for an IMAGE volume, and only for it")


class Volume(msgspec.Struct, frozen=True):
    """Mesos's ``Volume``: ``source`` seen at ``container_path`` inside the
    container (relative: under the sandbox), ``mode`` ``RW`` or ``RO``."""

    container_path: str
    source: VolumeSource
    mode: str = "RW"

    def __post_init__(self) -> None:
        _check_container_path(self.container_path, "volume.container_path")
        _problem(self.mode in ("RW", "RO"), f"volume.mode must be RW or RO, got {_preview(self.mode)}")


class DockerInfo(msgspec.Struct, frozen=True):
    """Mesos's ``ContainerInfo.DockerInfo``, run by the agent's own OCI
    runtime (no Docker daemon): ``image``, ``network`` ``HOST`` or
    ``NONE`` (no bridge), ``force_pull_image``."""

    image: str
    network: str = "HOST"
    force_pull_image: bool = False

    def __post_init__(self) -> None:
        Image(self.image)   # the same rules as a MESOS container's image name
        _problem(self.network in ("HOST", "NONE"),
                 f"docker.network must be HOST or NONE (mesoslike has no bridge network), got {_preview(self.network)}")


def _volume_list(value: list[Volume] | None) -> list[Volume]:
    volumes = list(value or [])
    _problem(len(volumes) <= MAX_VOLUMES, f"a container has at most {MAX_VOLUMES} volumes, got {len(volumes)}")
    return volumes


class ContainerInfo(msgspec.Struct, frozen=True):
    """Mesos's ``ContainerInfo`` (docs/containers.rst): type ``MESOS`` (the
    agent's containerizer; ``image`` optional: without one the task sees
    the agent's root filesystem) or ``DOCKER`` (``docker``: a Docker
    image, run by the same containerizer), with ``volumes``. ``hostname``:
    the container's own (UTS namespace); empty: the agent's."""

    MESOS: ClassVar[str] = "MESOS"
    DOCKER: ClassVar[str] = "DOCKER"

    type: str = "MESOS"
    image: Image | None = None
    docker: DockerInfo | None = None
    #: at most :data:`MAX_VOLUMES` (a list of the container's own)
    volumes: list[Volume] = msgspec.field(default_factory=list)
    hostname: str = ""

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "volumes", _volume_list(self.volumes))
        _problem(self.type in (self.MESOS, self.DOCKER),
                 f"container.type must be MESOS or DOCKER, got {_preview(self.type)}")
        _problem((self.type == self.DOCKER) == (self.docker is not None),
                 "container.docker is required for a DOCKER container, and only for it")
        _problem(self.type == self.MESOS or self.image is None,
                 "container.image is for a MESOS container (a DOCKER one names docker.image)")
        _problem(len(self.hostname) <= 63 and all(c.isalnum() or c == "-" for c in self.hostname),
                 f"container.hostname must be at most 63 letters, digits or '-', got {_preview(self.hostname)}")

    def image_name(self) -> str:
        """The image the container's root filesystem comes from; '' for none."""
        if self.docker is not None:
            return self.docker.image
        return self.image.name if self.image is not None else ""


# -------------------------------------------------------- custom executors
#: bytes of one framework message's data (either way: scheduler -> executor
#: or task, executor -> scheduler) and of a status update's ``data``, by
#: default — masters' and agents' ``--max-message-size``
#: (docs/reliability.rst, "Message sizes"). Mesos sets no limit of its own
#: beyond protobuf's (64 MB by default in the protobuf Mesos bundles);
#: frameworks send up to 50 MB. A longer one is refused where it is made
MAX_FRAMEWORK_MESSAGE = 64 * 1024 * 1024
#: data above this many bytes is logged (a warning) where it enters the cluster
WARN_MESSAGE_SIZE = 1024 * 1024
#: the least and the most ``--max-message-size`` may be
MIN_MESSAGE_SIZE = 1024
MAX_MESSAGE_SIZE_CEILING = 1024 * 1024 * 1024


def check_message_size(value: object) -> int:
    """``value`` as a ``--max-message-size`` (bytes of a framework message's or
    a status update's data); ValueError naming the bounds if it is not one."""
    if not isinstance(value, int) or isinstance(value, bool) \
            or not MIN_MESSAGE_SIZE <= value <= MAX_MESSAGE_SIZE_CEILING:
        raise ValueError(f"a message size limit is an integer of {MIN_MESSAGE_SIZE} to {MAX_MESSAGE_SIZE_CEILING} "
                         f"bytes, got {value!r}")
    return value


#: characters of an executor id
MAX_EXECUTOR_ID = 200
#: what the agent's own id of an executor's process run begins with (its
#: checkpoint and run directory sit beside the tasks'); a task id may not
#: (the master and the agent refuse one that does)
EXECUTOR_RUN_PREFIX = "\x1bexecutor\x1b"


def _repr_names_only(value: Any) -> str:
    """The repr of a task or an executor (:func:`_shown`: its environments' names, never their values)."""
    return f"{type(value).__name__}({', '.join(f'{name}={text}' for name, text in _shown(value))})"


def _rich_repr_names_only(value: Any) -> Any:
    """``__rich_repr__`` of a task or an executor, as its repr shows its fields."""
    for name, text in _shown(value):
        yield name, _Shown(text)


class ExecutorInfo(msgspec.Struct, frozen=True):
    """A custom executor (Mesos's ``ExecutorInfo``, docs/framework-api.rst,
    "Custom executors"): a long-lived process of the framework that the
    agent starts, the first time a task of the framework names it on that
    agent, with ``command`` (``/bin/sh -c``) and ``environment`` in a
    container of ``resources``; later tasks naming the same
    ``executor_id`` are handed to the running process. The process runs a
    :class:`mesoslike.executor.ExecutorDriver`. Its ``resources`` are taken
    from the offer of its first task besides the task's own, and stay used
    until the process exits. ``shutdown_grace_period``: how long it has to
    end after a ``shutdown`` (framework torn down) before it is killed."""

    executor_id: str
    command: str
    resources: Resources = Resources()
    #: its repr names the variables, never their values (as TaskInfo's)
    environment: dict[str, str] = msgspec.field(default_factory=dict)
    name: str = ""
    #: :class:`Label` objects, ``(key, value)`` pairs or a ``{key: value}`` map; at most :data:`MAX_LABELS`
    labels: list[Label] = msgspec.field(default_factory=list)
    shutdown_grace_period: float = 5.0
    #: its container (as :attr:`TaskInfo.container`): its tasks share it
    container: ContainerInfo | None = None
    #: secret environment variables (as :attr:`TaskInfo.environment_secrets`)
    environment_secrets: dict[str, Secret] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        # (what attrs's converters did, for a decoded executor too: copies, labels from pairs, the bounds)
        msgspec.structs.force_setattr(self, "environment", _frozen_dict(self.environment))
        msgspec.structs.force_setattr(self, "labels", _label_list(self.labels))
        msgspec.structs.force_setattr(self, "environment_secrets", _secret_environment(self.environment_secrets))
        _problem(isinstance(self.executor_id, str) and 0 < len(self.executor_id) <= MAX_EXECUTOR_ID
                 and self.executor_id.isprintable(),
                 f"executor.executor_id must be 1 to {MAX_EXECUTOR_ID} printable characters, "
                 f"got {_preview(self.executor_id)}")
        _problem(isinstance(self.command, str) and bool(self.command.strip())
                 and len(self.command) <= _MAX_CHECK_COMMAND and "\0" not in self.command,
                 f"executor.command must be a non-empty command of at most {_MAX_CHECK_COMMAND} characters, "
                 "without NUL")
        _problem(len(self.name) <= _MAX_PATH, f"executor.name must be at most {_MAX_PATH} characters")
        _problem(isinstance(self.shutdown_grace_period, (int, float)) and not isinstance(self.shutdown_grace_period, bool)
                 and 0 <= self.shutdown_grace_period <= 3600,
                 f"executor.shutdown_grace_period must be in [0, 3600], got {self.shutdown_grace_period!r}")

    def run_id(self) -> str:
        """The agent's id of this executor's process run (see :data:`EXECUTOR_RUN_PREFIX`)."""
        return EXECUTOR_RUN_PREFIX + self.executor_id

    # its repr names the environments' variables, never their values
    __repr__ = _repr_names_only
    __rich_repr__ = _rich_repr_names_only

    def replace(self, **changes: Any) -> "ExecutorInfo":
        """A copy with ``changes`` (fields by name), converted and checked as a new executor's are."""
        return _made_anew(self, changes)


class TaskInfo(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, metaclass=ConvertedWhenMade):
    """A task to launch: a shell ``command`` run by the agent in its own
    process group and sandbox, with ``resources`` taken from one offer.

    A frozen ``msgspec.Struct`` (each task crosses the wire in an ACCEPT and
    a RUN_TASK: built and decoded in C), not an attrs class: :meth:`replace`
    is ``attrs.evolve``'s counterpart. What its fields take beyond their
    types is converted and checked when one is made (:class:`ConvertedWhenMade`)
    and when one is decoded (the codec, from ``__wire_converters__``) alike:
    ``environment`` copied into a dict, ``labels`` from pairs or a map, at
    most :data:`MAX_TASK_URIS` URIs, :data:`MAX_TASK_SECRETS` secrets, 4096
    arguments."""

    task_id: str
    agent_id: str
    command: str
    resources: Resources
    name: str = ""
    #: its repr names the variables, never their values: a task's environment
    #: may hold secrets, and a repr ends up in logs (docs/security.rst)
    environment: dict[str, str] = NO_ENTRIES
    kill_grace_period: float = 3.0
    #: the unix user it runs as (default: its framework's ``user``); see docs/security.rst
    user: str = ""
    #: checked while it runs (docs/framework-api.rst, "HealthCheck"); None: never
    health_check: HealthCheck | None = None
    #: fetched into its sandbox before it starts (docs/agent.rst, "The fetcher")
    uris: list[CommandURI] = NO_ITEMS
    #: free-form key/value metadata (Mesos's ``TaskInfo.labels``): shown in
    #: ``/state`` and carried in every status update of the task
    labels: list[Label] = NO_ITEMS
    #: run by this custom executor (docs/framework-api.rst, "Custom executors");
    #: None: ``command`` is run by the agent's built-in command executor
    executor: ExecutorInfo | None = None
    #: Mesos's ``ContainerInfo``: an image for its root filesystem, volumes
    #: (docs/containers.rst); None: the agent's default container (its own
    #: namespaces and cgroups, the agent's root filesystem)
    container: ContainerInfo | None = None
    #: environment variables whose values are secrets (Mesos's
    #: ``Environment.Variable`` of type ``SECRET``): name -> :class:`Secret`;
    #: they reach only this task's process, never ``/state`` or logs
    environment_secrets: dict[str, Secret] = NO_ENTRIES
    #: Mesos's ``CommandInfo.shell``: True runs ``command`` with ``/bin/sh -c``;
    #: False executes ``arguments`` directly (``arguments[0]`` the program, as
    #: Mesos's ``value`` + ``arguments``), or, for a task with an image and no
    #: ``arguments``, the image's entrypoint and cmd
    shell: bool = True
    #: the argv when ``shell`` is False
    arguments: list[str] = NO_ITEMS

    #: what a decoded task's fields need converted and checked (its environment is a fresh dict
    #: already), when not empty: the compiled codec runs them (ConvertedWhenMade)
    __wire_converters__: ClassVar[dict[str, Callable[[Any], Any]]]

    def _convert(self) -> None:
        # what attrs's converters did; an empty list or map (most tasks' five) costs two tests each, and
        # is the shared one (NO_ITEMS, NO_ENTRIES: left out of the task's frames, as before)
        # (written out, not a loop over the fields: a framework makes a TaskInfo for every task it launches)
        environment = self.environment
        if environment or environment is not NO_ENTRIES:
            _set_converted(self, "environment", environment, _frozen_dict, NO_ENTRIES)
        uris = self.uris
        if uris or uris is not NO_ITEMS:
            _set_converted(self, "uris", uris, _uri_list, NO_ITEMS)
        labels = self.labels
        if labels or labels is not NO_ITEMS:
            _set_converted(self, "labels", labels, _label_list, NO_ITEMS)
        secrets = self.environment_secrets
        if secrets or secrets is not NO_ENTRIES:
            _set_converted(self, "environment_secrets", secrets, _secret_environment, NO_ENTRIES)
        arguments = self.arguments
        if arguments or arguments is not NO_ITEMS:
            _set_converted(self, "arguments", arguments, _argument_list, NO_ITEMS)

    # its repr names the environments' variables, never their values
    __repr__ = _repr_names_only
    __rich_repr__ = _rich_repr_names_only

    def replace(self, **changes: Any) -> "TaskInfo":
        """A copy with ``changes`` (fields by name), converted and checked as a new task's are."""
        if _CONVERTED_TASK_FIELDS.isdisjoint(changes):
            # what _convert converts is this task's, converted already: a copy in C (0.3 µs against 2:
            # a framework makes its tasks from one, a task an instance, docs/performance.rst, ctl29o)
            return msgspec.structs.replace(self, **changes)
        return _made_anew(self, changes)


TaskInfo.__wire_converters__ = {"uris": _uri_list, "labels": _label_list, "environment_secrets": _secret_environment,
                                "arguments": _argument_list}
#: the fields TaskInfo._convert converts (and checks): a replace of none of them need not convert
_CONVERTED_TASK_FIELDS = frozenset({"environment", *TaskInfo.__wire_converters__})
_NAMES_ONLY = frozenset({"environment", "environment_secrets"})


class _Shown(str):
    """A field's text as a repr shows it (for ``__rich_repr__``)."""

    def __repr__(self) -> str:
        return str(self)


def _shown(value: TaskInfo | ExecutorInfo) -> list[tuple[str, str]]:
    """The fields of a task or an executor as its repr shows them: the environments' names, never their
    values (a task's environment may hold secrets, and a repr ends up in logs)."""
    return [(name, _names_only(getattr(value, name)) if name in _NAMES_ONLY else repr(getattr(value, name)))
            for name in value.__struct_fields__]


def _isolator_list(value: list[str] | None) -> list[str]:
    names = list(value or [])
    # a loop, not all() over a generator: it runs for every update a scheduler decodes (three a task)
    if len(names) > 32:
        raise ValueError(_ISOLATORS_PROBLEM)
    for name in names:
        if not (isinstance(name, str) and 0 < len(name) <= 64 and name.isprintable()):
            raise ValueError(_ISOLATORS_PROBLEM)
    return names


_ISOLATORS_PROBLEM = "container_status.isolators must be at most 32 names of 1 to 64 printable characters"


class ContainerStatus(msgspec.Struct, frozen=True):
    """What a task's container is on its agent (a part of Mesos's
    ``ContainerStatus``, which rides on the task's updates):
    ``isolators`` — the isolators it got, by Mesos's names
    (docs/containers.rst, "Isolators"); ``image`` — the image its root
    filesystem comes from ('' for the agent's); ``executor_pid`` — the
    host's pid of the task's process (its executor's, for a custom
    executor's task; 0 when not known)."""

    isolators: list[str] = msgspec.field(default_factory=list)
    image: str = ""
    executor_pid: int = 0
    #: the address the task is reachable at (Mesos's ``network_infos[0].ip_addresses[0]``): its agent's,
    #: for a task on the host's network; '' when not known
    ip_address: str = ""

    def __post_init__(self) -> None:   # (inline, not _problem(): three times a task in a scheduler)
        msgspec.structs.force_setattr(self, "isolators", _isolator_list(self.isolators))
        ip_address, image, pid = self.ip_address, self.image, self.executor_pid
        if not (isinstance(ip_address, str) and len(ip_address) <= 64 and ip_address.isprintable()):
            raise ValueError("container_status.ip_address must be at most 64 printable characters")
        if not (isinstance(image, str) and len(image) <= 512 and image.isprintable()):
            raise ValueError("container_status.image must be at most 512 printable characters")
        if not (isinstance(pid, int) and 0 <= pid < 2147483648):   # < 2 ** 31
            raise ValueError("container_status.executor_pid must be a pid")


_Holder = TypeVar("_Holder", TaskInfo, ExecutorInfo)


def without_secret_values(info: _Holder) -> _Holder:
    """``info`` (a :class:`TaskInfo` or :class:`ExecutorInfo`) with the
    value of every ``VALUE`` secret emptied — of its secret environment
    variables, its ``SECRET`` volumes and its executor's: what is kept
    once the secrets have reached the task (an agent's checkpoints, a
    master's record of a launched task). ``info`` itself when it holds none."""
    changes: dict[str, Any] = {}
    if any(secret.type == Secret.VALUE for secret in info.environment_secrets.values()):
        changes["environment_secrets"] = {name: _emptied(secret) for name, secret in info.environment_secrets.items()}
    container = info.container
    if container is not None and any(v.source.secret is not None and v.source.secret.type == Secret.VALUE
                                     for v in container.volumes):
        changes["container"] = msgspec.structs.replace(container, volumes=[
            msgspec.structs.replace(v, source=msgspec.structs.replace(v.source, secret=_emptied(v.source.secret)))
            if v.source.secret is not None else v for v in container.volumes])
    if isinstance(info, TaskInfo) and info.executor is not None:
        executor = without_secret_values(info.executor)
        if executor is not info.executor:
            changes["executor"] = executor
    if not changes:
        return info
    replaced: Any = info.replace(**changes)
    return replaced


def _emptied(secret: Secret) -> Secret:
    return msgspec.structs.replace(secret, value=b"") if secret.type == Secret.VALUE else secret


class TaskStatus(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A task's state change. ``uuid`` identifies a reliable update that must
    be acknowledged; updates the master makes up (reconciliation) have none.

    A frozen ``msgspec.Struct`` (three of them cross the wire for every task
    in each direction): built and decoded in C; ``labels`` may be given as
    :class:`Label` objects, ``(key, value)`` pairs or a ``{key: value}`` map,
    at most :data:`MAX_LABELS`. :meth:`replace` is ``attrs.evolve``'s
    counterpart."""

    task_id: str
    state: str
    agent_id: str = ""
    message: str = ""
    source: str = ""            # SOURCE_MASTER, SOURCE_AGENT, SOURCE_EXECUTOR
    reason: str = ""
    uuid: str = ""
    timestamp: float = 0.0
    exit_code: int | None = None
    framework_id: str = ""
    #: the task's latest health check result (None: it has no health check, or none has ended yet)
    healthy: bool | None = None
    #: the task's labels (its agent copies them from ``TaskInfo.labels``)
    labels: list[Label] = []
    #: opaque bytes from the task's executor to its scheduler (Mesos's ``TaskStatus.data``), carried as sent
    data: bytes = b""
    #: its container on its agent (which isolators it got, the address it is reachable at); None: not known
    container_status: ContainerStatus | None = None

    def __post_init__(self) -> None:
        labels = self.labels
        if labels or type(labels) is not list:   # (most statuses have none: one test)
            # a task's labels when it has none are the shared NO_ITEMS (an agent's three updates a task,
            # a master's made-up and re-registered statuses): a list of the status's own, as the default
            # is, so that the frame leaves it out (msgspec omits only a plain empty list) — and without
            # _label_list's typing.Mapping check, ~0.9 us a status (docs/performance.rst, ctl29p)
            msgspec.structs.force_setattr(self, "labels", [] if labels is NO_ITEMS else _label_list(labels))

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def replace(self, **changes: Any) -> "TaskStatus":
        """A copy with ``changes`` (fields by name); new ``labels`` are converted and checked as a new
        status's are."""
        if "labels" in changes:
            return _made_anew(self, changes)
        return msgspec.structs.replace(self, **changes)


class Filters(msgspec.Struct, frozen=True):
    """How long to refuse the declined or unused resources of an offer."""

    refuse_seconds: float = DEFAULT_REFUSE_SECONDS


class OperationType:
    """What an offer :class:`Operation` does (Mesos's ``Offer.Operation.Type``)."""

    LAUNCH = "LAUNCH"
    RESERVE = "RESERVE"
    UNRESERVE = "UNRESERVE"
    ALL = (LAUNCH, RESERVE, UNRESERVE)


#: the most operations one ACCEPT carries
MAX_OPERATIONS = 1000


class Operation(msgspec.Struct, frozen=True):
    """One operation on accepted offers (Mesos's ``Offer.Operation``),
    applied in order against what the offers hold (docs/framework-api.rst,
    "Reservations"). Build one with :func:`Launch`, :func:`Reserve` or
    :func:`Unreserve`.

    - ``LAUNCH``: ``tasks`` run on the offers' resources as they are after
      the operations before it;
    - ``RESERVE``: ``resources`` (unreserved ones of the offers) become
      reserved for ``role`` (empty: the framework's role) by the framework's
      principal — the one it authenticated as, never one it names — with
      ``labels`` (Mesos's ``ReservationInfo.labels``: part of the reserved
      kinds, ``cpus(analytics,alice,team=ml)``);
    - ``UNRESERVE``: ``resources`` (dynamically reserved ones of the offers,
      written as offered: ``cpus(analytics,alice):1``) become unreserved.
    """

    type: str
    tasks: list[TaskInfo] = msgspec.field(default_factory=list)
    resources: Resources = Resources()
    role: str = ""
    #: :class:`Label` objects, ``(key, value)`` pairs or a ``{key: value}`` map; at most :data:`MAX_LABELS`
    labels: list[Label] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _problem(self.type in OperationType.ALL, f"operation type must be one of {', '.join(OperationType.ALL)}, "
                                                 f"got {self.type[:40]!r}")
        msgspec.structs.force_setattr(self, "labels", _label_list(self.labels))

    def replace(self, **changes: Any) -> "Operation":
        """A copy with ``changes`` (fields by name), converted and checked as a new operation's are."""
        return _made_anew(self, changes)


def Launch(tasks: list[TaskInfo]) -> Operation:  # noqa: N802 (named as Mesos's operation)
    """A LAUNCH operation: run ``tasks`` (all on the offers' agent)."""
    return Operation(OperationType.LAUNCH, tasks=list(tasks))


def Reserve(resources: Resources | str, role: str = "", labels: object = None) -> Operation:  # noqa: N802
    """A RESERVE operation: make ``resources`` (unreserved, e.g.
    ``"cpus:2;mem:1024"``) of the offers reserved for ``role`` (default:
    the framework's role) by the framework's principal, with ``labels``
    (Labels, ``(key, value)`` pairs or a ``{key: value}`` map)."""
    return Operation(OperationType.RESERVE, resources=_resources(resources), role=role,
                     labels=_label_list(labels))


def Unreserve(resources: Resources | str) -> Operation:  # noqa: N802
    """An UNRESERVE operation: make ``resources`` (dynamically reserved, as
    offered: ``"cpus(analytics,alice):2"``) of the offers unreserved."""
    return Operation(OperationType.UNRESERVE, resources=_resources(resources))


def _resources(value: Resources | str) -> Resources:
    return Resources.parse(value) if isinstance(value, str) else value


class MasterInfo(msgspec.Struct, frozen=True):
    """The leading master: id, scheduler/agent address, HTTP address, version."""

    id: str
    address: str
    http_address: str = ""
    version: str = ""


class AgentInfo(msgspec.Struct, frozen=True, gc=False, metaclass=ConvertedWhenMade):
    """An agent as it registers: ``id`` empty on first registration.

    A frozen ``msgspec.Struct`` (one in every (re-)registration: decoded in
    C), not an attrs class: :meth:`replace` is ``attrs.evolve``'s
    counterpart. ``attributes`` is copied into a dict and checked against
    the grammar (mesoslike.attributes) when one is made and when one is
    decoded alike (:class:`ConvertedWhenMade`)."""

    hostname: str
    resources: Resources
    #: name -> canonical Mesos text of a typed value (mesoslike.attributes), checked against the grammar
    attributes: dict[str, str] = NO_ENTRIES
    id: str = ""
    port: int = 0
    #: the agent principal it belongs to (docs/security.rst); set by the master only
    principal: str = ""

    #: what a decoded agent's fields need checked, when not empty (ConvertedWhenMade)
    __wire_converters__: ClassVar[dict[str, Callable[[Any], Any]]]

    def _convert(self) -> None:
        attributes = self.attributes
        if attributes or attributes is not NO_ENTRIES:   # (an agent without attributes: two tests)
            _set_converted(self, "attributes", attributes, self._checked, NO_ENTRIES)

    def _checked(self, attributes: Mapping[str, str]) -> dict[str, str]:
        attributes = _frozen_dict(attributes)
        check_attributes(self, None, attributes)
        return attributes

    def replace(self, **changes: Any) -> "AgentInfo":
        """A copy with ``changes`` (fields by name); new ``attributes`` are copied and checked as a new
        agent's are."""
        if "attributes" in changes:
            return _made_anew(self, changes)
        return msgspec.structs.replace(self, **changes)


def _checked_attributes(attributes: dict[str, str]) -> dict[str, str]:
    check_attributes(None, None, attributes)   # (a decoded map is a fresh dict already)
    return attributes


AgentInfo.__wire_converters__ = {"attributes": _checked_attributes}

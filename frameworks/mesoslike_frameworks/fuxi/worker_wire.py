"""The worker's side of the AppMaster/worker protocol, on MessagePack alone.

Every granted slot starts a worker (:mod:`.worker`), a job's 16 slots 16
at once, and each pays for what it imports before it says HELLO: the
protocol's declaration in :mod:`.am_protocol` — its message classes (attrs
classes then), the compiled msgspec codec, with the wire package under
them — was a third of a worker's start. This module speaks the same
frames without them, for the worker only (the AppMaster decodes with
:data:`.am_protocol.CODEC`, which checks every field):

- what a worker sends (HELLO, HEARTBEAT, PROGRESS, DONE, BYE, ERROR) is
  encoded as :data:`.am_protocol.CODEC` encodes it: ``{"v": 1, "type":
  TYPE}`` then every field, in the order declared (a Struct's; the attrs
  classes of before wrote them in name order; either decodes alike);
- what it receives (WELCOME, REJOIN, ASSIGN, KILL, ACK, RELEASE, ERROR) is
  decoded and checked as strictly as there: a map of at most
  :data:`MAX_FRAME` bytes with ``v`` 1 and a known type, instance and
  attempt integers >= 0 (not booleans), strings, an environment mapping
  strings to strings; a required field missing is an error naming it, an
  unknown field is ignored (a newer peer may send more). Anything else
  raises :class:`WireError` (the codec's ``error``), which the worker
  answers with an ERROR.

``tests/test_fuxi_worker_wire.py`` holds the two to each other: the same
types, fields and defaults, and frames that go across both ways.
"""

from __future__ import annotations

#: typing.TYPE_CHECKING without importing typing (a worker's start: fuxi/worker.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

import msgpack

__all__ = ["VERSION", "MAX_FRAME", "HEARTBEAT_INTERVAL", "PROGRESS_PREFIX", "WireError", "CODEC", "WorkerCodec",
           "Hello", "Heartbeat", "Progress", "Done", "Bye", "Welcome", "Rejoin", "Assign", "Kill", "Ack",
           "Release", "Error", "SENT", "RECEIVED"]

#: the protocol's version (the job protocol's)
VERSION = 1
#: the largest frame either way, in bytes
MAX_FRAME = 1024 * 1024
#: seconds between a worker's HELLOs / HEARTBEATs
HEARTBEAT_INTERVAL = 0.5
#: a line of an instance's stdout that reports its progress: ``FUXI_PROGRESS 0.25``
PROGRESS_PREFIX = "FUXI_PROGRESS"
#: the most entries a list or map of a frame may have (an environment's variables)
MAX_ENTRIES = 100_000


class WireError(ValueError):
    """A frame that is not a message for a worker: the reason."""


class _Message:
    """A message of the protocol: a plain class with ``__slots__``, its
    fields set by its ``__init__`` (by position or by name, in the order of
    ``_fields``; ``_field_defaults`` those that may be left out — the
    names a NamedTuple has, which these were: ``typing.NamedTuple`` made
    them at ~0.25 ms of CPU a class, ~3 ms of every worker's start;
    docs/performance.rst, "Stop 14: the Fuxi path (fuxi29h)"). Equal to a
    message of its own class with equal fields; its fields iterate in
    order, as a tuple's would. A default that is a list or a map is shared
    (as a NamedTuple's): never changed in place."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, Any] = {}

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"

    def _asdict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._fields}


_NO_RUNS: list[Any] = []
_NO_ENV: dict[str, str] = {}


# ------------------------------------------------------------ worker -> AppMaster
class Hello(_Message):
    __slots__ = _fields = ("slot", "unit", "hostname", "room", "running", "finished", "token", "agent_id", "queued")
    _field_defaults = {"room": "", "running": None, "finished": _NO_RUNS, "token": "", "agent_id": "",
                       "queued": None}

    def __init__(self, slot: str, unit: str, hostname: str, room: str = "", running: list[int] | None = None,
                 finished: list[list[Any]] = _NO_RUNS, token: str = "", agent_id: str = "",
                 queued: list[int] | None = None) -> None:
        self.slot, self.unit, self.hostname, self.room, self.running = slot, unit, hostname, room, running
        self.finished, self.token, self.agent_id, self.queued = finished, token, agent_id, queued


class Heartbeat(_Message):
    __slots__ = _fields = ("slot", "running", "queued")
    _field_defaults = {"running": None, "queued": None}

    def __init__(self, slot: str, running: list[int] | None = None, queued: list[int] | None = None) -> None:
        self.slot, self.running, self.queued = slot, running, queued


class Progress(_Message):
    __slots__ = _fields = ("slot", "instance", "attempt", "fraction")

    def __init__(self, slot: str, instance: int, attempt: int, fraction: float) -> None:
        self.slot, self.instance, self.attempt, self.fraction = slot, instance, attempt, fraction


class Done(_Message):
    __slots__ = _fields = ("slot", "instance", "attempt", "ok", "message")
    _field_defaults = {"message": ""}

    def __init__(self, slot: str, instance: int, attempt: int, ok: bool, message: str = "") -> None:
        self.slot, self.instance, self.attempt, self.ok, self.message = slot, instance, attempt, ok, message


class Bye(_Message):
    __slots__ = _fields = ("slot", "reason")
    _field_defaults = {"reason": ""}

    def __init__(self, slot: str, reason: str = "") -> None:
        self.slot, self.reason = slot, reason


# ------------------------------------------------------------ AppMaster -> worker
class Welcome(_Message):
    __slots__ = _fields = ("slot",)

    def __init__(self, slot: str) -> None:
        self.slot = slot


class Rejoin(_Message):
    __slots__ = ()


class Assign(_Message):
    __slots__ = _fields = ("instance", "attempt", "command", "env", "acks")
    _field_defaults = {"env": _NO_ENV, "acks": _NO_RUNS}

    def __init__(self, instance: int, attempt: int, command: str, env: dict[str, str] = _NO_ENV,
                 acks: list[list[int]] = _NO_RUNS) -> None:
        # acks: results acknowledged with it, [[instance, attempt], ...]
        self.instance, self.attempt, self.command, self.env, self.acks = instance, attempt, command, env, acks


class Kill(_Message):
    __slots__ = _fields = ("instance", "attempt")

    def __init__(self, instance: int, attempt: int) -> None:
        self.instance, self.attempt = instance, attempt


class Ack(_Message):
    __slots__ = _fields = ("instance", "attempt")

    def __init__(self, instance: int, attempt: int) -> None:
        self.instance, self.attempt = instance, attempt


class Release(_Message):
    __slots__ = ()


class Error(_Message):
    """Either way: the answer to a frame that is not a message."""

    __slots__ = _fields = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


#: what a worker sends, by TYPE
SENT: dict[str, type[_Message]] = {"HELLO": Hello, "HEARTBEAT": Heartbeat, "PROGRESS": Progress, "DONE": Done,
                                   "BYE": Bye, "ERROR": Error}
#: what a worker receives, by TYPE
RECEIVED: dict[str, type[_Message]] = {"WELCOME": Welcome, "REJOIN": Rejoin, "ASSIGN": Assign, "KILL": Kill,
                                       "ACK": Ack, "RELEASE": Release, "ERROR": Error}
_TYPES: dict[type, str] = {cls: kind for kind, cls in (*RECEIVED.items(), *SENT.items())}
#: per class sent: its fields in the order the frame carries them (as declared, as am_protocol's codec writes them)
_SENT_ORDER: dict[type, list[str]] = {cls: list(cls._fields) for cls in SENT.values()}


def _count(value: object) -> str | None:
    if type(value) is not int:
        return f"expected int, got {type(value).__name__} {value!r:.40}"
    return None if value >= 0 else f"must be >= 0, got {value}"


def _text(value: object) -> str | None:
    return None if type(value) is str else f"expected str, got {type(value).__name__}"


def _text_map(value: object) -> str | None:
    if type(value) is not dict:
        return f"expected a map, got {type(value).__name__}"
    for name, text in value.items():
        if type(name) is not str or type(text) is not str:
            return f"expected strings, got {type(name).__name__} {name!r:.40}: {type(text).__name__}"
    return None


def _runs(value: object) -> str | None:
    if type(value) is not list:
        return f"expected a list, got {type(value).__name__}"
    for run in value:
        if type(run) is not list or len(run) != 2:
            return f"expected [instance, attempt], got {run!r:.40}"
        problem = _count(run[0]) or _count(run[1])
        if problem is not None:
            return problem
    return None


#: the checks of the fields a worker receives (each name has one type across the messages)
_CHECKS: dict[str, Callable[[object], str | None]] = {
    "slot": _text, "message": _text, "command": _text, "instance": _count, "attempt": _count, "env": _text_map,
    "acks": _runs}


def pack(kind: str, message: object, order: list[str], limit: int, error: type[Exception]) -> bytes:
    """The frame of ``message`` of type ``kind``: ``{"v": VERSION, "type":
    kind}`` then its fields in ``order``; ``error`` if over ``limit`` bytes."""
    plain: dict[str, object] = {"v": VERSION, "type": kind}
    for name in order:
        plain[name] = getattr(message, name)
    frame: bytes = msgpack.packb(plain)
    if len(frame) > limit:
        raise error(f"{kind} of {len(frame)} bytes exceeds the limit of {limit}")
    return frame


def unpack(frame: bytes, limit: int, entries: int, error: type[Exception]) -> Any:
    """What MessagePack ``frame`` holds, its size, strings and binaries
    at most ``limit`` bytes, its lists and maps at most ``entries``;
    ``error`` saying why not."""
    if len(frame) > limit:
        raise error(f"frame of {len(frame)} bytes exceeds the limit of {limit}")
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=True, max_bin_len=limit, max_str_len=limit,
                               max_array_len=entries, max_map_len=entries)
    except Exception as exc:  # noqa: BLE001 - msgpack raises a zoo of types on garbage
        raise error(f"frame is not valid MessagePack: {exc}") from None


class WorkerCodec:
    """The transport's codec (:class:`mesoslike.transport.MessageCodec`)
    for a worker's connection to its AppMaster."""

    error = WireError
    max_message_size = MAX_FRAME

    def encode(self, message: object) -> bytes:
        """The frame of a message a worker sends; WireError for anything else."""
        order = _SENT_ORDER.get(type(message))
        if order is None:
            raise WireError(f"{type(message).__name__} is not a message a worker sends")
        return pack(_TYPES[type(message)], message, order, MAX_FRAME, WireError)

    def decode(self, frame: bytes) -> Any:
        """The message of the AppMaster in ``frame``, checked; WireError for anything else."""
        plain = unpack(frame, MAX_FRAME, MAX_ENTRIES, WireError)
        if type(plain) is not dict:
            raise WireError(f"frame must be a map, got {type(plain).__name__}")
        if plain.get("v") != VERSION or type(plain.get("v")) is not int:
            raise WireError(f"unsupported protocol version {plain.get('v')!r:.40} (this peer speaks {VERSION})")
        kind = plain.get("type")
        cls = RECEIVED.get(kind) if type(kind) is str else None
        if cls is None:
            if kind in SENT:
                raise WireError(f"{kind} is not a message for a worker")
            raise WireError(f"unknown message type {kind!r:.40}")
        fields: dict[str, object] = {}
        for name in cls._fields:
            if name not in plain:
                if name in cls._field_defaults:
                    continue
                raise WireError(f"{kind}.{name}: missing")
            problem = _CHECKS[name](plain[name])
            if problem is not None:
                raise WireError(f"{kind}.{name}: {problem}")
            fields[name] = plain[name]
        return cls(**fields)


#: the codec of a worker's connection
CODEC = WorkerCodec()

"""The worker's side of the AppMaster/worker protocol, on MessagePack alone.

Every granted slot starts a worker (:mod:`.worker`), a job's 16 slots 16
at once, and each pays for what it imports before it says HELLO: the
protocol's declaration in :mod:`.am_protocol` — attrs classes, their
validating converters and the compiled msgspec codec, with the wire package
under them — was a third of a worker's start. This module speaks the same
frames without them, for the worker only (the AppMaster decodes with
:data:`.am_protocol.CODEC`, which checks every field):

- what a worker sends (HELLO, HEARTBEAT, PROGRESS, DONE, BYE, ERROR) is
  encoded as :data:`.am_protocol.CODEC` encodes it: ``{"v": 1, "type":
  TYPE}`` then every field, in name order — the layout the AppMaster's
  compiled decoder takes;
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

from typing import Any, Callable, NamedTuple

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


# ------------------------------------------------------------ worker -> AppMaster
class Hello(NamedTuple):
    slot: str
    unit: str
    hostname: str
    room: str = ""
    running: list[int] | None = None
    finished: list[list[Any]] = []   # (a NamedTuple's default is never changed in place)
    token: str = ""
    agent_id: str = ""
    queued: list[int] | None = None


class Heartbeat(NamedTuple):
    slot: str
    running: list[int] | None = None
    queued: list[int] | None = None


class Progress(NamedTuple):
    slot: str
    instance: int
    attempt: int
    fraction: float


class Done(NamedTuple):
    slot: str
    instance: int
    attempt: int
    ok: bool
    message: str = ""


class Bye(NamedTuple):
    slot: str
    reason: str = ""


# ------------------------------------------------------------ AppMaster -> worker
class Welcome(NamedTuple):
    slot: str


class Rejoin(NamedTuple):
    pass


class Assign(NamedTuple):
    instance: int
    attempt: int
    command: str
    env: dict[str, str] = {}
    acks: list[list[int]] = []   # results acknowledged with it: [[instance, attempt], ...]


class Kill(NamedTuple):
    instance: int
    attempt: int


class Ack(NamedTuple):
    instance: int
    attempt: int


class Release(NamedTuple):
    pass


class Error(NamedTuple):
    """Either way: the answer to a frame that is not a message."""

    message: str


#: what a worker sends, by TYPE
SENT: dict[str, type] = {"HELLO": Hello, "HEARTBEAT": Heartbeat, "PROGRESS": Progress, "DONE": Done, "BYE": Bye,
                         "ERROR": Error}
#: what a worker receives, by TYPE
RECEIVED: dict[str, type] = {"WELCOME": Welcome, "REJOIN": Rejoin, "ASSIGN": Assign, "KILL": Kill, "ACK": Ack,
                             "RELEASE": Release, "ERROR": Error}
_TYPES = {cls: kind for kind, cls in (*RECEIVED.items(), *SENT.items())}
#: per class sent: its fields in the order the frame carries them (by name, as am_protocol's codec writes them)
_SENT_ORDER = {cls: sorted(cls._fields) for cls in SENT.values()}  # type: ignore[attr-defined]


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
        plain: dict[str, object] = {"v": VERSION, "type": _TYPES[type(message)]}
        for name in order:
            plain[name] = getattr(message, name)
        frame: bytes = msgpack.packb(plain)
        if len(frame) > MAX_FRAME:
            raise WireError(f"{plain['type']} of {len(frame)} bytes exceeds the limit of {MAX_FRAME}")
        return frame

    def decode(self, frame: bytes) -> Any:
        """The message of the AppMaster in ``frame``, checked; WireError for anything else."""
        if len(frame) > MAX_FRAME:
            raise WireError(f"frame of {len(frame)} bytes exceeds the limit of {MAX_FRAME}")
        try:
            plain = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_bin_len=MAX_FRAME,
                                    max_str_len=MAX_FRAME, max_array_len=MAX_ENTRIES, max_map_len=MAX_ENTRIES)
        except Exception as exc:  # noqa: BLE001 - msgpack raises a zoo of types on garbage
            raise WireError(f"frame is not valid MessagePack: {exc}") from None
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
        for name in cls._fields:  # type: ignore[attr-defined]
            if name not in plain:
                if name in cls._field_defaults:  # type: ignore[attr-defined]
                    continue
                raise WireError(f"{kind}.{name}: missing")
            problem = _CHECKS[name](plain[name])
            if problem is not None:
                raise WireError(f"{kind}.{name}: {problem}")
            fields[name] = plain[name]
        return cls(**fields)


#: the codec of a worker's connection
CODEC = WorkerCodec()

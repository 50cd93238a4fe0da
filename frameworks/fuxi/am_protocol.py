"""What a job's AppMaster and its workers say to each other.

Every granted slot runs one long-lived *worker* (:mod:`.worker`); it
connects a ZeroMQ DEALER (identity: its slot id) to its AppMaster's ROUTER
(:mod:`.appmaster`) and speaks MessagePack maps ``{"v": 1, "type": TYPE,
...}`` (the :class:`~mesoslike.frameworks.fuxi.protocol.Codec` of the job
protocol, with this message set):

worker -> AppMaster

- ``HELLO(slot, unit, hostname, room, running, finished)`` on start and
  every 0.5 s until a WELCOME: ``running`` is ``[instance, attempt]`` or
  None, ``finished`` the results not yet acknowledged, each
  ``[instance, attempt, ok, message]`` — so that an AppMaster that was
  restarted learns what its workers did while it was gone;
- ``HEARTBEAT(slot, running)`` every 0.5 s once welcomed;
- ``PROGRESS(slot, instance, attempt, fraction)`` for a ``FUXI_PROGRESS
  <fraction>`` line on the instance's stdout;
- ``DONE(slot, instance, attempt, ok, message)`` when the instance exits
  (``message``: exit status and the tail of its stderr), sent again with
  every heartbeat until an ACK;
- ``BYE(slot, reason)`` when the worker is stopped (SIGTERM).

AppMaster -> worker

- ``WELCOME(slot)``; ``REJOIN()`` to a heartbeat from a worker it does not
  know (a restarted AppMaster): the worker says HELLO again;
- ``ASSIGN(instance, attempt, command, env)``: run ``sh -c command``;
- ``KILL(instance, attempt)``: SIGTERM, then SIGKILL, the instance's group;
  a killed attempt is not reported;
- ``ACK(instance, attempt)``: the result is recorded (and checkpointed);
- ``RELEASE()``: the slot is not needed any more, the worker exits 0;
- ``ERROR(message)``: to a frame that is not a message (either way).

Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from mesoslike.frameworks.fuxi.protocol import VERSION, Codec, ProtocolError

__all__ = ["VERSION", "ProtocolError", "Hello", "Heartbeat", "Progress", "Done", "Bye", "Welcome", "Rejoin", "Assign",
           "Kill", "Ack", "Release", "Error", "encode", "decode", "HEARTBEAT_INTERVAL", "HEARTBEAT_TIMEOUT",
           "PROGRESS_PREFIX", "MAX_FRAME"]

#: seconds between a worker's HELLOs / HEARTBEATs
HEARTBEAT_INTERVAL = 0.5
#: seconds without a heartbeat after which the AppMaster declares a worker gone
HEARTBEAT_TIMEOUT = 3.0
#: a line of an instance's stdout that reports its progress: ``FUXI_PROGRESS 0.25``
PROGRESS_PREFIX = "FUXI_PROGRESS"
MAX_FRAME = 1024 * 1024


# -------------------------------------------------- worker -> AppMaster
@attrs.frozen
class Hello:
    TYPE: ClassVar[str] = "HELLO"
    slot: str
    unit: str
    hostname: str
    room: str = ""
    running: list | None = None
    finished: list = attrs.field(factory=list)


@attrs.frozen
class Heartbeat:
    TYPE: ClassVar[str] = "HEARTBEAT"
    slot: str
    running: list | None = None


@attrs.frozen
class Progress:
    TYPE: ClassVar[str] = "PROGRESS"
    slot: str
    instance: int
    attempt: int
    fraction: float


@attrs.frozen
class Done:
    TYPE: ClassVar[str] = "DONE"
    slot: str
    instance: int
    attempt: int
    ok: bool
    message: str = ""


@attrs.frozen
class Bye:
    TYPE: ClassVar[str] = "BYE"
    slot: str
    reason: str = ""


# -------------------------------------------------- AppMaster -> worker
@attrs.frozen
class Welcome:
    TYPE: ClassVar[str] = "WELCOME"
    slot: str


@attrs.frozen
class Rejoin:
    TYPE: ClassVar[str] = "REJOIN"


@attrs.frozen
class Assign:
    TYPE: ClassVar[str] = "ASSIGN"
    instance: int
    attempt: int
    command: str
    env: dict = attrs.field(factory=dict)


@attrs.frozen
class Kill:
    TYPE: ClassVar[str] = "KILL"
    instance: int
    attempt: int


@attrs.frozen
class Ack:
    TYPE: ClassVar[str] = "ACK"
    instance: int
    attempt: int


@attrs.frozen
class Release:
    TYPE: ClassVar[str] = "RELEASE"


@attrs.frozen
class Error:
    TYPE: ClassVar[str] = "ERROR"
    message: str


_RUN = (list, type(None))
CODEC = Codec({
    Hello: {"slot": str, "unit": str, "hostname": str, "room": str, "running": _RUN, "finished": list},
    Heartbeat: {"slot": str, "running": _RUN},
    Progress: {"slot": str, "instance": int, "attempt": int, "fraction": (float, int)},
    Done: {"slot": str, "instance": int, "attempt": int, "ok": bool, "message": str},
    Bye: {"slot": str, "reason": str},
    Welcome: {"slot": str},
    Rejoin: {},
    Assign: {"instance": int, "attempt": int, "command": str, "env": dict},
    Kill: {"instance": int, "attempt": int},
    Ack: {"instance": int, "attempt": int},
    Release: {},
    Error: {"message": str},
}, "Fuxi AppMaster/worker", MAX_FRAME)
encode = CODEC.encode


def decode(frame: bytes) -> Any:
    """The message in ``frame``, its nested values checked too; raises
    :class:`ProtocolError` naming what is wrong."""
    message = CODEC.decode(frame)
    if isinstance(message, (Hello, Heartbeat)) and message.running is not None:
        _run(message.running, f"{message.TYPE}.running")
    if isinstance(message, Hello):
        for i, result in enumerate(message.finished):
            where = f"HELLO.finished[{i}]"
            if not isinstance(result, list) or len(result) != 4 or not isinstance(result[2], bool) \
                    or not isinstance(result[3], str):
                raise ProtocolError(f"{where}: expected [instance, attempt, ok, message], got {result!r}")
            _run(result[:2], where)
    if isinstance(message, Progress) and not (math.isfinite(message.fraction) and 0 <= message.fraction <= 1):
        raise ProtocolError(f"PROGRESS.fraction: expected a number in [0, 1], got {message.fraction!r}")
    if isinstance(message, Assign) and not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in message.env.items()):
        raise ProtocolError("ASSIGN.env: expected a map of strings to strings")
    if any(getattr(message, name, 0) < 0 for name in ("instance", "attempt")):
        raise ProtocolError(f"{message.TYPE}: instance and attempt must be >= 0")
    return message


def _run(value: list, where: str) -> tuple[int, int]:
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ProtocolError(f"{where}: expected [instance, attempt] (integers >= 0), got {value!r}")
    return value[0], value[1]

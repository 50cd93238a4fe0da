"""What a job's AppMaster and its workers say to each other.

Every granted slot runs one long-lived *worker* (:mod:`.worker`); it
connects a ZeroMQ DEALER (identity: its slot id) to its AppMaster's ROUTER
(:mod:`.appmaster`) and speaks MessagePack maps ``{"v": 1, "type": TYPE,
...}``: the messages below (frozen msgspec Structs), declared on the same
machinery as the job protocol (:mod:`.protocol`) and the cluster's own
(:mod:`mesoslike.messaging`), checked by :data:`CODEC` — instance and attempt numbers are integers >= 0,
a fraction is in [0, 1], an environment maps strings to strings:

worker -> AppMaster

- ``HELLO(slot, unit, hostname, room, running, finished, token, agent_id, queued)``
  on start and every 0.5 s until a WELCOME: ``running`` is ``[instance,
  attempt]`` or None, ``queued`` the one it holds to run next (or None),
  ``finished`` the results not yet acknowledged, each
  ``[instance, attempt, ok, message]`` — so that an AppMaster that was
  restarted learns what its workers did while it was gone; ``token``
  proves the worker is the slot's (:func:`worker_token` of the job's token
  and the slot id: the service gives it to the slot's task, an AppMaster
  with the job's token checks it); ``agent_id`` is the agent the slot is on;
- ``HEARTBEAT(slot, running, queued)`` every 0.5 s once welcomed;
- ``PROGRESS(slot, instance, attempt, fraction)`` for a ``FUXI_PROGRESS
  <fraction>`` line on the instance's stdout;
- ``DONE(slot, instance, attempt, ok, message)`` when the instance exits
  (``message``: exit status and the tail of its stderr), sent again with
  every heartbeat until an ACK;
- ``BYE(slot, reason)`` when the worker is stopped (SIGTERM).

AppMaster -> worker

- ``WELCOME(slot)``; ``REJOIN()`` to a heartbeat from a worker it does not
  know (a restarted AppMaster): the worker says HELLO again;
- ``ASSIGN(instance, attempt, command, env)``: run ``sh -c command``; to a
  worker that runs an instance, the one it runs next (it holds one queued,
  and starts it the moment the running one ends);
- ``KILL(instance, attempt)``: SIGTERM, then SIGKILL, the instance's group
  (a queued one is dropped); a killed attempt is not reported;
- ``ACK(instance, attempt)``: the result is recorded (and checkpointed);
  an ASSIGN's ``acks`` (``[[instance, attempt], ...]``) say the same of
  earlier results of that worker, the AppMaster's ACKs carried by the
  ASSIGN that went out after them instead of frames of their own;
- ``RELEASE()``: the slot is not needed any more, the worker exits 0;
- ``ERROR(message)``: to a frame that is not a message (either way).

Pure: no I/O. The version, the frame limit, the heartbeat interval and the
progress prefix are :mod:`.worker_wire`'s (the worker's side of this
protocol, which a worker speaks without this module's schema machinery).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from mesoslike.messaging import Codec, Items, Range, Schema, WireError
from mesoslike_frameworks.fuxi.worker_wire import HEARTBEAT_INTERVAL, MAX_FRAME, PROGRESS_PREFIX, VERSION

__all__ = ["VERSION", "ProtocolError", "SCHEMA", "CODEC", "Hello", "Heartbeat", "Progress", "Done", "Bye", "Welcome",
           "Rejoin", "Assign", "Kill", "Ack", "Release", "Error", "encode", "decode", "HEARTBEAT_INTERVAL",
           "HEARTBEAT_TIMEOUT", "PROGRESS_PREFIX", "MAX_FRAME", "worker_token"]

#: what decoding a frame that is not a message raises: the job protocol's error
ProtocolError = WireError
#: seconds without a heartbeat after which the AppMaster declares a worker gone
HEARTBEAT_TIMEOUT = 3.0

SCHEMA = Schema("Fuxi AppMaster/worker", VERSION)

#: an instance's index or an attempt's number
Count = Annotated[int, Range(min=0)]
#: what a worker runs: ``[instance, attempt]``
Run = Annotated[list[Any], Items(Count, Count)]
#: a finished attempt: ``[instance, attempt, ok, message]``
Result = Annotated[list[Any], Items(Count, Count, bool, str)]


# -------------------------------------------------- worker -> AppMaster
@SCHEMA.message
class Hello(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "HELLO"
    slot: str
    unit: str
    hostname: str
    room: str = ""
    running: Run | None = None
    finished: list[Result] = msgspec.field(default_factory=list)
    token: str = ""
    agent_id: str = ""
    queued: Run | None = None


@SCHEMA.message
class Heartbeat(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "HEARTBEAT"
    slot: str
    running: Run | None = None
    queued: Run | None = None


@SCHEMA.message
class Progress(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "PROGRESS"
    slot: str
    instance: Count
    attempt: Count
    fraction: Annotated[float, Range(0, 1)]


@SCHEMA.message
class Done(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "DONE"
    slot: str
    instance: Count
    attempt: Count
    ok: bool
    message: str = ""


@SCHEMA.message
class Bye(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "BYE"
    slot: str
    reason: str = ""


# -------------------------------------------------- AppMaster -> worker
@SCHEMA.message
class Welcome(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "WELCOME"
    slot: str


@SCHEMA.message
class Rejoin(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "REJOIN"


@SCHEMA.message
class Assign(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "ASSIGN"
    instance: Count
    attempt: Count
    command: str
    env: dict[str, str] = msgspec.field(default_factory=dict)
    acks: list[Run] = msgspec.field(default_factory=list)


@SCHEMA.message
class Kill(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "KILL"
    instance: Count
    attempt: Count


@SCHEMA.message
class Ack(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "ACK"
    instance: Count
    attempt: Count


@SCHEMA.message
class Release(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "RELEASE"


@SCHEMA.message
class Error(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "ERROR"
    message: str


def worker_token(job_token: str, slot: str) -> str:
    """The secret a slot's worker shows its AppMaster: an HMAC of the slot id
    under the job's token (which only the service and the AppMaster hold)."""
    import hashlib   # here: every worker imports this module, and none needs these (0.01 s of its start)
    import hmac

    return hmac.new(job_token.encode(), slot.encode(), hashlib.sha256).hexdigest()


#: the codec of this protocol: for an AppMaster's server and its workers
CODEC = Codec(SCHEMA, MAX_FRAME)
encode = CODEC.encode
decode = CODEC.decode

"""The protocol of ``mesoslike fuxi serve``: a tiny message set over the
ZeroMQ transport, MessagePack-encoded. Two kinds of peers speak it to the
service's job server (a :class:`~mesoslike.transport.Server`, ROUTER):

**Job clients** (``mesoslike fuxi submit`` / ``status``) connect a
:class:`~mesoslike.transport.Client` and ask; the service answers each
request on the same connection, echoing the request's ``id``:

=================================  ==========================================
request                            answer
=================================  ==========================================
``SUBMIT(id, document)``           ``SUBMITTED(id, job_id)`` or ``ERROR(id, message)``
``STATUS(id, job_id, wait)``       ``STATUS_REPLY(id, document)`` or ``ERROR(id, message)``
``KILL(id, job_id)``               ``OK(id)`` once the job is killed, or ``ERROR(id, message)``
=================================  ==========================================

``document`` of SUBMIT is the job file as parsed TOML (a dict with a ``job``
table, docs/fuxi.rst); ``job_id`` of STATUS is empty for every job;
``document`` of STATUS_REPLY is the status as JSON text. ``wait`` of STATUS
(seconds, 0 by default) makes it a long poll: the answer comes once the job
is no longer running, or after ``wait`` seconds (at most
:data:`MAX_STATUS_WAIT`), whichever is first — a client following a job
sees its end at once without polling for it (0, or an empty ``job_id``:
at once). An ERROR's message is at most :data:`MAX_ERROR` characters: it
never echoes a request whole.

**AppMasters** (one process per job, started by the service) tell the
service what their job needs; every request carries the job's id and the
``token`` the service gave the AppMaster, and is answered ``OK(id)`` or
``ERROR(id, message)``:

===========================================  ================================================
request                                      what the service does
===========================================  ================================================
``SET_DESIRE(id, job_id, token, unit, slots)``  the unit's outstanding desire (slots wanted at once)
``RELEASE_SLOT(id, job_id, token, slot)``    the slot goes back to the scheduler
``AVOID_HOSTS(id, job_id, token, unit, hosts)``  the unit's next slots should not go to ``hosts`` (its stragglers' machines)
``BLACKLIST_HOST(id, job_id, token, host)``  no slot of any unit of the job goes to ``host``
``REPORT_HOST(id, job_id, token, host)``     ``host`` joins the scheduler's global blacklist
``PROGRESS(id, job_id, token, report)``      kept for ``status`` (the AppMaster core's progress report)
``JOB_ENDED(id, job_id, token, succeeded, reason)``  the job ends: its slots are killed and returned
===========================================  ================================================

The service tells an AppMaster of its grants directly, on the connection
its requests came over (FuxiMaster's grants to the AppMaster, seed 002),
without a reply: ``SLOT_GRANTED(job_id, slot, unit, hostname, room)`` as
the scheduler grants a slot (its worker task is being launched), and
``SLOT_REVOKED(job_id, slot, reason)`` when it takes one back (preempted,
lost with its agent, its task ended): the AppMaster gives the slot's work
to others at once instead of waiting for its worker's heartbeats to stop.

The messages are declared once, below, on the machinery of the cluster's
own wire protocol (:mod:`mesoslike.messaging`): each is a frozen
``msgspec.Struct`` (built, encoded and decoded in C; ``msgspec.structs.replace``
is a copy with some fields changed) registered in :data:`SCHEMA`, whose field
hints are what :data:`CODEC` checks; every frame is a map ``{"v": VERSION,
"type": TYPE, ...fields}`` (the fields as declared) of at most
:data:`MAX_FRAME` bytes, and decoding anything else raises a
:class:`ProtocolError` naming what is wrong. They are not messages of the
master's protocol: the Fuxi service is a framework, and its clients speak to
it, not to the master. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from mesoslike.messaging import Codec, Schema, WireError

__all__ = ["VERSION", "ProtocolError", "SCHEMA", "CODEC", "Submit", "Submitted", "Status", "StatusReply", "KillJob",
           "Error", "Ok", "SetDesire", "ReleaseSlot", "AvoidHosts", "BlacklistHost", "ReportHost", "Progress",
           "JobEnded", "APPMASTER_REQUESTS", "SlotGranted", "SlotRevoked", "GRANT_NEWS", "encode", "decode", "MAX_FRAME",
           "MAX_ERROR", "MAX_STATUS_WAIT", "bounded", "STANDBY_REFUSAL"]

VERSION = 1
#: the largest frame either side accepts
MAX_FRAME = 4 * 1024 * 1024
#: the longest ERROR message (and the most of a peer's input a log line quotes)
MAX_ERROR = 1000
#: the longest a STATUS may wait for its job's end (a longer ``wait`` waits this long): the client's
#: request timeout is its wait plus its own timeout, so a service gone meanwhile is noticed within it
MAX_STATUS_WAIT = 60.0
#: the ERROR a standby's job server answers (``fuxi serve --zk``): it may lead soon, so a client that
#: follows the leader through ZooKeeper asks again rather than giving up
STANDBY_REFUSAL = "this Fuxi scheduler is a standby, not the leader: ask with --fuxi zk://... to reach it"


def bounded(text: str, limit: int = MAX_ERROR) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was): what
    answers or logs a peer's input never repeats it whole."""
    return text if len(text) <= limit else f"{text[:limit - 40]}... ({len(text)} characters)"

#: the codec's error: a frame that is not a message of this protocol, or a
#: message that cannot be encoded (the message says why)
ProtocolError = WireError

SCHEMA = Schema("Fuxi service", VERSION)


# ------------------------------------------------------------ job clients
@SCHEMA.message
class Submit(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "SUBMIT"
    id: int
    document: dict[str, Any]


@SCHEMA.message
class Submitted(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "SUBMITTED"
    id: int
    job_id: str


@SCHEMA.message
class Status(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "STATUS"
    id: int
    job_id: str = ""
    #: seconds to wait for the job's end before answering (0: at once; a service of before this field ignores it)
    wait: float = 0.0


@SCHEMA.message
class StatusReply(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "STATUS_REPLY"
    id: int
    document: str


@SCHEMA.message
class KillJob(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "KILL"
    id: int
    job_id: str


@SCHEMA.message
class Error(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "ERROR"
    id: int
    message: str


# ------------------------------------------------------------- AppMasters
@SCHEMA.message
class Ok(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "OK"
    id: int


@SCHEMA.message
class SetDesire(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "SET_DESIRE"
    id: int
    job_id: str
    token: str
    unit: str
    slots: int


@SCHEMA.message
class ReleaseSlot(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "RELEASE_SLOT"
    id: int
    job_id: str
    token: str
    slot: str


@SCHEMA.message
class AvoidHosts(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "AVOID_HOSTS"
    id: int
    job_id: str
    token: str
    unit: str
    hosts: list[str]


@SCHEMA.message
class BlacklistHost(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "BLACKLIST_HOST"
    id: int
    job_id: str
    token: str
    host: str


@SCHEMA.message
class ReportHost(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "REPORT_HOST"
    id: int
    job_id: str
    token: str
    host: str


@SCHEMA.message
class Progress(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "PROGRESS"
    id: int
    job_id: str
    token: str
    report: dict[str, Any]


@SCHEMA.message
class JobEnded(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "JOB_ENDED"
    id: int
    job_id: str
    token: str
    succeeded: bool
    reason: str


@SCHEMA.message
class SlotGranted(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "SLOT_GRANTED"
    job_id: str
    slot: str
    unit: str
    hostname: str
    room: str


@SCHEMA.message
class SlotRevoked(msgspec.Struct, frozen=True, gc=False):
    TYPE: ClassVar[str] = "SLOT_REVOKED"
    job_id: str
    slot: str
    reason: str


#: what an AppMaster asks of the service
APPMASTER_REQUESTS = (SetDesire, ReleaseSlot, AvoidHosts, BlacklistHost, ReportHost, Progress, JobEnded)
#: what the service tells an AppMaster unasked
GRANT_NEWS = (SlotGranted, SlotRevoked)

Message = (Submit | Submitted | Status | StatusReply | KillJob | Error | Ok | SetDesire | ReleaseSlot | AvoidHosts | BlacklistHost
           | ReportHost | Progress | JobEnded | SlotGranted | SlotRevoked)
#: the codec of this protocol: for the job server, job clients and AppMasters
CODEC = Codec(SCHEMA, MAX_FRAME)
encode = CODEC.encode
decode = CODEC.decode

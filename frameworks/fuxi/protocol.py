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
``STATUS(id, job_id)``             ``STATUS_REPLY(id, document)`` or ``ERROR(id, message)``
=================================  ==========================================

``document`` of SUBMIT is the job file as parsed TOML (a dict with a ``job``
table, DESIGN §3.5); ``job_id`` of STATUS is empty for every job;
``document`` of STATUS_REPLY is the status as JSON text.

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

Every frame is a map ``{"v": VERSION, "type": TYPE, ...fields}``. The
messages are not part of the cluster's wire schema (:mod:`mesoslike.wire`):
the Fuxi service is a framework, and its clients speak to it, not to the
master. :class:`Codec` is shared with the AppMaster/worker protocol
(:mod:`.am_protocol`). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import attrs
import msgpack

from mesoslike import MesoslikeError

__all__ = ["VERSION", "ProtocolError", "Codec", "Submit", "Submitted", "Status", "StatusReply", "Error", "Ok",
           "SetDesire", "ReleaseSlot", "AvoidHosts", "BlacklistHost", "ReportHost", "Progress", "JobEnded", "APPMASTER_REQUESTS",
           "encode", "decode", "MAX_FRAME"]

VERSION = 1
#: the largest frame either side accepts
MAX_FRAME = 4 * 1024 * 1024


class ProtocolError(MesoslikeError, ValueError):
    """A frame that is not a message of this protocol; the message says why."""


class Codec:
    """Encodes and decodes the messages of ``schema`` (message class ->
    field -> the type, or tuple of types, its value must have; a bool is
    only accepted where ``bool`` is named). ``what`` names the protocol in
    errors."""

    def __init__(self, schema: Mapping[type, Mapping[str, type | tuple[type, ...]]], what: str,
                 max_frame: int = MAX_FRAME) -> None:
        self.schema = {cls: dict(fields) for cls, fields in schema.items()}
        self.types = {cls.TYPE: cls for cls in self.schema}
        self.what = what
        self.max_frame = max_frame

    def encode(self, message: Any) -> bytes:
        """The frame of ``message``; raises :class:`ProtocolError` for a value
        MessagePack cannot carry (e.g. a TOML date in a job document)."""
        if type(message) not in self.schema:
            raise ProtocolError(f"{type(message).__name__} is not a {self.what} message")
        plain: dict[str, Any] = {"v": VERSION, "type": message.TYPE}
        plain.update(attrs.asdict(message, recurse=False))
        try:
            frame = msgpack.packb(plain, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"cannot encode {message.TYPE}: {exc}") from None
        if len(frame) > self.max_frame:
            raise ProtocolError(f"{message.TYPE} of {len(frame)} bytes exceeds the limit of {self.max_frame}")
        return frame

    def decode(self, frame: bytes) -> Any:
        """The message in ``frame``; raises :class:`ProtocolError` naming what is wrong."""
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise ProtocolError(f"a frame must be bytes, got {type(frame).__name__}")
        if len(frame) > self.max_frame:
            raise ProtocolError(f"frame of {len(frame)} bytes exceeds the limit of {self.max_frame}")
        try:
            plain = msgpack.unpackb(frame, raw=False, strict_map_key=False)
        except Exception as exc:  # noqa: BLE001 - msgpack raises many types on garbage
            raise ProtocolError(f"frame is not valid MessagePack: {exc}") from None
        if not isinstance(plain, dict):
            raise ProtocolError(f"frame must be a map, got {type(plain).__name__}")
        if plain.get("v") != VERSION:
            raise ProtocolError(f"unsupported protocol version {plain.get('v')!r} (this side speaks {VERSION})")
        cls = self.types.get(plain.get("type")) if isinstance(plain.get("type"), str) else None
        if cls is None:
            raise ProtocolError(f"unknown message type {plain.get('type')!r}")
        values = {}
        for field in attrs.fields(cls):
            if field.name not in plain:
                if field.default is attrs.NOTHING:
                    raise ProtocolError(f"{cls.TYPE}.{field.name}: missing")
                continue
            value = plain[field.name]
            expected = self.schema[cls][field.name]
            expected = expected if isinstance(expected, tuple) else (expected,)
            if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
                names = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
                raise ProtocolError(f"{cls.TYPE}.{field.name}: expected {names}, got {type(value).__name__}")
            values[field.name] = value
        return cls(**values)


# ------------------------------------------------------------ job clients
@attrs.frozen
class Submit:
    TYPE: ClassVar[str] = "SUBMIT"
    id: int
    document: dict


@attrs.frozen
class Submitted:
    TYPE: ClassVar[str] = "SUBMITTED"
    id: int
    job_id: str


@attrs.frozen
class Status:
    TYPE: ClassVar[str] = "STATUS"
    id: int
    job_id: str = ""


@attrs.frozen
class StatusReply:
    TYPE: ClassVar[str] = "STATUS_REPLY"
    id: int
    document: str


@attrs.frozen
class Error:
    TYPE: ClassVar[str] = "ERROR"
    id: int
    message: str


# ------------------------------------------------------------- AppMasters
@attrs.frozen
class Ok:
    TYPE: ClassVar[str] = "OK"
    id: int


@attrs.frozen
class SetDesire:
    TYPE: ClassVar[str] = "SET_DESIRE"
    id: int
    job_id: str
    token: str
    unit: str
    slots: int


@attrs.frozen
class ReleaseSlot:
    TYPE: ClassVar[str] = "RELEASE_SLOT"
    id: int
    job_id: str
    token: str
    slot: str


@attrs.frozen
class AvoidHosts:
    TYPE: ClassVar[str] = "AVOID_HOSTS"
    id: int
    job_id: str
    token: str
    unit: str
    hosts: list


@attrs.frozen
class BlacklistHost:
    TYPE: ClassVar[str] = "BLACKLIST_HOST"
    id: int
    job_id: str
    token: str
    host: str


@attrs.frozen
class ReportHost:
    TYPE: ClassVar[str] = "REPORT_HOST"
    id: int
    job_id: str
    token: str
    host: str


@attrs.frozen
class Progress:
    TYPE: ClassVar[str] = "PROGRESS"
    id: int
    job_id: str
    token: str
    report: dict


@attrs.frozen
class JobEnded:
    TYPE: ClassVar[str] = "JOB_ENDED"
    id: int
    job_id: str
    token: str
    succeeded: bool
    reason: str


#: what an AppMaster asks of the service
APPMASTER_REQUESTS = (SetDesire, ReleaseSlot, AvoidHosts, BlacklistHost, ReportHost, Progress, JobEnded)
_AM = {"id": int, "job_id": str, "token": str}

Message = (Submit | Submitted | Status | StatusReply | Error | Ok | SetDesire | ReleaseSlot | AvoidHosts | BlacklistHost
           | ReportHost | Progress | JobEnded)
CODEC = Codec({
    Submit: {"id": int, "document": dict},
    Submitted: {"id": int, "job_id": str},
    Status: {"id": int, "job_id": str},
    StatusReply: {"id": int, "document": str},
    Error: {"id": int, "message": str},
    Ok: {"id": int},
    SetDesire: {**_AM, "unit": str, "slots": int},
    ReleaseSlot: {**_AM, "slot": str},
    AvoidHosts: {**_AM, "unit": str, "hosts": list},
    BlacklistHost: {**_AM, "host": str},
    ReportHost: {**_AM, "host": str},
    Progress: {**_AM, "report": dict},
    JobEnded: {**_AM, "succeeded": bool, "reason": str},
}, "Fuxi service")
encode = CODEC.encode
decode = CODEC.decode

"""The job-client protocol of ``mesoslike fuxi serve``: a tiny message set
over the ZeroMQ transport, MessagePack-encoded.

A job client (``mesoslike fuxi submit`` / ``status``) connects a
:class:`~mesoslike.transport.Client` to the service's
:class:`~mesoslike.transport.Server` and asks; the service answers each
request on the same connection, echoing the request's ``id``:

=================================  ==========================================
request                            answer
=================================  ==========================================
``SUBMIT(id, document)``           ``SUBMITTED(id, job_id)`` or ``ERROR(id, message)``
``STATUS(id, job_id)``             ``STATUS_REPLY(id, document)`` or ``ERROR(id, message)``
=================================  ==========================================

``document`` of SUBMIT is the job file as parsed TOML (a dict with a ``job``
table, DESIGN §3.5); ``job_id`` of STATUS is empty for every job;
``document`` of STATUS_REPLY is the status as JSON text. Every frame is a map
``{"v": VERSION, "type": TYPE, ...fields}``. The messages are not part of the
cluster's wire schema (:mod:`mesoslike.wire`): the Fuxi service is a
framework, and its clients speak to it, not to the master. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import msgpack

from mesoslike import MesoslikeError

__all__ = ["VERSION", "ProtocolError", "Submit", "Submitted", "Status", "StatusReply", "Error", "encode", "decode",
           "MAX_FRAME"]

VERSION = 1
#: the largest frame either side accepts
MAX_FRAME = 4 * 1024 * 1024


class ProtocolError(MesoslikeError, ValueError):
    """A frame that is not a message of this protocol; the message says why."""


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


Message = Submit | Submitted | Status | StatusReply | Error
#: message class -> field -> the type its value must have
_SCHEMA: dict[type, dict[str, type]] = {
    Submit: {"id": int, "document": dict},
    Submitted: {"id": int, "job_id": str},
    Status: {"id": int, "job_id": str},
    StatusReply: {"id": int, "document": str},
    Error: {"id": int, "message": str},
}
_TYPES: dict[str, type] = {cls.TYPE: cls for cls in _SCHEMA}


def encode(message: Message) -> bytes:
    """The frame of ``message``; raises :class:`ProtocolError` for a value
    MessagePack cannot carry (e.g. a TOML date in a job document)."""
    if type(message) not in _SCHEMA:
        raise ProtocolError(f"{type(message).__name__} is not a Fuxi client message")
    plain: dict[str, Any] = {"v": VERSION, "type": message.TYPE}
    plain.update(attrs.asdict(message, recurse=False))
    try:
        frame = msgpack.packb(plain, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode {message.TYPE}: {exc}") from None
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"{message.TYPE} of {len(frame)} bytes exceeds the limit of {MAX_FRAME}")
    return frame


def decode(frame: bytes) -> Message:
    """The message in ``frame``; raises :class:`ProtocolError` naming what is wrong."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"a frame must be bytes, got {type(frame).__name__}")
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the limit of {MAX_FRAME}")
    try:
        plain = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types on garbage
        raise ProtocolError(f"frame is not valid MessagePack: {exc}") from None
    if not isinstance(plain, dict):
        raise ProtocolError(f"frame must be a map, got {type(plain).__name__}")
    if plain.get("v") != VERSION:
        raise ProtocolError(f"unsupported protocol version {plain.get('v')!r} (this side speaks {VERSION})")
    cls = _TYPES.get(plain.get("type")) if isinstance(plain.get("type"), str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {plain.get('type')!r}")
    values = {}
    for field in attrs.fields(cls):
        if field.name not in plain:
            if field.default is attrs.NOTHING:
                raise ProtocolError(f"{cls.TYPE}.{field.name}: missing")
            continue
        value = plain[field.name]
        values[field.name] = value
        expected = _SCHEMA[cls][field.name]
        if not isinstance(value, expected) or isinstance(value, bool):
            raise ProtocolError(f"{cls.TYPE}.{field.name}: expected {expected.__name__}, got {type(value).__name__}")
    return cls(**values)

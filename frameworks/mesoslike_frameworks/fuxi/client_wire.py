"""A job client's side of the Fuxi job protocol (:mod:`.protocol`), on
MessagePack alone.

``mesoslike fuxi submit --wait`` is timed from its start: before its
``SUBMIT`` goes out it imports what it speaks with, and the protocol's
declaration in :mod:`.protocol` — msgspec Structs, the compiled codec
and the wire package under them — was ~20-30 ms of its CPU (at load ~50;
docs/performance.rst, "Stop 14: the Fuxi round's start and end
(fuxi29i)"). This module speaks a job client's frames without them, as
:mod:`.worker_wire` does for a worker:

- ``SUBMIT``, ``STATUS`` and ``KILL`` are encoded as :data:`.protocol.CODEC`
  encodes them: ``{"v": 1, "type": TYPE}`` then every field in the order
  declared (a Struct's; the attrs classes of before wrote them in name order).
  A ``SUBMIT`` whose document holds anything but what JSON has (a TOML date,
  an integer of more than 64 bits), and any other message (a test asking as
  an AppMaster), is encoded by :data:`.protocol.CODEC` itself, imported
  then;
- ``SUBMITTED``, ``STATUS_REPLY``, ``OK`` and ``ERROR`` are decoded and
  checked as strictly as there (a map of at most :data:`MAX_FRAME` bytes,
  ``v`` 1, an integer ``id`` — not a boolean —, strings; a required field
  missing is an error naming it, an unknown one ignored); a frame of any
  other type goes to :data:`.protocol.CODEC` (which knows it, or says what
  is wrong). Anything that is not a message raises :class:`WireError`, the
  codec's ``error``.

``tests/test_fuxi_client_wire.py`` holds the two to each other.
"""

from __future__ import annotations

from typing import Any

from mesoslike import MesoslikeError
from mesoslike_frameworks.fuxi.worker_wire import _Message, pack, unpack

__all__ = ["VERSION", "MAX_FRAME", "MAX_ERROR", "MAX_STATUS_WAIT", "STANDBY_REFUSAL", "bounded", "WireError", "CODEC",
           "ClientCodec", "Submit", "Status", "KillJob", "Submitted", "StatusReply", "Ok", "Error"]

# The protocol's constants, as :mod:`.protocol` declares them (which this module does not import but to
# fall back on; tests/test_fuxi_client_wire.py holds them equal).
#: the protocol's version (:data:`.protocol.VERSION`)
VERSION = 1
#: the largest frame either side accepts
MAX_FRAME = 4 * 1024 * 1024
#: the longest ERROR message (and the most of a peer's input a log line quotes)
MAX_ERROR = 1000
#: the longest a STATUS waits for its job's end (:data:`.protocol.MAX_STATUS_WAIT`)
MAX_STATUS_WAIT = 60.0
#: the ERROR a standby's job server answers (``fuxi serve --zk``): it may lead soon, so a client that
#: follows the leader through ZooKeeper asks again rather than giving up
STANDBY_REFUSAL = "this Fuxi scheduler is a standby, not the leader: ask with --fuxi zk://... to reach it"
#: the most entries a list or map of a frame may have
_MAX_ENTRIES = 1_000_000


def bounded(text: str, limit: int = MAX_ERROR) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was): what
    answers or logs a peer's input never repeats it whole."""
    return text if len(text) <= limit else f"{text[:limit - 40]}... ({len(text)} characters)"


class WireError(MesoslikeError, ValueError):
    """A frame that is not an answer of the job protocol, or a message that
    cannot be encoded: the reason (a :class:`MesoslikeError`, as the full
    codec's: ``fuxi submit`` exits 1 saying it)."""


# ------------------------------------------------------------ client -> service
class Submit(_Message):
    __slots__ = _fields = ("id", "document")

    def __init__(self, id: int, document: dict[str, Any]) -> None:   # noqa: A002 - the protocol's name
        self.id, self.document = id, document


class Status(_Message):
    __slots__ = _fields = ("id", "job_id", "wait")
    _field_defaults = {"job_id": "", "wait": 0.0}

    def __init__(self, id: int, job_id: str = "", wait: float = 0.0) -> None:   # noqa: A002
        self.id, self.job_id, self.wait = id, job_id, float(wait)


class KillJob(_Message):
    __slots__ = _fields = ("id", "job_id")

    def __init__(self, id: int, job_id: str) -> None:   # noqa: A002
        self.id, self.job_id = id, job_id


# ------------------------------------------------------------ service -> client
class Submitted(_Message):
    __slots__ = _fields = ("id", "job_id")

    def __init__(self, id: int, job_id: str) -> None:   # noqa: A002
        self.id, self.job_id = id, job_id


class StatusReply(_Message):
    __slots__ = _fields = ("id", "document")

    def __init__(self, id: int, document: str) -> None:   # noqa: A002
        self.id, self.document = id, document


class Ok(_Message):
    __slots__ = _fields = ("id",)

    def __init__(self, id: int) -> None:   # noqa: A002
        self.id = id


class Error(_Message):
    __slots__ = _fields = ("id", "message")

    def __init__(self, id: int, message: str) -> None:   # noqa: A002
        self.id, self.message = id, message


#: what a job client sends, by TYPE
SENT: dict[str, type[_Message]] = {"SUBMIT": Submit, "STATUS": Status, "KILL": KillJob}
#: the answers it decodes itself, by TYPE
RECEIVED: dict[str, type[_Message]] = {"SUBMITTED": Submitted, "STATUS_REPLY": StatusReply, "OK": Ok, "ERROR": Error}
_TYPES: dict[type, str] = {cls: kind for kind, cls in SENT.items()}
_SENT_ORDER: dict[type, list[str]] = {cls: list(cls._fields) for cls in SENT.values()}
#: the fields' types in the answers (each name has one type across them)
_FIELD_TYPES: dict[str, type] = {"id": int, "job_id": str, "document": str, "message": str}
#: what a document of SUBMIT may hold to be encoded here (what JSON has); anything else goes to protocol.CODEC
_PLAIN = (str, int, float, bool, type(None))


def _plain(value: object) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _plain(item) for key, item in value.items())   # type: ignore[attr-defined]
    if kind is list:
        return all(_plain(item) for item in value)   # type: ignore[attr-defined]
    if kind is int:
        return -(1 << 63) <= value < (1 << 64)   # type: ignore[operator]
    return kind in _PLAIN


def _full_codec() -> Any:
    from mesoslike_frameworks.fuxi import protocol   # msgspec, the wire package: only when needed

    return protocol.CODEC


class ClientCodec:
    """The transport's codec (:class:`mesoslike.transport.MessageCodec`) for
    a job client's connection to a Fuxi service."""

    error = WireError
    max_message_size = MAX_FRAME

    def encode(self, message: object) -> bytes:
        """The frame of ``message``; WireError if it cannot be one."""
        order = _SENT_ORDER.get(type(message))
        if order is None or (isinstance(message, Submit) and not _plain(message.document)):
            return self._encode_fully(message)
        return pack(_TYPES[type(message)], message, order, MAX_FRAME, WireError)

    def _encode_fully(self, message: object) -> bytes:
        codec = _full_codec()
        if isinstance(message, _Message):   # one of ours with a document only the full codec encodes
            from mesoslike_frameworks.fuxi import protocol

            message = getattr(protocol, type(message).__name__)(*message)
        try:
            frame: bytes = codec.encode(message)
        except codec.error as exc:
            raise WireError(str(exc)) from None
        return frame

    def decode(self, frame: bytes) -> Any:
        """The answer in ``frame``, checked; WireError if it is not a message of the protocol."""
        plain = unpack(frame, MAX_FRAME, _MAX_ENTRIES, WireError)
        kind = plain.get("type") if type(plain) is dict else None
        cls = RECEIVED.get(kind) if type(kind) is str else None
        if cls is None or plain.get("v") != VERSION or type(plain.get("v")) is not int:
            codec = _full_codec()   # another message of the protocol (news to an AppMaster), or what is wrong
            try:
                return codec.decode(frame)
            except codec.error as exc:
                raise WireError(str(exc)) from None
        fields: dict[str, object] = {}
        for name in cls._fields:
            if name not in plain:
                raise WireError(f"{kind}.{name}: missing")
            value = plain[name]
            if type(value) is not _FIELD_TYPES[name]:
                raise WireError(f"{kind}.{name}: expected {_FIELD_TYPES[name].__name__}, got {type(value).__name__}")
            fields[name] = value
        return cls(**fields)


#: the codec of a job client's connection
CODEC = ClientCodec()

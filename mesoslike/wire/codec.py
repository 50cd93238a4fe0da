"""The codec machinery: message objects <-> bytes, pure and validating, for
any protocol declared as a :class:`~mesoslike.wire.schema.Schema` — the
master protocol (:mod:`mesoslike.wire.messages`, :data:`CODEC`), the
executor channel, the agent's checkpoints and the bundled Fuxi scheduler's
two protocols alike.

Encoding is MessagePack (``docs/wire.rst`` has the measurement against JSON
that chose it). Every frame is a map ``{"v": VERSION, "type": TYPE,
...fields}``. Decoding is total: it returns a message or raises
:class:`WireError` naming the offending field, whatever the bytes — it
checks the size, the version, the type and every field (types, nested
classes, lists, ``Resources`` strings, finite numbers, the schema's
constraints, the value types' own checks) — so a runtime can answer a bad
peer with an ERROR and carry on. Unknown fields are ignored (a newer peer
may send more); missing required fields are errors.

Two decoders do it: the compiled one (:mod:`mesoslike.wire.compiled`,
msgspec straight into the message classes) takes every valid frame this
codec writes; anything it does not take goes to the checking one
(:mod:`mesoslike.wire.checking`), which decides, and names the field.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

import msgpack

from mesoslike.wire import compiled
from mesoslike.wire.checking import (MAX_LIST_LENGTH, WireError, _class_converter, from_plain, hints,
                                     plain_converter, to_plain)
from mesoslike.wire.schema import Items, Schema, fields, is_message_class

__all__ = ["WireError", "Codec", "CODEC", "encode", "decode", "peek_type", "to_plain", "from_plain",
           "DEFAULT_MAX_MESSAGE_SIZE", "MAX_LIST_LENGTH", "FRAME_OVERHEAD", "frame_limit", "sized"]

DEFAULT_MAX_MESSAGE_SIZE = 8 * 1024 * 1024


class Codec:
    """Encodes and decodes the messages of ``schema``; frames (both ways)
    are at most ``max_message_size`` bytes. :attr:`error` is the type it
    raises (the transport, :mod:`mesoslike.transport`, hands it out for a bad
    frame instead of a message)."""

    error = WireError

    def __init__(self, schema: Schema, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if not isinstance(max_message_size, int) or max_message_size < 1:
            raise ValueError(f"a message size limit is an integer >= 1, got {max_message_size!r}")
        self.schema = schema
        self.max_message_size = max_message_size
        self._types = schema.types   # the schema's own dict: what it registers later is known too
        self._encoders: dict[type, Callable[[Any], bytes]] = {}
        #: TYPE as the frame's bytes -> the compiled decoder of its class
        self._decoders: dict[bytes, Callable[[bytes], Any]] = {}
        #: TYPE as the frame's bytes -> its class, for the decoders not made yet
        self._kinds: dict[bytes, type] = {}
        # what encode() writes after the map header, up to the type's string: "v", version, "type"
        self._head = compiled.frame_head(schema.version, "")[:-1]

    def __repr__(self) -> str:
        return f"Codec({self.schema!r}, max_message_size={self.max_message_size})"

    def encode(self, message: object) -> bytes:
        """The frame of ``message`` (a message of the schema); raises
        :class:`WireError` for anything else, for a value MessagePack cannot
        carry (e.g. a date in a document) and for a frame over the limit."""
        cls = type(message)
        encoder = self._encoders.get(cls)
        if encoder is None:
            encoder = self._encoder(cls)
        try:
            frame = encoder(message)
        except Exception as exc:  # noqa: BLE001 - msgspec's TypeError/OverflowError, a value that is not plain data
            raise WireError(f"cannot encode {getattr(cls, 'TYPE')}: {exc}") from None
        if len(frame) > self.max_message_size:
            raise WireError(f"{getattr(cls, 'TYPE')} of {len(frame)} bytes exceeds the limit of {self.max_message_size}")
        return frame

    def _encoder(self, cls: type) -> Callable[[Any], bytes]:
        if self._types.get(getattr(cls, "TYPE", "")) is not cls:   # ("": never a TYPE)
            raise WireError(f"{cls.__name__} is not a message of the {self.schema.name} protocol")
        encoder = self._encoders[cls] = compiled.encoder(cls, self.schema.version)
        return encoder

    def decode(self, frame: bytes, max_size: int | None = None) -> Any:
        """Parse and validate one frame (of at most ``max_size`` bytes, by
        default the codec's limit); raises :class:`WireError`."""
        if max_size is None and type(frame) is bytes and len(frame) <= self.max_message_size:
            # the common case, in this one frame: a frame laid out as encode() writes it, of a type whose
            # decoder is made (_compiled_decoder's lookup inlined: ~450 instructions less a frame)
            try:
                first = frame[0]
                decoder = self._decoders[frame[1:10 + (frame[9] & 0x1f)] if 0x80 <= first <= 0x8f
                                         else frame[3:12 + (frame[11] & 0x1f)] if first == 0xde else b""]
            except (IndexError, KeyError):
                pass   # a short frame, another layout, a type not learnt yet: below
            else:
                try:
                    return decoder(frame)
                except Exception:  # noqa: BLE001 - anything odd: the checking decoder decides and names the field
                    return self._decode_checked(frame, self.max_message_size)
        limit = self.max_message_size if max_size is None else max_size
        if type(frame) is not bytes:
            if not isinstance(frame, (bytearray, memoryview)):
                raise WireError(f"a frame must be bytes, got {type(frame).__name__}")
            frame = bytes(frame)
        if len(frame) > limit:
            raise WireError(f"frame of {len(frame)} bytes exceeds the limit of {limit}")
        learnt = self._compiled_decoder(frame)
        if learnt is not None:
            try:
                return learnt(frame)
            except Exception:  # noqa: BLE001 - anything odd: the checking decoder decides and names the field
                pass
        return self._decode_checked(frame, limit)

    def _compiled_decoder(self, frame: bytes) -> Callable[[bytes], Any] | None:
        """The compiled decoder of a frame laid out as encode() writes it — a
        map whose first keys are "v" with this codec's version and "type"
        with a message type's name — found by those bytes; None for any
        other frame. O(1)."""
        try:
            first = frame[0]
            if 0x80 <= first <= 0x8f:
                key = frame[1:10 + (frame[9] & 0x1f)]
            elif first == 0xde:
                key = frame[3:12 + (frame[11] & 0x1f)]
            else:
                return None
        except IndexError:
            return None
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = self._learn(key)
        return decoder

    def _learn(self, key: bytes) -> Callable[[bytes], Any] | None:
        """The compiled decoder of the type whose frames start with ``key``,
        made at its first frame (None: no type of the schema): a process
        compiles the types it receives only — a ``mesoslike run`` client a
        handful of the master protocol's 41, ~15 ms less of its start."""
        # the types registered so far (dict's own methods: the schema's lazy modules stay unimported
        # while every frame is of a type already made; mesoslike.wire.schema.Schema.lazy)
        if len(self._kinds) < dict.__len__(self._types):   # a type registered since
            self._kinds = {compiled.frame_head(self.schema.version, kind): cls
                           for kind, cls in list(dict.items(self._types))}
        cls = self._kinds.get(key)
        if cls is None:
            load = getattr(self._types, "load", None)
            if load is None or not load():   # no lazy module left to look in
                return None
            return self._learn(key)
        try:
            decoder = compiled.decoder(cls)
        except Exception:  # noqa: BLE001 - a hint msgspec cannot take (_check() names it)
            decoder = _not_compiled   # the checking decoder only
        self._decoders[key] = decoder
        return decoder

    def _decode_checked(self, frame: bytes, limit: int) -> Any:
        """The checking decoder: MessagePack's reader, then every field
        checked by its path."""
        try:
            plain = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_bin_len=limit,
                                    max_str_len=limit, max_array_len=MAX_LIST_LENGTH,
                                    max_map_len=MAX_LIST_LENGTH)
        except Exception as exc:  # msgpack raises a zoo of types on garbage
            raise WireError(f"frame is not valid MessagePack: {exc}") from None
        if not isinstance(plain, dict):
            raise WireError(f"frame must be a map, got {type(plain).__name__}")
        version = plain.get("v")
        if version != self.schema.version:
            raise WireError(f"unsupported protocol version {version!r} (this peer speaks {self.schema.version})")
        kind = plain.get("type")
        if not isinstance(kind, str) or (cls := self._types.get(kind)) is None:
            raise WireError(f"unknown message type {kind!r}")
        try:
            return from_plain(cls, plain, kind)
        except WireError:
            raise
        except Exception as exc:  # noqa: BLE001 - a case no check foresaw: still a bad frame, not a crash
            raise WireError(f"{kind}: {type(exc).__name__}: {exc}") from None

    def _decode_compiled(self, frame: bytes) -> Any:
        """The compiled decoder alone, for tests: raises on any frame it
        does not take."""
        decoder = self._compiled_decoder(frame)
        if decoder is None:
            raise ValueError("not a frame the compiled decoder takes")
        return decoder(frame)

    def peek_type(self, frame: bytes) -> str | None:
        """The ``type`` of a frame, read without decoding the rest (``encode``
        writes it second, after ``v``); None for anything that does not start
        like a frame. Lets a runtime order its work before paying for decoding.
        O(1) for frames of this codec."""
        # the layout encode() writes: a map header, "v", version, "type", a string
        at = (1 if 0x80 <= frame[0] <= 0x8f else 3 if frame[0] == 0xde else 0) if frame else 0
        if at and frame[at:at + 8] == self._head and len(frame) > at + 8 and 0xa0 <= frame[at + 8] <= 0xbf:
            end = at + 9 + (frame[at + 8] & 0x1f)
            try:
                return frame[at + 9:end].decode("utf-8") if len(frame) >= end else None
            except UnicodeDecodeError:
                return None
        try:
            unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
            unpacker.feed(frame)
            for _ in range(min(unpacker.read_map_header(), 2)):
                if unpacker.unpack() == "type":
                    found = unpacker.unpack()
                    return found if isinstance(found, str) else None
                unpacker.skip()
        except Exception:  # noqa: BLE001 - not a frame: the caller decodes it and gets the WireError
            return None
        return None

    def _check(self) -> None:
        """The schema's invariants, and that the codec can take every field
        of every message: the checking decoder knows its hint (building its
        converters raises TypeError for one it cannot), and so does the
        compiled one; no field is named as the envelope's keys, and each is
        set by its own name."""
        self.schema._check()
        for cls in self._types.values():
            _class_converter(cls)
            _check_fields(cls, set())
            compiled.decoder(cls)
            compiled.encoder(cls, self.schema.version)
            reserved = [f.name for f in fields(cls) if f.name in compiled.RESERVED_FIELDS]
            if reserved:
                raise TypeError(f"{cls.__name__}: a field named {reserved[0]!r} (the envelope's)")


def _not_compiled(frame: bytes) -> Any:
    raise ValueError("a message the compiled decoder cannot take")


def _check_fields(cls: type, seen: set[type]) -> None:
    """Every field of ``cls`` and the classes it holds is set by its own
    name in ``__init__`` (what msgspec and the checking decoder both rely
    on), and an ``Items`` list holds plain values only."""
    if cls in seen:
        return
    seen.add(cls)
    for field in fields(cls):
        if not field.by_name:
            raise TypeError(f"{cls.__name__}.{field.name}: not set by its own name in __init__")
        _check_hint(hints(cls)[field.name], seen)


def _check_hint(hint: object, seen: set[type]) -> None:
    for item in typing.get_args(hint):
        if isinstance(item, Items):
            for inner in item.hints:
                plain_converter(inner)   # raises TypeError for a message class in it
        else:
            _check_hint(item, seen)
    if isinstance(hint, type) and is_message_class(hint):
        _check_fields(hint, seen)


# ------------------------------------------------------ the master protocol
#: what a frame carrying a framework message or a status update holds
#: besides its data (ids, the status's fields and labels), at most
FRAME_OVERHEAD = 1024 * 1024


def frame_limit(max_data: int) -> int:
    """The largest frame of a peer whose framework messages and status data
    are at most ``max_data`` bytes (``--max-message-size``)."""
    return max(DEFAULT_MAX_MESSAGE_SIZE, max_data + FRAME_OVERHEAD)


def sized(codec: Codec, max_data: int) -> Codec:
    """``codec`` with frames for data of at most ``max_data`` bytes (itself if they fit already)."""
    limit = frame_limit(max_data)
    return codec if limit == codec.max_message_size else Codec(codec.schema, limit)


#: the master protocol's codec and its functions (:data:`CODEC`, ``encode``, ``decode``, ``peek_type``)
_MASTER_CODEC_NAMES = ("CODEC", "encode", "decode", "peek_type")

if typing.TYPE_CHECKING:
    #: the codec of the master protocol (:mod:`mesoslike.wire.messages`):
    #: masters, agents, scheduler drivers and ``mesoslike state``, with frames
    #: for the default ``--max-message-size``
    CODEC: Codec
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    peek_type: Callable[[bytes], str]


def __getattr__(name: str) -> Any:
    """:data:`CODEC` and its functions, made on first use: a process that
    speaks another protocol (a Fuxi worker, an AppMaster) does not import
    the master protocol's ~100 message and value classes (0.1 s of CPU at
    every start)."""
    if name not in _MASTER_CODEC_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mesoslike.wire import messages, types
    codec = Codec(messages.SCHEMA, frame_limit(types.MAX_FRAMEWORK_MESSAGE))
    names = dict(zip(_MASTER_CODEC_NAMES, (codec, codec.encode, codec.decode, codec.peek_type)))
    globals().update(names)
    return names[name]

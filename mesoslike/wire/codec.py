"""The codec machinery: message objects <-> bytes, pure and validating, for
any protocol declared as a :class:`~mesoslike.wire.schema.Schema` — the
master protocol (:mod:`mesoslike.wire.messages`, :data:`CODEC`) and the
bundled Fuxi scheduler's two protocols alike.

Encoding is MessagePack (``docs/wire.rst`` has the measurement against JSON
that chose it). Every frame is a map ``{"v": VERSION, "type": TYPE,
...fields}``. Decoding is total: it returns a message or raises
:class:`WireError` naming the offending field, whatever the bytes — it
checks the size, the version, the type and every field's type (nested
classes, lists, ``Resources`` strings, finite numbers, the schema's
constraints) — so a runtime can answer a bad peer with an ERROR and carry
on. Unknown fields are ignored (a newer peer may send more); missing
required fields are errors.
"""

from __future__ import annotations

import math
import types
import typing
from functools import lru_cache
from typing import Annotated, Any, Callable

import attrs
import msgpack

from mesoslike.errors import MesoslikeError, ResourcesError
from mesoslike.resources import Resources
from mesoslike.wire import messages as _messages
from mesoslike.wire.schema import Items, Range, Schema

__all__ = ["WireError", "Codec", "CODEC", "encode", "decode", "peek_type", "to_plain", "from_plain",
           "DEFAULT_MAX_MESSAGE_SIZE", "MAX_LIST_LENGTH"]

DEFAULT_MAX_MESSAGE_SIZE = 8 * 1024 * 1024
MAX_LIST_LENGTH = 200_000
#: a Packer is kept for reuse unless it encoded a frame of this size or more (its buffer stays grown)
_KEEP_PACKER_BELOW = 256 * 1024


class WireError(MesoslikeError, ValueError):
    """A frame that is too large, not MessagePack, of an unknown version or
    type, or with a field of the wrong type; or a message that cannot be
    encoded. The one error type of every codec."""


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
        self._encoders: dict[type, Callable[[Any], dict]] = {}
        self._packers: list[msgpack.Packer] = []   # idle packers: one per thread encoding at once
        # the layout encode() writes, up to the type's string: fixmap, "v", version, "type"
        self._header = b"\xa1v" + bytes([schema.version]) + b"\xa4type"

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
        # a kept Packer: msgpack.packb makes one, with a fresh buffer, per
        # call (8.4 µs for a status update against 2.4 µs, issue 14). A
        # Packer is not thread-safe: each encoder takes one from the idle
        # ones (list.pop and append are atomic) and gives it back
        try:
            packer = self._packers.pop()
        except IndexError:
            packer = msgpack.Packer(use_bin_type=True)
        try:
            frame: bytes = packer.pack(encoder(message))
        except Exception as exc:  # noqa: BLE001 - msgpack's TypeError/ValueError/OverflowError, a field of a wrong type
            self._packers.append(packer)   # (it resets itself after an error)
            raise WireError(f"cannot encode {getattr(cls, 'TYPE')}: {exc}") from None
        if len(frame) < _KEEP_PACKER_BELOW:   # one grown by a large frame is let go with its buffer
            self._packers.append(packer)
        if len(frame) > self.max_message_size:
            raise WireError(f"{getattr(cls, 'TYPE')} of {len(frame)} bytes exceeds the limit of {self.max_message_size}")
        return frame

    def _encoder(self, cls: type) -> Callable[[Any], dict]:
        if self._types.get(getattr(cls, "TYPE", "")) is not cls:   # ("": never a TYPE)
            raise WireError(f"{cls.__name__} is not a message of the {self.schema.name} protocol")
        encoder = self._encoders[cls] = _fast_encoder(cls, self.schema.version)
        return encoder

    def decode(self, frame: bytes, max_size: int | None = None) -> Any:
        """Parse and validate one frame (of at most ``max_size`` bytes, by
        default the codec's limit); raises :class:`WireError`."""
        limit = self.max_message_size if max_size is None else max_size
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise WireError(f"a frame must be bytes, got {type(frame).__name__}")
        if len(frame) > limit:
            raise WireError(f"frame of {len(frame)} bytes exceeds the limit of {limit}")
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
            return _fast_converter(cls)(plain)
        except Exception:  # noqa: BLE001 - anything odd: the checking path decides and names the field
            pass
        try:
            return from_plain(cls, plain, kind)
        except WireError:
            raise
        except Exception as exc:  # noqa: BLE001 - a case no check foresaw: still a bad frame, not a crash
            raise WireError(f"{kind}: {type(exc).__name__}: {exc}") from None

    def peek_type(self, frame: bytes) -> str | None:
        """The ``type`` of a frame, read without decoding the rest (``encode``
        writes it second, after ``v``); None for anything that does not start
        like a frame. Lets a runtime order its work before paying for decoding.
        O(1) for frames of this codec."""
        # the layout encode() writes for a map of up to 15 keys: fixmap, "v", version, "type", fixstr
        if frame[1:9] == self._header and 0x80 <= frame[0] <= 0x8f and len(frame) > 9 and \
                0xa0 <= frame[9] <= 0xbf:
            end = 10 + (frame[9] & 0x1f)
            try:
                return frame[10:end].decode("utf-8") if len(frame) >= end else None
            except UnicodeDecodeError:
                return None
        try:
            unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
            unpacker.feed(frame)
            for _ in range(min(unpacker.read_map_header(), 2)):
                if unpacker.unpack() == "type":
                    kind = unpacker.unpack()
                    return kind if isinstance(kind, str) else None
                unpacker.skip()
        except Exception:  # noqa: BLE001 - not a frame: the caller decodes it and gets the WireError
            return None
        return None

    def _check(self) -> None:
        """The schema's invariants, and that every field of every message
        has a hint this codec can check (building its converters raises
        TypeError for one it cannot)."""
        self.schema._check()
        for cls in self._types.values():
            _class_converter(cls)
            _fast_converter(cls)
            _fast_encoder(cls, self.schema.version)


# --------------------------------------------------------------- plain data
@lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in attrs.fields(cls))


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """The type hints of ``cls``'s fields, ``Annotated`` constraints kept."""
    return typing.get_type_hints(cls, include_extras=True)


def to_plain(value: object) -> object:
    """attrs objects -> dicts, Resources -> strings; the rest as is."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    if isinstance(value, Resources):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if attrs.has(cls):
        return {name: to_plain(getattr(value, name)) for name in _field_names(cls)}
    return value


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})

# Resources are immutable, and the same strings recur (every offer of an agent
# of the same size): parse each distinct string once.
_parse_resources = lru_cache(maxsize=4096)(Resources.parse)

Converter = Callable[[Any, str], Any]


def from_plain(cls: type, plain: object, path: str) -> object:
    """Build ``cls`` from plain data, checking every field's type."""
    return _class_converter(cls)(plain, path)


@lru_cache(maxsize=None)
def _class_converter(cls: type) -> Converter:
    hints = _hints(cls)
    fields = tuple((f.name, _converter(hints[f.name]), f.default is attrs.NOTHING) for f in attrs.fields(cls))

    def convert(plain: object, path: str) -> object:
        if not isinstance(plain, dict):
            raise WireError(f"{path}: expected a map, got {type(plain).__name__}")
        kwargs = {}
        for name, field_converter, required in fields:
            if name in plain:
                kwargs[name] = field_converter(plain[name], f"{path}.{name}")
            elif required:
                raise WireError(f"{path}.{name}: missing")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise WireError(f"{path}: {exc}") from None

    return convert


def _converter(hint: object) -> Converter:
    """A function checking (and converting) plain values of type ``hint``."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _annotated_converter(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        convert_inner = _converter(inner)
        return lambda value, path: None if value is None else convert_inner(value, path)
    if origin is list:
        (inner,) = typing.get_args(hint)
        return _list_converter(_converter(inner))
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        return _dict_converter(_converter(key_type), _converter(value_type))
    if hint is Resources:
        return _convert_resources
    if hint is Any:
        return _convert_plain
    if isinstance(hint, type) and attrs.has(hint):
        return lambda value, path: _class_converter(hint)(value, path)
    return _scalar_converter(hint)


def _constraints(hint: object) -> tuple[object, Items | None, tuple[Range, ...]]:
    """An Annotated hint's base type, its Items (if any) and its Ranges."""
    base, *metadata = typing.get_args(hint)
    unknown = [item for item in metadata if not isinstance(item, (Items, Range))]
    if unknown:
        raise TypeError(f"unsupported constraint {unknown[0]!r} in {hint!r}")
    items = [item for item in metadata if isinstance(item, Items)]
    if items and typing.get_origin(base) is not list and base is not list:
        raise TypeError(f"Items constrains a list, not {base!r}")
    return base, (items[0] if items else None), tuple(item for item in metadata if isinstance(item, Range))


def _annotated_converter(hint: object) -> Converter:
    base, items, ranges = _constraints(hint)
    convert_base = _items_converter(items) if items is not None else _converter(base)
    if not ranges:
        return convert_base

    def convert(value: object, path: str) -> object:
        value = convert_base(value, path)
        for bounds in ranges:
            problem = bounds.problem(value)
            if problem is not None:
                raise WireError(f"{path}: {problem}")
        return value
    return convert


def _items_converter(items: Items) -> Converter:
    converters = [_converter(hint) for hint in items.hints]

    def convert(value: object, path: str) -> list:
        if not isinstance(value, list) or len(value) != len(converters):
            raise WireError(f"{path}: expected a list of {len(converters)} items, got {_preview(value)}")
        return [convert_item(item, f"{path}[{i}]") for i, (convert_item, item) in enumerate(zip(converters, value))]
    return convert


def _list_converter(convert_item: Converter) -> Converter:
    def convert(value: object, path: str) -> list:
        if not isinstance(value, list):
            raise WireError(f"{path}: expected a list, got {type(value).__name__}")
        return [convert_item(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return convert


def _dict_converter(convert_key: Converter, convert_value: Converter) -> Converter:
    def convert(value: object, path: str) -> dict:
        if not isinstance(value, dict):
            raise WireError(f"{path}: expected a map, got {type(value).__name__}")
        return {convert_key(k, f"{path} key"): convert_value(v, f"{path}[{k!r}]") for k, v in value.items()}
    return convert


def _convert_resources(value: object, path: str) -> Resources:
    if not isinstance(value, str):
        raise WireError(f"{path}: resources must be a string, got {type(value).__name__}")
    try:
        return _parse_resources(value)
    except ResourcesError as exc:
        raise WireError(f"{path}: {exc}") from None


def _convert_plain(value: object, path: str) -> object:
    """``Any``: plain data only — what MessagePack makes of None, bool, int,
    float, str, bytes, lists and string-keyed maps (not its extension types).
    Walked without recursion: nesting as deep as MessagePack allows is no
    RecursionError. O(n) in the values."""
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if isinstance(item, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(item))
        elif isinstance(item, dict):
            for key, x in item.items():
                if type(key) is not str:
                    raise WireError(f"{where}: a map key must be a string, got {type(key).__name__}")
                stack.append((x, f"{where}[{key!r}]"))
        else:
            raise WireError(f"{where}: expected plain data, got {kind.__name__}")
    return value


# ----------------------------------------------------------- the fast path
# A master decodes every agent's re-registration after a failover (10k
# agents x 10 tasks); the checking converters above build a path string for
# every field of every task. The fast converters below are generated per
# class with the same checks inlined and no paths. They only ever accept
# what the checking converters accept, with the same result; on anything
# else they raise, and decode() runs the checking converter, which either
# accepts it after all (e.g. an int subclass) or names the bad field.

class _Rejected(Exception):
    """Raised by a fast converter; never escapes decode()."""


def _reject() -> typing.NoReturn:
    raise _Rejected


@lru_cache(maxsize=None)
def _fast_converter(cls: type) -> Callable[[object], object]:
    hints = _hints(cls)
    env: dict[str, object] = {"cls": cls, "reject": _reject, "MISSING": _MISSING}
    fields = attrs.fields(cls)
    # positional arguments (cheaper than a kwargs dict) when every field allows it
    positional = all(field.init and not field.kw_only for field in fields)
    lines = ["def convert(plain):",
             "    if type(plain) is not dict: reject()"]
    if not positional:
        lines.append("    kwargs = {}")
    for index, field in enumerate(fields):
        var = f"a{index}"
        lines.append(f"    {var} = plain.get({field.name!r}, MISSING)")
        if field.default is attrs.NOTHING:
            lines.append(f"    if {var} is MISSING: reject()")
            checks = _fast_check(hints[field.name], var, f"f{index}", env)
            lines += ["    " + line for line in checks]
            if not positional:
                lines.append(f"    kwargs[{field.name!r}] = {var}")
            continue
        lines.append(f"    if {var} is not MISSING:")
        lines += ["        " + line for line in _fast_check(hints[field.name], var, f"f{index}", env)]
        if not positional:
            lines.append(f"        kwargs[{field.name!r}] = {var}")
            continue
        default = field.default
        # (attrs' stubs declare Factory a function; it is a class)
        if isinstance(default, attrs.Factory) and not default.takes_self:  # type: ignore[arg-type]
            env[f"d{index}"] = default.factory
            lines.append(f"    else: {var} = d{index}()")
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # pragma: no cover - no such field in a schema
            raise TypeError(f"{cls.__name__}.{field.name}: a default that takes self")
        else:
            env[f"d{index}"] = default
            lines.append(f"    else: {var} = d{index}")
    if positional:
        lines.append(f"    return cls({', '.join(f'a{i}' for i in range(len(fields)))})")
    else:
        lines.append("    return cls(**kwargs)")
    exec("\n".join(lines), env)  # noqa: S102 - generated from our own schema, not from input
    return typing.cast(Callable[[object], object], env["convert"])


# The encoding side, generated the same way: a master sends tens of
# thousands of replies and offers per failover, and the generic to_plain()
# walks every value with isinstance checks. Same output, key order included
# ("v" and "type" first: peek_type() relies on it).
@lru_cache(maxsize=None)
def _fast_encoder(cls: type, version: int) -> Callable[[Any], dict]:
    env: dict[str, object] = {}
    body = _plain_fields(cls, "m", env)
    lines = ["def encode(m):", f"    return {{'v': {version!r}, 'type': {getattr(cls, 'TYPE')!r}, {body}}}"]
    exec("\n".join(lines), env)  # noqa: S102 - generated from our own schema, not from input
    return typing.cast(Callable[[Any], dict], env["encode"])


@lru_cache(maxsize=None)
def _fast_plain(cls: type) -> Callable[[object], dict]:
    env: dict[str, object] = {}
    lines = ["def plain(m):", f"    return {{{_plain_fields(cls, 'm', env)}}}"]
    exec("\n".join(lines), env)  # noqa: S102 - generated from our own schema
    return typing.cast(Callable[[object], dict], env["plain"])


def _plain_fields(cls: type, var: str, env: dict[str, object]) -> str:
    hints = _hints(cls)
    return ", ".join(f"{field.name!r}: {_plain_expr(hints[field.name], f'{var}.{field.name}', env)}"
                     for field in attrs.fields(cls))


def _plain_expr(hint: object, expr: str, env: dict[str, object]) -> str:
    """A Python expression turning the value ``expr`` of type ``hint`` into
    what to_plain() makes of it."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, items, _ = _constraints(hint)
        if items is None:
            return _plain_expr(base, expr, env)
        item_exprs = [_plain_expr(item, f"x[{i}]", env) for i, item in enumerate(items.hints)]
        if item_exprs == [f"x[{i}]" for i in range(len(item_exprs))]:
            return expr
        name = f"items{len(env)}"
        env[name] = eval(f"lambda x: [{', '.join(item_exprs)}]", env)  # noqa: S307 - our schema
        return f"{name}({expr})"
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        inner_expr = _plain_expr(inner, "x", env)
        if inner_expr == "x":
            return expr
        name = f"opt{len(env)}"
        env[name] = eval(f"lambda x: None if x is None else {inner_expr}", env)  # noqa: S307 - our schema
        return f"{name}({expr})"
    if origin is list:
        (inner,) = typing.get_args(hint)
        return f"[{_plain_expr(inner, 'x', env)} for x in {expr}]"
    if origin is dict:
        _, value_type = typing.get_args(hint)
        return f"{{k: {_plain_expr(value_type, 'x', env)} for k, x in {expr}.items()}}"
    if hint is Resources:
        return f"str({expr})"
    if isinstance(hint, type) and attrs.has(hint):
        name = f"plain{len(env)}"
        env[name] = _fast_plain(hint)
        return f"{name}({expr})"
    return expr  # str, int, float, bool, bytes, plain data (Any): as they are


_MISSING = object()


def _fast_check(hint: object, var: str, name: str, env: dict[str, object]) -> list[str]:
    """Source lines that check ``var`` against ``hint`` and leave the
    converted value in it (``reject()`` otherwise)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _fast_annotated_check(hint, var, name, env)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        return [f"if {var} is not None:"] + ["    " + line for line in _fast_check(inner, var, name, env)]
    if origin is list:
        (inner,) = typing.get_args(hint)
        env[name] = _fast_item_converter(inner)
        return [f"if type({var}) is not list: reject()", f"{var} = [{name}(x) for x in {var}]"]
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        env[name + "k"], env[name + "v"] = _fast_item_converter(key_type), _fast_item_converter(value_type)
        return [f"if type({var}) is not dict: reject()",
                f"{var} = {{{name}k(k): {name}v(x) for k, x in {var}.items()}}"]
    if hint is Resources:
        env["parse_resources"] = _parse_resources
        return [f"if type({var}) is not str: reject()", f"{var} = parse_resources({var})"]
    if hint is Any:
        env["convert_plain"] = _convert_plain   # raises WireError: decode() falls back, and it names the value
        return [f"convert_plain({var}, '')"]
    if isinstance(hint, type) and attrs.has(hint):
        env[name] = _fast_converter(hint)
        return [f"{var} = {name}({var})"]
    if hint is float:
        return [f"if type({var}) is int: {var} = float({var})",
                f"elif type({var}) is not float or {var} - {var} != 0.0: reject()"]  # x - x != 0: nan or inf
    if hint in (str, int, bool, bytes):
        return [f"if type({var}) is not {getattr(hint, '__name__')}: reject()"]
    raise TypeError(f"unsupported field type {hint!r}")  # pragma: no cover - a schema bug, not bad input


def _fast_annotated_check(hint: object, var: str, name: str, env: dict[str, object]) -> list[str]:
    base, items, ranges = _constraints(hint)
    if items is None:
        lines = _fast_check(base, var, name, env)
    else:
        converters = [f"{name}i{i}" for i in range(len(items.hints))]
        for converter, item in zip(converters, items.hints):
            env[converter] = _fast_item_converter(item)
        lines = [f"if type({var}) is not list or len({var}) != {len(converters)}: reject()",
                 f"{var} = [{', '.join(f'{c}({var}[{i}])' for i, c in enumerate(converters))}]"]
    for j, bounds in enumerate(ranges):
        env[f"{name}r{j}"] = bounds
        lines.append(f"if {name}r{j}.problem({var}) is not None: reject()")
    return lines


@lru_cache(maxsize=None)
def _fast_item_converter(hint: object) -> Callable[[object], object]:
    env: dict[str, object] = {"reject": _reject}
    lines = ["def convert(x):"] + ["    " + line for line in _fast_check(hint, "x", "c", env)] + ["    return x"]
    exec("\n".join(lines), env)  # noqa: S102 - generated from our own schema
    return typing.cast(Callable[[object], object], env["convert"])


def _scalar_converter(hint: object) -> Converter:
    if hint is float:
        def convert_float(value: object, path: str) -> float:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
            raise _type_error(hint, value, path)
        return convert_float
    accepts: Callable[[object], bool]
    if hint is int:
        accepts = lambda value: isinstance(value, int) and not isinstance(value, bool)  # noqa: E731
    elif hint in (str, bool, bytes):
        accepts = lambda value: type(value) is hint  # noqa: E731
    else:  # pragma: no cover - a schema bug, not bad input
        raise TypeError(f"unsupported field type {hint!r}")

    def convert(value: object, path: str) -> object:
        if accepts(value):
            return value
        raise _type_error(hint, value, path)
    return convert


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_error(hint: object, value: object, path: str) -> WireError:
    return WireError(f"{path}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__} {_preview(value)}")


# ------------------------------------------------------ the master protocol
#: the codec of the master protocol (:mod:`mesoslike.wire.messages`):
#: masters, agents, scheduler drivers and ``mesoslike state``
CODEC = Codec(_messages.SCHEMA)
encode = CODEC.encode
decode = CODEC.decode
peek_type = CODEC.peek_type

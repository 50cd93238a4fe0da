"""The compiled codec: message objects <-> MessagePack through msgspec, a
compiled (C) library, for every protocol declared as a
:class:`~mesoslike.wire.schema.Schema` — its message classes attrs classes
or ``msgspec.Struct`` types (the hot ones: ``TaskStatus``, the per-task
messages of :mod:`mesoslike.wire.messages`), taken alike.

**Decoding** (:func:`decoder`): a ``msgspec.msgpack.Decoder`` of the message
class decodes a frame straight into the objects (a Struct is built in C; an
attrs object is made by msgspec too, its validators called in Python). It checks every
field's type — ``str``, ``bytes``, ``int`` (never a bool), ``bool`` (never an
int), ``float`` (an int is made a float), lists, string maps, ``T | None``,
nested classes — fills defaults, refuses a missing required field, ignores
unknown ones (``v`` and ``type`` among them), runs the classes' attrs
validators and ``__attrs_post_init__`` (a Struct's ``__post_init__``: where
the value types check their values: labels, health checks, URIs,
containers, secrets) and hands
``Resources`` strings to :func:`_decode_hook` (parsed once per distinct
string). What msgspec does not know is checked after by a function
generated per class (:func:`_after`), only for the fields that need it:
floats finite (msgspec takes NaN and infinities), ``Range`` and ``Items``
constraints, ``Any`` values plain data, list and map lengths
(:data:`~mesoslike.wire.checking.MAX_LIST_LENGTH`), and the attrs converters
that do more than normalize (:func:`~mesoslike.wire.schema.normalizer`).

A decoder here raises *something* on a frame it does not take; the codec
(:mod:`mesoslike.wire.codec`) then runs the checking decoder
(:mod:`mesoslike.wire.checking`), which names the field. It only ever
accepts what the checking decoder accepts, with the same result (the tests
mutate every field of every message of every protocol to hold it to that).

**Encoding** (:func:`encoder`): msgspec writes the message's map (every
field by name; ``Resources`` as their string, :func:`_encode_hook`), and the
frame is that map with ``v`` and ``type`` put first. A value type declared
with ``omit_defaults`` (``TaskInfo``, ``TaskStatus``: most of their fields
are at their defaults in nearly every task) leaves its fields at their
defaults out; every decoder fills an absent field's default, so the
defaults are part of the protocol. A message class itself writes every
field (its frame's map header is fixed: :func:`encoder` refuses one that
omits). Values of ``Any`` fields are checked to be plain data first:
msgspec would write a date or a set that no decoder takes back.

Pure: no I/O.
"""

from __future__ import annotations

import sys
import types
import typing
from functools import lru_cache
from typing import Annotated, Any, Callable

import msgspec

from mesoslike.resources import Resources
from mesoslike.wire.checking import (KEPT_PARSES, MAX_LIST_LENGTH, _constraints, hints, kept_with_the_parses,
                                     note_parsed, parse_resources, plain_converter, reject)
from mesoslike.wire.schema import fields, is_attrs_class, is_message_class, is_normalizer

__all__ = ["decoder", "encoder", "frame_head", "RESERVED_FIELDS"]

#: the envelope's keys: no message class may have a field of these names
RESERVED_FIELDS = ("v", "type")
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_ENCODABLE_SCALARS = (str, int, float, bytes, bytearray, memoryview, type(None))   # (bool is an int)


def _parse_hook(kind: type, value: object) -> object:
    """msgspec's hook for the types it does not know: ``Resources`` (a string)."""
    if kind is Resources and type(value) is str:
        parsed = parse_resources(value)
        note_parsed(value)   # (its answer is about to be kept: long strings only up to a bound)
        return parsed
    raise TypeError(f"expected {kind.__name__}")


#: :func:`_parse_hook`, its answers kept: a frame's Resources strings are mostly the same few (a
#: re-registering agent's ten tasks'), and a kept answer is found without a Python call (~0.2 µs
#: each). A value it cannot hash (a list) raises TypeError, as the hook does; raising is never kept.
#: Bounded as :data:`~mesoslike.wire.checking.parse_resources` is, and emptied with it
_decode_hook: Callable[[type, object], object] = kept_with_the_parses(lru_cache(maxsize=KEPT_PARSES)(_parse_hook))


def _encode_hook(value: object) -> object:
    if isinstance(value, Resources):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a wire value")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_encode_hook)


class _Probe(msgspec.Struct, frozen=True, gc=False):
    checked: int = 0

    def __post_init__(self) -> None:
        if self.checked < 0:   # (what attrs.validators.ge(0) refused, in its words)
            raise ValueError(f"'checked' must be >= 0: {self.checked}")


def _refuse_an_old_msgspec(probe: type = _Probe, checks: str = "__post_init__") -> None:
    """The value types' checks are a Struct's ``__post_init__`` (and an attrs
    class's validators and ``__attrs_post_init__``: :func:`_refuse_an_old_msgspec_for_attrs`):
    a msgspec that did not run them would let what they refuse in. Refuse to
    run with one rather than decode unchecked: ``probe`` (a class whose one
    field ``checked`` refuses a negative number) must refuse -1."""
    try:
        msgspec.msgpack.decode(b"\x81\xa7checked\xff", type=probe)   # {"checked": -1}
    except msgspec.ValidationError:
        return
    raise ImportError(f"msgspec {msgspec.__version__} does not run {checks}: mesoslike needs msgspec >= 0.18.6")


_refuse_an_old_msgspec()


@lru_cache(maxsize=None)
def _refuse_an_old_msgspec_for_attrs() -> None:
    """As :func:`_refuse_an_old_msgspec`, for attrs validators (they came in
    msgspec's 0.18 series): checked when the codec first takes an attrs
    class apart, not at import — attrs, which the probe is made with, is
    imported only by a process that has attrs classes (~20 ms of a client's
    start, whose classes are all Structs). Raises ImportError (the codec
    then decodes that class with the checking decoder only)."""
    import attrs

    @attrs.frozen
    class _AttrsProbe:
        checked: int = attrs.field(validator=attrs.validators.ge(0))

    _refuse_an_old_msgspec(_AttrsProbe, "attrs validators")


# ---------------------------------------------------------------- decoding
@lru_cache(maxsize=None)
def decoder(cls: type) -> Callable[[bytes], Any]:
    """A function decoding a frame of message class ``cls`` (its ``v`` and
    ``type`` already read by the caller); raises on anything it does not
    take. Built once per class."""
    decode: Callable[[bytes], Any] = msgspec.msgpack.Decoder(cls, dec_hook=_decode_hook).decode
    env: dict[str, object] = _check_env()
    lines = _object_checks(cls, "o", env, (cls,))
    if not lines:
        return decode
    # the decoding and the checks in one generated function: a Python call less a frame (~500 instructions
    # of a STATUS_UPDATE's ~12,000, bench/wire_instructions.py) than a decoder calling _after's function
    env["decode"] = decode
    exec("\n".join(["def decode_and_check(frame):", "    o = decode(frame)"] + ["    " + line for line in lines]
                   + ["    return o"]), env)  # noqa: S102 - generated from our own schema, not from input
    return typing.cast(Callable[[bytes], Any], env["decode_and_check"])


def _check_env() -> dict[str, object]:
    """The names the generated checks use."""
    return {"reject": reject, "set": object.__setattr__, "MAX": MAX_LIST_LENGTH, "check_plain": _check_plain,
            "force_set": msgspec.structs.force_setattr}


@lru_cache(maxsize=None)
def _after(cls: type) -> Callable[[object], None] | None:
    """The checks msgspec does not make on an object of ``cls`` it built
    (nested objects included, their checks inlined), generated; None if
    there are none."""
    env = _check_env()
    lines = _object_checks(cls, "o", env, (cls,))
    if not lines:
        return None
    exec("\n".join(["def after(o):"] + ["    " + line for line in lines]), env)  # noqa: S102 - our own schema
    return typing.cast(Callable[[object], None], env["after"])


def _object_checks(cls: type, var: str, env: dict[str, object], outer: tuple[type, ...]) -> list[str]:
    """Source lines checking the fields of ``var``, an object of ``cls``
    (``outer``: the classes being expanded, whose checks a nested object of
    the same class calls instead of inlining them)."""
    lines: list[str] = []
    if is_attrs_class(cls):
        _refuse_an_old_msgspec_for_attrs()
    # a converter of attrs's Converter class (one that takes the instance) can only be an attrs class's,
    # made with attrs imported (its ``attr`` package, which ``attrs`` re-exports): without it in the process
    # there is none, and it is not imported to ask
    converter_class = getattr(sys.modules.get("attr"), "Converter", None)
    field_hints = hints(cls)
    for field in fields(cls):
        value = _name(env, "v", None)
        checks, rebinds = _checks(field_hints[field.name], value, env, outer)
        converter = field.converter
        if converter_class is not None and isinstance(converter, converter_class):
            raise TypeError(f"{cls.__name__}.{field.name}: a converter that takes the instance")
        converts = converter is not None and not is_normalizer(converter)
        if not checks and not converts:
            continue
        hint = field_hints[field.name]
        # most decoded lists and maps are empty (a task's environment, URIs, labels, secrets and
        # arguments): an empty one has nothing to check, and a converter that keeps an empty one as
        # it is need not run on it — all of it is skipped (13 tests of each task's five, before)
        # (so is an empty string a converter keeps: a framework's web page, most have none)
        skip_empty = (typing.get_origin(hint) in (list, dict) or hint is str) and (
            not converts or converter is not None and _keeps_empty(converter, hint))
        body = list(checks)
        if converts:
            body.append(f"{value} = {_name(env, 'convert', converter)}({value})")
        if rebinds or converts:
            setter = "force_set" if issubclass(cls, msgspec.Struct) else "set"   # (a frozen Struct's converters)
            body.append(f"if {value} is not {var}.{field.name}: {setter}({var}, {field.name!r}, {value})")
        lines.append(f"{value} = {var}.{field.name}")
        lines += [f"if {value}:"] + ["    " + line for line in body] if skip_empty else body
    return lines


def _keeps_empty(converter: Callable[[Any], Any], hint: object) -> bool:
    """Whether ``converter`` (of a list or map field) takes an empty list
    (map) without a word and gives an empty one back: a converter is a pure
    function, so asking it once, here, answers for every frame."""
    origin = typing.get_origin(hint) or hint
    if origin is Annotated:
        origin = typing.get_origin(typing.get_args(hint)[0])
    if origin not in (list, dict, str):
        return False
    empty: object = origin()
    try:
        converted = converter(origin())
    except Exception:  # noqa: BLE001 - it refuses an empty one: it always runs
        return False
    return type(converted) is type(empty) and converted == empty


def _checks(hint: object, var: str, env: dict[str, object], outer: tuple[type, ...]) -> tuple[list[str], bool]:
    """Source lines checking ``var`` (of type ``hint``, as msgspec built it)
    for what msgspec does not check, and whether they may rebind ``var`` to
    a converted value."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, items, ranges = _constraints(hint)
        if items is not None:   # a fixed list of plain values: checked (and converted) whole
            name = _name(env, "items", plain_converter(hint))
            return [f"{var} = {name}({var})"], True
        lines, rebinds = _checks(base, var, env, outer)
        for bounds in ranges:
            lines.append(f"if {_name(env, 'range', bounds)}.problem({var}) is not None: reject()")
        return lines, rebinds
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        lines, rebinds = _checks(inner, var, env, outer)
        return ([f"if {var} is not None:"] + ["    " + line for line in lines] if lines else []), rebinds
    if origin in (list, dict):
        args = typing.get_args(hint)
        if origin is dict and _checks(args[0], "k", env, outer)[0]:
            raise TypeError(f"unsupported map key type {args[0]!r}")
        lines = [f"if len({var}) > MAX: reject()"]
        item = _name(env, "x", None)
        item_lines, item_rebinds = _checks(args[-1], item, env, outer)
        if not item_lines:
            return lines, False
        if not item_rebinds:
            values = var if origin is list else f"{var}.values()"
            return lines + [f"for {item} in {values}:"] + ["    " + line for line in item_lines], False
        convert = _name(env, "convert", _item_function(item_lines, item, env))
        if origin is list:
            lines.append(f"{var} = [{convert}({item}) for {item} in {var}]")
        else:
            lines.append(f"{var} = {{k: {convert}({item}) for k, {item} in {var}.items()}}")
        return lines, True
    if hint is float:
        return [f"if {var} - {var} != 0.0: reject()"], False   # x - x != 0: NaN or an infinity
    if hint is Any:
        return [f"check_plain({var})"], False
    if isinstance(hint, type) and is_message_class(hint):
        if hint in outer:   # a class inside itself: its own function, looked up when called (it is being made)
            return [f"{_name(env, 'after', lambda value, cls=hint: (_after(cls) or _no_checks)(value))}({var})"], False
        return _object_checks(hint, var, env, outer + (hint,)), False
    if hint in (str, int, bool, bytes, Resources):
        return [], False
    raise TypeError(f"unsupported field type {hint!r}")


def _no_checks(value: object) -> None:
    return None


def _name(env: dict[str, object], prefix: str, value: object) -> str:
    """A fresh name in ``env`` (bound to ``value``)."""
    name = f"{prefix}{len(env)}"
    env[name] = value
    return name


def _item_function(lines: list[str], var: str, env: dict[str, object]) -> Callable[[object], object]:
    source = [f"def item({var}):"] + ["    " + line for line in lines] + [f"    return {var}"]
    scope = dict(env)
    exec("\n".join(source), scope)  # noqa: S102 - generated from our own schema, not from input
    return typing.cast(Callable[[object], object], scope["item"])


def _check_plain(value: object) -> None:
    """``Any``: plain data only (as :func:`mesoslike.wire.checking._convert_plain`,
    without paths; lists and maps of at most MAX_LIST_LENGTH, as MessagePack's
    reader bounds them on the checking path). msgspec gives an extension
    type back as ``msgspec.msgpack.Ext`` and a timestamp as a datetime:
    neither is plain. Walked without recursion. O(n) in the values."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if isinstance(item, list):   # (exactly a list or a dict: msgspec makes no subclasses)
            if len(item) > MAX_LIST_LENGTH:
                reject()
            stack += item
        elif isinstance(item, dict):
            if len(item) > MAX_LIST_LENGTH:
                reject()
            for key, entry in item.items():
                if type(key) is not str:
                    reject()
                stack.append(entry)
        else:
            reject()


# ---------------------------------------------------------------- encoding
def _map_header(count: int) -> bytes:
    return bytes([0x80 | count]) if count < 16 else b"\xde" + count.to_bytes(2, "big")


def frame_head(version: int, kind: str) -> bytes:
    """What every frame of ``kind`` holds after its map header: ``"v"``,
    the version, ``"type"`` and ``kind`` (MessagePack)."""
    return b"\xa1v" + msgspec.msgpack.encode(version) + b"\xa4type" + msgspec.msgpack.encode(kind)


@lru_cache(maxsize=None)
def encoder(cls: type, version: int) -> Callable[[Any], bytes]:
    """A function encoding a message of class ``cls`` as a frame of protocol
    ``version``: ``{"v": version, "type": TYPE, ...fields}``, ``v`` and
    ``type`` first (:meth:`mesoslike.wire.codec.Codec.peek_type` reads them
    without decoding). Raises on a value it cannot carry."""
    if issubclass(cls, msgspec.Struct) and cls.__struct_config__.omit_defaults:
        raise TypeError(f"{cls.__name__}: a message class writes every field (its frame's map header is fixed)")
    count = len(fields(cls))
    body_header = _map_header(count)
    skip = len(body_header)
    head = _map_header(count + 2) + frame_head(version, getattr(cls, "TYPE"))
    check = _encode_check(cls)
    encode = _ENCODER.encode

    def encode_message(message: Any) -> bytes:
        if check is not None:
            check(message)
        body = encode(message)
        if body[:skip] != body_header:   # (a message class writes every field: never so)
            raise ValueError(f"expected a map of {count} fields")
        return head + body[skip:]
    return encode_message


@lru_cache(maxsize=None)
def _encode_check(cls: type) -> Callable[[object], None] | None:
    """A check that the values of ``cls``'s ``Any`` fields (nested objects'
    included) are plain data; None if it has none."""
    if not _holds_any(cls):
        return None
    env: dict[str, object] = {"encodable": _check_encodable}
    lines = ["def check(o):"]
    field_hints = hints(cls)
    for index, field in enumerate(fields(cls)):
        checks = _encode_checks(field_hints[field.name], f"v{index}", env)
        if checks:
            lines.append(f"    v{index} = o.{field.name}")
            lines += ["    " + line for line in checks]
    if len(lines) == 1:
        return None
    exec("\n".join(lines), env)  # noqa: S102 - generated from our own schema, not from input
    return typing.cast(Callable[[object], None], env["check"])


def _encode_checks(hint: object, var: str, env: dict[str, object]) -> list[str]:
    origin = typing.get_origin(hint)
    if origin is Annotated or hint is Any:   # (Items lists hold plain values: all of it is checked)
        return [f"encodable({var})"] if _holds_any(hint) else []
    if not _holds_any(hint):
        return []
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        lines = _encode_checks(inner, var, env)
        return [f"if {var} is not None:"] + ["    " + line for line in lines] if lines else []
    if origin in (list, dict):
        item = _name(env, "x", None)
        lines = _encode_checks(typing.get_args(hint)[-1], item, env)
        values = var if origin is list else f"{var}.values()"
        return [f"for {item} in {values}:"] + ["    " + line for line in lines] if lines else []
    if isinstance(hint, type) and is_message_class(hint) and _holds_any(hint):
        # looked up when called: the class may hold itself, and its check be in the making
        return [f"{_name(env, 'check', lambda value, cls=hint: (_encode_check(cls) or _no_checks)(value))}({var})"]
    return []


def _holds_any(hint: object, seen: frozenset[type] = frozenset()) -> bool:
    """Whether values of ``hint`` may hold an ``Any`` value (nested classes' fields included)."""
    if hint is Any:
        return True
    if isinstance(hint, type) and is_message_class(hint):
        # its fields' hints only: a class's other annotations (a ClassVar such as ``__wire_converters__``,
        # whose converters take Any) are not values it carries — counted, they had every TaskInfo, FrameworkInfo
        # and AgentInfo checked item by item at each encoding of a message holding one (a call an item)
        field_hints = hints(hint)
        return hint not in seen and any(_holds_any(field_hints[f.name], seen | {hint}) for f in fields(hint))
    args: tuple[object, ...] = typing.get_args(hint)
    if typing.get_origin(hint) is Annotated:
        base, items, _ = _constraints(hint)
        args = items.hints if items is not None else (base,)   # (an Items list holds its items' types)
    return any(_holds_any(arg, seen) for arg in args)


def _check_encodable(value: object) -> None:
    """Plain data, as a decoder takes it back: None, bool, int, float, str,
    bytes, lists (tuples too) and string-keyed maps of plain data."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _ENCODABLE_SCALARS):
            continue
        if isinstance(item, (list, tuple)):
            stack += item
        elif isinstance(item, dict):
            for key, entry in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"a map key must be a string, got {type(key).__name__}")
                stack.append(entry)
        else:
            raise TypeError(f"{type(item).__name__} is not plain data")

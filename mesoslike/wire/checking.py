"""The checking decoder: plain data (what MessagePack gives back) -> message
objects, every field checked against its hint, and a bad one named by its
path (``ACCEPT.tasks[0].agent_id: missing``); and back (:func:`to_plain`).

It is the reference of what a codec accepts: the compiled decoder
(:mod:`mesoslike.wire.compiled`) decodes valid frames without it, and only
ever accepts what it accepts, with the same result; on anything else the
codec (:mod:`mesoslike.wire.codec`) runs this one, which names the field.
The tests mutate every field of every message of every protocol to hold the
two to it. Pure: no I/O.
"""

from __future__ import annotations

import math
import types
import typing
from functools import lru_cache
from typing import Annotated, Any, Callable

from mesoslike.errors import MesoslikeError, ResourcesError
from mesoslike.resources import Resources
from mesoslike.wire.schema import Items, Range, fields, is_message_class

__all__ = ["WireError", "from_plain", "to_plain", "MAX_LIST_LENGTH", "plain_converter", "hints"]

#: the most items of a list, and entries of a map, in a frame
MAX_LIST_LENGTH = 200_000


class WireError(MesoslikeError, ValueError):
    """A frame that is too large, not MessagePack, of an unknown version or
    type, or with a field of the wrong type; or a message that cannot be
    encoded. The one error type of every codec."""


@lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in fields(cls))


@lru_cache(maxsize=None)
def hints(cls: type) -> dict[str, Any]:
    """The type hints of ``cls``'s fields, ``Annotated`` constraints kept."""
    return typing.get_type_hints(cls, include_extras=True)


def to_plain(value: object) -> object:
    """message objects (attrs, Structs) -> dicts, Resources -> strings; the rest as is."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    if isinstance(value, Resources):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if is_message_class(cls):
        return {name: to_plain(getattr(value, name)) for name in _field_names(typing.cast(Any, cls))}
    return value


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})

#: the most distinct resources strings whose parses a cache (:data:`parse_resources`, the compiled
#: codec's decode hook) keeps
KEPT_PARSES = 4096
#: a resources string longer than this is a long one: the caches keep their parses of long strings
#: only up to :data:`KEPT_LONG_TEXT` characters in all
KEPT_TEXT = 256
#: characters of long resources strings the caches may hold before they are emptied. Without it a
#: peer sending distinct long strings (a valid one may be padded with spaces or list 100,000
#: port ranges, up to the frame limit) would have 4,096 of them, and their parses, kept: gigabytes
#: (a string of 100,000 ranges and its parse hold ~13 MB). With it, ~1 M characters (~10 MB)
KEPT_LONG_TEXT = 1 << 20
_caches: list[Any] = []
_long_text = 0


def note_parsed(text: str) -> None:
    """A cache is about to keep the parse of ``text``: past
    :data:`KEPT_LONG_TEXT` characters of long strings, the caches are
    emptied (a long string is rare: an agent's total with its port ranges
    is a few dozen characters). Call it on a cache's miss, once ``text``
    parsed."""
    global _long_text
    if len(text) > KEPT_TEXT:
        _long_text += len(text)
        if _long_text > KEPT_LONG_TEXT:
            _long_text = len(text)   # (this one is kept after the emptying)
            for cache in _caches:
                cache.cache_clear()


def kept_with_the_parses(cache: Any) -> Any:
    """Have ``cache`` (an ``lru_cache`` whose answers are parses of resources
    strings, calling :func:`note_parsed` on its misses) emptied with them."""
    _caches.append(cache)
    return cache


def _parse_kept(text: str) -> Resources:
    parsed = Resources.parse(text)   # (one it refuses is not kept: not counted)
    note_parsed(text)
    return parsed


# Resources are immutable, and the same strings recur (every offer of an agent
# of the same size): parse each distinct string once (its answer kept: at most
# KEPT_PARSES, and long strings up to KEPT_LONG_TEXT characters in all).
parse_resources = kept_with_the_parses(lru_cache(maxsize=KEPT_PARSES)(_parse_kept))

Converter = Callable[[Any, str], Any]


def from_plain(cls: type, plain: object, path: str) -> object:
    """Build ``cls`` from plain data, checking every field's type."""
    return _class_converter(cls)(plain, path)


@lru_cache(maxsize=None)
def _class_converter(cls: type) -> Converter:
    field_hints = hints(cls)
    converters = tuple((f.name, _converter(field_hints[f.name]), f.required) for f in fields(cls))

    def convert(plain: object, path: str) -> object:
        if not isinstance(plain, dict):
            raise WireError(f"{path}: expected a map, got {type(plain).__name__}")
        kwargs = {}
        for name, field_converter, required in converters:
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
    if is_message_class(hint):
        return lambda value, path: _class_converter(typing.cast(type, hint))(value, path)
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
        return parse_resources(value)
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


# ------------------------------------------------- plain values, fast
# The compiled decoder (mesoslike.wire.compiled) gets plain data back where
# a hint is ``Any`` — e.g. the items of an ``Items`` list — and checks it
# with these: generated per hint, the checks above inlined and no paths.
# They accept exactly what the checking converters accept, with the same
# result; on anything else they raise (and the codec runs the checking
# converter, which names the value).

class Rejected(Exception):
    """Raised by a generated check; never escapes a codec's decode()."""


def reject() -> typing.NoReturn:
    raise Rejected


def _plain_check(hint: object, var: str, name: str, env: dict[str, object]) -> list[str]:
    """Source lines that check the plain value ``var`` against ``hint`` and
    leave the converted value in it (``reject()`` otherwise)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _plain_annotated_check(hint, var, name, env)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        return [f"if {var} is not None:"] + ["    " + line for line in _plain_check(inner, var, name, env)]
    if origin is list:
        (inner,) = typing.get_args(hint)
        env[name] = plain_converter(inner)
        return [f"if type({var}) is not list: reject()", f"{var} = [{name}(x) for x in {var}]"]
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        env[name + "k"], env[name + "v"] = plain_converter(key_type), plain_converter(value_type)
        return [f"if type({var}) is not dict: reject()",
                f"{var} = {{{name}k(k): {name}v(x) for k, x in {var}.items()}}"]
    if hint is Resources:
        env["parse_resources"] = parse_resources
        return [f"if type({var}) is not str: reject()", f"{var} = parse_resources({var})"]
    if hint is Any:
        env["convert_plain"] = _convert_plain   # raises WireError: the codec falls back, and it names the value
        return [f"convert_plain({var}, '')"]
    if hint is float:
        return [f"if type({var}) is int: {var} = float({var})",
                f"elif type({var}) is not float or {var} - {var} != 0.0: reject()"]  # x - x != 0: nan or inf
    if hint in (str, int, bool, bytes):
        return [f"if type({var}) is not {getattr(hint, '__name__')}: reject()"]
    # (a message class inside an Items list: the compiled decoder does not
    # take it apart; the codec's _check() names it, and such frames decode
    # on the checking path)
    raise TypeError(f"unsupported type in a plain value: {hint!r}")


def _plain_annotated_check(hint: object, var: str, name: str, env: dict[str, object]) -> list[str]:
    base, items, ranges = _constraints(hint)
    if items is None:
        lines = _plain_check(base, var, name, env)
    else:
        converters = [f"{name}i{i}" for i in range(len(items.hints))]
        for converter, item in zip(converters, items.hints):
            env[converter] = plain_converter(item)
        lines = [f"if type({var}) is not list or len({var}) != {len(converters)}: reject()",
                 f"{var} = [{', '.join(f'{c}({var}[{i}])' for i, c in enumerate(converters))}]"]
    for j, bounds in enumerate(ranges):
        env[f"{name}r{j}"] = bounds
        lines.append(f"if {name}r{j}.problem({var}) is not None: reject()")
    return lines


@lru_cache(maxsize=None)
def plain_converter(hint: object) -> Callable[[object], object]:
    """A function checking (and converting) a plain value of type ``hint``
    (no message classes in it), without paths: raises on a bad one."""
    env: dict[str, object] = {"reject": reject}
    lines = ["def convert(x):"] + ["    " + line for line in _plain_check(hint, "x", "c", env)] + ["    return x"]
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


"""Typed agent attributes, as in Mesos: text, scalar, ranges and set.

An agent is started with ``--attributes "rack:r1;zone:a;ssd:true;level:3;
ports:[1000-2000];tags:{a,b}"``. Each value's type follows Mesos's attribute
grammar (``mesos::internal::values::parse``):

- ``[a-b,c-d]``: RANGES of integers (each ``a <= b``);
- ``{a,b}``: a SET of words;
- a number (``3``, ``-2.5``, ``1e3``): a SCALAR;
- anything else: TEXT (which then holds no ``[]{}``: a value that looks like
  ranges or a set but is not one is an error, not text).

On the wire (agent registration, offers, the registry) an attribute travels
as its canonical text — the Mesos formatting (``[1000-2000]``, ``{a,b}``,
``3``) — in a ``dict[str, str]``: the grammar makes the type of a value
unambiguous, so the text *is* the typed value, and everything that keyed on
attribute text keeps working. Every peer checks the text against the
grammar and the bounds below when it decodes an agent's registration or an
offer (:func:`check_attributes`, a validator of ``AgentInfo.attributes`` and
``Offer.attributes``). :func:`typed_attributes` gives the typed view
(:class:`Attribute`), and ``Offer.typed_attributes`` a scheduler's.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Union

import msgspec

from mesoslike.errors import MesoslikeError

__all__ = ["Attribute", "AttributesError", "TEXT", "SCALAR", "RANGES", "SET", "parse_attributes",
           "parse_attribute_value", "typed_attributes", "check_attributes", "attributes_problem",
           "MAX_ATTRIBUTES", "MAX_ATTRIBUTE_NAME", "MAX_ATTRIBUTE_TEXT", "MAX_ATTRIBUTE_ITEMS", "json_value",
           "attributes_json", "format_value"]

TEXT, SCALAR, RANGES, SET = "TEXT", "SCALAR", "RANGES", "SET"

#: attributes one agent may have
MAX_ATTRIBUTES = 128
#: characters of a name
MAX_ATTRIBUTE_NAME = 128
#: characters of a value's text (its canonical form)
MAX_ATTRIBUTE_TEXT = 1024
#: ranges of a RANGES value, items of a SET value
MAX_ATTRIBUTE_ITEMS = 64

_NAME = re.compile(r"[A-Za-z0-9_.\-/@]+")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")
_WORD = re.compile(r"[^\[\]{},;:\s]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: a typed value: text, a number, ranges ((begin, end), ...) or set items (a, b, ...)
Value = Union[str, float, tuple]


class AttributesError(MesoslikeError, ValueError):
    """An attribute (or a set of them) that breaks the grammar or the bounds."""


class Attribute(msgspec.Struct, frozen=True, gc=False):
    """One typed attribute of an agent. ``value`` is a ``str`` (TEXT), a
    ``float`` (SCALAR), a tuple of ``(begin, end)`` integer pairs (RANGES) or
    a tuple of words (SET, in the order given, without repeats). ``str()``
    is its canonical Mesos text.

    A frozen ``msgspec.Struct`` (an attrs class before, of the same fields,
    equality, hash and repr: importing attrs cost every client ~20 ms of its
    start; out of the collector's passes: it holds no cycles)."""

    name: str
    type: str
    value: Value

    def __str__(self) -> str:
        return format_value(self.type, self.value)


def _format_scalar(value: float) -> str:
    # as Mesos prints a Value::Scalar: three decimals at most, no trailing zeros
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_value(kind: str, value: Value) -> str:
    """The canonical Mesos text of a typed value."""
    if kind == SCALAR:
        assert isinstance(value, float)
        return _format_scalar(value)
    if kind == RANGES:
        assert isinstance(value, tuple)
        return "[" + ",".join(f"{pair[0]}-{pair[1]}" for pair in value) + "]"
    if kind == SET:
        return "{" + ",".join(value) + "}"  # type: ignore[arg-type]
    return str(value)


@lru_cache(maxsize=4096)
def parse_attribute_value(text: str) -> tuple[str, Value]:
    """``(type, value)`` of an attribute value's text, by Mesos's grammar;
    raises :class:`AttributesError` naming what is wrong. Cached: agents of
    one kind repeat the same values."""
    if not isinstance(text, str):
        raise AttributesError(f"an attribute value is text, got {type(text).__name__}")
    if len(text) > MAX_ATTRIBUTE_TEXT:
        raise AttributesError(f"a value of {len(text)} characters is longer than {MAX_ATTRIBUTE_TEXT}")
    if _CONTROL.search(text):
        raise AttributesError(f"{text!r} holds a control character")
    value = text.strip()
    if value.startswith("["):
        return RANGES, _parse_ranges(value)
    if value.startswith("{"):
        return SET, _parse_set(value)
    if any(c in value for c in "[]{}"):
        raise AttributesError(f"{value!r}: a bracket or brace outside a ranges '[a-b,...]' or set '{{a,...}}' value")
    if _NUMBER.fullmatch(value):
        number = float(value)
        if not math.isfinite(number):
            raise AttributesError(f"{value!r}: a scalar must be finite")
        return SCALAR, number
    return TEXT, value


def _parse_ranges(value: str) -> tuple[tuple[int, int], ...]:
    if not value.endswith("]"):
        raise AttributesError(f"{value!r}: ranges must look like [BEGIN-END,...] (no closing ']')")
    ranges = []
    body = value[1:-1].strip()
    for part in body.split(",") if body else []:
        begin, dash, end = part.strip().partition("-")
        if not dash or not _INTEGER.fullmatch(begin.strip()) or not _INTEGER.fullmatch(end.strip()):
            raise AttributesError(f"{value!r}: {part.strip()!r} is not a range BEGIN-END of integers")
        low, high = int(begin), int(end)
        if low > high:
            raise AttributesError(f"{value!r}: range {low}-{high} ends before it begins")
        ranges.append((low, high))
    if len(ranges) > MAX_ATTRIBUTE_ITEMS:
        raise AttributesError(f"{value!r}: {len(ranges)} ranges are more than {MAX_ATTRIBUTE_ITEMS}")
    return tuple(ranges)


def _parse_set(value: str) -> tuple[str, ...]:
    if not value.endswith("}"):
        raise AttributesError(f"{value!r}: a set must look like {{ITEM,...}} (no closing '}}')")
    items: list[str] = []
    body = value[1:-1].strip()
    for part in body.split(",") if body else []:
        item = part.strip()
        if not _WORD.fullmatch(item):
            raise AttributesError(f"{value!r}: {item!r} is not a set item (a word without []{{}},;: or spaces)")
        if item not in items:
            items.append(item)
    if len(items) > MAX_ATTRIBUTE_ITEMS:
        raise AttributesError(f"{value!r}: {len(items)} items are more than {MAX_ATTRIBUTE_ITEMS}")
    return tuple(items)


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"an attribute name is text, got {type(name).__name__}"
    if len(name) > MAX_ATTRIBUTE_NAME:
        return f"attribute name of {len(name)} characters is longer than {MAX_ATTRIBUTE_NAME}"
    if not _NAME.fullmatch(name):
        return f"attribute name {name!r} is not made of letters, digits and _.-/@"
    return None


def attributes_problem(attributes: Mapping[str, str]) -> str | None:
    """Why ``attributes`` (name -> value text) break the grammar or the
    bounds, or None. O(attributes), each distinct value parsed once."""
    if type(attributes) is not dict and not isinstance(attributes, Mapping):   # (a decoded map: a dict)
        return f"attributes are a map, got {type(attributes).__name__}"
    if len(attributes) > MAX_ATTRIBUTES:
        return f"{len(attributes)} attributes are more than {MAX_ATTRIBUTES}"
    for name, text in attributes.items():
        problem = _name_problem(name)
        if problem is not None:
            return problem
        try:
            parse_attribute_value(text)
        except AttributesError as exc:
            return f"attribute {name}: {exc}"
    return None


def check_attributes(instance: object, field: object, attributes: Mapping[str, str]) -> None:
    """A validator (of attrs's signature, ``instance`` and ``field`` unused;
    the value types call it when one is made or decoded): raises
    :class:`AttributesError` (a ValueError, so the codec names the field)
    for attributes :func:`attributes_problem` refuses."""
    problem = attributes_problem(attributes)
    if problem is not None:
        raise AttributesError(problem)


def parse_attributes(text: str) -> dict[str, str]:
    """``"rack:r1;level:3;ports:[1000-2000, 3000-3100];tags:{a,b}"`` -> the
    canonical map ``{"rack": "r1", "level": "3", "ports":
    "[1000-2000,3000-3100]", "tags": "{a,b}"}``. Raises
    :class:`AttributesError` naming the item for a bad one (no ``:``, a bad
    name, a value against the grammar, a name given twice, too many)."""
    attributes: dict[str, str] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition(":")
        name = name.strip()
        if not sep or not name:
            raise AttributesError(f"bad attribute {item!r}: expected NAME:VALUE[;NAME:VALUE...]")
        problem = _name_problem(name)
        if problem is not None:
            raise AttributesError(problem)
        if name in attributes:
            raise AttributesError(f"attribute {name} is given twice")
        try:
            kind, typed = parse_attribute_value(value)
        except AttributesError as exc:
            raise AttributesError(f"attribute {name}: {exc}") from None
        attributes[name] = format_value(kind, typed)
    if len(attributes) > MAX_ATTRIBUTES:
        raise AttributesError(f"{len(attributes)} attributes are more than {MAX_ATTRIBUTES}")
    return attributes


def typed_attributes(attributes: Mapping[str, str]) -> dict[str, Attribute]:
    """The typed view of a name -> text map (as an offer carries it)."""
    typed = {}
    for name, text in attributes.items():
        kind, value = parse_attribute_value(text)
        typed[name] = Attribute(name, kind, value)
    return typed


def json_value(text: str) -> object:
    """An attribute as Mesos's ``/state`` shows it: a scalar as a number, the
    other types as their text (``"[1000-2000]"``, ``"{a,b}"``). Text that
    does not parse (it never reaches a master) is shown as it is."""
    try:
        kind, value = parse_attribute_value(text)
    except AttributesError:
        return text
    return value if kind == SCALAR else format_value(kind, value)


def attributes_json(attributes: Mapping[str, str]) -> dict[str, object]:
    """An agent's attributes as Mesos's ``/state`` shows them (master and agent)."""
    return {name: json_value(text) for name, text in attributes.items()}

"""Declaring a protocol: its message classes, its version, and the
constraints on field values beyond their Python types.

A protocol is a :class:`Schema`: a name, a version, and the message classes
registered with :meth:`Schema.message` — frozen ``msgspec.Struct`` types
(every message of the bundled protocols: msgspec builds and checks them in
C) or frozen attrs classes (:func:`fields` reads either kind), each with a
unique ``TYPE``, whose
fields' type hints are the schema (no second declaration). The hints the
codec (:mod:`mesoslike.wire.codec`) checks:

- ``str``, ``int``, ``float`` (an int is accepted and made a float; NaN and
  infinities are not numbers), ``bool`` (never an int), ``bytes``;
- ``list[T]``, ``dict[K, V]``, ``T | None``, nested Structs (or attrs classes),
  :class:`~mesoslike.resources.Resources` (as its string);
- ``typing.Any``: any plain value (None, bool, int, float, str, bytes, lists
  and string-keyed maps of plain values), e.g. a document;
- ``Annotated[T, Range(...)]``: a number within bounds;
- ``Annotated[list[...], Items(A, B, ...)]``: a list of exactly those items,
  in order (e.g. ``[instance, attempt]``).

Values are checked beyond their types by the classes themselves: a Struct's
``__post_init__`` (an attrs class's validators and ``__attrs_post_init__``)
runs on every decoded object, and so do an attrs class's converters, unless marked
:func:`normalizer` (a converter that only turns what a Python caller may
pass into the declared type, and checks nothing: a decoded value has that
type already). A Struct has no converters: its ``__post_init__`` converts
(``msgspec.structs.force_setattr``) and checks — or, a Struct of metaclass
:class:`~mesoslike.converted_structs.ConvertedWhenMade` (``TaskInfo``, ``Offer``), its
``__wire_converters__``, run by the codec on a decoded one's non-empty fields.

Pure: no I/O.
"""

from __future__ import annotations

import importlib
import typing
from typing import Any, Callable, Iterator, NamedTuple, Sized, TypeVar

import msgspec

__all__ = ["Schema", "Range", "Items", "normalizer", "is_normalizer", "is_message_class", "is_attrs_class", "fields",
           "Field", "check_length"]

T = TypeVar("T", bound=type)
F = TypeVar("F", bound=Callable[..., Any])
_NORMALIZERS: set[object] = set()


def normalizer(converter: F) -> F:
    """Marks an attrs converter of a message's (or value type's) field as
    one that only normalizes what a Python caller may pass — a mapping
    copied into a dict, pairs made :class:`~mesoslike.wire.types.Label` objects —
    and checks nothing: decoding, whose values have the declared types
    already, skips it. Any other converter also runs on decoded values (so a
    converter that refuses something refuses it from the wire too)."""
    _NORMALIZERS.add(converter)
    return converter


def is_normalizer(converter: object) -> bool:
    """Whether ``converter`` was marked with :func:`normalizer`."""
    return converter in _NORMALIZERS


class Field(NamedTuple):
    """One field of a message class, of either kind (:func:`fields`)."""

    name: str
    #: no default: a frame without it is refused
    required: bool
    #: its attrs converter (None: none); a Struct's, from its ``__wire_converters__`` (most have none)
    converter: Callable[[Any], Any] | None
    #: set by its own name in ``__init__`` (what msgspec and the checking decoder rely on)
    by_name: bool


def is_attrs_class(cls: object) -> bool:
    """Whether ``cls`` is an attrs class — told without importing attrs (~20 ms of a client's start,
    which has none): every attrs class has its fields in ``__attrs_attrs__`` (what ``attrs.has`` reads)."""
    return isinstance(cls, type) and getattr(cls, "__attrs_attrs__", None) is not None


def is_message_class(cls: object) -> bool:
    """Whether ``cls`` is a class the codec takes apart: an attrs class or a ``msgspec.Struct``."""
    return isinstance(cls, type) and (issubclass(cls, msgspec.Struct) or is_attrs_class(cls))


def fields(cls: type) -> tuple[Field, ...]:
    """The fields of ``cls`` (an attrs class or a ``msgspec.Struct``), in order."""
    found = _FIELDS.get(cls)
    if found is None:
        if issubclass(cls, msgspec.Struct):
            converters = getattr(cls, "__wire_converters__", {})   # (converted_structs.ConvertedWhenMade)
            found = tuple(Field(f.name, f.required, converters.get(f.name), f.encode_name == f.name)
                          for f in msgspec.structs.fields(cls))
        else:
            # an attrs class: attrs is imported already (its module made the class), so importing it here
            # costs nothing — and a process whose classes are all Structs never imports it
            import attrs
            found = tuple(Field(f.name, f.default is attrs.NOTHING, f.converter,
                                f.init and (f.alias or f.name) == f.name) for f in attrs.fields(typing.cast(Any, cls)))
        _FIELDS[cls] = found
    return found


_FIELDS: dict[type, tuple[Field, ...]] = {}


def _is_frozen(cls: type) -> bool:
    if issubclass(cls, msgspec.Struct):
        return bool(cls.__struct_config__.frozen)
    return cls.__setattr__ is not object.__setattr__


class _Types(dict):
    """TYPE -> message class, the classes of a schema's lazy modules
    (:meth:`Schema.lazy`) among them: a module is imported (its classes
    registered) when a TYPE not yet known is looked up, or the types are
    counted or listed."""

    def __init__(self) -> None:
        super().__init__()
        #: modules whose classes are registered when imported, not imported yet
        self.pending: list[str] = []

    def load(self) -> bool:
        """Import the pending modules; whether there were any."""
        if not self.pending:
            return False
        pending, self.pending = self.pending, []
        for module in pending:
            importlib.import_module(module)
        return True

    def get(self, key: Any, default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None and self.pending and self.load():
            found = dict.get(self, key)
        return default if found is None else found

    def __getitem__(self, key: Any) -> Any:
        if not dict.__contains__(self, key):
            self.load()
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (bool(self.pending) and self.load() and dict.__contains__(self, key))

    def __iter__(self) -> Iterator[str]:
        self.load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self.load()
        return dict.__eq__(self, other)

    __hash__ = None   # (as a dict's)

    def __repr__(self) -> str:
        self.load()
        return dict.__repr__(self)

    def keys(self) -> Any:
        self.load()
        return dict.keys(self)

    def values(self) -> Any:
        self.load()
        return dict.values(self)

    def items(self) -> Any:
        self.load()
        return dict.items(self)

    def copy(self) -> dict:
        self.load()
        return dict(dict.items(self))


class Schema:
    """The messages of one protocol, by ``TYPE``, under one ``version``
    (0-127: frames carry it as MessagePack's one-byte positive integer).
    ``name`` says whose messages they are, in errors."""

    def __init__(self, name: str, version: int) -> None:
        if not isinstance(version, int) or not 0 <= version < 128:
            raise ValueError(f"a protocol version is an integer 0-127, got {version!r}")
        self.name = name
        self.version = version
        #: TYPE -> message class (a dict; the classes of :meth:`lazy` modules made when first needed)
        self.types: dict[str, type] = _Types()

    def lazy(self, module: str) -> None:
        """Messages of this protocol that ``module`` declares (``@message``
        at its import), imported when first needed: a frame of a type not yet
        known, a lookup of one, a listing of :attr:`types`. For the classes
        some processes never use, whose making (attrs compiles their methods)
        would only lengthen their start."""
        types = self.types
        assert isinstance(types, _Types)
        types.pending.append(module)

    def message(self, cls: T) -> T:
        """Class decorator: register ``cls`` (a frozen attrs class or
        ``msgspec.Struct`` with a ``TYPE: ClassVar[str]``) as a message of
        this protocol."""
        kind = getattr(cls, "TYPE", None)
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{cls.__name__} has no TYPE (a non-empty string)")
        if not is_message_class(cls):
            raise TypeError(f"{cls.__name__} is neither an attrs class nor a msgspec Struct")
        if dict.__contains__(self.types, kind):   # (not `in`: that would import the pending modules)
            raise TypeError(f"duplicate message type {kind} in the {self.name} protocol")
        self.types[kind] = cls
        return cls

    def __repr__(self) -> str:
        return f"Schema({self.name!r}, version {self.version}, {len(self.types)} messages)"

    def _check(self) -> None:
        """The invariants: every class is registered under its own TYPE and
        is a frozen attrs class or Struct. (That the codec can check every
        field's hint is :meth:`mesoslike.wire.codec.Codec._check`.)"""
        for kind, cls in self.types.items():
            assert getattr(cls, "TYPE") == kind, (kind, cls)
            assert is_message_class(cls), cls
            assert _is_frozen(cls), f"{cls.__name__} is not frozen"


# ------------------------------------------------------------ constraints
def check_length(value: Sized, name: str, most: int) -> None:
    """A field's length (a string's, bytes', a list's) at most ``most``, for a
    Struct's ``__post_init__``: ValueError in attrs' ``max_len`` words, which
    the messages had (``Length of 'secret' must be <= 64: 65``)."""
    if len(value) > most:
        raise ValueError(f"Length of {name!r} must be <= {most}: {len(value)}")


class Range(msgspec.Struct, frozen=True, gc=False):
    """``Annotated[int, Range(min=0)]``, ``Annotated[float, Range(0, 1)]``: a
    number within inclusive bounds (None: unbounded).

    A frozen ``msgspec.Struct`` (an attrs class before: the same
    constructor, equality, hash and repr, without importing attrs)."""

    min: float | None = None
    max: float | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (already of the field's type) is out of range; None if it is not."""
        low_ok = self.min is None or value >= self.min
        high_ok = self.max is None or value <= self.max
        if low_ok and high_ok:
            return None
        if self.max is None:
            return f"must be >= {self.min:g}, got {value!r}"
        if self.min is None:
            return f"must be <= {self.max:g}, got {value!r}"
        return f"must be in [{self.min:g}, {self.max:g}], got {value!r}"


class Items:
    """``Annotated[list[int], Items(int, int)]``: a list of exactly these
    items, in order, each checked against its hint. The value stays a list
    (what MessagePack gives back), so it compares equal to the list it was
    made from."""

    __slots__ = ("hints",)

    def __init__(self, *hints: Any) -> None:
        self.hints = hints

    def __repr__(self) -> str:
        return f"Items({', '.join(map(repr, self.hints))})"

"""The Fuxi job model's and AppMaster core's attrs classes are declared with
``repr=False`` on :class:`mesoslike_frameworks.fuxi.FieldsRepr` (attrs
compiles a ``__repr__`` a class as it makes it: ~0.2 ms of CPU each at the
AppMaster's start; docs/performance.rst, "Stop 14: the AppMaster's start
(fuxi29j)"): their ``repr`` is still the text attrs writes. The messages of
the two Fuxi protocols are msgspec Structs, whose own ``repr`` is that same
text."""

from __future__ import annotations

import attrs
import msgspec
import pytest

from mesoslike_frameworks.fuxi import FieldsRepr, am_protocol, appmaster_core, model, protocol

pytestmark = pytest.mark.timeout(30)


def _classes(modules: tuple, kind: str) -> list[type]:
    found = []
    for module in modules:
        for value in vars(module).values():
            if not (isinstance(value, type) and value.__module__ == module.__name__):
                continue
            if attrs.has(value) if kind == "attrs" else issubclass(value, msgspec.Struct):
                found.append(value)
    return found


ATTRS_CLASSES = _classes((protocol, am_protocol, model, appmaster_core), "attrs")
STRUCTS = _classes((protocol, am_protocol), "struct")


def _id(cls: type) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"


def test_every_class_takes_its_repr_from_fields_repr() -> None:
    assert len(ATTRS_CLASSES) == 10
    for cls in ATTRS_CLASSES:
        assert issubclass(cls, FieldsRepr), cls
        assert cls.__repr__ is FieldsRepr.__repr__, cls


def test_every_message_of_the_protocols_is_a_frozen_struct() -> None:
    assert len(STRUCTS) == 28
    assert set(STRUCTS) == {*protocol.SCHEMA.types.values(), *am_protocol.SCHEMA.types.values()}
    for cls in STRUCTS:
        assert cls.__struct_config__.frozen and not cls.__struct_config__.gc, cls


VALUES = [[1, "two", {"k": (3.5, None)}], "it's", -7, protocol.Ok(id=4), {"a": [True]}, b"\x00b", 2.5]


def _twin_repr(cls: type, names: list[str], chosen: dict) -> str:
    twin_cls = attrs.make_class(cls.__name__, names, frozen=True, slots=True)
    twin_cls.__qualname__ = cls.__qualname__
    return repr(twin_cls(**chosen))


@pytest.mark.parametrize("cls", ATTRS_CLASSES, ids=_id)
def test_the_repr_is_the_one_attrs_writes(cls: type) -> None:
    names = [field.name for field in attrs.fields(cls)]
    ours = object.__new__(cls)
    chosen = {name: VALUES[i % len(VALUES)] for i, name in enumerate(names)}
    for name, value in chosen.items():
        object.__setattr__(ours, name, value)
    assert repr(ours) == _twin_repr(cls, names, chosen)
    assert repr(ours).startswith(f"{cls.__name__}(")


@pytest.mark.parametrize("cls", STRUCTS, ids=_id)
def test_a_messages_repr_is_the_one_attrs_wrote(cls: type) -> None:
    names = [field.name for field in msgspec.structs.fields(cls)]
    chosen = {name: VALUES[i % len(VALUES)] for i, name in enumerate(names)}
    assert repr(cls(**chosen)) == _twin_repr(cls, names, chosen)


def test_a_repr_of_a_real_message() -> None:
    assert repr(protocol.Error(id=3, message="no")) == "Error(id=3, message='no')"
    assert repr(am_protocol.Release()) == "Release()"
    assert (repr(am_protocol.Assign(1, 0, "true")) == "Assign(instance=1, attempt=0, command='true', env={}, acks=[])")

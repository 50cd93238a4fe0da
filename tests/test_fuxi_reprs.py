"""The Fuxi protocols', job model's and AppMaster core's attrs classes are
declared with ``repr=False`` on :class:`mesoslike_frameworks.fuxi.FieldsRepr`
(attrs compiles a ``__repr__`` a class as it makes it: ~0.2 ms of CPU each
at the AppMaster's start; docs/performance.rst, "Stop 14: the AppMaster's
start (fuxi29j)"): their ``repr`` is still the text attrs writes."""

from __future__ import annotations

import attrs
import pytest

from mesoslike_frameworks.fuxi import FieldsRepr, am_protocol, appmaster_core, model, protocol

pytestmark = pytest.mark.timeout(30)


def _classes() -> list[type]:
    found = []
    for module in (protocol, am_protocol, model, appmaster_core):
        for value in vars(module).values():
            if isinstance(value, type) and attrs.has(value) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_every_class_takes_its_repr_from_fields_repr() -> None:
    classes = _classes()
    assert len(classes) == 38
    for cls in classes:
        assert issubclass(cls, FieldsRepr), cls
        assert cls.__repr__ is FieldsRepr.__repr__, cls


@pytest.mark.parametrize("cls", _classes(), ids=lambda cls: f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}")
def test_the_repr_is_the_one_attrs_writes(cls: type) -> None:
    fields = attrs.fields(cls)
    values = [[1, "two", {"k": (3.5, None)}], "it's", -7, protocol.Ok(id=4), {"a": [True]}, b"\x00b", 2.5]
    ours = object.__new__(cls)
    twin_cls = attrs.make_class(cls.__name__, [field.name for field in fields], frozen=True, slots=True)
    twin_cls.__qualname__ = cls.__qualname__
    chosen = {field.name: values[i % len(values)] for i, field in enumerate(fields)}
    for name, value in chosen.items():
        object.__setattr__(ours, name, value)
    twin = twin_cls(**chosen)
    assert repr(ours) == repr(twin)
    assert repr(ours).startswith(f"{cls.__name__}(")


def test_a_repr_of_a_real_message() -> None:
    assert repr(protocol.Error(id=3, message="no")) == "Error(id=3, message='no')"
    assert repr(am_protocol.Release()) == "Release()"

"""docs/framework-api.rst is the complete reference of the framework API
(issue 18: "every public class, field and callback"): this test enumerates
the code and fails, listing *everything* missing at once, when the page
lacks a public name, a class's signature, a field of a public attrs class, a
``Scheduler`` callback, a ``SchedulerDriver`` method or any other public
method or property of a public class.

What counts as public: the names of ``mesoslike.__all__``,
``mesoslike.driver.__all__``, ``mesoslike.wire.types.__all__`` and the
``__all__`` of any other package ``mesoslike`` loads names from lazily but
the HA ones (their classes are checked member by member), plus the names of the other modules
a framework may import (``mesoslike.messaging``, ``mesoslike.transport``,
``mesoslike.credentials``: named in "The public API"; their reference is
docs/wire.rst and docs/security.rst). A name added to one of those lists is
checked from then on: add its section to the page as the message says.

What the page must hold, as the message names it:

- every public name, as an inline literal (````Name````, ````Name(...)````);
- for a class: its signature as an inline literal, ````Name(param, param=default,
  *, keyword=default)````, the parameters of its constructor in order, each
  default as the code has it (a literal compared by value);
- for an attrs class: in the section (between two headings) holding the
  signature, one line per field starting with ````field````: a row of the
  field table (field, type, default, meaning);
- for another class: in that section, each public method as
  ````method(param, ...)```` (its parameters as above) and each property as
  ````name````; for a ``Scheduler``-like interface the methods are the callbacks;
- for a constants class (``TaskState``, ``DriverStatus``, ``HealthCheck.COMMAND`` ...):
  each constant's name or value somewhere on the page.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Iterator

import attrs
import msgspec
import pytest

import mesoslike
import mesoslike.credentials
import mesoslike.driver
import mesoslike.messaging
import mesoslike.transport
import mesoslike.wire.types

pytestmark = pytest.mark.timeout(60)

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "framework-api.rst"
#: the packages ``mesoslike`` loads names from lazily whose ``__all__`` is
#: framework API too (the driver's, and any added later, such as an
#: executor's); the HA modules' lists hold their internals as well, and so
#: does the resources module's (``Resources`` itself is in ``mesoslike.__all__``)
_LAZY_INTERNALS = {"mesoslike.ha", "mesoslike.locator", "mesoslike.resources"}
#: modules whose every public class is documented member by member
REFERENCED = (mesoslike, mesoslike.driver, mesoslike.wire.types, *(
    importlib.import_module(name) for name in sorted(set(getattr(mesoslike, "_LAZY", {}).values()))
    if name not in _LAZY_INTERNALS and name != "mesoslike.driver"))
#: public modules whose names must appear (their own reference is elsewhere)
NAMED_ONLY = (mesoslike.messaging, mesoslike.transport, mesoslike.credentials)
_HEADING = re.compile(r"^([=\-~^\"'`#*+]){3,}\s*$")


# ------------------------------------------------------------ the page
def literals(text: str) -> Iterator[tuple[int, str]]:
    """Every inline literal ````...```` of ``text`` (it may span lines): (offset, content)."""
    for match in re.finditer(r"``(.+?)``", text, re.S):
        yield match.start(), match.group(1)


def sections(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the parts between two headings (of any level)."""
    lines = text.splitlines(keepends=True)
    offsets, position = [], 0
    for i, line in enumerate(lines):
        if i and _HEADING.match(line) and lines[i - 1].strip() and len(line.strip()) >= len(lines[i - 1].strip()):
            offsets.append(position - len(lines[i - 1]))
        position += len(line)
    bounds = [0, *offsets, len(text)]
    return list(zip(bounds, bounds[1:]))


def section_of(text: str, offset: int) -> str:
    return next(text[start:end] for start, end in sections(text) if start <= offset < end)


def split_parameters(inside: str) -> list[str]:
    """``a, b=(1, 2), *, c={}`` -> ["a", "b=(1, 2)", "*", "c={}"] (commas inside brackets and quotes kept)."""
    parts, depth, current, quote = [], 0, "", ""
    for char in inside:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0 and not quote:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return [" ".join(part.split()) for part in parts]


# ------------------------------------------------------------ the code
_NO_DEFAULT = object()


def expected_parameters(function: Any, skip_first: bool) -> list[tuple[str, Any]]:
    """(name as written in a signature, default or _NO_DEFAULT) of a function's
    parameters, with ``*`` where keyword-only ones start."""
    out: list[tuple[str, Any]] = []
    parameters = list(inspect.signature(function).parameters.values())
    if skip_first:
        parameters = parameters[1:]
    star = False
    for parameter in parameters:
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            out.append(("*", _NO_DEFAULT))
            star = True
        prefix = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
        star = star or parameter.kind is parameter.VAR_POSITIONAL
        default = _NO_DEFAULT if parameter.default is parameter.empty else parameter.default
        out.append((prefix + parameter.name, default))
    return out


def is_record(obj: object) -> bool:
    """A value type whose fields are its parameters: an attrs class or a msgspec Struct."""
    return isinstance(obj, type) and (attrs.has(obj) or issubclass(obj, msgspec.Struct))


def record_field_names(cls: type) -> list[str]:
    if issubclass(cls, msgspec.Struct):
        return list(cls.__struct_fields__)
    return [field.name for field in attrs.fields(cls)]


def attrs_parameters(cls: type) -> list[tuple[str, Any]]:
    if issubclass(cls, msgspec.Struct):
        return [(f.name, _NO_DEFAULT if f.required else
                 f.default_factory() if f.default is msgspec.NODEFAULT else f.default)
                for f in msgspec.structs.fields(cls)]
    out = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory() if not default.takes_self else _NO_DEFAULT  # type: ignore[attr-defined]
        elif default is attrs.NOTHING:
            default = _NO_DEFAULT
        name = field.alias if getattr(field, "alias", None) else field.name
        out.append((name, default))
    return out


def signature_problem(documented: list[str], expected: list[tuple[str, Any]]) -> str:
    """Why the documented parameters are not the code's, or ""."""
    names = [part.split("=", 1)[0].strip() for part in documented]
    wanted = [name for name, _ in expected]
    if names != wanted:
        return f"parameters {names} are not {wanted}"
    for part, (name, default) in zip(documented, expected):
        has_default = "=" in part
        if default is _NO_DEFAULT:
            if has_default and name not in ("*",):
                return f"{name} has no default in the code"
            continue
        if not has_default:
            return f"{name} has the default {default!r} in the code"
        text = part.split("=", 1)[1].strip()
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            if _is_literal(default):   # ``refuse_seconds=N`` is an example, not the signature
                return f"{name}={text}, the code's default is {default!r}"
            continue   # a default that is no literal (``backoff=Backoff()``) is written as the page likes
        if value != default or type(value) is not type(default) and not (
                isinstance(value, (int, float)) and isinstance(default, (int, float))
                and not isinstance(default, bool)) and not (
                type(value) in (list, dict) and isinstance(default, type(value))):   # (wire.types.NO_ITEMS, ...)
            return f"{name}={text}, the code's default is {default!r}"
    return ""


def _is_literal(value: Any) -> bool:
    try:
        ast.literal_eval(repr(value))
    except (ValueError, SyntaxError):
        return False
    return True


def public_names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for module in REFERENCED:
        for name in module.__all__:
            names.setdefault(name, getattr(module, name))
    return names


def is_constants_class(cls: type) -> bool:
    if issubclass(cls, enum.Enum):
        return True
    members = [name for name in vars(cls) if not name.startswith("_")]
    return bool(members) and all(isinstance(vars(cls)[name], (str, tuple, frozenset)) for name in members)


def public_members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties a class defines (inherited ones are documented with their class)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(value):
            yield name, value


# ------------------------------------------------------------ the check
def find_signatures(doc: str, name: str, expected: list[tuple[str, Any]]) -> tuple[list[int], str]:
    """The offsets of the literals ``name(...)`` matching ``expected`` and,
    if none does, why the first candidate does not."""
    found, first_problem = [], ""
    for offset, content in literals(doc):
        match = re.fullmatch(rf"(?:[\w.]+\.)?{re.escape(name)}\((.*)\)", content.strip(), re.S)
        if match is None:
            continue
        problem = signature_problem(split_parameters(match.group(1)), expected)
        if not problem:
            found.append(offset)
        else:
            first_problem = first_problem or f"``{content.strip()[:80]}``: {problem}"
    return found, "" if found else first_problem


def find_signature(doc: str, name: str, expected: list[tuple[str, Any]]) -> tuple[int | None, str]:
    found, problem = find_signatures(doc, name, expected)
    return (found[0] if found else None), problem


def missing_from(doc: str) -> list[str]:
    """Everything the page lacks, one line each."""
    missing: list[str] = []
    literal_text = "\n".join(content for _, content in literals(doc))
    words = set(re.findall(r"\w+", doc))

    def named(name: str) -> bool:
        return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", literal_text) is not None

    for module in NAMED_ONLY:
        for name in module.__all__:
            if not named(name):
                missing.append(f"{module.__name__}.{name}: not named (add it to \"The public API\")")

    for name, obj in sorted(public_names().items()):
        if not named(name):
            missing.append(f"{name}: not named as ``{name}``")
        if not inspect.isclass(obj):
            if inspect.isfunction(obj):
                offset, problem = find_signature(doc, name, expected_parameters(obj, skip_first=False))
                if offset is None:
                    missing.append(f"{name}: no signature ``{name}(...)``" + (f" ({problem})" if problem else ""))
            continue
        if issubclass(obj, BaseException):
            continue
        if is_constants_class(obj):
            for member in obj if issubclass(obj, enum.Enum) else [m for m in vars(obj) if not m.startswith("_")]:
                label, value = (member.name, member.value) if isinstance(member, enum.Enum) else (
                    member, getattr(obj, member))
                if label not in words and not (isinstance(value, str) and value in words):
                    missing.append(f"{name}.{label}: not on the page")
            continue
        if is_record(obj):
            expected = attrs_parameters(obj)
        elif getattr(obj, "_is_protocol", False):
            expected = None   # a Protocol: never constructed
        else:
            expected = expected_parameters(obj.__init__, skip_first=True) if "__init__" in _own_dicts(obj) else []
        if expected is None:
            missing += members_missing(name, obj, doc, words)
            continue
        found, problem = find_signatures(doc, name, expected)
        if not found:
            missing.append(f"{name}: no signature ``{name}({_written(expected)})``"
                           + (f" (found {problem})" if problem else ""))
            found = [0]
        # the class's section is the one, among those holding its signature, that documents it best
        missing += min((members_missing(name, obj, section_of(doc, offset), words) for offset in found), key=len)
    return missing


def members_missing(name: str, obj: type, section: str, words: set[str]) -> list[str]:
    """What ``section`` lacks of class ``obj``'s fields, methods and properties."""
    missing: list[str] = []
    if is_record(obj):
        rows = {line.split("``")[1] for line in section.splitlines() if line.startswith("``")}
        for field_name in record_field_names(obj):
            if field_name not in rows:
                missing.append(f"{name}.{field_name}: no row ``{field_name}`` in the field table of {name}'s "
                               "section")
    for member, value in public_members(obj):
        if isinstance(value, property):
            if not re.search(rf"``(?:[\w.]+\.)?{member}``", section):
                missing.append(f"{name}.{member}: property not shown as ``{member}`` in {name}'s section")
            continue
        function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        skip = not isinstance(value, staticmethod)
        if find_signature(section, member, expected_parameters(function, skip_first=skip))[0] is None:
            wanted = _written(expected_parameters(function, skip_first=skip))
            missing.append(f"{name}.{member}: no ``{member}({wanted})`` in {name}'s section")
    for constant, value in vars(obj).items():   # class constants of a value type (HealthCheck.COMMAND)
        if is_record(obj) and not constant.startswith("_") and isinstance(value, str) and constant.isupper() \
                and constant not in words:
            missing.append(f"{name}.{constant}: not on the page")
    return missing


def _own_dicts(cls: type) -> dict:
    own: dict = {}
    for base in reversed(cls.__mro__[:-1]):
        own.update(vars(base))
    return own


def _written(expected: list[tuple[str, Any]]) -> str:
    return ", ".join(name if default is _NO_DEFAULT else f"{name}={default!r}" for name, default in expected)


def test_the_framework_api_page_documents_every_public_name_field_callback_and_method():
    missing = missing_from(DOC_PATH.read_text())
    assert not missing, ("docs/framework-api.rst lacks (see the docstring of tests/test_framework_api_doc.py "
                         "for the forms):\n  " + "\n  ".join(missing))


# ------------------------------------------------------------ the check itself
def test_the_check_finds_what_a_page_lacks():
    page = "\n".join([
        "Filters", "-------", "", "``Filters(refuse_seconds=5.0)``", "", "``refuse_seconds``  float  5.0  how long",
        "", "Labels", "------", "``Label(key, value=\"\")``",
    ])
    missing = missing_from(page)
    assert not any(line.startswith("Filters") for line in missing)
    assert "Label.key: no row ``key`` in the field table of Label's section" in missing
    assert any(line.startswith("TaskInfo: no signature ``TaskInfo(task_id, agent_id, command, resources")
               for line in missing)
    assert any(line.startswith("Scheduler.registered: no ``registered(driver, framework_id, master_info)``")
               for line in missing)
    assert "TaskState.STAGING: not on the page" in missing
    # a wrong default is named
    wrong = "\n".join(["Filters", "-------", "``Filters(refuse_seconds=1.0)``", "``refuse_seconds``"])
    assert any("refuse_seconds=1.0, the code's default is 5.0" in line for line in missing_from(wrong))

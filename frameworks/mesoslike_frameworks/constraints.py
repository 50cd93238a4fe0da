"""Marathon-style placement constraints: ``FIELD:OPERATOR[:VALUE]``.

A pure module (no I/O, no clock) a framework uses to decide whether an
offer's agent may take one more instance of something, given where the
others run. ``FIELD`` is ``hostname`` (the agent's hostname) or the name of
an agent attribute; an attribute's value is compared as its canonical Mesos
text (``r1``, ``3``, ``[1000-2000]``, ``{a,b}``), as Marathon compares
"the formatted values".

Operators, with Marathon's semantics (its ``Constraints.scala`` and
``docs/constraints.md``):

``UNIQUE``
    no two instances share the field's value (``hostname:UNIQUE``: one per host).
``CLUSTER[:VALUE]``
    every instance on agents whose value is VALUE; with no VALUE, all on the
    value the first instance landed on.
``GROUP_BY[:N]``
    spread evenly over the values: an agent is accepted if its value has no
    instance yet, or if at least N values are in use and its value has the
    fewest instances. Without N (0) the spread only covers the values seen
    in offers so far — give N when you know how many there are.
``LIKE:REGEX`` / ``UNLIKE:REGEX``
    the value matches (does not match) the whole regular expression.
``MAX_PER:N``
    at most N instances per value.

An agent without the attribute is refused by every operator but ``UNLIKE``,
which accepts it (Marathon's rule).

:class:`Placements` keeps, per constraint, how many instances are placed on
each value, so asking about an offer costs O(constraints) (GROUP_BY: O(values
in use)), not O(instances).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Mapping

__all__ = ["Constraint", "ConstraintError", "Placements", "OPERATORS", "HOSTNAME", "parse_constraints"]

UNIQUE, CLUSTER, GROUP_BY, LIKE, UNLIKE, MAX_PER = "UNIQUE", "CLUSTER", "GROUP_BY", "LIKE", "UNLIKE", "MAX_PER"
OPERATORS = (UNIQUE, CLUSTER, GROUP_BY, LIKE, UNLIKE, MAX_PER)
#: the field naming the agent's hostname rather than an attribute
HOSTNAME = "hostname"
#: characters of a constraint (a regular expression included)
MAX_CONSTRAINT_LENGTH = 1024


class ConstraintError(ValueError):
    """A constraint that does not parse: unknown operator, missing or
    unexpected value, a bad number or regular expression."""


def _regex(constraint: Constraint) -> re.Pattern[str] | None:
    if constraint.operator not in (LIKE, UNLIKE):
        return None
    try:
        return re.compile(constraint.value)
    except re.error as exc:
        raise ConstraintError(f"{constraint}: {constraint.value!r} is not a regular expression: {exc}") from None


class Constraint:
    """One constraint; build it with :meth:`parse` (which checks it) or
    with keywords (checked too).

    Frozen, compared, hashed and shown by its three fields (``field``,
    ``operator``, ``value``); the compiled regular expression of a LIKE or
    UNLIKE one is kept beside them, out of its equality, hash, repr and
    constructor. A plain class with ``__slots__`` and hand-written methods
    (an attrs class before, whose behaviour they keep, without importing
    attrs: ~20 ms of a ``mesoslike run`` client's start), not a
    ``msgspec.Struct``: a Struct keeps a value beside its fields only in an
    instance ``__dict__`` (``dict=True``), which ``copy.copy`` does not copy
    — a copied constraint would have no pattern."""

    __slots__ = ("field", "operator", "value", "_pattern", "__weakref__")
    __match_args__ = ("field", "operator", "value")

    field: str
    operator: str
    value: str
    _pattern: re.Pattern[str] | None

    def __init__(self, field: str, operator: str, value: str = "") -> None:
        set_ = object.__setattr__
        set_(self, "field", field)
        set_(self, "operator", operator)
        set_(self, "value", value)
        if not self.field:
            raise ConstraintError(f"{self}: the field is empty (hostname or an attribute name)")
        if self.operator not in OPERATORS:
            raise ConstraintError(f"{self}: unknown operator {self.operator!r} (one of {', '.join(OPERATORS)})")
        if self.operator == UNIQUE and self.value:
            raise ConstraintError(f"{self}: UNIQUE takes no value")
        if self.operator in (LIKE, UNLIKE, MAX_PER) and not self.value:
            raise ConstraintError(f"{self}: {self.operator} needs a value")
        if self.operator in (GROUP_BY, MAX_PER) and self.value:
            if not self.value.isdigit() or (self.operator == MAX_PER and int(self.value) < 1):
                raise ConstraintError(f"{self}: {self.operator}'s value is a whole number"
                                      f"{' >= 1' if self.operator == MAX_PER else ''}, got {self.value!r}")
        set_(self, "_pattern", _regex(self))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("can't set attribute")   # (attrs's words: its FrozenInstanceError is an AttributeError)

    def __delattr__(self, name: str) -> None:
        raise AttributeError("can't set attribute")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Constraint)
        return (self.field, self.operator, self.value) == (other.field, other.operator, other.value)

    def __hash__(self) -> int:
        return hash((Constraint, self.field, self.operator, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(field={self.field!r}, operator={self.operator!r}, value={self.value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled and copied (copy.copy, deepcopy) by its fields: made anew, checked, its pattern compiled
        return type(self), (self.field, self.operator, self.value)

    @classmethod
    def parse(cls, text: str) -> Constraint:
        """``"rack:GROUP_BY:3"`` -> Constraint("rack", "GROUP_BY", "3"). The
        value is everything after the second ``:`` (a regular expression may
        hold ``:``); the operator is case-insensitive."""
        if len(text) > MAX_CONSTRAINT_LENGTH:
            raise ConstraintError(f"a constraint of {len(text)} characters is longer than {MAX_CONSTRAINT_LENGTH}")
        field, sep, rest = text.partition(":")
        if not sep:
            raise ConstraintError(f"{text!r}: expected FIELD:OPERATOR[:VALUE], e.g. hostname:UNIQUE or rack:GROUP_BY:3")
        operator, _, value = rest.partition(":")
        return cls(field.strip(), operator.strip().upper(), value)

    def __str__(self) -> str:
        return f"{self.field}:{self.operator}" + (f":{self.value}" if self.value else "")

    def field_value(self, hostname: str, attributes: Mapping[str, str]) -> str | None:
        """The agent's value of this constraint's field (None: it has no such attribute)."""
        return hostname if self.field == HOSTNAME else attributes.get(self.field)

    @property
    def static(self) -> bool:
        """Whether it accepts or refuses an agent whatever is placed where
        (LIKE, UNLIKE, CLUSTER with a value)."""
        return self.operator in (LIKE, UNLIKE) or (self.operator == CLUSTER and bool(self.value))

    def accepts(self, value: str | None, placed: Mapping[str, int]) -> bool:
        """Whether one more instance may go to an agent whose field value is
        ``value``, with ``placed`` instances (value -> count, counts > 0)
        already placed."""
        if value is None:
            return self.operator == UNLIKE
        operator = self.operator
        if operator == UNIQUE:
            return value not in placed
        if operator == CLUSTER:
            if self.value:
                return value == self.value
            return all(other == value for other in placed)
        if operator == GROUP_BY:
            count = placed.get(value)
            if count is None:
                return True
            return len(placed) >= int(self.value or 0) and count == min(placed.values())
        if operator == MAX_PER:
            return placed.get(value, 0) < int(self.value)
        assert self._pattern is not None
        matches = self._pattern.fullmatch(value) is not None
        return matches if operator == LIKE else not matches


def parse_constraints(texts: Iterable[str]) -> list[Constraint]:
    """Each of ``texts`` parsed (``--constraint`` given several times)."""
    return [Constraint.parse(text) for text in texts]


class Placements:
    """Where the instances of one thing are, as the constraints see it: per
    constraint, value -> how many instances are placed on it. ``place`` an
    instance when it is launched, ``remove`` it when it ends."""

    def __init__(self, constraints: Iterable[Constraint]) -> None:
        self.constraints = list(constraints)
        self._counts: list[Counter[str]] = [Counter() for _ in self.constraints]
        self._values: dict[str, list[str | None]] = {}   # instance key -> its value per constraint

    def __len__(self) -> int:
        return len(self._values)

    def refusing(self, hostname: str, attributes: Mapping[str, str]) -> Constraint | None:
        """The first constraint that refuses one more instance on this agent,
        or None if every one accepts it."""
        for constraint, counts in zip(self.constraints, self._counts):
            if not constraint.accepts(constraint.field_value(hostname, attributes), counts):
                return constraint
        return None

    def place(self, key: str, hostname: str, attributes: Mapping[str, str]) -> None:
        """Instance ``key`` now runs on this agent."""
        if key in self._values:
            self.remove(key)
        values = [constraint.field_value(hostname, attributes) for constraint in self.constraints]
        self._values[key] = values
        for value, counts in zip(values, self._counts):
            if value is not None:
                counts[value] += 1

    def remove(self, key: str) -> None:
        """Instance ``key`` ended (unknown keys are ignored)."""
        values = self._values.pop(key, None)
        for value, counts in zip(values or (), self._counts):
            if value is not None:
                counts[value] -= 1
                if counts[value] <= 0:
                    del counts[value]

    def counts(self, constraint: Constraint) -> dict[str, int]:
        """value -> instances placed, for one of the constraints."""
        return dict(self._counts[self.constraints.index(constraint)])

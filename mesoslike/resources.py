"""Immutable resource vectors: named scalars (cpus, mem, disk, gpus, ...) and
named sets of integer ranges (ports).

Syntax (the same one ``str()`` gives back)::

    cpus:4;mem:8192;disk:10240;ports:[31000-32000,33000-33010]

Scalars are fixed-point with three decimals, as in Mesos: every quantity is
rounded to the nearest 0.001 when it enters, and arithmetic is exact on those
thousandths, so sums and differences never drift (``0.1 + 0.2 == 0.3`` here).
That rounding is the float tolerance: quantities closer than 0.0005 are equal.

A zero quantity is the same as an absent one. Negative, NaN or infinite
quantities, malformed strings, and reversed or overlapping-nonsense ranges
raise :class:`~mesoslike.errors.ResourcesError`. So does a quantity above
:data:`MAX_QUANTITY` (10^15: a petabyte of memory in MB, a million times the
largest machine) — one scalar, or the sum of a name's repeated entries
(``cpus:6e14;cpus:6e14``) — and a range bound above it: a vector that enters
(parsed, built, decoded from a peer) is bounded, so no arithmetic on it can
overflow a float anywhere downstream (issue 12 §2: ``cpus:1.7e305`` twice
killed every framework it was offered to). Subtraction is strict: ``a -
b`` raises unless ``a.contains(b)``; :meth:`Resources.subtract_clamped` is the
saturating variant.

Static reservations (Mesos's ``name(role):value``)::

    cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096

A kind may carry a reservation role in parentheses: ``cpus(analytics)`` is a
kind of its own, distinct from ``cpus`` (so ``contains`` and subtraction keep
reserved and unreserved apart), reserved for role ``analytics`` and its
sub-roles. The role must be a valid role name (``docs/roles.rst``) of at most
:data:`MAX_RESERVATION_ROLE` characters; ``cpus(*)`` is plain ``cpus``.
:meth:`Resources.stripped` drops the reservations (what fairness and quota
count), :meth:`Resources.unreserved`, :meth:`Resources.reserved` and
:meth:`Resources.allocatable_to` select parts.

Dynamic reservations (Mesos's RESERVE/UNRESERVE operations; a role and the
*reserving principal*)::

    cpus(analytics,alice):2;mem(analytics,alice):1024

A comma in the parentheses makes the reservation dynamic: the role, then the
principal that reserved it (empty in an anonymous cluster: ``cpus(a,)``),
then, optionally, its *labels* (Mesos's ``ReservationInfo.labels``) after a
second comma, ``key=value`` pairs joined by ``&``:
``cpus(analytics,alice,purpose=etl&team=ml):2``. Keys and values are
letters, digits and ``_ . - @ /`` (keys not empty), at most
:data:`MAX_RESERVATION_LABELS` pairs of at most :data:`MAX_RESERVATION_ROLE`
characters in all; the pairs are kept sorted, so one
set of labels is one kind however it was written. Reservations that differ
in their labels are different kinds, as Mesos never merges them.
Principals are at most :data:`MAX_RESERVATION_ROLE` characters of letters,
digits and ``_ . - @``; a role in a reservation may not hold a comma. Each
(role, principal) is a kind of its own, like a static reservation; a dynamic
reservation counts wherever a static one does (offered only to the role and
its sub-roles, DRF, quota). :meth:`Resources.as_reserved` and
:meth:`Resources.as_unreserved` convert between unreserved and dynamically
reserved quantities, :meth:`Resources.dynamically_reserved` selects them.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Mapping

from mesoslike.errors import ResourcesError

__all__ = ["Resources", "ResourcesError", "Range", "format_millis", "KNOWN_KINDS", "similar_kind", "MAX_QUANTITY", "MAX_RESERVATION_ROLE",
           "MAX_RESERVATION_LABELS", "reservation_of", "reservation_principal", "reservation_labels"]

Range = tuple[int, int]  # inclusive bounds

_SCALE = 1000  # thousandths
#: the largest quantity of one scalar kind in a vector that enters, and the
#: largest range bound (docs/wire.rst, "Validation")
MAX_QUANTITY = 10**15
_MAX_MILLIS = MAX_QUANTITY * _SCALE
_MAX_DIGITS = len(str(MAX_QUANTITY))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
_RESERVED_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)\(([^()]*)\)\Z", re.S)
#: the longest reservation role a kind may carry (``cpus(ROLE)``)
MAX_RESERVATION_ROLE = 255
_PRINCIPAL = re.compile(r"[A-Za-z0-9_.\-@]*\Z")
#: the most labels a dynamic reservation may carry (written as ``k=v&k2=v2``: at most MAX_RESERVATION_ROLE characters)
MAX_RESERVATION_LABELS = 16
_LABEL_TEXT = re.compile(r"[A-Za-z0-9_.\-@/]*\Z")
_RANGE = re.compile(r"\s*(\d+)\s*-\s*(\d+)\s*\Z")
_CANONICAL_ORDER = {"cpus": 0, "gpus": 1, "mem": 2, "disk": 3}


def _to_millis(name: str, value: float) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResourcesError(f"quantity of {name!r} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ResourcesError(f"quantity of {name!r} must be finite, got {value!r}")
    if value < 0:
        raise ResourcesError(f"quantity of {name!r} must be >= 0, got {value!r}")
    if value > MAX_QUANTITY:
        raise ResourcesError(f"quantity of {name!r} must be <= {MAX_QUANTITY:.0e}, got {value!r}")
    return int(round(value * _SCALE))


def _check_total(name: str, millis: int) -> int:
    """The sum of a name's entries, bounded like each of them."""
    if millis > _MAX_MILLIS:
        raise ResourcesError(f"quantity of {name!r} must be <= {MAX_QUANTITY:.0e}, got {millis / _SCALE:g} "
                             "(its entries added up)")
    return millis


def _check_name(name: str) -> str:
    """``name`` if it is a valid kind — ``cpus`` or ``cpus(role)`` — else
    raise. ``cpus(*)`` is returned as ``cpus`` (reserved for nobody)."""
    if not isinstance(name, str):
        raise ResourcesError(f"resource name must be a string, got {type(name).__name__}")
    if _NAME.match(name):
        return name
    reserved = _RESERVED_NAME.match(name)
    if reserved is None:
        raise ResourcesError(
            f"bad resource name {name[:80]!r}: use letters, digits, '_', '-', '.' "
            "and start with a letter or '_', optionally followed by a reservation role "
            "without parentheses: name(role)"
        )
    base, role = reserved.group(1), reserved.group(2)
    role, dynamic, principal = role.partition(",")
    if dynamic:
        principal, labelled, labels = principal.partition(",")
        _check_principal(base, principal)
        if labelled:
            name = f"{base}({role},{principal},{_label_text(base, _parse_labels(base, labels))})"
        if role == "*":  # lazily imported below; "*" is the default role
            raise ResourcesError(f"bad reservation in {name[:80]!r}: resources cannot be reserved for the "
                                 "default role '*'")
    if len(role) > MAX_RESERVATION_ROLE:
        raise ResourcesError(f"reservation role of {base!r} is {len(role)} characters long; "
                             f"at most {MAX_RESERVATION_ROLE} are allowed")
    # here, not at the top: the allocator package imports this module
    from mesoslike.allocator.roles import DEFAULT_ROLE, validate_role
    from mesoslike.errors import InvalidRoleError
    try:
        validate_role(role)
    except InvalidRoleError as exc:
        raise ResourcesError(f"bad reservation in {name!r}: {exc}") from None
    return base if role == DEFAULT_ROLE else name


def _check_principal(base: str, principal: str) -> None:
    if len(principal) > MAX_RESERVATION_ROLE or not _PRINCIPAL.match(principal):
        raise ResourcesError(f"bad reserving principal {principal[:80]!r} of {base!r}: at most "
                             f"{MAX_RESERVATION_ROLE} letters, digits, '_', '.', '-' or '@'")


def _parse_labels(base: str, text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split("&"):
        key, _, value = item.partition("=")
        pairs.append((key, value))
    return pairs


def _label_text(base: str, labels: Iterable[tuple[str, str]]) -> str:
    """The labels of a reservation as its kind holds them (sorted ``k=v``
    joined by ``&``); raise for labels that cannot be written so."""
    pairs = sorted(labels)
    if not pairs or len(pairs) > MAX_RESERVATION_LABELS:
        raise ResourcesError(f"a reservation of {base!r} has {len(pairs)} labels: 1 to {MAX_RESERVATION_LABELS} "
                             "may be written in its kind (none: leave the labels out)")
    for key, value in pairs:
        for text in (key, value):
            if not isinstance(text, str) or len(text) > MAX_RESERVATION_ROLE or not _LABEL_TEXT.match(text):
                raise ResourcesError(f"bad reservation label {str(key)[:80]!r}={str(value)[:80]!r} of {base!r}: "
                                     f"keys and values are at most {MAX_RESERVATION_ROLE} letters, digits, "
                                     "'_', '.', '-', '@' or '/' (a label of other text cannot be part of a kind)")
        if not key:
            raise ResourcesError(f"a reservation label of {base!r} has an empty key")
    text = "&".join(f"{key}={value}" for key, value in pairs)
    if len(text) > MAX_RESERVATION_ROLE:
        raise ResourcesError(f"the labels of a reservation of {base!r} are {len(text)} characters long written as "
                             f"k=v&k2=v2; at most {MAX_RESERVATION_ROLE} are allowed")
    return text


def reservation_labels(kind: str) -> tuple[tuple[str, str], ...]:
    """The labels of a dynamically reserved kind as sorted (key, value)
    pairs (``"cpus(a,alice,team=ml)"`` -> ``(("team", "ml"),)``); ``()``
    for any other kind."""
    if kind.endswith(")"):
        _, _, rest = kind[kind.index("(") + 1:-1].partition(",")
        _, labelled, labels = rest.partition(",")
        if labelled:
            return tuple((key, value) for key, _, value in (item.partition("=") for item in labels.split("&")))
    return ()


def reservation_of(kind: str) -> str | None:
    """The reservation role of a (valid) kind: ``"cpus(a/b)"`` -> ``"a/b"``,
    ``"cpus(a,alice)"`` -> ``"a"``, ``"cpus"`` -> None."""
    if kind.endswith(")"):
        return kind[kind.index("(") + 1:-1].partition(",")[0]
    return None


def reservation_principal(kind: str) -> str | None:
    """The reserving principal of a dynamically reserved kind
    (``"cpus(a,alice)"`` -> ``"alice"``, ``"cpus(a,)"`` -> ``""``); None for
    an unreserved or statically reserved kind."""
    if kind.endswith(")"):
        role, dynamic, principal = kind[kind.index("(") + 1:-1].partition(",")
        if dynamic:
            return principal.partition(",")[0]
    return None


def _is_dynamic(kind: str) -> bool:
    return kind.endswith(")") and "," in kind


def _base_name(kind: str) -> str:
    """``"cpus(a)"`` -> ``"cpus"``."""
    return kind.partition("(")[0]


def _reserved_for(reservation: str, role: str) -> bool:
    """Whether resources reserved for ``reservation`` may go to a framework
    in ``role``: the role itself or a sub-role of it (Mesos)."""
    return role == reservation or role.startswith(reservation + "/")


def _normalize_ranges(name: str, ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Sort and merge (overlapping or adjacent) inclusive ranges."""
    items = []
    for item in ranges:
        try:
            lo, hi = item
        except (TypeError, ValueError):
            raise ResourcesError(f"range of {name!r} must be a (low, high) pair, got {item!r}") from None
        if isinstance(lo, bool) or isinstance(hi, bool) or not isinstance(lo, int) or not isinstance(hi, int):
            raise ResourcesError(f"range bounds of {name!r} must be integers, got {item!r}")
        if lo < 0 or hi < lo or hi > MAX_QUANTITY:
            raise ResourcesError(f"bad range {lo}-{hi} for {name!r}: need 0 <= low <= high <= {MAX_QUANTITY:.0e}")
        items.append((lo, hi))
    items.sort()
    merged: list[list[int]] = []
    for lo, hi in items:
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def _ranges_contain(outer: tuple[Range, ...], inner: tuple[Range, ...]) -> bool:
    i = 0
    for lo, hi in inner:
        while i < len(outer) and outer[i][1] < lo:
            i += 1
        if i == len(outer) or outer[i][0] > lo or outer[i][1] < hi:
            return False
    return True


def _ranges_subtract(outer: tuple[Range, ...], inner: tuple[Range, ...]) -> tuple[Range, ...]:
    """outer minus inner (inner need not be contained)."""
    result: list[Range] = []
    for lo, hi in outer:
        cur = lo
        for ilo, ihi in inner:
            if ihi < cur or ilo > hi:
                continue
            if ilo > cur:
                result.append((cur, ilo - 1))
            cur = max(cur, ihi + 1)
            if cur > hi:
                break
        if cur <= hi:
            result.append((cur, hi))
    return tuple(result)


def _ranges_intersect(a: tuple[Range, ...], b: tuple[Range, ...]) -> tuple[Range, ...]:
    result: list[Range] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            result.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(result)


def _format_millis(millis: int) -> str:
    whole, frac = divmod(millis, _SCALE)
    if frac == 0:
        return str(whole)
    return f"{whole}.{frac:03d}".rstrip("0")



#: :meth:`Resources.sum` of n times one vector, by (its id, n) -> (it, the sum): a re-registering
#: agent's tasks of a framework are alike (their resources one parsed object), and so are 100,000
#: agents' after a failover. Vectors are immutable, so a sum is shared; at most ``_MULTIPLES_KEPT``,
#: each of a vector of at most ``_MULTIPLE_RANGES_KEPT`` ranges in all (its entry keeps it alive: a
#: peer's vectors of 60,000 port ranges each, ~8 MB, are not kept by the thousand after their tasks end).
_MULTIPLES: dict[tuple[int, int], tuple["Resources", "Resources"]] = {}
_MULTIPLES_KEPT = 4096
_MULTIPLE_RANGES_KEPT = 64

class Resources:
    """An immutable vector of resources.

    Build one with :meth:`parse`, with keyword scalars, or from mappings::

        Resources.parse("cpus:4;mem:8192;ports:[31000-32000]")
        Resources(cpus=4, mem=8192)
        Resources({"cpus": 4}, ranges={"ports": [(31000, 32000)]})

    Operations cost O(k) in the number of named kinds (plus the number of
    ranges for range kinds). Instances are hashable and compare by value.
    """

    __slots__ = ("_millis", "_ranges", "_hash", "_text", "_stripped")

    _millis: dict[str, int]
    _ranges: dict[str, tuple[Range, ...]]
    _hash: int | None
    _text: str | None
    _stripped: Resources | None  # cached stripped(): self when nothing is reserved

    def __init__(
        self,
        scalars: Mapping[str, float] | None = None,
        ranges: Mapping[str, Iterable[Range]] | None = None,
        **kw_scalars: float,
    ) -> None:
        millis: dict[str, int] = {}
        for source in (scalars or {}, kw_scalars):
            for name, value in source.items():
                amount = _to_millis(name, value)
                name = _check_name(name)
                if amount:
                    millis[name] = _check_total(name, millis.get(name, 0) + amount)
        norm: dict[str, tuple[Range, ...]] = {}
        for name, rs in (ranges or {}).items():
            name = _check_name(name)
            if name in millis:
                raise ResourcesError(f"{name!r} cannot be both a scalar and a range")
            merged = _normalize_ranges(name, (*norm.get(name, ()), *rs))
            if merged:
                norm[name] = merged
        self._check_kinds(millis, norm)
        self._millis = millis
        self._ranges = norm
        self._hash = None
        self._text = None
        self._stripped = None

    @classmethod
    def _make(cls, millis: dict[str, int], ranges: dict[str, tuple[Range, ...]]) -> Resources:
        """Trusted constructor: no validation, takes ownership of the dicts."""
        self = object.__new__(cls)
        self._millis = millis
        self._ranges = ranges
        self._hash = None
        self._text = None
        self._stripped = None
        return self

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, text: str) -> Resources:
        """Parse ``"name:value;name(role):value;name:[lo-hi,lo-hi];..."``.

        Repeated scalar names add up; repeated range names merge. An empty
        string is the empty vector. Raises ``ResourcesError`` with the bad
        part quoted.
        """
        if not isinstance(text, str):
            raise ResourcesError(f"resources must be a string, got {type(text).__name__}")
        scalars: dict[str, int] = {}
        ranges: dict[str, list[Range]] = {}
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            name, sep, value = part.partition(":")
            name, value = name.strip(), value.strip()
            if not sep or not value:
                raise ResourcesError(f"bad resource {part!r} in {text!r}: expected name:value")
            name = _check_name(name)
            if value.startswith("["):
                if not value.endswith("]"):
                    raise ResourcesError(f"bad ranges {value!r} for {name!r}: expected [lo-hi,...]")
                if name in scalars:
                    raise ResourcesError(f"{name!r} cannot be both a scalar and a range in {text!r}")
                ranges.setdefault(name, []).extend(cls._parse_ranges(name, value[1:-1]))
            else:
                if name in ranges:
                    raise ResourcesError(f"{name!r} cannot be both a scalar and a range in {text!r}")
                try:
                    number = float(value)
                except ValueError:
                    raise ResourcesError(f"bad quantity {value!r} for {name!r} in {text!r}") from None
                scalars[name] = _check_total(name, scalars.get(name, 0) + _to_millis(name, number))
        millis = {k: v for k, v in scalars.items() if v}
        norm = {}
        for name, rs in ranges.items():
            merged = _normalize_ranges(name, rs)
            if merged:
                norm[name] = merged
        cls._check_kinds(millis, norm)
        return cls._make(millis, norm)

    @staticmethod
    def _parse_ranges(name: str, body: str) -> list[Range]:
        out: list[Range] = []
        if not body.strip():
            return out
        for chunk in body.split(","):
            match = _RANGE.match(chunk)
            if not match:
                raise ResourcesError(f"bad range {chunk.strip()!r} for {name!r}: expected lo-hi")
            if max(len(match.group(1).lstrip("0")), len(match.group(2).lstrip("0"))) > _MAX_DIGITS:
                # before int(): a 5,000-digit bound would cost (and Python refuses it with a ValueError)
                raise ResourcesError(f"bad range {chunk.strip()[:40]!r} for {name!r}: bounds are at most "
                                     f"{MAX_QUANTITY:.0e}")
            out.append((int(match.group(1)), int(match.group(2))))
        return out

    # ------------------------------------------------------------------ access
    def get(self, name: str, default: float = 0.0) -> float:
        """The quantity of ``name``: a scalar's value, or the number of values
        in a range kind (``ports:[1-10]`` gives 10.0). ``default`` if absent."""
        millis = self._millis.get(name)
        if millis is not None:
            return millis / _SCALE
        rs = self._ranges.get(name)
        if rs is not None:
            return float(sum(hi - lo + 1 for lo, hi in rs))
        return default

    def ranges(self, name: str) -> tuple[Range, ...]:
        """The merged, sorted inclusive ranges of ``name`` (empty if absent)."""
        return self._ranges.get(name, ())

    def scalars(self) -> dict[str, float]:
        """A fresh dict of the scalar quantities."""
        return {k: v / _SCALE for k, v in self._millis.items()}

    def millis(self) -> Mapping[str, int]:
        """The scalar quantities in exact thousandths (``cpus:1.5`` ->
        ``{"cpus": 1500}``): the vector's own mapping, read-only, O(1) — for
        code that does its arithmetic on thousandths (the allocator, quota)."""
        return self._millis

    def range_names(self) -> list[str]:
        """The range kinds present, sorted."""
        return sorted(self._ranges)

    def has_ranges(self) -> bool:
        """Whether any range kind is present (``bool(range_names())`` without the list)."""
        return bool(self._ranges)

    @classmethod
    def from_millis(cls, millis: Mapping[str, int]) -> Resources:
        """Scalars from exact thousandths (the inverse of :meth:`millis`);
        zeros are dropped. Raises ``ResourcesError`` for a bad name or a
        quantity that is not an integer >= 0. O(k)."""
        out: dict[str, int] = {}
        for name, amount in millis.items():
            name = _check_name(name)
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                raise ResourcesError(f"thousandths of {name!r} must be an integer >= 0, got {amount!r}")
            _check_total(name, amount)
            if amount:
                out[name] = _check_total(name, out.get(name, 0) + amount)
        return cls._make(out, {})

    def names(self) -> list[str]:
        """All kinds present, in canonical order."""
        return sorted(self._millis, key=_sort_key) + sorted(self._ranges)

    def is_empty(self) -> bool:
        return not self._millis and not self._ranges

    def __bool__(self) -> bool:
        return bool(self._millis) or bool(self._ranges)

    # ----------------------------------------------------------- reservations
    def stripped(self) -> Resources:
        """The same quantities with reservations dropped (``cpus(a):2;cpus:1``
        -> ``cpus:3``): what DRF shares and quota count, as in Mesos. Cached;
        ``self`` when nothing is reserved. O(k) once."""
        stripped = self._stripped
        if stripped is None:
            if not self.has_reservations():
                stripped = self
            else:
                millis: dict[str, int] = {}
                for name, amount in self._millis.items():
                    base = _base_name(name)
                    millis[base] = millis.get(base, 0) + amount
                ranges: dict[str, tuple[Range, ...]] = {}
                for name, rs in self._ranges.items():
                    base = _base_name(name)
                    mine = ranges.get(base)
                    ranges[base] = _normalize_ranges(base, mine + rs) if mine else rs
                self._check_kinds(millis, ranges)
                stripped = Resources._make(millis, ranges)
            self._stripped = stripped
        return stripped

    def has_reservations(self) -> bool:
        """Whether some kind is reserved for a role. O(k)."""
        if self._stripped is not None:
            return self._stripped is not self
        return any(name.endswith(")") for name in self._millis) or any(name.endswith(")") for name in self._ranges)

    def reservation_roles(self) -> list[str]:
        """The roles some kind is reserved for, sorted."""
        roles = {reservation_of(name) for name in (*self._millis, *self._ranges)}
        roles.discard(None)
        return sorted(role for role in roles if role is not None)

    def unreserved(self) -> Resources:
        """The kinds reserved for nobody."""
        if not self.has_reservations():
            return self
        return Resources._make({k: v for k, v in self._millis.items() if not k.endswith(")")},
                               {k: v for k, v in self._ranges.items() if not k.endswith(")")})

    def reserved(self, role: str | None = None) -> Resources:
        """The kinds reserved for ``role`` exactly (for any role if None)."""
        if not self.has_reservations():
            return EMPTY

        def wanted(kind: str) -> bool:
            reservation = reservation_of(kind)
            return reservation is not None and (role is None or reservation == role)
        return Resources._make({k: v for k, v in self._millis.items() if wanted(k)},
                               {k: v for k, v in self._ranges.items() if wanted(k)})

    def dynamically_reserved(self) -> Resources:
        """The dynamically reserved kinds (``cpus(a,alice)``), whoever reserved them."""
        if not self.has_reservations():
            return EMPTY
        return Resources._make({k: v for k, v in self._millis.items() if _is_dynamic(k)},
                               {k: v for k, v in self._ranges.items() if _is_dynamic(k)})

    def as_reserved(self, role: str, principal: str, labels: Iterable[tuple[str, str]] = ()) -> Resources:
        """The same quantities dynamically reserved for ``role`` by
        ``principal`` (``cpus:2`` -> ``cpus(role,principal):2``), with
        ``labels`` (``(key, value)`` pairs: ``cpus(role,principal,k=v):2``):
        what a RESERVE operation makes of them. Every kind must be
        unreserved; raises ``ResourcesError`` otherwise, or for a role,
        principal or label that cannot be written in a kind (``*``, a comma)."""
        if self.has_reservations():
            raise ResourcesError(f"only unreserved resources can be reserved; {self.reserved()} are reserved "
                                 "already")
        if not isinstance(role, str) or "," in role or not isinstance(principal, str) or "," in principal:
            raise ResourcesError(f"bad reservation role {role!r}: a role in a reservation may not hold a comma")
        pairs = list(labels)
        suffix = f"({role},{principal}{',' + _label_text('x', pairs) if pairs else ''})"
        if not self:
            _check_name("x" + suffix)   # the role and principal are checked even for nothing
            return self
        millis = {_check_name(k + suffix): v for k, v in self._millis.items()}
        ranges = {_check_name(k + suffix): v for k, v in self._ranges.items()}
        return Resources._make(millis, ranges)

    def as_unreserved(self) -> Resources:
        """The same quantities unreserved (``cpus(a,alice):2`` -> ``cpus:2``):
        what an UNRESERVE operation makes of them. Every kind must be
        dynamically reserved (a static reservation is the agent's to change,
        at its restart); raises ``ResourcesError`` otherwise."""
        wrong = [k for k in (*self._millis, *self._ranges) if not _is_dynamic(k)]
        if wrong:
            raise ResourcesError(f"only dynamically reserved resources can be unreserved, not {', '.join(wrong)} "
                                 "(a static reservation changes only with the agent's --resources)")
        return self.stripped()

    def allocatable_to(self, role: str) -> Resources:
        """What a framework in ``role`` may be offered of this: the unreserved
        kinds and those reserved for ``role`` or one of its ancestors (Mesos:
        ``analytics``'s reservations go to ``analytics`` and
        ``analytics/batch``, never to ``web``). ``self`` when nothing is reserved."""
        if not self.has_reservations():
            return self

        def wanted(kind: str) -> bool:
            reservation = reservation_of(kind)
            return reservation is None or _reserved_for(reservation, role)
        return Resources._make({k: v for k, v in self._millis.items() if wanted(k)},
                               {k: v for k, v in self._ranges.items() if wanted(k)})

    # ------------------------------------------------------------- arithmetic
    def __add__(self, other: Resources) -> Resources:
        if not isinstance(other, Resources):
            return NotImplemented
        if not other._millis and not other._ranges:
            return self
        if not self._millis and not self._ranges:
            return other
        millis = dict(self._millis)
        for name, amount in other._millis.items():
            millis[name] = millis.get(name, 0) + amount
        ranges = self._ranges
        if other._ranges:
            ranges = dict(ranges)
            for name, rs in other._ranges.items():
                mine = ranges.get(name)
                ranges[name] = _normalize_ranges(name, mine + rs) if mine else rs
        self._check_kinds(millis, ranges)
        return Resources._make(millis, ranges)

    @classmethod
    def sum(cls, items: Iterable[Resources]) -> Resources:
        """The sum of ``items`` (empty for none), in one pass: O(total size)
        instead of one intermediate vector per ``+``; a list of one vector
        again and again (tasks alike: their parsed strings' one object)
        costs O(kinds)."""
        if type(items) is list and items:
            first = items[0]
            if len(items) == 1:
                return first
            for item in items:
                if item is not first:
                    break
            else:   # n times the same vector: its quantities n times, its ranges (merged with themselves) once
                count = len(items)
                key = (id(first), count)
                known = _MULTIPLES.get(key)
                if known is not None and known[0] is first:   # (it holds ``first``: the id is still its)
                    return known[1]
                multiple = cls._make({name: amount * count for name, amount in first._millis.items()},
                                     dict(first._ranges))
                kept = first._ranges
                if not kept or sum(map(len, kept.values())) <= _MULTIPLE_RANGES_KEPT:
                    if len(_MULTIPLES) >= _MULTIPLES_KEPT:
                        _MULTIPLES.clear()
                    _MULTIPLES[key] = (first, multiple)
                return multiple
        millis: dict[str, int] = {}
        ranges: dict[str, tuple[Range, ...]] | None = None
        for item in items:
            for name, amount in item._millis.items():
                millis[name] = millis.get(name, 0) + amount
            if item._ranges:
                ranges = ranges if ranges is not None else {}
                for name, rs in item._ranges.items():
                    mine = ranges.get(name)
                    ranges[name] = _normalize_ranges(name, mine + rs) if mine else rs
        ranges = ranges or {}
        cls._check_kinds(millis, ranges)
        return cls._make(millis, ranges)

    def __sub__(self, other: Resources) -> Resources:
        """Strict subtraction: raises ``ResourcesError`` unless ``self.contains(other)``."""
        if not isinstance(other, Resources):
            return NotImplemented
        if not self.contains(other):
            raise ResourcesError(f"cannot subtract {other} from {self}: not contained")
        return self.subtract_clamped(other)

    def subtract_clamped(self, other: Resources) -> Resources:
        """Saturating subtraction: each quantity goes down to zero at most."""
        millis = dict(self._millis)
        for name, amount in other._millis.items():
            mine = millis.get(name)
            if mine is not None:
                left = mine - amount
                if left > 0:
                    millis[name] = left
                else:
                    del millis[name]
        ranges = self._ranges
        if other._ranges and ranges:
            ranges = dict(ranges)
            for name, rs in other._ranges.items():
                have = ranges.get(name)
                if have:
                    rest = _ranges_subtract(have, rs)
                    if rest:
                        ranges[name] = rest
                    else:
                        del ranges[name]
        return Resources._make(millis, ranges)

    def contains(self, other: Resources) -> bool:
        """True if every quantity of ``other`` fits in ``self`` (scalars by
        value, ranges by set inclusion)."""
        mine = self._millis
        for name, amount in other._millis.items():
            if mine.get(name, 0) < amount:
                return False
        if other._ranges:
            for name, rs in other._ranges.items():
                if not _ranges_contain(self._ranges.get(name, ()), rs):
                    return False
        return True

    def minimum(self, other: Resources) -> Resources:
        """Component-wise minimum (the intersection of the two vectors)."""
        millis = {}
        for name, amount in self._millis.items():
            theirs = other._millis.get(name)
            if theirs:
                millis[name] = amount if amount < theirs else theirs
        ranges = {}
        for name, rs in self._ranges.items():
            their_ranges = other._ranges.get(name)
            if their_ranges:
                both = _ranges_intersect(rs, their_ranges)
                if both:
                    ranges[name] = both
        return Resources._make(millis, ranges)

    def only(self, names: Iterable[str]) -> Resources:
        """The sub-vector of the given kinds."""
        wanted = set(names)
        return Resources._make(
            {k: v for k, v in self._millis.items() if k in wanted},
            {k: v for k, v in self._ranges.items() if k in wanted},
        )

    def clipped(self, caps: Mapping[str, int]) -> Resources:
        """Each scalar kind named in ``caps`` cut down to at most that many
        thousandths (a cap of 0 drops the kind); other kinds and ranges stay.
        Returns ``self`` when nothing is cut. O(len(caps)) — what quota
        limits and headroom do to an offer."""
        millis = self._millis
        clipped = None
        for kind, cap in caps.items():
            have = millis.get(kind)
            if have is not None and have > cap:
                if clipped is None:
                    clipped = dict(millis)
                if cap > 0:
                    clipped[kind] = cap
                else:
                    del clipped[kind]
        return self if clipped is None else Resources._make(clipped, self._ranges)

    def scale(self, factor: float) -> Resources:
        """Scalars multiplied by ``factor`` (>= 0); ranges dropped."""
        if not math.isfinite(factor) or factor < 0:
            raise ResourcesError(f"scale factor must be finite and >= 0, got {factor!r}")
        millis = {}
        for name, amount in self._millis.items():
            scaled = int(round(amount * factor))
            if scaled:
                millis[name] = scaled
        return Resources._make(millis, {})

    @staticmethod
    def _check_kinds(millis: Mapping[str, int], ranges: Mapping[str, object]) -> None:
        """A kind is a scalar or a range, reserved or not (``cpus:1`` and
        ``cpus(a):[1-2]`` cannot meet in one vector)."""
        if ranges and millis:
            clash = {_base_name(k) for k in millis} & {_base_name(k) for k in ranges}
            if clash:
                raise ResourcesError(f"{sorted(clash)} cannot be both scalars and ranges")

    # --------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resources):
            return NotImplemented
        return self._millis == other._millis and self._ranges == other._ranges

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((frozenset(self._millis.items()), frozenset(self._ranges.items())))
        return self._hash

    def __str__(self) -> str:
        # cached: immutable, and the wire writes the same vectors again and again (offers, tasks)
        if self._text is None:
            parts = [f"{name}:{_format_millis(self._millis[name])}" for name in sorted(self._millis, key=_sort_key)]
            for name in sorted(self._ranges):
                body = ",".join(f"{lo}-{hi}" for lo, hi in self._ranges[name])
                parts.append(f"{name}:[{body}]")
            self._text = ";".join(parts)
        return self._text

    def __repr__(self) -> str:
        return f"Resources.parse({str(self)!r})"

    def __reduce__(self):
        return (Resources.parse, (str(self),))


#: the resource names mesoslike itself knows (agents detect them, tasks are isolated by them); others are custom
KNOWN_KINDS = ("cpus", "mem", "disk", "gpus", "ports")


def similar_kind(name: str, known: Iterable[str] = KNOWN_KINDS) -> str | None:
    """The name of ``known`` that ``name`` is most likely a typo of
    (``cpu`` -> ``cpus``, ``memory`` -> ``mem``), or None: ``name`` is one
    of them, or like none of them."""
    known = list(known)
    if name in known:
        return None
    import difflib   # here, not at the top: only a name not known needs it

    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    return close[0] if close else None


def format_millis(millis: Mapping[str, int]) -> str:
    """Scalar thousandths in the syntax of ``str(Resources)``, in canonical
    order, *keeping* explicit zeros (``{"gpus": 0}`` -> ``"gpus:0"``): how
    quota quantities read back, where a zero limit means "none"."""
    return ";".join(f"{name}:{_format_millis(millis[name])}" for name in sorted(millis, key=_sort_key))


def _sort_key(name: str) -> tuple[int, str, str]:
    base = _base_name(name)  # a reserved kind sorts next to its unreserved one
    return (_CANONICAL_ORDER.get(base, len(_CANONICAL_ORDER)), base, name)


EMPTY = Resources()

"""The roles file (docs/roles.rst): role weights, quota and the settings of
fair-share preemption, as YARN's FairScheduler has them per queue.

This module holds the one model of these settings: :class:`RolesConfig`
(the ``[preemption]`` table as :class:`PreemptionConfig`, each listed role as
a :class:`RoleConfig`), the one place where a role's inherited settings are
resolved (:meth:`RolesConfig.effective`), and the reading of the file. The
master applies it to the allocator (weights, quota) and hands it as is to the
preemption policy (:mod:`mesoslike.master.preemption`).

Pure: parsing and validation only (reading the file is the one I/O).
:func:`load_roles_file` reads a TOML file, :func:`parse_roles` takes the
decoded document; both return a frozen :class:`RolesConfig` or raise
:class:`RolesFileError`, whose message names the field at fault, as in
``roles."a/b".weight: must be a number > 0, got -1``. The classes check
their own values when built (a bad value raises :class:`RolesFileError`
naming the attribute), so a configuration built in Python is as valid as a
parsed one.

Inheritance follows YARN: the two preemption timeouts and the threshold of
a role not setting them come from its nearest ancestor that does, then from
the ``[preemption]`` table, then from the defaults (timeouts: never;
threshold: 0.5). Weight, quota and min share are the role's own (default
weight 1, no quota, no min share). Parents that are not listed but have
listed children exist implicitly, with every setting inherited.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping, TypeGuard, TypeVar

import attrs

from mesoslike.allocator.roles import ancestors, validate_role
from mesoslike.errors import MesoslikeError, ResourcesError
from mesoslike.resources import Resources

__all__ = ["RoleConfig", "PreemptionConfig", "RolesConfig", "RolesFileError", "load_roles_file", "parse_roles",
           "quantities", "DEFAULT_WEIGHT", "DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT",
           "DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT", "DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD",
           "DEFAULT_WAIT_BEFORE_KILL", "DEFAULT_CLUSTER_UTILIZATION_THRESHOLD"]

DEFAULT_WEIGHT = 1.0
#: YARN's defaults: a role is never starved for its fair or min share ...
DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT = math.inf
DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT = math.inf
#: ... and, when it is, it counts as starved below half its fair share
DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD = 0.5
#: seconds between the warning and the kill (YARN's waitTimeBeforeKill)
DEFAULT_WAIT_BEFORE_KILL = 15.0
#: preempt only while the cluster is used above this share (YARN's
#: ``preemption.cluster-utilization-threshold``: the largest share over the kinds)
DEFAULT_CLUSTER_UTILIZATION_THRESHOLD = 0.8

#: the settings a role inherits from its nearest ancestor setting them
INHERITED = ("fair_share_preemption_timeout", "min_share_preemption_timeout", "fair_share_preemption_threshold")
_DEFAULTS = {"fair_share_preemption_timeout": DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT,
             "min_share_preemption_timeout": DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT,
             "fair_share_preemption_threshold": DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD}
_RESOURCE_FIELDS = ("guarantee", "limit", "min_share")
_ROLE_FIELDS = ("weight",) + _RESOURCE_FIELDS + INHERITED
_PREEMPTION_FIELDS = ("enabled", "wait_before_kill", "cluster_utilization_threshold") + INHERITED
_NUMBER_FIELDS = frozenset(("weight", "wait_before_kill", "cluster_utilization_threshold") + INHERITED)
_BARE_KEY = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class RolesFileError(MesoslikeError, ValueError):
    """A roles file that cannot be used; the message names the field
    (``field`` holds it alone, empty for the file as a whole)."""

    def __init__(self, field: str, problem: str, path: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.path = path
        where = ": ".join(part for part in (path, field) if part)
        super().__init__(f"{where}: {problem}" if where else problem)


# ------------------------------------------------------------ value checks
# attrs validators: each raises RolesFileError naming the attribute; the
# parser puts the path of the table in front (``roles.a.weight``).
def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: float) -> str:
    """A number as the file has it: ``-1`` rather than ``-1.0``."""
    return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


def _number(name: str, value: object) -> float:
    if not _is_number(value):
        raise RolesFileError(name, f"must be a number, got {value!r}")
    return value


def _check_weight(instance: object, attribute: attrs.Attribute, value: object) -> None:
    weight = _number(attribute.name, value)
    if not (math.isfinite(weight) and weight > 0):
        raise RolesFileError(attribute.name, f"must be a number > 0, got {_shown(weight)}")


def _check_timeout(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    seconds = _number(attribute.name, value)
    if not seconds >= 0:  # also refuses NaN
        raise RolesFileError(attribute.name, f"must be a number of seconds >= 0 (inf = never), got {_shown(seconds)}")


def _check_threshold(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    threshold = _number(attribute.name, value)
    if not 0 <= threshold <= 1:
        raise RolesFileError(attribute.name, f"must be a number between 0 and 1, got {_shown(threshold)}")


def _check_wait(instance: object, attribute: attrs.Attribute, value: object) -> None:
    wait = _number(attribute.name, value)
    if not (math.isfinite(wait) and wait >= 0):
        raise RolesFileError(attribute.name, f"must be a finite number of seconds >= 0, got {_shown(wait)}")


def _check_flag(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bool):
        raise RolesFileError(attribute.name, f"must be true or false, got {value!r}")


def _check_resources(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise RolesFileError(attribute.name, f'must be a resource string such as "cpus:4;mem:8192", got {value!r}')
    try:
        quantities(value)
    except ResourcesError as exc:
        raise RolesFileError(attribute.name, f"bad resources {value!r}: {exc}") from None


def _check_name(instance: object, attribute: attrs.Attribute, value: object) -> None:
    try:
        validate_role(value)
    except MesoslikeError as exc:
        raise RolesFileError(attribute.name, f"not a valid role name: {exc}") from None


# ------------------------------------------------------------------ the model
@attrs.frozen
class RoleConfig:
    """One role's settings. In :attr:`RolesConfig.roles` an inherited field
    left out of the file is None (inherit); from :meth:`RolesConfig.effective`
    every field but the resource strings is resolved. Resource strings are
    kept as written (explicit zeros, such as ``gpus:0`` in a limit, mean
    "none of it"); timeouts are seconds, ``math.inf`` = never. Building one
    checks every value, and that the guarantee and the min share fit in the
    role's own limit (:class:`RolesFileError` names the attribute)."""

    name: str = attrs.field(validator=_check_name)
    weight: float = attrs.field(default=DEFAULT_WEIGHT, validator=_check_weight)
    guarantee: str | None = attrs.field(default=None, validator=_check_resources)
    limit: str | None = attrs.field(default=None, validator=_check_resources)
    min_share: str | None = attrs.field(default=None, validator=_check_resources)
    fair_share_preemption_timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    min_share_preemption_timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    fair_share_preemption_threshold: float | None = attrs.field(default=None, validator=_check_threshold)

    def __attrs_post_init__(self) -> None:
        for field in ("guarantee", "min_share"):
            problem = _excess(self, field, self)
            if problem is not None:
                raise RolesFileError(field, problem)

    def to_json(self) -> dict:
        """Plain JSON (a timeout of ``inf`` shows as None: never)."""
        return {field: _json_value(getattr(self, field)) for field in _ROLE_FIELDS}


@attrs.frozen
class PreemptionConfig:
    """The ``[preemption]`` table. The three inherited settings set here are
    the defaults of every role (YARN's ``defaultFairSharePreemptionTimeout``
    and friends); None = the built-in default."""

    enabled: bool = attrs.field(default=False, validator=_check_flag)
    wait_before_kill: float = attrs.field(default=DEFAULT_WAIT_BEFORE_KILL, validator=_check_wait)
    #: no new victims while the cluster's utilisation is at or below it (seed 003, YARN)
    cluster_utilization_threshold: float = attrs.field(default=DEFAULT_CLUSTER_UTILIZATION_THRESHOLD,
                                                       validator=_check_threshold)
    fair_share_preemption_timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    min_share_preemption_timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    fair_share_preemption_threshold: float | None = attrs.field(default=None, validator=_check_threshold)

    def to_json(self) -> dict:
        return {field: _json_value(value) for field, value in attrs.asdict(self).items()}


def _sorted_roles(roles: Mapping[str, RoleConfig]) -> dict[str, RoleConfig]:
    return dict(sorted(dict(roles).items()))


@attrs.frozen
class RolesConfig:
    """A whole roles file: the preemption settings and the listed roles
    (name -> :class:`RoleConfig`, as written; see :meth:`effective`).
    Building one checks the roles against each other (:meth:`_check`)."""

    preemption: PreemptionConfig = attrs.field(factory=PreemptionConfig)
    # not hashed (a dict), but compared: equal configs still hash alike
    roles: Mapping[str, RoleConfig] = attrs.field(factory=dict, converter=_sorted_roles, hash=False)
    #: the file it was read from (None: built from a document)
    path: str | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Each role is listed under its own name; a role's guarantee and min
        share fit in every listed ancestor's limit; the guarantees of a
        role's nearest guaranteed descendants add up to no more than its own
        (as the allocator requires). Raises :class:`RolesFileError` naming
        the field. O(roles x depth x kinds)."""
        for name, config in self.roles.items():
            where = f"roles.{_key(name)}"
            if config.name != name:
                raise RolesFileError(where, f"holds the settings of role {config.name!r}")
            for parent in ancestors(name)[1:]:
                if parent in self.roles:
                    for field in ("guarantee", "min_share"):
                        problem = _excess(config, field, self.roles[parent])
                        if problem is not None:
                            raise RolesFileError(f"{where}.{field}", problem)
        sums: dict[str, dict[str, int]] = {}
        guaranteed = {name: quantities(c.guarantee) for name, c in self.roles.items() if quantities(c.guarantee)}
        for name, amounts in guaranteed.items():
            nearest = next((a for a in ancestors(name)[1:] if a in guaranteed), None)
            if nearest is not None:
                total = sums.setdefault(nearest, {})
                for kind, amount in amounts.items():
                    total[kind] = total.get(kind, 0) + amount
        for parent, total in sorted(sums.items()):
            over = sorted(k for k, amount in total.items() if amount > guaranteed[parent].get(k, 0))
            if over:
                raise RolesFileError(f"roles.{_key(parent)}.guarantee",
                                     f"the guarantees of its sub-roles add up to {_show(total)}, more than "
                                     f"{self.roles[parent].guarantee!r} (for {', '.join(over)})")

    @property
    def implicit_roles(self) -> list[str]:
        """Parents not listed that have listed descendants, sorted."""
        return sorted({a for role in self.roles for a in ancestors(role)[1:]} - set(self.roles))

    def effective(self, role: str) -> RoleConfig:
        """``role``'s settings with inheritance and defaults resolved: its own
        weight (default 1), quota and min share; the timeouts and the
        threshold from the role, else its nearest ancestor setting them, else
        ``[preemption]``, else the defaults. Any valid role name works,
        listed or not (a role not listed inherits everything). This is the
        one place settings are inherited. O(depth of ``role``)."""
        validate_role(role)
        own = self.roles.get(role) or RoleConfig(role)
        return attrs.evolve(own, fair_share_preemption_timeout=self._inherited(role, "fair_share_preemption_timeout"),
                            min_share_preemption_timeout=self._inherited(role, "min_share_preemption_timeout"),
                            fair_share_preemption_threshold=self._inherited(role, "fair_share_preemption_threshold"))

    def _inherited(self, role: str, field: str) -> float:
        for name in ancestors(role):
            value = getattr(self.roles[name], field) if name in self.roles else None
            if value is not None:
                return value
        value = getattr(self.preemption, field)
        return _DEFAULTS[field] if value is None else value

    def to_json(self) -> dict:
        """The ``/state`` view: preemption settings and each listed role's
        effective settings (implicit parents listed by name)."""
        return {"path": self.path, "preemption": self.preemption.to_json(),
                "roles": {role: self.effective(role).to_json() for role in self.roles},
                "implicit_roles": self.implicit_roles}


# ------------------------------------------------------------------ parsing
def load_roles_file(path: str | Path) -> RolesConfig:
    """Read and validate a roles file; :class:`RolesFileError` names the
    file and the field at fault."""
    name = str(path)
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RolesFileError("", "no such file", name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RolesFileError("", f"cannot read it: {exc}", name) from None
    except tomllib.TOMLDecodeError as exc:
        raise RolesFileError("", f"not valid TOML: {exc}", name) from None
    try:
        return attrs.evolve(parse_roles(document), path=name)
    except RolesFileError as exc:
        raise RolesFileError(exc.field, exc.problem, name) from None


def parse_roles(document: Mapping) -> RolesConfig:
    """Validate a decoded roles document (a ``dict`` as ``tomllib`` gives)."""
    if not isinstance(document, Mapping):
        raise RolesFileError("", f"must be a table, got {document!r}")
    _refuse_unknown(document, ("preemption", "roles"), "")
    table = _table(document.get("preemption", {}), "preemption")
    _refuse_unknown(table, _PREEMPTION_FIELDS, "preemption")
    preemption = _build(PreemptionConfig, "preemption", _values(table))
    listed = _table(document.get("roles", {}), "roles")
    roles = {}
    for name, table in listed.items():
        where = f"roles.{_key(name)}"
        try:
            validate_role(name)
        except MesoslikeError as exc:
            raise RolesFileError(where, f"not a valid role name: {exc}") from None
        table = _table(table, where)
        _refuse_unknown(table, _ROLE_FIELDS, where, role=name)
        roles[name] = _build(RoleConfig, where, {"name": name, **_values(table)})
    return RolesConfig(preemption, roles)


def quantities(text: str | None) -> dict[str, int]:
    """Scalar quantities of a resource string in thousandths, *keeping*
    explicit zeros (``"gpus:0"`` -> ``{"gpus": 0}``), as quota reads them;
    ``{}`` for None. Raises :class:`ResourcesError`."""
    if text is None:
        return {}
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        parsed = Resources.parse(part)
        if any(parsed.ranges(n) for n in parsed.names()):
            raise ResourcesError(f"only scalar quantities are allowed, got {part!r}")
        name = part.partition(":")[0].strip()
        out[name] = out.get(name, 0) + parsed.millis().get(name, 0)
    return out


_Built = TypeVar("_Built")


def _build(model: Callable[..., _Built], where: str, values: Mapping[str, Any]) -> _Built:
    """``model(**values)``, its errors named by their path in the file."""
    try:
        return model(**values)
    except RolesFileError as exc:
        raise RolesFileError(f"{where}.{exc.field}", exc.problem) from None


def _values(table: Mapping) -> dict[str, Any]:
    """A table's values as the model takes them: numbers as floats, an empty
    resource string as not set; anything else as written (the model refuses
    what is wrong)."""
    out = {}
    for field, value in table.items():
        if field in _NUMBER_FIELDS and _is_number(value):
            value = float(value)
        elif field in _RESOURCE_FIELDS and isinstance(value, str):
            value = value.strip() or None  # "" = not set
        out[field] = value
    return out


def _excess(config: RoleConfig, field: str, bound: RoleConfig) -> str | None:
    """Why ``config.<field>`` exceeds ``bound``'s limit on a kind the limit
    names (kinds a limit leaves out are unlimited); None if it does not."""
    amounts, limit = quantities(getattr(config, field)), quantities(bound.limit)
    for kind in sorted(set(amounts) & set(limit)):
        if amounts[kind] > limit[kind]:
            kin = "parent" if ancestors(config.name)[1:2] == [bound.name] else "ancestor"
            whose = "its limit" if bound is config else f"the limit of its {kin} role {bound.name!r}"
            return f"exceeds {whose} for {kind}: {amounts[kind] / 1000:g} > {limit[kind] / 1000:g}"
    return None


def _json_value(value: object) -> object:
    return None if isinstance(value, float) and math.isinf(value) else value


def _table(value: object, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise RolesFileError(where, f"must be a table, got {value!r}")
    return value


def _refuse_unknown(table: Mapping, known: tuple[str, ...], where: str, role: str | None = None) -> None:
    for key in table:
        if key not in known:
            field = f"{where}.{_key(key)}" if where else _key(key)
            hint = ""
            if role is not None and isinstance(table[key], Mapping):
                hint = f"; a nested role is a table of its own: [roles.{_key(role + '/' + key)}]"
            raise RolesFileError(field, f"unknown key (known: {', '.join(known)}){hint}")


def _key(name: str) -> str:
    """A TOML key as written in a dotted path: bare if it can be."""
    if name and set(name) <= _BARE_KEY:
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _show(millis: Mapping[str, int]) -> str:
    return ";".join(f"{kind}:{amount / 1000:g}" for kind, amount in sorted(millis.items()))

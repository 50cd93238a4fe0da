"""The roles file (DESIGN §3.6): role weights, quota and the settings of
fair-share preemption, as YARN's FairScheduler has them per queue.

Pure: parsing and validation only (reading the file is the one I/O).
:func:`load_roles_file` reads a TOML file, :func:`parse_roles` takes the
decoded document; both return a frozen :class:`RolesConfig` or raise
:class:`RolesFileError`, whose message names the field at fault, as in
``roles."a/b".weight: must be a number > 0, got -1``.

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
from typing import Mapping

import attrs

from mesoslike.allocator.roles import ancestors, validate_role
from mesoslike.errors import MesoslikeError, ResourcesError
from mesoslike.resources import Resources

__all__ = ["RoleConfig", "PreemptionConfig", "RolesConfig", "RolesFileError", "load_roles_file", "parse_roles",
           "quantities", "DEFAULT_WEIGHT", "DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT",
           "DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT", "DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD",
           "DEFAULT_WAIT_BEFORE_KILL"]

DEFAULT_WEIGHT = 1.0
#: YARN's defaults: a role is never starved for its fair or min share ...
DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT = math.inf
DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT = math.inf
#: ... and, when it is, it counts as starved below half its fair share
DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD = 0.5
#: seconds between the warning and the kill (YARN's waitTimeBeforeKill)
DEFAULT_WAIT_BEFORE_KILL = 15.0

#: the settings a role inherits from its nearest ancestor setting them
INHERITED = ("fair_share_preemption_timeout", "min_share_preemption_timeout", "fair_share_preemption_threshold")
_DEFAULTS = {"fair_share_preemption_timeout": DEFAULT_FAIR_SHARE_PREEMPTION_TIMEOUT,
             "min_share_preemption_timeout": DEFAULT_MIN_SHARE_PREEMPTION_TIMEOUT,
             "fair_share_preemption_threshold": DEFAULT_FAIR_SHARE_PREEMPTION_THRESHOLD}
_RESOURCE_FIELDS = ("guarantee", "limit", "min_share")
_ROLE_FIELDS = ("weight",) + _RESOURCE_FIELDS + INHERITED
_PREEMPTION_FIELDS = ("enabled", "wait_before_kill") + INHERITED
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


@attrs.frozen
class RoleConfig:
    """One role's settings. In :attr:`RolesConfig.roles` a field left out of
    the file is None (the three inherited ones: inherit); from
    :meth:`RolesConfig.effective` every field but the resource strings is
    resolved. Resource strings are kept as written (explicit zeros, such as
    ``gpus:0`` in a limit, mean "none of it"); timeouts are seconds,
    ``math.inf`` = never."""

    name: str
    weight: float | None = None
    guarantee: str | None = None
    limit: str | None = None
    min_share: str | None = None
    fair_share_preemption_timeout: float | None = None
    min_share_preemption_timeout: float | None = None
    fair_share_preemption_threshold: float | None = None

    def to_json(self) -> dict:
        """Plain JSON (a timeout of ``inf`` shows as None: never)."""
        out: dict = {}
        for field in _ROLE_FIELDS:
            value = getattr(self, field)
            out[field] = None if isinstance(value, float) and math.isinf(value) else value
        return out


@attrs.frozen
class PreemptionConfig:
    """The ``[preemption]`` table. The three inherited settings set here are
    the defaults of every role (YARN's ``defaultFairSharePreemptionTimeout``
    and friends); None = the built-in default."""

    enabled: bool = False
    wait_before_kill: float = DEFAULT_WAIT_BEFORE_KILL
    fair_share_preemption_timeout: float | None = None
    min_share_preemption_timeout: float | None = None
    fair_share_preemption_threshold: float | None = None

    def to_json(self) -> dict:
        out = attrs.asdict(self)
        return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in out.items()}


@attrs.frozen
class RolesConfig:
    """A whole roles file: the preemption settings and the listed roles
    (name -> :class:`RoleConfig`, as written; see :meth:`effective`)."""

    preemption: PreemptionConfig = attrs.field(factory=PreemptionConfig)
    roles: Mapping[str, RoleConfig] = attrs.field(factory=dict, converter=lambda r: dict(sorted(dict(r).items())))
    #: the file it was read from (None: built from a document)
    path: str | None = attrs.field(default=None, eq=False)

    __hash__ = None  # holds a dict

    @property
    def implicit_roles(self) -> list[str]:
        """Parents not listed that have listed descendants, sorted."""
        return sorted({a for role in self.roles for a in ancestors(role)[1:]} - set(self.roles))

    def effective(self, role: str) -> RoleConfig:
        """``role``'s settings with inheritance and defaults resolved: its own
        weight (default 1), quota and min share; the timeouts and the
        threshold from the role, else its nearest ancestor setting them, else
        ``[preemption]``, else the defaults. Any valid role name works,
        listed or not (a role not listed inherits everything)."""
        validate_role(role)
        own = self.roles.get(role, RoleConfig(role))
        inherited = {}
        for field in INHERITED:
            value = next((getattr(self.roles[a], field) for a in ancestors(role)
                          if a in self.roles and getattr(self.roles[a], field) is not None), None)
            if value is None:
                value = getattr(self.preemption, field)
            inherited[field] = _DEFAULTS[field] if value is None else value
        return attrs.evolve(own, weight=DEFAULT_WEIGHT if own.weight is None else own.weight, **inherited)

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
    preemption = _parse_preemption(_table(document.get("preemption", {}), "preemption"))
    listed = _table(document.get("roles", {}), "roles")
    roles = {}
    for name, table in listed.items():
        where = f"roles.{_key(name)}"
        try:
            validate_role(name)
        except MesoslikeError as exc:
            raise RolesFileError(where, f"not a valid role name: {exc}") from None
        roles[name] = _parse_role(name, _table(table, where), where)
    _check_hierarchy(roles)
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


def _parse_preemption(table: Mapping) -> PreemptionConfig:
    _refuse_unknown(table, _PREEMPTION_FIELDS, "preemption")
    enabled = table.get("enabled", False)
    if not isinstance(enabled, bool):
        raise RolesFileError("preemption.enabled", f"must be true or false, got {enabled!r}")
    wait = _number(table, "wait_before_kill", "preemption", DEFAULT_WAIT_BEFORE_KILL)
    if not (math.isfinite(wait) and wait >= 0):
        raise RolesFileError("preemption.wait_before_kill", f"must be a finite number of seconds >= 0, got {wait!r}")
    return PreemptionConfig(enabled, float(wait), **_inherited_settings(table, "preemption"))


def _parse_role(name: str, table: Mapping, where: str) -> RoleConfig:
    _refuse_unknown(table, _ROLE_FIELDS, where, role=name)
    weight = _number(table, "weight", where, None)
    if weight is not None and not (math.isfinite(weight) and weight > 0):
        raise RolesFileError(f"{where}.weight", f"must be a number > 0, got {weight!r}")
    resources = {}
    for field in _RESOURCE_FIELDS:
        value = table.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise RolesFileError(f"{where}.{field}", f'must be a resource string such as "cpus:4;mem:8192", '
                                                     f"got {value!r}")
        try:
            quantities(value)
        except ResourcesError as exc:
            raise RolesFileError(f"{where}.{field}", f"bad resources {value!r}: {exc}") from None
        resources[field] = value.strip() or None  # "" = not set
    config = RoleConfig(name, None if weight is None else float(weight), **resources,
                        **_inherited_settings(table, where))
    for field in ("guarantee", "min_share"):
        _check_within(config, field, config, where)
    return config


def _inherited_settings(table: Mapping, where: str) -> dict[str, float | None]:
    out = {}
    for field in ("fair_share_preemption_timeout", "min_share_preemption_timeout"):
        value = _number(table, field, where, None)
        if value is not None and not value >= 0:  # also refuses NaN
            raise RolesFileError(f"{where}.{field}", f"must be a number of seconds >= 0 (inf = never), got {value!r}")
        out[field] = None if value is None else float(value)
    threshold = _number(table, "fair_share_preemption_threshold", where, None)
    if threshold is not None and not 0 <= threshold <= 1:
        raise RolesFileError(f"{where}.fair_share_preemption_threshold",
                             f"must be a number between 0 and 1, got {threshold!r}")
    out["fair_share_preemption_threshold"] = None if threshold is None else float(threshold)
    return out


def _check_hierarchy(roles: Mapping[str, RoleConfig]) -> None:
    """A role's guarantee and min share fit in every listed ancestor's limit;
    the guarantees of a role's nearest guaranteed descendants add up to no
    more than its own (as the allocator requires)."""
    for name, config in roles.items():
        where = f"roles.{_key(name)}"
        for parent in ancestors(name)[1:]:
            if parent in roles:
                for field in ("guarantee", "min_share"):
                    _check_within(config, field, roles[parent], where)
    sums: dict[str, dict[str, int]] = {}
    guaranteed = {name: quantities(c.guarantee) for name, c in roles.items() if quantities(c.guarantee)}
    for name, amounts in guaranteed.items():
        parent = next((a for a in ancestors(name)[1:] if a in guaranteed), None)
        if parent is not None:
            total = sums.setdefault(parent, {})
            for kind, amount in amounts.items():
                total[kind] = total.get(kind, 0) + amount
    for parent, total in sorted(sums.items()):
        over = sorted(k for k, amount in total.items() if amount > guaranteed[parent].get(k, 0))
        if over:
            raise RolesFileError(f"roles.{_key(parent)}.guarantee",
                                 f"the guarantees of its sub-roles add up to {_show(total)}, more than "
                                 f"{roles[parent].guarantee!r} (for {', '.join(over)})")


def _check_within(config: RoleConfig, field: str, bound: RoleConfig, where: str) -> None:
    """``config.<field>`` does not exceed ``bound``'s limit on any kind the
    limit names (kinds a limit leaves out are unlimited)."""
    amounts, limit = quantities(getattr(config, field)), quantities(bound.limit)
    for kind in sorted(set(amounts) & set(limit)):
        if amounts[kind] > limit[kind]:
            kin = "parent" if ancestors(config.name)[1:2] == [bound.name] else "ancestor"
            whose = "its limit" if bound is config else f"the limit of its {kin} role {bound.name!r}"
            raise RolesFileError(f"{where}.{field}", f"exceeds {whose} for {kind}: "
                                                     f"{amounts[kind] / 1000:g} > {limit[kind] / 1000:g}")


def _number(table: Mapping, field: str, where: str, default):
    value = table.get(field, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RolesFileError(f"{where}.{field}", f"must be a number, got {value!r}")
    return value


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

"""Who may do what: the principals of a cluster and its Mesos-style ACLs
(docs/security.rst). Pure: :mod:`mesoslike.credentials` reads the file.

A *principal* is a name bound to a CURVE public key (the master learns it
from the key a peer authenticated with, never from a message) and to the
kinds of peer it may be: ``agent``, ``framework``, ``operator``. An operator
may also hold an HTTP bearer token.

The ACLs are rules per action (:data:`ACTIONS`). An action with no rule in
the file is allowed to every principal of the kind it is for (agents
register as agents, frameworks register in any role and run tasks as any
user but root, operators change quota and weights); once an action has
rules, only what a rule grants is allowed. ``"*"`` in a rule's
``principals``, ``roles``, ``users`` or ``reserver_principals`` means any —
except that running tasks as ``root`` needs a rule naming ``root`` in its
``users`` (a ``run_tasks`` rule without ``users``, or with ``"*"``, never
grants root).

Reading sandboxes (an agent's ``/files``) follows Mesos's
``access_sandboxes``: which principals may read the sandboxes of the
frameworks of which ``framework_principals``. With no rule, operators may
read every sandbox and a framework's principal its own frameworks' only.

Reserving and unreserving are done by operators (over HTTP) and by
frameworks (offer operations) alike, as Mesos's ``reserve_resources``
(which principals may reserve for which ``roles``) and
``unreserve_resources`` (which principals may unreserve what which
``reserver_principals`` reserved). With no rule, operators may do both to
anything, frameworks may reserve (for their own role: the master's check)
and unreserve only what their own principal reserved.
"""

from __future__ import annotations

import base64
import hmac
from typing import Mapping

import attrs

from mesoslike.errors import ConfigError

__all__ = ["ACTIONS", "KINDS", "ANY", "Principal", "Rule", "Acls", "Credentials", "Refused"]

#: the kinds of peer a principal may be
KINDS = ("agent", "framework", "operator")
#: in a rule: any principal, role or user
ANY = "*"
#: action -> the kind of principal allowed it when the file has no rule for it
ACTIONS: Mapping[str, str] = {
    "register_agents": "agent",
    "register_frameworks": "framework",
    "run_tasks": "framework",
    "teardown_frameworks": "operator",
    "kill_tasks": "operator",
    "update_quota": "operator",
    "update_weights": "operator",
    "drain_agents": "operator",
    "reactivate_agents": "operator",
    "mark_agents_gone": "operator",
    "reserve_resources": "operator",
    "unreserve_resources": "operator",
    # the Fuxi service's (``mesoslike fuxi serve --credentials``): submitting jobs to a quota group,
    # and killing jobs another principal submitted (one's own jobs one may always kill)
    "submit_jobs": "framework",
    "kill_jobs": "operator",
    # the service scheduler's (``mesoslike services serve --credentials``): seeing and changing the apps
    # of the listed groups (``/team`` covers ``/team/web``; docs/services.rst)
    "manage_apps": "operator",
    # an agent's /files: the sandboxes of which frameworks (by their principal) a principal may read
    "access_sandboxes": "operator",
}
#: which part of a rule an action's object is checked against
_OBJECTS = {"register_frameworks": "roles", "run_tasks": "users", "submit_jobs": "quota_groups",
            "reserve_resources": "roles", "unreserve_resources": "reserver_principals", "manage_apps": "apps",
            "access_sandboxes": "framework_principals"}
#: how a refusal names an action's object (default: the field's singular, ``user 'root'``)
_OBJECT_TEXT = {"reserve_resources": "for role {!r}", "unreserve_resources": "on what principal {!r} reserved",
                "access_sandboxes": "to the sandboxes of principal {!r}'s frameworks"}
#: with no rule for the action, what a principal of each kind may do as that kind: on any object, or only
#: on its own (the object is the principal itself); the other actions: their ACTIONS kind, any object
_DEFAULTS: Mapping[str, Mapping[str, str]] = {
    "reserve_resources": {"operator": "any", "framework": "any"},
    "unreserve_resources": {"operator": "any", "framework": "own"},
    "access_sandboxes": {"operator": "any", "framework": "own"},
}
#: objects an action allows only when a rule names them: a task runs as root only by an explicit grant
_NAMED_ONLY: Mapping[str, frozenset[str]] = {"run_tasks": frozenset({"root"})}


class Refused(Exception):
    """An action the ACLs do not allow: ``permission`` names the missing
    permission (the ACL's name), the message says who and what."""

    def __init__(self, permission: str, message: str) -> None:
        super().__init__(message)
        self.permission = permission


@attrs.frozen
class Principal:
    name: str
    key: bytes                                    #: CURVE public key, z85
    kinds: frozenset[str]
    token: str = attrs.field(default="", repr=False)
    #: the unix user its work runs as where a service maps principals to users (the Fuxi service's job
    #: workers: docs/security.rst); "" — its own name
    user: str = ""


@attrs.frozen
class Rule:
    """One ACL entry: ``principals`` may do the action, on ``objects``
    (roles or users, as the action says; None for actions without one)."""

    principals: frozenset[str]
    objects: frozenset[str] | None = None

    def grants(self, principal: str, target: str | None, named_only: frozenset[str] = frozenset()) -> bool:
        """Whether the rule lets ``principal`` act (on ``target``). A target
        in ``named_only`` (``root`` for ``run_tasks``) is granted only by a
        rule that names it: never through ``"*"``, nor by a rule without
        objects."""
        if principal not in self.principals and ANY not in self.principals:
            return False
        if target is not None and target in named_only:
            return self.objects is not None and target in self.objects
        if target is None or self.objects is None:
            return True
        return target in self.objects or ANY in self.objects


@attrs.frozen
class Acls:
    """The rules of each action that has some."""

    rules: Mapping[str, tuple[Rule, ...]] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, document: object) -> Acls:
        """The ``[acls]`` table: ``{action: [{principals=[...], roles|users|reserver_principals=[...]}, ...]}``."""
        if document is None:
            return cls()
        if not isinstance(document, dict):
            raise ConfigError("acls: expected a table of actions")
        rules: dict[str, tuple[Rule, ...]] = {}
        for action, entries in document.items():
            if action not in ACTIONS:
                raise ConfigError(f"acls.{action}: unknown action (known: {', '.join(ACTIONS)})")
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ConfigError(f"acls.{action}: expected [[acls.{action}]] entries")
            parsed = []
            for entry in entries:
                field = _OBJECTS.get(action)
                unknown = set(entry) - {"principals", *([field] if field else [])}
                if unknown:
                    raise ConfigError(f"acls.{action}: unknown key(s) {', '.join(sorted(unknown))}")
                objects = _names(entry[field], f"acls.{action}.{field}") if field and field in entry else None
                parsed.append(Rule(_names(entry.get("principals"), f"acls.{action}.principals"), objects))
            rules[action] = tuple(parsed)
        return cls(rules)


def _names(value: object, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: expected a list of names")
    return frozenset(value)


@attrs.frozen
class Credentials:
    """The principals of a cluster and its ACLs."""

    principals: Mapping[str, Principal]
    acls: Acls = attrs.field(factory=Acls)

    def __attrs_post_init__(self) -> None:
        keys: dict[bytes, str] = {}
        for principal in self.principals.values():
            if principal.key in keys:
                raise ConfigError(f"principals {keys[principal.key]} and {principal.name} share a key")
            keys[principal.key] = principal.name
        for action, rules in self.acls.rules.items():
            for rule in rules:
                unknown = rule.principals - set(self.principals) - {ANY}
                if unknown:
                    raise ConfigError(f"acls.{action} names unknown principal(s) {', '.join(sorted(unknown))}")

    def principal_of_key(self) -> dict[bytes, str]:
        """Public key -> principal name (what the ZAP handler lets in). O(principals)."""
        return {p.key: p.name for p in self.principals.values()}

    def principal_of_token(self, token: str) -> str | None:
        """The principal holding HTTP bearer ``token``. O(principals)."""
        for principal in self.principals.values():
            if principal.token and hmac.compare_digest(principal.token.encode(), token.encode()):
                return principal.name
        return None

    def principal_of_authorization(self, header: str | None) -> str | None:
        """The principal an HTTP ``Authorization`` header proves:
        ``Bearer TOKEN``, or ``Basic`` with the token as the password (what
        a browser sends for a link, once asked; the user name is not
        looked at). None for anything else. O(principals)."""
        scheme, _, value = (header or "").strip().partition(" ")
        if scheme.lower() == "bearer":
            return self.principal_of_token(value.strip())
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
            return self.principal_of_token(decoded.partition(":")[2])
        return None

    def may_access_sandboxes(self, principal: str | None, owner: str) -> bool:
        """Whether ``principal`` may read the sandboxes of a framework of
        principal ``owner`` (``access_sandboxes``; with no rule: an
        operator any, a framework principal its own). O(rules)."""
        return any(self.allows("access_sandboxes", principal, owner, kind) for kind in ("operator", "framework"))

    def is_kind(self, principal: str | None, kind: str) -> bool:
        found = self.principals.get(principal) if principal is not None else None
        return found is not None and kind in found.kinds

    def check(self, action: str, principal: str | None, target: str | None = None, kind: str | None = None) -> None:
        """Raise :class:`Refused` unless ``principal`` may do ``action`` (on
        ``target``: the role, the user, the reserver principal), acting as
        a peer of ``kind`` (default: the kind the action is for; it matters
        only when the action has no rule). O(rules of the action)."""
        rules = self.acls.rules.get(action)
        who = principal if principal is not None else "an anonymous peer"
        on = ""
        if target is not None and action in _OBJECTS:
            on = " " + _OBJECT_TEXT.get(action, _OBJECTS[action][:-1] + " {!r}").format(target)
        named_only = _NAMED_ONLY.get(action, frozenset())
        if rules is None:
            kind = kind or ACTIONS[action]
            scope = _DEFAULTS.get(action, {ACTIONS[action]: "any"}).get(kind)
            allowed = scope is not None and self.is_kind(principal, kind) and target not in named_only \
                and (scope == "any" or target == principal)
        else:
            allowed = principal is not None and any(rule.grants(principal, target, named_only) for rule in rules)
        if not allowed:
            raise Refused(action, f"not authorized: principal {who} lacks the {action} permission{on}")

    def allows(self, action: str, principal: str | None, target: str | None = None, kind: str | None = None) -> bool:
        try:
            self.check(action, principal, target, kind)
        except Refused:
            return False
        return True

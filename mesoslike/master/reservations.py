"""Dynamic reservations, sans I/O: what RESERVE and UNRESERVE operations
may do and what they make of resources (docs/framework-api.rst,
"Reservations"; docs/operations.rst, "/reserve and /unreserve").

A reservation operation is a *conversion*: some resources of an agent
become the same quantities reserved otherwise — unreserved ``cpus:2`` into
``cpus(analytics,alice):2`` (RESERVE, by principal ``alice``) or back
(UNRESERVE). The checks follow Mesos's master
(``validation::operation::validate``): a framework reserves only for its
own role (the role its offers are allocated to; Mesos without reservation
refinement), never for ``*``, only unreserved resources, as the principal
it authenticated as; it unreserves only dynamically reserved resources and,
in a cluster with credentials, only those its own principal reserved. An
operator may reserve for any role and unreserve any dynamic reservation,
with the ``reserve_resources`` / ``unreserve_resources`` permissions.
"""

from __future__ import annotations

from typing import Callable

import attrs

from mesoslike.allocator.roles import DEFAULT_ROLE
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources, reservation_of, reservation_principal

__all__ = ["Conversion", "ReservationError", "framework_reserve", "framework_unreserve", "operator_reserve",
           "operator_unreserve", "reservations_json"]


class ReservationError(MesoslikeError, ValueError):
    """A RESERVE or UNRESERVE that may not be applied; the text says why."""


@attrs.frozen
class Conversion:
    """``removed`` becomes ``added`` (the same quantities); ``convert`` does
    the same to any part of ``removed`` (an operation spread over offers)."""

    removed: Resources
    added: Resources
    convert: Callable[[Resources], Resources] = attrs.field(eq=False, repr=False)


def framework_reserve(resources: Resources, role: str, framework_role: str, principal: str) -> Conversion:
    """A framework's RESERVE of ``resources`` for ``role`` ("" = its own)."""
    role = role or framework_role
    if framework_role == DEFAULT_ROLE:
        raise ReservationError("a framework in the default role '*' cannot reserve: resources are reserved "
                               "for the framework's role")
    if role != framework_role:
        raise ReservationError(f"a framework reserves for its own role {framework_role!r} only, not {role!r} "
                               "(the role its offers are allocated to, as in Mesos)")
    return _reserve(resources, role, principal)


def operator_reserve(resources: Resources, principal: str) -> Conversion:
    """An operator's reserve: ``resources`` written reserved for their role
    (``cpus(analytics):2``, Mesos's ``/reserve`` body) become dynamically
    reserved for it by ``principal``."""
    if not resources:
        raise ReservationError("nothing to reserve")
    roles = resources.reservation_roles()
    if resources.unreserved() or len(roles) != 1 or resources.dynamically_reserved():
        raise ReservationError(f"write the resources to reserve with the one role they are for, e.g. "
                               f"cpus(analytics):2;mem(analytics):1024 (got {resources})")
    return _reserve(resources.stripped(), roles[0], principal)


def _reserve(resources: Resources, role: str, principal: str) -> Conversion:
    if not resources:
        raise ReservationError("nothing to reserve")
    try:
        added = resources.as_reserved(role, principal)
    except MesoslikeError as exc:
        raise ReservationError(str(exc)) from None
    return Conversion(resources, added, lambda part: part.as_reserved(role, principal))


def framework_unreserve(resources: Resources, principal: str | None) -> Conversion:
    """A framework's UNRESERVE; ``principal`` is the one it authenticated
    as (None: an anonymous cluster, where anyone may unreserve)."""
    conversion = _unreserve(resources)
    if principal is not None:
        others = sorted({p for p in _principals(resources) if p != principal})
        if others:
            raise ReservationError(f"not authorized: principal {principal} may unreserve only what it reserved, "
                                   f"not what principal(s) {', '.join(repr(p) for p in others)} reserved")
    return conversion


def operator_unreserve(resources: Resources) -> Conversion:
    """An operator's unreserve (the permission was checked: any principal's)."""
    return _unreserve(resources)


def _unreserve(resources: Resources) -> Conversion:
    if not resources:
        raise ReservationError("nothing to unreserve")
    try:
        added = resources.as_unreserved()
    except MesoslikeError as exc:
        raise ReservationError(str(exc)) from None
    return Conversion(resources, added, lambda part: part.as_unreserved())


def _principals(resources: Resources) -> set[str]:
    found = set()
    for kind in (*resources.scalars(), *resources.range_names()):
        principal = reservation_principal(kind)
        if principal is not None:
            found.add(principal)
    return found


def reservations_json(total: Resources) -> list[dict[str, str]]:
    """The reservations of an agent's total for ``/state``: one entry per
    (role, principal) — ``{"role", "type": "static"|"dynamic", "principal"
    (dynamic only), "resources"}`` — sorted."""
    groups: dict[tuple[str, str | None], dict[str, float]] = {}
    ranges: dict[tuple[str, str | None], list[str]] = {}
    for kind, amount in total.scalars().items():
        role = reservation_of(kind)
        if role is not None:
            groups.setdefault((role, reservation_principal(kind)), {})[kind] = amount
    for kind in total.range_names():
        role = reservation_of(kind)
        if role is not None:
            ranges.setdefault((role, reservation_principal(kind)), []).append(kind)
    out = []
    for key in sorted(set(groups) | set(ranges), key=lambda k: (k[0], k[1] is not None, k[1] or "")):
        role, principal = key
        part = Resources(groups.get(key, {}), ranges={kind: total.ranges(kind) for kind in ranges.get(key, [])})
        entry = {"role": role, "type": "static" if principal is None else "dynamic", "resources": str(part)}
        if principal is not None:
            entry["principal"] = principal
        out.append(entry)
    return out

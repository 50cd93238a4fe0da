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
it authenticated as; it unreserves only dynamically reserved resources. An
operator reserves for any role. Who may reserve for which role, and
unreserve what which principal reserved, is the ACLs' to say
(``reserve_resources``, ``unreserve_resources`` in :mod:`mesoslike.acl`;
the master checks them with :func:`reserver_principals`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs

from mesoslike.allocator.roles import DEFAULT_ROLE
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources, reservation_labels, reservation_of, reservation_principal

__all__ = ["Conversion", "ReservationError", "framework_reserve", "operator_reserve", "operator_unreserve", "unreserve",
           "reserver_principals", "reservations_json", "check_reservation_count", "MAX_DYNAMIC_RESERVATIONS_PER_AGENT"]

#: distinct dynamic reservations — (role, principal, labels) — one agent may hold: labels let a framework
#: make a new kind per RESERVE, and every kind costs registry space and allocator time, so they are bounded
MAX_DYNAMIC_RESERVATIONS_PER_AGENT = 64


class ReservationError(MesoslikeError, ValueError):
    """A RESERVE or UNRESERVE that may not be applied; the text says why."""


@attrs.frozen
class Conversion:
    """``removed`` becomes ``added`` (the same quantities); ``convert`` does
    the same to any part of ``removed`` (an operation spread over offers)."""

    removed: Resources
    added: Resources
    convert: Callable[[Resources], Resources] = attrs.field(eq=False, repr=False)


def framework_reserve(resources: Resources, role: str, framework_role: str, principal: str,
                      labels: Sequence[tuple[str, str]] = ()) -> Conversion:
    """A framework's RESERVE of ``resources`` for ``role`` ("" = its own),
    with ``labels`` (Mesos's ``ReservationInfo.labels``)."""
    role = role or framework_role
    if framework_role == DEFAULT_ROLE:
        raise ReservationError("a framework in the default role '*' cannot reserve: resources are reserved "
                               "for the framework's role")
    if role != framework_role:
        raise ReservationError(f"a framework reserves for its own role {framework_role!r} only, not {role!r} "
                               "(the role its offers are allocated to, as in Mesos)")
    return _reserve(resources, role, principal, labels)


def operator_reserve(resources: Resources, principal: str, labels: Sequence[tuple[str, str]] = ()) -> Conversion:
    """An operator's reserve: ``resources`` written reserved for their role
    (``cpus(analytics):2``, Mesos's ``/reserve`` body) become dynamically
    reserved for it by ``principal``."""
    if not resources:
        raise ReservationError("nothing to reserve")
    roles = resources.reservation_roles()
    if resources.unreserved() or len(roles) != 1 or resources.dynamically_reserved():
        raise ReservationError(f"write the resources to reserve with the one role they are for, e.g. "
                               f"cpus(analytics):2;mem(analytics):1024 (got {resources})")
    return _reserve(resources.stripped(), roles[0], principal, labels)


def _reserve(resources: Resources, role: str, principal: str, labels: Sequence[tuple[str, str]]) -> Conversion:
    if not resources:
        raise ReservationError("nothing to reserve")
    labels = tuple(labels)
    try:
        added = resources.as_reserved(role, principal, labels)
    except MesoslikeError as exc:
        raise ReservationError(str(exc)) from None
    return Conversion(resources, added, lambda part: part.as_reserved(role, principal, labels))


def unreserve(resources: Resources) -> Conversion:
    """A framework's UNRESERVE or an operator's unreserve: dynamically
    reserved ``resources`` become unreserved (whose they may unreserve, the
    ACLs say)."""
    if not resources:
        raise ReservationError("nothing to unreserve")
    try:
        added = resources.as_unreserved()
    except MesoslikeError as exc:
        raise ReservationError(str(exc)) from None
    return Conversion(resources, added, lambda part: part.as_unreserved())


def operator_unreserve(resources: Resources, principal: str) -> Conversion:
    """An operator's unreserve of ``resources`` written as ``/state`` shows
    them (``cpus(analytics,ops):2``), or as ``reserve`` takes them — with
    their one role only (``cpus(analytics):2``) — meaning the reservation
    ``reserve`` made of the same string: the role's, by ``principal``. So
    ``mesoslike unreserve`` takes back what ``mesoslike reserve`` was given."""
    roles = resources.reservation_roles()
    if resources and not resources.unreserved() and not resources.dynamically_reserved() and len(roles) == 1:
        try:
            resources = resources.stripped().as_reserved(roles[0], principal)
        except MesoslikeError as exc:
            raise ReservationError(str(exc)) from None
    return unreserve(resources)


def reserver_principals(resources: Resources) -> list[str]:
    """The principals that reserved the dynamically reserved kinds of
    ``resources`` ("" for a reservation made without credentials), sorted."""
    found = set()
    for kind in (*resources.scalars(), *resources.range_names()):
        principal = reservation_principal(kind)
        if principal is not None:
            found.add(principal)
    return sorted(found)


def check_reservation_count(total: Resources) -> None:
    """Raise :class:`ReservationError` if an agent whose total would be
    ``total`` held more than :data:`MAX_DYNAMIC_RESERVATIONS_PER_AGENT`
    distinct dynamic reservations. O(kinds)."""
    dynamic = total.dynamically_reserved()
    held = {kind.partition("(")[2] for kind in (*dynamic.scalars(), *dynamic.range_names())}
    if len(held) > MAX_DYNAMIC_RESERVATIONS_PER_AGENT:
        raise ReservationError(f"the agent would hold {len(held)} distinct dynamic reservations (role, principal, "
                               f"labels); at most {MAX_DYNAMIC_RESERVATIONS_PER_AGENT} are allowed: unreserve some, "
                               "or reserve with labels already in use")


#: a reservation of an agent: (role, reserving principal (None: static), labels)
_Reservation = tuple[str, "str | None", tuple[tuple[str, str], ...]]


def reservations_json(total: Resources) -> list[dict[str, Any]]:
    """The reservations of an agent's total for ``/state``: one entry per
    (role, principal, labels) — ``{"role", "type": "static"|"dynamic",
    "principal" (dynamic only), "labels" (labelled ones only, as
    ``[{"key", "value"}]``), "resources"}`` — sorted."""
    groups: dict[_Reservation, dict[str, float]] = {}
    ranges: dict[_Reservation, list[str]] = {}
    for kind, amount in total.scalars().items():
        role = reservation_of(kind)
        if role is not None:
            groups.setdefault((role, reservation_principal(kind), reservation_labels(kind)), {})[kind] = amount
    for kind in total.range_names():
        role = reservation_of(kind)
        if role is not None:
            ranges.setdefault((role, reservation_principal(kind), reservation_labels(kind)), []).append(kind)
    out = []
    for key in sorted(set(groups) | set(ranges), key=lambda k: (k[0], k[1] is not None, k[1] or "", k[2])):
        role, principal, labels = key
        part = Resources(groups.get(key, {}), ranges={kind: total.ranges(kind) for kind in ranges.get(key, [])})
        entry: dict[str, Any] = {"role": role, "type": "static" if principal is None else "dynamic",
                                 "resources": str(part)}
        if principal is not None:
            entry["principal"] = principal
        if labels:
            entry["labels"] = [{"key": k, "value": v} for k, v in labels]
        out.append(entry)
    return out

"""Values the allocator hands out: offers, rescinds and statistics."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import attrs

from mesoslike.attributes import Attribute, check_attributes, typed_attributes
from mesoslike.resources import Resources

__all__ = ["Offer", "OfferLayout", "issue_offer", "Rescind", "RescindReason", "AllocatorStatistics"]


def _attribute_dict(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})  # a copy: the caller's mapping may change later


@attrs.frozen(slots=True, weakref_slot=False)  # no __weakref__ slot: issue_offer builds it as OfferLayout
class Offer:
    """Resources of one agent offered to one framework — Mesos's ``Offer``:
    id, framework, agent, hostname, resources and the agent's attributes.

    The one offer model: the allocator makes it, the master sends it as it
    is, and a scheduler receives it (``mesoslike.Offer``). Build one with
    keywords, ``Offer(id=..., agent_id=..., hostname=..., resources=...,
    attributes=...)`` (``framework_id`` defaults to ``""``).

    Offered resources count as allocated to the framework until they are
    declined, recovered as the unused part of an accept, rescinded, or used by
    tasks and freed when those end. ``attributes`` is the agent's mapping at
    the time of the offer; treat it as read-only: name -> the canonical text
    of a typed Mesos attribute (text, scalar, ranges or set; checked against
    the grammar when an offer is built or decoded), typed by
    :attr:`typed_attributes`.
    """

    id: str
    agent_id: str
    hostname: str
    resources: Resources
    attributes: dict[str, str] = attrs.field(factory=dict, converter=_attribute_dict, validator=check_attributes)
    framework_id: str = ""

    @property
    def typed_attributes(self) -> dict[str, Attribute]:
        """The agent's attributes typed: name -> :class:`mesoslike.attributes.Attribute`
        (``.type`` TEXT, SCALAR, RANGES or SET, ``.value`` a str, float,
        ((begin, end), ...) or (item, ...))."""
        return typed_attributes(self.attributes)


_new = object.__new__


class OfferLayout:
    """:class:`Offer`'s slots, writable: :func:`issue_offer` (and the offer
    book's loop, which inlines it) fills one and makes it an ``Offer`` (``__class__`` assignment: same slots, no
    ``__dict__`` or ``__weakref__``, so CPython allows it)."""

    __slots__ = Offer.__slots__
    id: str
    agent_id: str
    hostname: str
    resources: Resources
    attributes: dict[str, str]
    framework_id: str


def issue_offer(offer_id: str, framework_id: str, agent_id: str, hostname: str, resources: Resources,
                attributes: dict[str, str]) -> Offer:
    """An :class:`Offer` from values the allocator has already checked, for
    its hot path (a cycle makes one per agent): the fields are stored as
    given, ``attributes`` shared rather than copied — the same value as
    ``Offer(...)``, of the same class. A frozen ``attrs`` class can only be
    filled through ``object.__setattr__`` or its slot descriptors, a call
    per field; plain stores into a writable twin of the same layout, then
    one class switch, cost half as much."""
    offer = _new(OfferLayout)
    offer.id = offer_id
    offer.agent_id = agent_id
    offer.hostname = hostname
    offer.resources = resources
    offer.attributes = attributes
    offer.framework_id = framework_id
    offer.__class__ = Offer  # type: ignore[assignment]
    return offer  # type: ignore[return-value]


class RescindReason:
    """Why the allocator took an outstanding offer back."""

    OFFER_TIMEOUT = "offer_timeout"
    AGENT_REMOVED = "agent_removed"
    AGENT_DEACTIVATED = "agent_deactivated"
    FRAMEWORK_DEACTIVATED = "framework_deactivated"
    FRAMEWORK_REMOVED = "framework_removed"
    WEIGHTS_UPDATED = "weights_updated"
    QUOTA_UPDATED = "quota_updated"
    OPERATOR = "operator"


@attrs.frozen(slots=True)
class Rescind:
    """An offer the allocator rescinded; its resources are already back in
    the pool, and the framework should be told (``offer_rescinded``)."""

    offer: Offer
    reason: str


def _frozen_map(value: Mapping) -> Mapping:
    return MappingProxyType(dict(value))


@attrs.frozen
class AllocatorStatistics:
    """A frozen snapshot of the allocator's counters and shares."""

    cycles: int
    offers_made: int
    offers_filtered: int
    offers_declined: int
    offers_accepted: int
    offers_rescinded: int
    outstanding_offers: int
    active_filters: int
    agents: int
    frameworks: int
    last_cycle_duration: float
    last_cycle_offers: int
    total: Resources
    allocated: Resources
    role_shares: Mapping[str, float] = attrs.field(converter=_frozen_map)
    framework_shares: Mapping[str, float] = attrs.field(converter=_frozen_map)
    #: reservations by the role they are for, static and dynamic (whose kinds name the reserving
    #: principal): ``{"analytics": cpus(analytics):4;cpus(analytics,alice):2;...}``
    reserved: Mapping[str, Resources] = attrs.field(factory=dict, converter=_frozen_map)
    #: what the frameworks of each role hold (offered + used), reserved kinds
    #: kept apart: ``.reserved()`` / ``.unreserved()`` split it
    role_allocated: Mapping[str, Resources] = attrs.field(factory=dict, converter=_frozen_map)

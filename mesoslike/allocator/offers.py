"""Values the allocator hands out: offers, rescinds and statistics."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping

import msgspec

from mesoslike.attributes import Attribute, check_attributes, typed_attributes
from mesoslike.converted_structs import ConvertedWhenMade, made_unconverted
from mesoslike.resources import Resources

__all__ = ["Offer", "issue_offer", "Rescind", "RescindReason", "AllocatorStatistics"]


class Offer(msgspec.Struct, frozen=True, gc=False, metaclass=ConvertedWhenMade):
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

    A frozen ``msgspec.Struct`` (built, encoded and decoded in C; out of the
    collector's passes: it holds no cycles). ``attributes`` is copied and
    checked when one is made by a call and when one is decoded alike
    (:class:`~mesoslike.converted_structs.ConvertedWhenMade`); the allocator
    makes its offers with :func:`issue_offer`, from agents' attributes
    checked already.
    """

    id: str
    agent_id: str
    hostname: str
    resources: Resources
    attributes: dict[str, str] = {}
    framework_id: str = ""

    #: what a decoded offer's fields need checked, when not empty (ConvertedWhenMade)
    __wire_converters__: ClassVar[dict[str, Callable[[Any], Any]]]

    def _convert(self) -> None:
        # what attrs's converter and validator did: a copy (the caller's mapping may change later), checked
        attributes = self.attributes
        if attributes or type(attributes) is not dict:
            attributes = dict(attributes or {})
            check_attributes(self, None, attributes)
            msgspec.structs.force_setattr(self, "attributes", attributes)

    @property
    def typed_attributes(self) -> dict[str, Attribute]:
        """The agent's attributes typed: name -> :class:`mesoslike.attributes.Attribute`
        (``.type`` TEXT, SCALAR, RANGES or SET, ``.value`` a str, float,
        ((begin, end), ...) or (item, ...))."""
        return typed_attributes(self.attributes)


def _checked_attributes(attributes: dict[str, str]) -> dict[str, str]:
    check_attributes(None, None, attributes)   # (a decoded map is a fresh dict already)
    return attributes


Offer.__wire_converters__ = {"attributes": _checked_attributes}


def issue_offer(offer_id: str, framework_id: str, agent_id: str, hostname: str, resources: Resources,
                attributes: dict[str, str]) -> Offer:
    """An :class:`Offer` from values the allocator has already checked, for
    its hot path (a cycle makes one per agent): the fields are stored as
    given, ``attributes`` shared rather than copied — the same value as
    ``Offer(...)``, of the same class, made by msgspec's constructor without
    the conversion (~0.09 µs against 0.16 for the attrs class it was, filled
    through a writable twin of its slots)."""
    offer: Offer = made_unconverted(Offer, offer_id, agent_id, hostname, resources, attributes, framework_id)
    return offer


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


class Rescind(msgspec.Struct, frozen=True, gc=False):
    """An offer the allocator rescinded; its resources are already back in
    the pool, and the framework should be told (``offer_rescinded``).

    A frozen ``msgspec.Struct`` (an attrs class before: the same fields,
    equality, hash and repr, without importing attrs; out of the
    collector's passes: an offer and a string hold no cycles)."""

    offer: Offer
    reason: str


def _frozen_map(value: Mapping) -> Mapping:
    return MappingProxyType(dict(value))


class AllocatorStatistics(msgspec.Struct, frozen=True):
    """A frozen snapshot of the allocator's counters and shares.

    A frozen ``msgspec.Struct`` (an attrs class before: the same fields,
    positional order, equality and repr, without importing attrs). The maps
    are made read-only copies (``MappingProxyType``) by ``__post_init__``,
    as attrs's converters did, defaults included."""

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
    role_shares: Mapping[str, float]
    framework_shares: Mapping[str, float]
    #: reservations by the role they are for, static and dynamic (whose kinds name the reserving
    #: principal): ``{"analytics": cpus(analytics):4;cpus(analytics,alice):2;...}``
    reserved: Mapping[str, Resources] = msgspec.field(default_factory=dict)
    #: what the frameworks of each role hold (offered + used), reserved kinds
    #: kept apart: ``.reserved()`` / ``.unreserved()`` split it
    role_allocated: Mapping[str, Resources] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("role_shares", "framework_shares", "reserved", "role_allocated"):
            msgspec.structs.force_setattr(self, name, _frozen_map(getattr(self, name)))

"""Values the allocator hands out: offers, rescinds and statistics."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

import attrs

from mesoslike.resources import Resources

__all__ = ["Offer", "Rescind", "RescindReason", "AllocatorStatistics"]


class Offer(NamedTuple):
    """Resources of one agent offered to one framework.

    Offered resources count as allocated to the framework until they are
    declined, recovered as the unused part of an accept, rescinded, or used by
    tasks and freed when those end. (A named tuple: immutable, and the
    cheapest value Python can make — a cycle makes one per agent.)
    """

    id: str
    framework_id: str
    agent_id: str
    resources: Resources
    hostname: str = ""
    attributes: Mapping[str, str] = MappingProxyType({})
    created_at: float = 0.0


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

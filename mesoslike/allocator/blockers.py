"""Why a framework gets no offers: the answer the allocator gives on demand
(:meth:`HierarchicalAllocator.offer_blockers`), never computed by an
allocation cycle.

Each :class:`OfferBlocker` names one reason, Mesos-style in upper case, with
a sentence for people and the figures behind it (``details``, plain JSON
values), so that ``/state``, ``mesoslike state`` and the dashboard can show
the same thing:

==================  =============================================================
reason              what holds the offers back
==================  =============================================================
``INACTIVE``        the framework is disconnected (failing over)
``SUPPRESSED``      it suppressed offers for its role (until it revives)
``DECLINE_FILTERS`` decline filters of its own, on agents that could take it
                    (how many, on how many agents, the soonest expiry)
``QUOTA_LIMIT``     its role (or an ancestor) reached its quota limit
``QUOTA_HEADROOM``  what is free is held for other roles' quota guarantees
``NO_AGENTS``       no agent is active (none registered, or all drained)
``MIN_ALLOCATABLE`` no agent has free what its minimum allocatable needs:
                    everything is offered to or used by others, or too small
``WEIGHT_SHARE``    (with ``MIN_ALLOCATABLE``) where its role stands in the
                    allocation order: weight, dominant share, position
``PENDING``         nothing blocks it: the next allocation offers to it
==================  =============================================================
"""

from __future__ import annotations

import attrs

__all__ = ["OfferBlocker", "INACTIVE", "SUPPRESSED", "DECLINE_FILTERS", "QUOTA_LIMIT", "QUOTA_HEADROOM",
           "NO_AGENTS", "MIN_ALLOCATABLE", "WEIGHT_SHARE", "PENDING"]

INACTIVE = "INACTIVE"
SUPPRESSED = "SUPPRESSED"
DECLINE_FILTERS = "DECLINE_FILTERS"
QUOTA_LIMIT = "QUOTA_LIMIT"
QUOTA_HEADROOM = "QUOTA_HEADROOM"
NO_AGENTS = "NO_AGENTS"
MIN_ALLOCATABLE = "MIN_ALLOCATABLE"
WEIGHT_SHARE = "WEIGHT_SHARE"
PENDING = "PENDING"


@attrs.frozen
class OfferBlocker:
    """One reason a framework gets no offers now."""

    reason: str
    message: str
    #: the figures behind it (JSON values: numbers, strings, lists of strings)
    details: dict = attrs.field(factory=dict)

    def to_json(self) -> dict:
        return {"reason": self.reason, "message": self.message, **self.details}


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

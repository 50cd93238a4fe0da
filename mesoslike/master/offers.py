"""The master's offers to frameworks (sans I/O): sent as the allocator
makes them, taken back when they expire (``offer_timeout``) or the
allocator rescinds them, declined, and a framework's SUPPRESS and REVIVE.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterable

from mesoslike.allocator import RescindReason
from mesoslike.master.context import CoreContext
from mesoslike.master.records import clip
from mesoslike.observations import LATENCY_BUCKETS, Histogram
from mesoslike.wire import Offer
from mesoslike.wire import messages as m

__all__ = ["OfferDesk"]

log = logging.getLogger("mesoslike.master")


class OfferDesk:
    """Offers made and answered. O(offers) per batch made or expired."""

    def __init__(self, context: CoreContext) -> None:
        self._context = context
        #: (deadline, offer id) of the offers made, oldest first (all share offer_timeout)
        self._deadlines: deque[tuple[float, str]] = deque()
        #: seconds from an offer made to its ACCEPT/DECLINE (/metrics)
        self.round_trips = Histogram(LATENCY_BUCKETS)

    def send(self, offers: Iterable[Offer]) -> None:
        """Send the allocator's offers to their frameworks (the wire's offers: sent as they are)."""
        context = self._context
        by_framework: dict[str, list[Offer]] = {}
        timeout = context.config.offer_timeout
        deadline = context.clock.now() + timeout if timeout is not None else None
        for offer in offers:
            by_framework.setdefault(offer.framework_id, []).append(offer)
            if deadline is not None:
                self._deadlines.append((deadline, offer.id))
        for framework_id, batch in by_framework.items():
            record = context.frameworks.get(framework_id)
            if record is not None and record.connected:
                context.out.send_framework(record, m.Offers(batch))

    def expire(self, now: float) -> None:
        """Offers unanswered for ``offer_timeout``: taken back, and counted as
        declined for ``offer_timeout`` seconds (a filter), the framework told
        (RESCIND_OFFER, reason ``offer_timeout``), counted in
        ``offers_expired``. Mesos only takes such offers back; without the
        filter the framework that never answers, holding nothing, would
        come first in DRF order and get the same resources straight back, so
        hoarding would go on. O(offers expired)."""
        context = self._context
        timeout = context.config.offer_timeout
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            offer_id = deadlines.popleft()[1]
            offer = context.allocator.get_offer(offer_id)
            if offer is None or timeout is None:
                continue  # answered or rescinded meanwhile
            context.allocator.decline_offer(offer_id, timeout)
            context.counters["offers_expired"] += 1
            record = context.frameworks.get(offer.framework_id)
            if record is not None and record.connected:
                context.out.send_framework(record, m.RescindOffer(offer_id, RescindReason.OFFER_TIMEOUT))

    def next_expiry(self) -> float:
        """When the oldest outstanding offer expires (inf: none may)."""
        return self._deadlines[0][0] if self._deadlines else float("inf")

    def send_rescinds(self) -> None:
        """Tell frameworks of the offers the allocator took back."""
        context = self._context
        for rescind in context.allocator.drain_rescinds():
            record = context.frameworks.get(rescind.offer.framework_id)
            if record is not None and record.connected:
                context.out.send_framework(record, m.RescindOffer(rescind.offer.id, rescind.reason))

    def answered(self, offer_id: str) -> None:
        """An offer was accepted or declined: how long it took (/metrics)."""
        made = self._context.allocator.offer_made_at(offer_id)
        if made is not None:
            self.round_trips.observe(max(0.0, self._context.clock.now() - made))

    # ------------------------------------------------------------ messages
    def decline(self, peer: bytes, msg: m.Decline, principal: str | None) -> None:
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        for offer_id in msg.offer_ids:
            offer = context.allocator.get_offer(offer_id)
            if offer is not None and offer.framework_id == record.id:
                self.answered(offer_id)
                context.allocator.decline_offer(offer_id, msg.filters.refuse_seconds)
            else:
                log.info("framework %s declined unknown offer %s", record.id, clip(offer_id))

    def revive(self, peer: bytes, msg: m.Revive, principal: str | None) -> None:
        record = self._context.framework_for(peer, msg.framework_id)
        if record is not None:
            self._context.allocator.revive_offers(record.id)
            record.suppressed = False

    def suppress(self, peer: bytes, msg: m.Suppress, principal: str | None) -> None:
        record = self._context.framework_for(peer, msg.framework_id)
        if record is not None:
            self._context.allocator.suppress_offers(record.id)
            record.suppressed = True

"""The offer book: outstanding offers by id, by framework and agent, with
when each was made (for timeouts and the oldest-first order of rescinds).

It makes the offer ids (``<prefix><serial>``) and the offers themselves, and
forgets an offer when it is answered or rescinded. It never touches
resources: the allocator moves those through the agent book.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator, Mapping

from mesoslike.allocator.agents import Agent
from mesoslike.allocator.offers import Offer, issue_offer
from mesoslike.errors import UnknownOfferError
from mesoslike.resources import Resources

__all__ = ["OfferBook"]

_NONE: Mapping[str, Offer] = {}


class OfferBook:
    """Outstanding offers.

    Complexity: making, finding and retiring an offer are O(1); the offers of
    a framework come in O(its offers · log); ``timed_out`` is O(expired).
    """

    def __init__(self, id_prefix: str = "O", track_times: bool = False) -> None:
        self._prefix = id_prefix
        self._serial = 0
        self._offers: dict[str, Offer] = {}
        self._created: dict[str, float] = {}
        #: framework -> agent -> offer id -> offer
        self._by_framework: dict[str, dict[str, dict[str, Offer]]] = {}
        self._track_times = track_times
        self._times: deque[tuple[float, str]] = deque()  # creation order, for timeouts

    # ---------------------------------------------------------------- making
    def issue(self, grants: Mapping[tuple[str, Agent], Resources], now: float) -> list[Offer]:
        """One offer per (framework id, agent) -> resources of ``grants``, in
        that order, made at ``now``. O(grants)."""
        offers = []
        prefix, serial = self._prefix, self._serial
        table, created, by_framework = self._offers, self._created, self._by_framework
        for (framework_id, agent), resources in grants.items():
            agent_id = agent.id
            serial += 1
            offer_id = f"{prefix}{serial}"
            offer = issue_offer(offer_id, framework_id, agent_id, agent.hostname, resources, agent.attributes)
            table[offer_id] = offer
            created[offer_id] = now
            on_agents = by_framework.get(framework_id)
            if on_agents is None:
                by_framework[framework_id] = {agent_id: {offer_id: offer}}
            else:
                on_agent = on_agents.get(agent_id)
                if on_agent is None:
                    on_agents[agent_id] = {offer_id: offer}
                else:
                    on_agent[offer_id] = offer
            offers.append(offer)
        self._serial = serial
        if self._track_times:
            self._times.extend((now, offer.id) for offer in offers)
        return offers

    def retire(self, offer: Offer) -> None:
        """Forget an answered or rescinded offer."""
        del self._offers[offer.id]
        del self._created[offer.id]
        on_agents = self._by_framework[offer.framework_id]
        on_agent = on_agents[offer.agent_id]
        del on_agent[offer.id]
        if not on_agent:
            del on_agents[offer.agent_id]
            if not on_agents:
                del self._by_framework[offer.framework_id]

    def replace(self, offer: Offer, resources: Resources) -> Offer:
        """The outstanding ``offer`` with other resources (an operation
        converted part of them), under the same id and creation time."""
        new = issue_offer(offer.id, offer.framework_id, offer.agent_id, offer.hostname, resources, offer.attributes)
        self._offers[offer.id] = new
        self._by_framework[offer.framework_id][offer.agent_id][offer.id] = new
        return new

    # --------------------------------------------------------------- lookups
    def get(self, offer_id: str) -> Offer | None:
        return self._offers.get(offer_id)

    def require(self, offer_id: str) -> Offer:
        """The outstanding offer, or :class:`UnknownOfferError`."""
        try:
            return self._offers[offer_id]
        except (KeyError, TypeError):
            raise UnknownOfferError(f"offer {offer_id!r} is not outstanding") from None

    def created_at(self, offer_id: str) -> float:
        return self._created[offer_id]

    def of_framework(self, framework_id: str) -> list[Offer]:
        """The framework's offers, oldest first."""
        on_agents = self._by_framework.get(framework_id, {})
        created = self._created
        return sorted((o for offers in on_agents.values() for o in offers.values()), key=lambda o: created[o.id])

    def on(self, framework_id: str, agent_id: str) -> Mapping[str, Offer]:
        """The framework's offers on the agent, by id (read-only)."""
        return self._by_framework.get(framework_id, {}).get(agent_id, _NONE)

    def oldest_first(self, offers: list[Offer]) -> list[Offer]:
        """``offers`` by creation time, then id."""
        created = self._created
        return sorted(offers, key=lambda o: (created[o.id], o.id))

    def __iter__(self) -> Iterator[Offer]:
        """Every outstanding offer, in the order they were made."""
        return iter(self._offers.values())

    def __len__(self) -> int:
        return len(self._offers)

    # -------------------------------------------------------------- timeouts
    def timed_out(self, deadline: float) -> list[Offer]:
        """Outstanding offers made at or before ``deadline``, oldest first
        (only when made with ``track_times``)."""
        times, table = self._times, self._offers
        expired = []
        while times and times[0][0] <= deadline:
            _, offer_id = times.popleft()
            offer = table.get(offer_id)
            if offer is not None:  # else answered or rescinded already
                expired.append(offer)
        return expired

    def oldest_time(self) -> float | None:
        """When the oldest outstanding offer was made (with ``track_times``)."""
        times = self._times
        while times and times[0][1] not in self._offers:
            times.popleft()  # answered offers leave stale entries behind
        return times[0][0] if times else None

    # ---------------------------------------------------------------- checks
    def snapshot(self) -> dict[str, dict[str, object]]:
        return {o.id: {"framework_id": o.framework_id, "agent_id": o.agent_id, "resources": str(o.resources),
                       "created_at": self._created[o.id]}
                for o in self._offers.values()}

    def _check(self) -> None:
        """Raise ``AssertionError`` unless the indexes agree with each other."""
        indexed = 0
        for framework_id, on_agents in self._by_framework.items():
            assert on_agents, f"framework {framework_id}: empty index kept"
            for agent_id, offers in on_agents.items():
                assert offers, f"{framework_id}@{agent_id}: empty index kept"
                for offer_id, offer in offers.items():
                    assert self._offers.get(offer_id) is offer, f"offer {offer_id} indexed but not outstanding"
                    assert (offer.framework_id, offer.agent_id) == (framework_id, agent_id), \
                        f"offer {offer_id} filed under {framework_id}@{agent_id}"
                    indexed += 1
        assert indexed == len(self._offers), f"{len(self._offers)} offers, {indexed} indexed"
        assert self._created.keys() == self._offers.keys(), "creation times out of step with the offers"

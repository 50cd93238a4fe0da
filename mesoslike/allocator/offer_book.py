"""The offer book: outstanding offers by id, by framework and agent, with
when each was made (for timeouts and the oldest-first order of rescinds).

It makes the offer ids (``<prefix><serial>``) and the offers themselves, and
forgets an offer when it is answered or rescinded. It never touches
resources: the allocator moves those through the agent book.

Offers are filed by framework and agent lazily: most are answered by id
(declined, accepted) before anyone asks for a framework's offers, and an
offer answered before it was filed is never filed. A cycle that makes
100,000 offers so saves a dict per offer.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator, Mapping

from mesoslike.allocator.agents import Agent
from mesoslike.allocator.offers import Offer, issue_offer
from mesoslike.converted_structs import made_unconverted
from mesoslike.errors import UnknownOfferError
from mesoslike.resources import Resources

__all__ = ["OfferBook"]

_NONE: Mapping[str, Offer] = {}
_NO_AGENTS: dict[str, dict[str, Offer]] = {}  # read only


class OfferBook:
    """Outstanding offers.

    Complexity: making, finding and retiring an offer are O(1); the offers of
    a framework come in O(its offers · log), plus filing the offers made
    since the last such query (each offer is filed once at most: amortised
    O(1) an offer); ``timed_out`` is O(expired).
    """

    def __init__(self, id_prefix: str = "O", track_times: bool = False) -> None:
        self._prefix = id_prefix
        self._serial = 0
        self._offers: dict[str, Offer] = {}
        self._created: dict[str, float] = {}
        #: framework -> agent -> offer id -> offer, for the offers filed (_file)
        self._by_framework: dict[str, dict[str, dict[str, Offer]]] = {}
        #: offers made, in order, and not yet filed by framework (answered ones are skipped then)
        self._unfiled: list[Offer] = []
        self._answered_unfiled = 0  # how many of those were answered since
        self._track_times = track_times
        self._times: deque[tuple[float, str]] = deque()  # creation order, for timeouts

    # ---------------------------------------------------------------- making
    def issue(self, grants: Mapping[tuple[str, Agent], Resources], now: float) -> list[Offer]:
        """One offer per (framework id, agent) -> resources of ``grants``, in
        that order, made at ``now``. O(grants)."""
        return self.issue_rows([(framework_id, agent, resources)
                                for (framework_id, agent), resources in grants.items()], now)

    def issue_rows(self, rows: list[tuple[str, Agent, Resources]], now: float) -> list[Offer]:
        """One offer per (framework id, agent, resources) row, in that order,
        made at ``now`` (a row per (framework, agent) at most). O(rows)."""
        offers: list[Offer] = []
        append = offers.append
        prefix, serial = self._prefix, self._serial
        table, created = self._offers, self._created
        unfiled = self._unfiled
        if self._answered_unfiled == len(unfiled):
            unfiled.clear()  # all answered while nobody asked (a decline-all cycle): nothing to file
            self._answered_unfiled = 0
        for framework_id, agent, resources in rows:
            serial += 1
            offer_id = f"{prefix}{serial}"
            # issue_offer inlined: a call an offer saved
            offer = made_unconverted(Offer, offer_id, agent.id, agent.hostname, resources, agent.attributes,
                                     framework_id)
            table[offer_id] = offer
            created[offer_id] = now
            append(offer)
        self._serial = serial
        unfiled.extend(offers)
        if self._answered_unfiled > 1024 + len(unfiled) // 2:
            # answered offers pile up while nobody asks: drop them (each once, so O(1) an offer)
            self._unfiled = [offer for offer in unfiled if table.get(offer.id) is offer]
            self._answered_unfiled = 0
        if self._track_times:
            self._times.extend((now, offer.id) for offer in offers)
        return offers

    def _file(self) -> None:
        """File the offers made since the last call, by framework and agent,
        skipping those answered meanwhile. O(offers made since)."""
        unfiled = self._unfiled
        if not unfiled:
            return
        self._unfiled, self._answered_unfiled = [], 0
        table, by_framework = self._offers, self._by_framework
        for offer in unfiled:
            offer_id = offer.id
            if table.get(offer_id) is not offer:
                continue  # answered or rescinded before anyone asked
            framework_id, agent_id = offer.framework_id, offer.agent_id
            on_agents = by_framework.get(framework_id)
            if on_agents is None:
                by_framework[framework_id] = {agent_id: {offer_id: offer}}
            else:
                on_agent = on_agents.get(agent_id)
                if on_agent is None:
                    on_agents[agent_id] = {offer_id: offer}
                else:
                    on_agent[offer_id] = offer

    def retire(self, offer: Offer) -> None:
        """Forget an answered or rescinded offer."""
        del self._offers[offer.id]
        del self._created[offer.id]
        on_agents = self._by_framework.get(offer.framework_id, _NO_AGENTS)
        on_agent = on_agents.get(offer.agent_id)
        if on_agent is None or on_agent.pop(offer.id, None) is None:
            self._answered_unfiled += 1  # not filed yet: skipped when filed or dropped
            return
        if not on_agent:
            del on_agents[offer.agent_id]
            if not on_agents:
                del self._by_framework[offer.framework_id]

    def replace(self, offer: Offer, resources: Resources) -> Offer:
        """The outstanding ``offer`` with other resources (an operation
        converted part of them), under the same id and creation time."""
        self._file()  # the offer in the index too, before it changes
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
        self._file()
        on_agents = self._by_framework.get(framework_id, {})
        created = self._created
        return sorted((o for offers in on_agents.values() for o in offers.values()), key=lambda o: created[o.id])

    def on(self, framework_id: str, agent_id: str) -> Mapping[str, Offer]:
        """The framework's offers on the agent, by id (read-only)."""
        self._file()
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
        self._file()
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

"""A textbook DRF offer allocator: the baseline of ``bench/allocator.py``.

Same observable semantics as :class:`mesoslike.allocator.HierarchicalAllocator`
for what the benchmark exercises (roles and frameworks ordered by weighted
dominant share, then allocations received, then name; coarse-grained
whole-agent offers; minimum allocatable resources; decline filters with
containment semantics, ``max(allocation_interval, refuse_seconds)`` expiry
and the 365-day cap), but with the naive algorithm:

* for **every agent** of a cycle, every role and every framework is sorted
  again, and each one's dominant share is computed from scratch (max over
  resource kinds of allocated/total) — O(F log F) per agent, O(A·F log F)
  per cycle;
* a decline filter is found by scanning that framework's list of filters
  linearly — O(filters of the framework) per (agent, framework) check;
* expired filters are dropped by one linear sweep at the start of a cycle.

What it does keep incrementally is each framework's (and role's) allocation
vector, as the DRF paper's algorithm does: recomputing it from every agent
would make the baseline quadratic in the cluster and not worth comparing.

It reuses :class:`mesoslike.resources.Resources` for all arithmetic and
:class:`mesoslike.allocator.Offer` for offers (made as the allocator makes them,
with ``issue_offer``), and it shuffles the agents of a
cycle exactly as the allocator does (``sorted`` then ``rng.shuffle``), so with
the same seed and the same history both make the *same* offers — the bench
checks that.

Only what the benchmark needs is implemented: no quota, no weights API, no
suppress/revive, no agent or framework removal, no offer timeouts.
"""

from __future__ import annotations

import itertools
import random
from typing import Iterable

from mesoslike.allocator import Offer, parse_min_allocatable
from mesoslike.allocator.offers import issue_offer
from mesoslike.clock import Clock
from mesoslike.resources import Resources

__all__ = ["TextbookDRFAllocator"]

EMPTY = Resources()
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0


class _Agent:
    __slots__ = ("id", "total", "available")

    def __init__(self, agent_id: str, total: Resources) -> None:
        self.id = agent_id
        self.total = total
        self.available = total


class _Client:
    """A role or a framework: a running allocation vector and a counter."""

    __slots__ = ("id", "role", "alloc", "count", "filters", "used")

    def __init__(self, client_id: str, role: str | None = None) -> None:
        self.id = client_id
        self.role = role
        self.alloc: dict[str, int] = {}           # scalar millis held (offered + used)
        self.count = 0                            # allocations received
        self.filters: list[tuple[str, Resources, float]] = []  # (agent, refused, expires_at)
        self.used: dict[str, Resources] = {}       # agent -> used by tasks


class TextbookDRFAllocator:
    """Naive DRF: sort everything from scratch for every agent."""

    def __init__(
        self,
        clock: Clock,
        *,
        allocation_interval: float = 1.0,
        min_allocatable: str = "cpus:0.01|mem:32",
        rng: random.Random | None = None,
    ) -> None:
        self.clock = clock
        self.allocation_interval = float(allocation_interval)
        self.min_allocatable = parse_min_allocatable(min_allocatable)
        self._rng = rng if rng is not None else random.Random(0)
        self._agents: dict[str, _Agent] = {}
        self._frameworks: dict[str, _Client] = {}
        self._roles: dict[str, _Client] = {}
        self._total: dict[str, int] = {}
        self._offers: dict[str, Offer] = {}
        self._offer_ids = (f"T{n}" for n in itertools.count(1))
        self.offers_filtered = 0
        self.filter_checks = 0

    # ------------------------------------------------------------ membership
    def add_agent(self, agent_id: str, total: Resources) -> None:
        if agent_id in self._agents:
            raise ValueError(f"agent {agent_id!r} was already added")
        self._agents[agent_id] = _Agent(agent_id, total)
        for kind, amount in total.millis().items():
            self._total[kind] = self._total.get(kind, 0) + amount

    def add_framework(self, framework_id: str, role: str = "*") -> None:
        if framework_id in self._frameworks:
            raise ValueError(f"framework {framework_id!r} was already added")
        self._frameworks[framework_id] = _Client(framework_id, role)
        if role not in self._roles:
            self._roles[role] = _Client(role)

    # ------------------------------------------------------------ ordering
    def _share(self, client: _Client) -> float:
        """Dominant share, computed from scratch (all weights are 1)."""
        total = self._total
        dominant = 0.0
        for kind, amount in client.alloc.items():
            pool = total.get(kind)
            if pool:
                ratio = amount / pool
                if ratio > dominant:
                    dominant = ratio
        return dominant

    def _sorted(self, clients: Iterable[_Client]) -> list[_Client]:
        return sorted(clients, key=lambda c: (self._share(c), c.count, c.id))

    # ------------------------------------------------------------ allocation
    def allocate(self, agent_ids: Iterable[str] | None = None) -> list[Offer]:
        now = self.clock.now()
        self._expire_filters(now)
        if agent_ids is None:
            candidates = sorted(a.id for a in self._agents.values() if a.available)
        else:
            candidates = sorted(a for a in set(agent_ids) if self._agents[a].available)
        self._rng.shuffle(candidates)
        # membership does not change during a cycle: group frameworks once
        frameworks_of: dict[str, list[_Client]] = {}
        for framework in self._frameworks.values():
            frameworks_of.setdefault(framework.role, []).append(framework)
        offers = []
        for agent_id in candidates:
            offer = self._allocate_agent(self._agents[agent_id], frameworks_of, now)
            if offer is not None:
                offers.append(offer)
        return offers

    def _allocate_agent(self, agent: _Agent, frameworks_of: dict[str, list[_Client]], now: float) -> Offer | None:
        offer = agent.available
        if not offer or not any(offer.contains(m) for m in self.min_allocatable):
            return None
        for role in self._sorted(self._roles.values()):
            for framework in self._sorted(frameworks_of.get(role.id, ())):
                if self._filtered(framework, agent.id, offer, now):
                    self.offers_filtered += 1
                    continue
                return self._grant(framework, role, agent, offer, now)
        return None

    def _filtered(self, framework: _Client, agent_id: str, offer: Resources, now: float) -> bool:
        for filter_agent, refused, expires_at in framework.filters:
            self.filter_checks += 1
            if filter_agent == agent_id and expires_at > now and refused.contains(offer):
                return True
        return False

    def _grant(self, framework: _Client, role: _Client, agent: _Agent, resources: Resources, now: float) -> Offer:
        agent.available = agent.available - resources
        for client in (framework, role):
            self._add(client, resources, 1)
            client.count += 1
        offer = issue_offer(next(self._offer_ids), framework.id, agent.id, agent.id, resources, {})
        self._offers[offer.id] = offer
        return offer

    # --------------------------------------------------------- bookkeeping
    @staticmethod
    def _add(client: _Client, resources: Resources, sign: int) -> None:
        alloc = client.alloc
        for kind, amount in resources.millis().items():
            left = alloc.get(kind, 0) + sign * amount
            if left:
                alloc[kind] = left
            else:
                alloc.pop(kind, None)

    def _release(self, framework: _Client, agent: _Agent, resources: Resources) -> None:
        agent.available = agent.available + resources
        self._add(framework, resources, -1)
        self._add(self._roles[framework.role], resources, -1)

    def _add_filter(self, framework: _Client, agent_id: str, refused: Resources, refuse_seconds: float) -> None:
        refuse = min(float(refuse_seconds), MAX_REFUSE_SECONDS)
        if refuse > 0 and refused:
            timeout = max(self.allocation_interval, refuse)
            framework.filters.append((agent_id, refused, self.clock.now() + timeout))

    def _expire_filters(self, now: float) -> None:
        for framework in self._frameworks.values():
            if framework.filters:
                framework.filters = [f for f in framework.filters if f[2] > now]

    # -------------------------------------------------------------- answers
    def decline_offer(self, offer_id: str, refuse_seconds: float = 5.0) -> None:
        offer = self._offers.pop(offer_id)
        framework = self._frameworks[offer.framework_id]
        self._release(framework, self._agents[offer.agent_id], offer.resources)
        self._add_filter(framework, offer.agent_id, offer.resources, refuse_seconds)

    def accept_offer(self, offer_id: str, used: Resources, refuse_seconds: float = 5.0) -> Resources:
        offer = self._offers.pop(offer_id)
        framework = self._frameworks[offer.framework_id]
        framework.used[offer.agent_id] = framework.used.get(offer.agent_id, EMPTY) + used
        unused = offer.resources - used
        if unused:
            self._release(framework, self._agents[offer.agent_id], unused)
            self._add_filter(framework, offer.agent_id, unused, refuse_seconds)
        return unused

    def recover_resources(self, framework_id: str, agent_id: str, resources: Resources,
                          refuse_seconds: float = 0.0) -> None:
        """Tasks ended: give back resources the framework's tasks used there."""
        framework = self._frameworks[framework_id]
        used = framework.used.get(agent_id, EMPTY)
        left = used - resources  # raises unless the tasks held that much
        if left:
            framework.used[agent_id] = left
        else:
            framework.used.pop(agent_id, None)
        self._release(framework, self._agents[agent_id], resources)
        self._add_filter(framework, agent_id, resources, refuse_seconds)

    # --------------------------------------------------------------- queries
    def outstanding_offers(self) -> int:
        return len(self._offers)

    def active_filters(self) -> int:
        return sum(len(f.filters) for f in self._frameworks.values())

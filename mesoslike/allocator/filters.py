"""Decline filters: "don't offer me this agent again for N seconds".

A filter belongs to a framework (and so to its role) and an agent, and blocks
a later offer only if that offer is *contained* in what was refused: an agent
that now has more to give is offered again. Filters expire on their own; a
heap of expiry times makes the sweep O(expired · log n).
"""

from __future__ import annotations

import heapq
import itertools

from mesoslike.resources import Resources

__all__ = ["FilterStore", "AgentFilters", "MAX_REFUSE_SECONDS"]

#: refuse_seconds above this are capped (Mesos caps filters at 365 days)
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0


class _Filter:
    __slots__ = ("refused", "expires_at")

    def __init__(self, refused: Resources, expires_at: float) -> None:
        self.refused = refused
        self.expires_at = expires_at


#: the filters on one agent, by framework
AgentFilters = dict[str, list[_Filter]]


def refused_any(filters: list[_Filter], offer: Resources, now: float) -> bool:
    """True if one of the (framework, agent) filters is unexpired and refused
    a superset of ``offer``. The identity and equality tests come first: a
    declined agent is usually re-offered the very resources it refused."""
    for flt in filters:
        if flt.expires_at > now:
            refused = flt.refused
            if refused is offer or refused == offer or refused.contains(offer):
                return True
    return False


class FilterStore:
    """Filters indexed by agent then framework, and by framework.

    An agent's table (framework -> filters) is handed out by :meth:`add` so
    that a caller may keep it beside the agent and skip the lookup by id: a
    table stays the agent's until its last filter goes, and whatever removes
    filters does so in place, so a table kept after that is empty, never
    stale. The next filter on the agent starts a new table (``add`` returns it).
    """

    def __init__(self) -> None:
        self._by_agent: dict[str, dict[str, list[_Filter]]] = {}
        self._agents_of: dict[str, set[str]] = {}
        self._expiry: list[tuple[float, int, str, str, _Filter]] = []
        self._seq = itertools.count()
        self._count = 0
        #: ``on_agent(agent_id)``: the filters on an agent by framework
        #: (read-only), or None — the dict's own ``get``, for the hot path
        self.on_agent = self._by_agent.get

    def add(self, framework_id: str, agent_id: str, refused: Resources, expires_at: float) -> AgentFilters:
        """File a filter; returns the agent's table (see the class)."""
        flt = _Filter(refused, expires_at)
        table = self._by_agent.setdefault(agent_id, {})
        table.setdefault(framework_id, []).append(flt)
        self._agents_of.setdefault(framework_id, set()).add(agent_id)
        heapq.heappush(self._expiry, (expires_at, next(self._seq), framework_id, agent_id, flt))
        self._count += 1
        return table

    def expire(self, now: float) -> set[str]:
        """Drop every filter whose time has come; returns the agents that
        lost a filter (they may be offered again)."""
        heap = self._expiry
        agents = set()
        while heap and heap[0][0] <= now:
            _, _, framework_id, agent_id, flt = heapq.heappop(heap)
            if self._discard(framework_id, agent_id, flt):
                agents.add(agent_id)
        return agents

    def _discard(self, framework_id: str, agent_id: str, flt: _Filter) -> bool:
        on_agent = self._by_agent.get(agent_id)
        filters = on_agent.get(framework_id) if on_agent else None
        if on_agent is None or not filters or flt not in filters:
            return False  # already cleared by revive or removal
        filters.remove(flt)
        self._count -= 1
        if not filters:
            del on_agent[framework_id]
            if not on_agent:
                del self._by_agent[agent_id]
            agents = self._agents_of[framework_id]
            agents.discard(agent_id)
            if not agents:
                del self._agents_of[framework_id]
        return True

    def clear_framework(self, framework_id: str) -> int:
        """Remove all of a framework's filters (revive, removal); returns how many."""
        removed = 0
        for agent_id in self._agents_of.pop(framework_id, ()):
            on_agent = self._by_agent[agent_id]
            removed += len(on_agent.pop(framework_id))
            if not on_agent:
                del self._by_agent[agent_id]
        self._count -= removed
        return removed

    def clear_agent(self, agent_id: str) -> None:
        table = self._by_agent.pop(agent_id, {})
        for framework_id, filters in table.items():
            self._count -= len(filters)
            agents = self._agents_of[framework_id]
            agents.discard(agent_id)
            if not agents:
                del self._agents_of[framework_id]
        table.clear()  # in place: a holder of the table sees no filter

    def of_framework(self, framework_id: str) -> dict[str, list[_Filter]]:
        """A framework's filters by agent (read-only lists; expired ones
        included until the next sweep). O(agents it filtered)."""
        return {agent_id: self._by_agent[agent_id][framework_id] for agent_id in self._agents_of.get(framework_id, ())}

    def __len__(self) -> int:
        return self._count

    def snapshot(self) -> dict[str, dict[str, list[tuple[str, float]]]]:
        """``{framework: {agent: [(refused, expires_at), ...]}}``."""
        out: dict[str, dict[str, list[tuple[str, float]]]] = {}
        for agent_id in sorted(self._by_agent):
            for framework_id, filters in sorted(self._by_agent[agent_id].items()):
                out.setdefault(framework_id, {})[agent_id] = [(str(f.refused), f.expires_at) for f in filters]
        return out

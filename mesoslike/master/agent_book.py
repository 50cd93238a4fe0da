"""The agent book: every agent the master knows — registered, unreachable,
expected back after a failover, removed for good — which connection each
registered one is on, who holds it, and its drain (sans I/O).

It guards what the rest of the core leans on (:meth:`AgentBook._check`):

- a connection names at most one registered agent, and that agent is on it;
- an agent id is registered, unreachable, removed, or none of them — one at
  most (an agent expected back is not registered yet either);
- every id a connection or a principal holds is a registered agent's;
- the unreachable agents whose tasks this master never saw are unreachable;
- agents waiting for their turn to be marked unreachable are registered.

The lifecycle that moves agents between these (registration, pings,
partitions, removal) is :class:`mesoslike.master.agents.AgentLifecycle`'s.
"""

from __future__ import annotations

import itertools
from typing import Container, Iterable, Mapping

from mesoslike.master.operations import DrainInfo
from mesoslike.master.partitions import RemovalQueue, RemovalRateLimit, UnreachableAgent
from mesoslike.master.records import AgentRecord, Holdings

__all__ = ["AgentBook"]


class AgentBook:
    """The agents by id (:attr:`records`: registered), with the indexes
    and the other agents around them. Read the fields freely; change
    membership and connections only through the book. O(1) per operation,
    :meth:`_check` O(agents)."""

    def __init__(self, master_id: str, removed: Iterable[str] = (), removal_limit: str | None = None,
                 earlier_peers: Mapping[str, bytes] | None = None) -> None:
        self.records: dict[str, AgentRecord] = {}
        self._by_peer: dict[bytes, str] = {}
        #: which connection holds which agents (max_agents_per_connection)
        self.owners = Holdings()
        #: the same, by principal (secured clusters: max_agents_per_principal)
        self.principals = Holdings()
        #: ids that may not come back (unregistered, marked gone, forgotten while unreachable)
        self.removed: set[str] = set(removed)
        #: agents marked unreachable (docs/reliability.rst, "Partitions"): they may re-register
        self.unreachable: dict[str, UnreachableAgent] = {}
        #: those of them whose tasks this master never saw (taken over from the registry)
        self.unreachable_unknown: set[str] = set()
        #: known before a failover (the registry's), not back yet; marked unreachable at expected_until
        self.expected: set[str] = set()
        self.expected_until = 0.0
        #: agent id -> the connection an earlier core of this process knew it on (after a ZooKeeper
        #: outage the same master may lead again with a fresh core): told at once to re-register
        self.earlier_peers: dict[str, bytes] = dict(earlier_peers or {})
        #: agents that failed their health checks, marked unreachable in turn (agent_removal_rate_limit)
        self.removals = RemovalQueue(RemovalRateLimit.parse(removal_limit) if removal_limit is not None else None)
        #: agents drained or being drained by the operator (docs/operations.rst)
        self.drains: dict[str, DrainInfo] = {}
        self._ids = (f"{master_id}-S{n}" for n in itertools.count(1))

    # --------------------------------------------------------------- lookups
    def get(self, agent_id: str) -> AgentRecord | None:
        return self.records.get(agent_id)

    def on(self, peer: bytes) -> AgentRecord | None:
        """The registered agent whose connection is ``peer``, if any. O(1)."""
        agent_id = self._by_peer.get(peer)
        return self.records[agent_id] if agent_id is not None else None

    def new_id(self, taken: Container[str]) -> str:
        """The next id of this master's series that no agent holds, held or
        is expected back under (nor ``taken``: the registry's): an agent that
        re-registered under an id of the series (as an agent may, after a
        failover) never makes a later registration fail. O(1) amortised."""
        for agent_id in self._ids:
            if agent_id not in self.records and agent_id not in self.removed \
                    and agent_id not in taken and agent_id not in self.expected:
                return agent_id
        raise AssertionError("unreachable: the series is endless")

    def peers(self) -> dict[str, bytes]:
        """agent id -> its connection, for a later core of this process (``earlier_peers``)."""
        peers = {agent.id: agent.peer for agent in self.records.values()}
        peers.update((a, p) for a, p in self.earlier_peers.items() if a in self.expected)
        return peers

    # ------------------------------------------------------------ membership
    def add(self, record: AgentRecord, owner: bytes) -> None:
        """A registered agent: new, or back (after a failover, a partition)."""
        agent_id = record.id   # (a property: read once)
        assert agent_id not in self.records and agent_id not in self.unreachable
        self.records[agent_id] = record
        self.expected.discard(agent_id)
        if self.earlier_peers:   # (after a ZooKeeper outage only)
            self.earlier_peers.pop(agent_id, None)
        self.connect(record, record.peer, owner)

    def connect(self, record: AgentRecord, peer: bytes, owner: bytes) -> None:
        """``record`` speaks from ``peer`` now, held by ``owner`` (and its principal, if any)."""
        if record.peer != peer:
            self._unmap(record)
            record.peer = peer
        self._by_peer[peer] = record.id
        self.owners.hold(owner, record.id)
        if record.info.principal:
            self.principals.hold(record.info.principal.encode(), record.id)

    def forget(self, record: AgentRecord) -> None:
        """A registered agent is no longer (removed, or marked unreachable)."""
        self._unmap(record)
        del self.records[record.id]
        self.owners.release(record.id)
        self.principals.release(record.id)
        self.removals.cancel(record.id)

    def _unmap(self, record: AgentRecord) -> None:
        if self._by_peer.get(record.peer) == record.id:
            del self._by_peer[record.peer]

    def keep_unreachable(self, agent: UnreachableAgent) -> None:
        self.unreachable[agent.id] = agent
        if not agent.tasks_known:
            self.unreachable_unknown.add(agent.id)

    def forget_unreachable(self, agent_id: str) -> UnreachableAgent:
        self.unreachable_unknown.discard(agent_id)
        return self.unreachable.pop(agent_id)

    def _check(self) -> None:
        """Raise ``AssertionError`` unless the invariants of the module docstring hold."""
        for peer, agent_id in self._by_peer.items():
            record = self.records.get(agent_id)
            assert record is not None, f"connection {peer!r} names agent {agent_id}, which is not registered"
            assert record.peer == peer, f"agent {agent_id} is not on {peer!r}"
        for agent_id, record in self.records.items():
            assert record.id == agent_id, f"agent {agent_id} is filed as {record.id}"
        registered, unreachable = self.records.keys(), self.unreachable.keys()
        assert not registered & unreachable, "an agent is registered and unreachable"
        assert not self.removed & (registered | unreachable), "a removed agent is registered or unreachable"
        assert not self.expected & registered, "an agent expected back is registered"
        assert self.unreachable_unknown <= unreachable
        for holdings in (self.owners, self.principals):
            holdings._check()
            assert holdings.items() <= registered, "an agent held is not registered"
        assert self.removals.waiting() <= registered, "a removal waits for an agent not registered"

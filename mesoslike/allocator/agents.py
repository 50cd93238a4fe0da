"""The agent book: every agent's total, what is still available there, and
what each framework holds there (offered + used).

It guards the one invariant everything else leans on — per agent,
``available + Σ held == total`` with nothing negative — by moving resources
only through checked operations: :meth:`AgentBook.decrease_available` (a
grant: strict subtraction, so never below zero) and
:meth:`AgentBook.increase_available` (a release: only what the framework
holds there, so never above the total). Mesos's ``Slave`` does the same with
``increaseAvailable``/``decreaseAvailable``. One exception, for speed: the
allocator's fast path (no quota, so no free pool to keep) does
``decrease_available``'s work inline for a grant it has just checked fits
(``HierarchicalAllocator._allocate_plain``; ``check_invariants`` still
holds it to the invariant).

While asked to (quota headroom needs it), the book also keeps the *free
pool*: the scalar thousandths available on active agents, summed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

from mesoslike.allocator.millis import Millis, add_millis
from mesoslike.errors import AgentCapacityError, RecoveryError, ResourcesError, UnknownAgentError
from mesoslike.resources import Resources

if TYPE_CHECKING:
    from mesoslike.allocator.filters import AgentFilters

__all__ = ["Agent", "AgentBook"]

EMPTY = Resources()


class Agent:
    """One agent's record. Read its fields freely; change ``total``,
    ``available``, ``held`` and ``active`` only through the book."""

    __slots__ = ("id", "hostname", "attributes", "total", "available", "active", "held", "version", "idle_stamp",
                 "reserved", "filters", "fit")

    def __init__(self, agent_id: str, total: Resources, hostname: str, attributes: Mapping[str, str]) -> None:
        self.id = agent_id
        self.hostname = hostname
        self.attributes = dict(attributes)
        self.total = total
        self.available = total
        #: whether part of the total is reserved for a role (``cpus(a):4``):
        #: the allocator's hot paths skip the reservation checks when not
        self.reserved = total.has_reservations()
        self.active = True
        self.held: dict[str, Resources] = {}  # framework -> offered + used here
        #: bumped whenever what the agent could be offered may have grown
        self.version = 0
        #: (version, eligibility) when nobody could take it: the allocator's cache
        self.idle_stamp: tuple[int, int] | None = None
        #: the decline filters on this agent by framework: the filter store's own
        #: table for it (``FilterStore.add`` hands it out), kept here so that a
        #: cycle reaches it without a lookup among 100,000 agents; None before
        #: the first filter, empty once they are gone. The allocator sets it.
        self.filters: AgentFilters | None = None
        #: what the agent had free (reservations stripped) when it last met the
        #: allocator's default minimum: the same object again meets it again
        #: (a declined offer gives the very object back). The allocator's cache.
        self.fit: Resources | None = None


class AgentBook:
    """The agents by id, with checked moves of their resources.

    Complexity: every operation is O(kinds) (plus ranges), except
    :meth:`_check`, O(agents · frameworks held there).
    """

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._free: Millis = {}
        self._tracking_free = False

    # ------------------------------------------------------------ membership
    def add(self, agent_id: str, total: Resources, hostname: str, attributes: Mapping[str, str],
            held: Mapping[str, Resources] | None = None, holding: Resources | None = None,
            available: Resources | None = None) -> Agent:
        """Add an agent; ``held``: what frameworks hold on it already (an
        agent re-registering with its tasks: non-empty, ``holding`` their
        sum), granted at once — as :meth:`decrease_available` for each, with
        one subtraction (``available``: its result, ``total - holding``,
        which the caller worked out for an agent alike). Raises
        ``ResourcesError`` (changing nothing) unless they fit in ``total``."""
        agent = Agent(agent_id, total, hostname, attributes)
        if held:
            if available is None or holding is None:
                available = total - (holding if holding is not None else Resources.sum(held.values()))
            agent.available = available
            agent.held.update(held)
            agent.version += len(held)
        self._agents[agent_id] = agent
        if self._tracking_free:
            add_millis(self._free, agent.available.millis(), 1)
        return agent

    def remove(self, agent_id: str) -> Agent:
        """Forget an agent that nobody holds anything on any more."""
        agent = self._agents[agent_id]
        if agent.held:
            raise AgentCapacityError(f"agent {agent_id!r} is still held by {sorted(agent.held)}")
        if agent.active:
            self._add_free(agent.available.millis(), -1)
        del self._agents[agent_id]
        return agent

    def get(self, agent_id: str) -> Agent:
        """The agent, or :class:`UnknownAgentError`."""
        try:
            return self._agents[agent_id]
        except (KeyError, TypeError):
            raise UnknownAgentError(f"unknown agent {agent_id!r}") from None

    def find(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._agents

    def __iter__(self) -> Iterator[Agent]:
        """The agents in the order they were added (deterministic for a history)."""
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)

    # ----------------------------------------------------------------- moves
    def decrease_available(self, agent: Agent, framework_id: str, resources: Resources) -> None:
        """Grant: ``resources`` go from the agent's available pool to the
        framework. Raises ``ResourcesError`` (changing nothing) unless the
        agent has them available."""
        available = agent.available
        # the usual coarse-grained grant hands out everything: no arithmetic
        agent.available = EMPTY if resources is available else available - resources
        held = agent.held.get(framework_id)
        agent.held[framework_id] = held + resources if held is not None else resources
        agent.version += 1
        if self._tracking_free and agent.active:
            add_millis(self._free, resources.millis(), -1)

    def increase_available(self, agent: Agent, framework_id: str, resources: Resources) -> None:
        """Release: ``resources`` the framework holds on the agent go back to
        its available pool. Raises :class:`RecoveryError` (changing nothing)
        unless the framework holds them there."""
        if not resources:
            return
        held = agent.held.get(framework_id, EMPTY)
        try:
            left = held - resources  # strict: only what the framework holds there
        except ResourcesError:
            raise RecoveryError(f"framework {framework_id!r} holds {held} on agent {agent.id!r}; "
                                f"cannot release {resources}") from None
        if left:
            agent.held[framework_id] = left
        else:
            del agent.held[framework_id]
        agent.available = agent.available + resources
        agent.version += 1
        if self._tracking_free and agent.active:
            add_millis(self._free, resources.millis(), 1)

    def resize(self, agent: Agent, total: Resources) -> None:
        """Change the agent's total; raises :class:`AgentCapacityError`
        (changing nothing) if that is below what is held there."""
        allocated = agent.total - agent.available
        if not total.contains(allocated):
            raise AgentCapacityError(
                f"agent {agent.id!r}: new total {total} is below what is allocated there ({allocated})"
            )
        available = total - allocated
        if agent.active:
            self._add_free(agent.available.millis(), -1)
            self._add_free(available.millis(), 1)
        agent.total = total
        agent.available = available
        agent.reserved = total.has_reservations()
        agent.version += 1

    def convert(self, agent: Agent, removed: Resources, added: Resources, framework_id: str | None = None) -> None:
        """Turn ``removed`` into ``added`` (the same quantities, reserved
        otherwise: a RESERVE or UNRESERVE) in the agent's total and in what
        ``framework_id`` holds there (its offer), or in what is available
        (None). Raises :class:`AgentCapacityError` (changing nothing) unless
        that part holds ``removed``."""
        if framework_id is None:
            part = agent.available
        else:
            part = agent.held.get(framework_id, EMPTY)
        if not part.contains(removed):
            where = "available" if framework_id is None else f"held by framework {framework_id!r}"
            raise AgentCapacityError(f"agent {agent.id!r}: {removed} is not {where} there ({part})")
        converted = part - removed + added
        if framework_id is None:
            if agent.active:
                self._add_free(agent.available.millis(), -1)
                self._add_free(converted.millis(), 1)
            agent.available = converted
        else:
            agent.held[framework_id] = converted
        agent.total = agent.total - removed + added
        agent.reserved = agent.total.has_reservations()
        agent.version += 1

    def set_active(self, agent: Agent, active: bool) -> None:
        """An inactive agent keeps its holdings but leaves the free pool."""
        if agent.active == active:
            return
        agent.active = active
        self._add_free(agent.available.millis(), 1 if active else -1)
        if active:
            agent.version += 1

    # ------------------------------------------------------------- free pool
    def track_free(self, tracking: bool) -> None:
        """Keep the free pool (O(agents) to start) or stop keeping it."""
        if tracking and not self._tracking_free:
            self._free = {}
            self._tracking_free = True
            for agent in self._agents.values():
                if agent.active:
                    add_millis(self._free, agent.available.millis())
        elif not tracking:
            self._tracking_free = False
            self._free = {}

    @property
    def tracking_free(self) -> bool:
        """Whether the free pool is kept (:meth:`track_free`)."""
        return self._tracking_free

    @property
    def free(self) -> Mapping[str, int]:
        """Scalar thousandths available on active agents (empty unless tracked)."""
        return self._free

    def _add_free(self, millis: Mapping[str, int], sign: int) -> None:
        if self._tracking_free:
            add_millis(self._free, millis, sign)

    # ---------------------------------------------------------------- checks
    def _check(self) -> None:
        """Raise ``AssertionError`` unless every agent's holdings and
        available resources add up to its total, and the free pool (while
        tracked) is the sum of what active agents have available."""
        free: Millis = {}
        for agent_id, agent in self._agents.items():
            assert agent.id == agent_id, f"agent {agent_id} is filed as {agent.id}"
            held = Resources.sum(agent.held.values())
            assert all(agent.held.values()), f"agent {agent_id}: an empty holding is kept"
            assert held + agent.available == agent.total, \
                f"agent {agent_id}: held {held} + available {agent.available} != total {agent.total}"
            if agent.active:
                add_millis(free, agent.available.millis())
        if self._tracking_free:
            assert free == self._free, f"free pool {self._free} != {free}"

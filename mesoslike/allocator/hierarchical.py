"""The hierarchical offer allocator: Mesos's HierarchicalDRFAllocator, sans I/O.

It answers "who gets this agent now?". It never does I/O and never reads the
time itself: it takes a :class:`Clock` and a ``random.Random``. A runtime
feeds it events (agents and frameworks coming and going, declines, accepts,
task ends) and carries out what it returns (offers to send, rescinds to
announce).

Its state lives in parts with one job each, as in Mesos:

- the *agent book* (:mod:`~mesoslike.allocator.agents`): totals, available
  resources and who holds what, moved only by checked increase/decrease;
- the *role tree* (:mod:`~mesoslike.allocator.role_tree`): the roles with
  frameworks and what each role's subtree consumes, for quota;
- the *offer book* (:mod:`~mesoslike.allocator.offer_book`): outstanding
  offers by id, framework and agent;
- the sorters (roles, then the frameworks of each role), the decline
  filters and the quota book.

Allocation order is two-level: roles by the role sorter, then the frameworks
of a role by that role's framework sorter (both DRF by default). A cycle runs
up to three *stages* — prefer (agents freed for a starved role),
guarantees (roles owed part of their quota guarantee) and plain (everyone) —
and every stage is the same loop, "walk the sorted frameworks → what may be
offered → filter check → grant" (:meth:`HierarchicalAllocator._run_stage`),
parameterised by which roles it walks, with what caps, and what happens after
a grant. Offers are coarse-grained: an agent's available resources go to one
framework per stage, unless quota limits or headroom cut the offer short, in
which case the plain stage offers the rest to the next framework in order.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple

import mesoslike.allocator.blockers as why
from mesoslike.allocator.agents import Agent, AgentBook
from mesoslike.allocator.blockers import OfferBlocker, ordinal
from mesoslike.allocator.filters import MAX_REFUSE_SECONDS, FilterStore, refused_any
from mesoslike.allocator.millis import Millis, positive_gap
from mesoslike.allocator.offer_book import OfferBook
from mesoslike.allocator.offers import AllocatorStatistics, Offer, Rescind, RescindReason
from mesoslike.allocator.quota import QuotaAmount, QuotaBook
from mesoslike.allocator.role_tree import RoleTree
from mesoslike.allocator.roles import DEFAULT_ROLE, validate_role
from mesoslike.allocator.shuffle import shuffle
from mesoslike.allocator.sorter import Sorter, make_sorter
from mesoslike.clock import Clock
from mesoslike.errors import (
    AgentCapacityError,
    DuplicateAgentError,
    DuplicateFrameworkError,
    InvalidFilterError,
    QuotaError,
    RecoveryError,
    ResourcesError,
    UnknownFrameworkError,
    WeightError,
)
from mesoslike.observations import QUICK_BUCKETS, Histogram
from mesoslike.resources import KNOWN_KINDS, Resources, format_millis, similar_kind

__all__ = ["CheckedAgent", "HierarchicalAllocator", "parse_min_allocatable", "DEFAULT_MIN_ALLOCATABLE"]

EMPTY = Resources()
#: the most distinct (total, holdings) add_agent keeps its sums of (HierarchicalAllocator._agent_sums)
_AGENT_SUMS_KEPT = 1024


class CheckedAgent(NamedTuple):
    """An agent :meth:`HierarchicalAllocator.check_agent` checked, for
    :meth:`HierarchicalAllocator.book_agent` to add."""
    agent_id: str
    total: Resources
    hostname: str
    attributes: Mapping[str, str]
    #: framework id -> what its tasks hold there (none empty), and those frameworks' records, in its order
    holds: dict[str, Resources]
    holders: list[_Framework]
    #: the sum of ``holds`` and what is left of ``total`` (worked out once for agents alike)
    holding: Resources
    available: Resources
DEFAULT_MIN_ALLOCATABLE = "cpus:0.01|mem:32"
DEFAULT_REFUSE_SECONDS = 5.0

MinAllocatable = tuple[Resources, ...]


def parse_min_allocatable(spec: str | Iterable[Resources | str]) -> MinAllocatable:
    """``"cpus:0.01|mem:32"`` -> alternatives; resources are allocatable if
    they contain at least one alternative. An empty spec means any non-empty
    resources are allocatable."""
    if isinstance(spec, str):
        items: Iterable[Resources | str] = [p for p in spec.split("|") if p.strip()]
    else:
        items = spec
    out = []
    for item in items:
        out.append(item if isinstance(item, Resources) else Resources.parse(item))
    return tuple(out)


class _Framework:
    __slots__ = ("id", "role", "active", "suppressed", "min_allocatable", "used")

    def __init__(self, framework_id: str, role: str, min_allocatable: MinAllocatable | None) -> None:
        self.id = framework_id
        self.role = role
        self.active = True
        self.suppressed = False
        self.min_allocatable = min_allocatable
        self.used: dict[str, Resources] = {}  # agent -> used by tasks


#: (framework id, agent) -> resources granted in this cycle
Grants = dict[tuple[str, Agent], Resources]
#: what a stage walks for an agent: (role, caps or None, kinds an offer must include or None)
RoleWalk = Iterator[tuple[str, "Millis | None", "Millis | None"]]

# what a stage does after a grant on an agent
_NEXT_AGENT = "next agent"   # done with this agent
_NEXT_ROLE = "next role"     # go on with the next role of the walk
_AGAIN = "again"             # walk again from the first role, skipping who was served


class _ClientEntries:
    """A sorter's order as entries whose ``[2]`` is the client, for one
    without a live order (:meth:`Sorter.live_order`)."""

    __slots__ = ("_sorter",)

    def __init__(self, sorter: Sorter) -> None:
        self._sorter = sorter

    def __iter__(self) -> Iterator[tuple[None, None, str]]:
        return ((None, None, client) for client in self._sorter.iter_sorted())


class _Stage(NamedTuple):
    """One stage of a cycle: the stage loop with these parameters."""

    name: str
    roles: Callable[[Agent], RoleWalk]
    after_grant: str
    stamps_idle: bool  # remember agents nobody could take (plain stage only)


def _check_refuse(refuse_seconds: float) -> float:
    if isinstance(refuse_seconds, bool) or not isinstance(refuse_seconds, (int, float)) or math.isnan(refuse_seconds) \
            or refuse_seconds < 0:
        raise InvalidFilterError(f"refuse_seconds must be a number >= 0, got {refuse_seconds!r}")
    return min(float(refuse_seconds), MAX_REFUSE_SECONDS)


def _check_conversion(removed: Resources, added: Resources) -> None:
    """A reservation operation keeps the quantities; only the kinds change."""
    if not isinstance(removed, Resources) or not isinstance(added, Resources):
        raise ResourcesError("a conversion takes Resources")
    if removed.stripped() != added.stripped():
        raise RecoveryError(f"{removed} and {added} are not the same quantities")


class HierarchicalAllocator:
    """Offers agents' resources to frameworks in (weighted) DRF order.

    Why one class of some 1,200 lines (Mesos's ``HierarchicalAllocatorProcess``
    is one too): its books already live beside it — ``offer_book``,
    ``filters``, ``quota`` (with the quota arithmetic against the free pool:
    a role's caps, the headroom held for guarantees, what a quota change
    rescinds, the capacity check), ``agents``, ``role_tree``, ``blockers``,
    the sorters — and what stays is the public API and the one stage loop
    (``_cycle``, ``_run_stage``, ``_first_taker``), which change the holdings
    of an agent, its role and its framework together in one step
    (``check_invariants`` guards that they agree). Cut in two, each half would
    reach into the other's state on every call; so would the offer blockers
    (``offer_blockers``), a read-only query over every book at once.

    Parameters:
        clock: where time comes from (``FakeClock`` in tests).
        sorter: ``"drf"`` (default), ``"random"``, another registered name,
            or a :class:`Sorter` instance used for roles (its ``fresh()``
            copies order the frameworks inside each role).
        allocation_interval: seconds between batch cycles (``tick``).
        min_allocatable: default minimum allocatable resources.
        offer_timeout: seconds after which an unanswered offer is rescinded
            (None = never, the default).
        rng: randomness for the agent order of a cycle and random sorters.
        offer_id_prefix: prefix of the offer ids this allocator makes.

    Complexity: a cycle visits each allocatable agent once and walks the
    sorted frameworks until one takes it, so a cycle with no filters costs
    O(A · depth · log F); a framework skipped for a filter costs O(1) more.
    ``allocate([agent])`` for one freed agent costs O(depth · log F).
    Bad input raises a :class:`~mesoslike.errors.AllocatorError` and changes
    nothing. The allocator never touches the garbage collector: a runtime
    that wants none during a cycle disables it around its own loop turn.
    """

    def __init__(
        self,
        clock: Clock,
        sorter: str | Sorter = "drf",
        *,
        allocation_interval: float = 1.0,
        min_allocatable: str | Iterable[Resources | str] = DEFAULT_MIN_ALLOCATABLE,
        offer_timeout: float | None = None,
        rng: random.Random | None = None,
        offer_id_prefix: str = "O",
    ) -> None:
        if not (isinstance(allocation_interval, (int, float)) and allocation_interval > 0):
            raise ValueError(f"allocation_interval must be > 0, got {allocation_interval!r}")
        if offer_timeout is not None and not (isinstance(offer_timeout, (int, float)) and offer_timeout > 0):
            raise ValueError(f"offer_timeout must be > 0 or None, got {offer_timeout!r}")
        self.clock = clock
        self.allocation_interval = float(allocation_interval)
        self.offer_timeout = offer_timeout
        self.min_allocatable = parse_min_allocatable(min_allocatable)
        self._rng = rng if rng is not None else random.Random(0)
        #: the sorters as booked so far: read through _role_sorter and _framework_sorters, which book
        #: the agents add_agent left to book first (see _book_added)
        self._role_sorter_booked: Sorter = sorter if isinstance(sorter, Sorter) else \
            make_sorter(sorter, hierarchical=True, rng=self._rng)
        self._agents = AgentBook()
        self._frameworks: dict[str, _Framework] = {}
        self._framework_sorters_booked: dict[str, Sorter] = {}   # role -> its frameworks' sorter
        #: the sorters' side of the agents added since the sorters were last read, by object (a
        #: re-registration's resources are mostly the codec's one parse of a string): id(stripped total)
        #: -> [it, agents]; (framework id, id(resources)) -> [framework, resources, agents holding them]
        self._unbooked_totals: dict[int, list] = {}
        self._unbooked_grants: dict[tuple[str, int], list] = {}
        #: what add_agent worked out for an agent's total and holdings, by their objects (a new
        #: leader's re-registering agents are mostly alike: the codec's one parse of each string, one
        #: sum of a framework's tasks): (id(total), id(holding), ...) -> (total, holdings, their sum, what
        #: is left available). The entry holds the objects its key names: an id in it is still theirs
        self._agent_sums: dict[tuple[int, ...], tuple[Resources, tuple[Resources, ...], Resources, Resources]] = {}
        self._roles = RoleTree()
        self._quota = QuotaBook(self._roles)
        self._offers = OfferBook(offer_id_prefix, track_times=offer_timeout is not None)
        self._filters = FilterStore()
        self._weights: dict[str, float] = {}
        self._rescinds: list[Rescind] = []
        self._pending_all = False
        self._pending: set[str] = set()
        #: agent -> (role, until): offer what the agent has free to that role's
        #: frameworks first until then (fair-share preemption's Prefer)
        self._preferred: dict[str, tuple[str, float]] = {}
        self._eligibility = 0  # bumped whenever some framework may take what it could not before
        self._eligible: set[str] = set()              # frameworks active and not suppressed
        self._min_overrides: dict[MinAllocatable, int] = {}  # distinct per-framework minimums
        self._all_mins: tuple[MinAllocatable, ...] = (self.min_allocatable,)
        self._fits_for = self.min_allocatable  # the minimum the agents' Agent.fit caches were checked against
        self._role_eligible: dict[str, int] = {}
        self._active_roles: set[str] = set()          # roles with an eligible framework
        # With a single role and no quota, nothing reads the role sorter's
        # order, so grants skip it and it is brought up to date on demand
        # (_sync_roles): a role-level update per grant saved.
        self._roles_deferred = False
        self._deferred_grants = 0
        #: the plain stage in the common case (no quota, one active role, one
        #: minimum) runs as one tight loop; tests turn it off to compare
        self._fast_path = True
        #: the frameworks' offer filters, judged by the allocator's owner: ``offer_gate(framework_id,
        #: agent_id)`` says whether the framework may be offered what the agent has available now
        #: (Mesos's ``OfferFilters.min_allocatable_resources``, which a framework sets and updates
        #: through ``UPDATE_FRAMEWORK``, as a predicate); None: every framework may. Call
        #: :meth:`offer_filters_changed` when its answers may have changed.
        self.offer_gate: Callable[[str, str], bool] | None = None
        self._stages = (
            _Stage("prefer", self._preferred_roles, _NEXT_AGENT, False),
            _Stage("guarantees", self._guaranteed_roles, _NEXT_ROLE, False),
            _Stage("plain", self._plain_roles, _AGAIN, True),
        )
        self._next_batch = clock.now()
        self._counters = dict(cycles=0, offers_made=0, offers_filtered=0, offers_declined=0,
                              offers_accepted=0, offers_rescinded=0)
        self._last_cycle_duration = 0.0
        #: every cycle's duration (the master's /metrics shows it as a histogram)
        self.cycle_durations = Histogram(QUICK_BUCKETS)
        self._last_cycle_offers = 0

    # ============================================================== sorters
    @property
    def _role_sorter(self) -> Sorter:
        if self._unbooked_totals:
            self._book_added()
        return self._role_sorter_booked

    @property
    def _framework_sorters(self) -> dict[str, Sorter]:
        if self._unbooked_totals:
            self._book_added()
        return self._framework_sorters_booked

    def _book_added(self) -> None:
        """The sorters' side of the agents :meth:`add_agent` added since the
        sorters were last read (after a failover a turn re-registers hundreds
        of agents, and nothing reads the sorters before the turn's tick): the
        totals and grants they would have booked one agent at a time, added
        up — a sorter's total once per distinct total, and each framework's
        grants once per distinct vector it holds, with their count (the same
        sums and counts, so the same order). Only while the role level is
        deferred (one role, no quota): the role sorter's grants are then a
        count (:meth:`_sync_roles`)."""
        totals, self._unbooked_totals = self._unbooked_totals, {}
        grants, self._unbooked_grants = self._unbooked_grants, {}
        sorters = self._framework_sorters_booked
        for stripped, count in totals.values():
            added = Resources.sum([stripped] * count)
            self._role_sorter_booked.add_total(added)
            for sorter in sorters.values():
                sorter.add_total(added)
        for framework, resources, count in grants.values():
            self._deferred_grants += count
            sorters[framework.role].allocated_many(framework.id, resources, count)

    # ================================================================ agents
    def add_agent(
        self,
        agent_id: str,
        total: Resources,
        attributes: Mapping[str, str] | None = None,
        hostname: str | None = None,
        used: Mapping[str, Resources] | None = None,
    ) -> None:
        """Add an agent; ``used`` maps framework ids to what their running
        tasks already hold there (an agent re-registering after failover).
        Triggers allocation of this agent. (:meth:`check_agent` then
        :meth:`book_agent`.)"""
        self.book_agent(self.check_agent(agent_id, total, attributes, hostname, used))

    def check_agent(self, agent_id: str, total: Resources, attributes: Mapping[str, str] | None = None,
                    hostname: str | None = None, used: Mapping[str, Resources] | None = None) -> CheckedAgent:
        """The checks of :meth:`add_agent`, changing nothing: raises
        ``DuplicateAgentError``, ``ResourcesError``, ``UnknownFrameworkError``
        or ``AgentCapacityError`` as it would. What it returns,
        :meth:`book_agent` adds — at once, or later (a new leader's
        re-registering agents are booked after their answers:
        ``AgentLifecycle.settle``) provided that no other call was made in
        between that adds this agent or removes one of the frameworks
        holding something on it (the caller's gate)."""
        if agent_id in self._agents:
            raise DuplicateAgentError(f"agent {agent_id!r} was already added")
        if not isinstance(total, Resources):
            raise ResourcesError(f"total of agent {agent_id!r} must be Resources, got {type(total).__name__}")
        frameworks = self._frameworks
        holds: dict[str, Resources] = {}
        holders: list[_Framework] = []   # holds' frameworks, in its order (looked up once)
        if used:
            for framework_id in sorted(used):   # every one known, before anything changes
                framework = frameworks.get(framework_id)
                if framework is None:
                    framework = self._framework(framework_id)   # (raises)
                resources = used[framework_id]
                if resources:
                    holds[framework_id] = resources
                    holders.append(framework)
        # what its tasks hold is granted as the agent is added: one subtraction (a re-registering agent's),
        # worked out once for agents alike
        values = tuple(holds.values())
        alike = (id(total), *map(id, values))
        known = self._agent_sums.get(alike)
        if known is None:
            held = Resources.sum(list(values))
            if not total.contains(held):
                raise AgentCapacityError(f"agent {agent_id!r}: used {held} does not fit in its total {total}")
            known = (total, values, held, total - held)
            if len(self._agent_sums) >= _AGENT_SUMS_KEPT:
                self._agent_sums.clear()
            self._agent_sums[alike] = known
        return CheckedAgent(agent_id, total, hostname or agent_id, attributes or {}, holds, holders, known[2],
                            known[3])

    def offers_wanted(self) -> bool:
        """Whether some framework may be offered anything now (active and
        not suppressed): else no cycle offers anything, whatever the agents. O(1)."""
        return bool(self._eligible)

    def book_agent(self, checked: CheckedAgent) -> None:
        """Add the agent :meth:`check_agent` checked (see there). O(frameworks holding something there)."""
        agent_id, total, holds, holders = checked.agent_id, checked.total, checked.holds, checked.holders
        if agent_id in self._agents:   # (the caller's gate makes it impossible: nothing is added twice)
            raise DuplicateAgentError(f"agent {agent_id!r} was already added")
        agent = self._agents.add(agent_id, total, checked.hostname, checked.attributes, holds, checked.holding,
                                 checked.available)
        stripped = total.stripped()
        if agent.reserved:   # (_reserve's own test, without its calls: most agents reserve nothing)
            self._reserve(total, 1)
        self._pending.add(agent_id)
        if self._roles_deferred and not agent.reserved:
            # the sorters' side when they are next read (_book_added): as _charge would, with the role
            # level deferred (no quota), an unreserved agent's grants counted as they are
            totals = self._unbooked_totals
            booked = totals.get(id(stripped))
            if booked is None:
                totals[id(stripped)] = [stripped, 1]
            else:
                booked[1] += 1
            grants = self._unbooked_grants
            for framework, (framework_id, resources) in zip(holders, holds.items()):
                framework.used[agent_id] = resources
                key = (framework_id, id(resources))
                booked = grants.get(key)
                if booked is None:
                    grants[key] = [framework, resources, 1]
                else:
                    booked[2] += 1
            return
        self._role_sorter.add_total(stripped)
        for sorter in self._framework_sorters.values():
            sorter.add_total(stripped)
        for framework, resources in zip(holders, holds.values()):
            self._charge(framework, agent, resources)
            framework.used[agent_id] = resources

    def remove_agent(self, agent_id: str) -> None:
        """Remove an agent: its outstanding offers are rescinded (reason
        ``agent_removed``), what tasks held there is released, its filters go."""
        agent = self._agents.get(agent_id)
        self._rescind_all(self._offers_on_agent(agent), RescindReason.AGENT_REMOVED)
        for framework_id in sorted(agent.held):
            framework = self._frameworks[framework_id]
            self._release(framework, agent, framework.used.pop(agent_id, EMPTY))
        self._agents.remove(agent_id)
        self._role_sorter.remove_total(agent.total.stripped())
        for sorter in self._framework_sorters.values():
            sorter.remove_total(agent.total.stripped())
        self._reserve(agent.total, -1)
        self._filters.clear_agent(agent_id)
        self._pending.discard(agent_id)
        self._preferred.pop(agent_id, None)

    def update_agent(
        self,
        agent_id: str,
        total: Resources | None = None,
        attributes: Mapping[str, str] | None = None,
        hostname: str | None = None,
    ) -> None:
        """Change an agent's total (not below what is allocated there),
        attributes or hostname — an agent that re-registered changed. Changed
        attributes remove every decline filter on the agent (a framework may
        have declined it for lacking an attribute: Mesos's ``RemoveFilters``);
        any change triggers allocation of the agent."""
        agent = self._agents.get(agent_id)
        changed = False
        if total is not None:
            if not isinstance(total, Resources):
                raise ResourcesError(f"total of agent {agent_id!r} must be Resources, got {type(total).__name__}")
            old = agent.total
            if total != old:
                self._agents.resize(agent, total)  # checks before it changes anything
                for sorter in [self._role_sorter, *self._framework_sorters.values()]:
                    sorter.remove_total(old.stripped())
                    sorter.add_total(total.stripped())
                self._reserve(old, -1)
                self._reserve(total, 1)
                changed = True
        if attributes is not None and dict(attributes) != agent.attributes:
            agent.attributes = dict(attributes)
            self._filters.clear_agent(agent_id)
            agent.version += 1  # what was filtered may be offered again
            changed = True
        if hostname is not None and hostname != agent.hostname:
            agent.hostname = hostname
            changed = True
        if changed:
            self._pending.add(agent_id)

    def deactivate_agent(self, agent_id: str) -> None:
        """Stop offering the agent (it disconnected, or is drained); its
        offers are rescinded (``agent_deactivated``), its tasks keep their
        resources."""
        agent = self._agents.get(agent_id)
        if not agent.active:
            return
        self._rescind_all(self._offers_on_agent(agent), RescindReason.AGENT_DEACTIVATED)
        self._agents.set_active(agent, False)

    def activate_agent(self, agent_id: str) -> None:
        """Offer the agent again; triggers its allocation."""
        agent = self._agents.get(agent_id)
        if agent.active:
            return
        self._agents.set_active(agent, True)
        self._pending.add(agent_id)

    def prefer_role(self, agent_id: str, role: str, until: float) -> None:
        """Until ``until`` (clock time), offer what ``agent_id`` has free to
        the frameworks of ``role`` first, ahead of the DRF order, weights and
        quota guarantees (fair-share preemption's ``Prefer``: resources freed
        for a starved role). Quota limits and the headroom held for other
        roles' guarantees still cap the offer, and a role whose frameworks
        cannot take it (suppressed, filtered, below their minimum) lets it go
        on in the usual order. One preference per agent: a later call
        replaces it; ``until`` in the past clears it. Triggers allocation of
        the agent. O(1); a cycle pays for preferences only while some are set.
        """
        self._agents.get(agent_id)
        validate_role(role)
        if until <= self.clock.now():
            self._preferred.pop(agent_id, None)
            return
        self._preferred[agent_id] = (role, float(until))
        self._pending.add(agent_id)

    def preferences(self) -> dict[str, tuple[str, float]]:
        """The preferences in force: agent -> (role, until)."""
        now = self.clock.now()
        return {agent_id: pref for agent_id, pref in sorted(self._preferred.items()) if pref[1] > now}

    # ============================================================ frameworks
    def add_framework(
        self,
        framework_id: str,
        role: str = DEFAULT_ROLE,
        *,
        active: bool = True,
        suppressed: bool = False,
        min_allocatable: str | Iterable[Resources | str] | None = None,
    ) -> None:
        """Add a framework in ``role``. ``min_allocatable`` overrides the
        allocator's default for this framework. Triggers allocation."""
        if framework_id in self._frameworks:
            raise DuplicateFrameworkError(f"framework {framework_id!r} was already added")
        if not isinstance(framework_id, str) or not framework_id:
            raise UnknownFrameworkError(f"framework id must be a non-empty string, got {framework_id!r}")
        validate_role(role)
        mins = parse_min_allocatable(min_allocatable) if min_allocatable is not None else None
        framework = _Framework(framework_id, role, mins)
        if mins is not None:
            self._min_overrides[mins] = self._min_overrides.get(mins, 0) + 1
            self._all_mins = (self.min_allocatable, *self._min_overrides)
        framework.active = active
        framework.suppressed = suppressed
        sorter = self._framework_sorters.get(role)
        if sorter is None:
            self._sync_roles()  # the role sorter is about to have to order roles
            self._roles_deferred = False
            sorter = self._framework_sorters[role] = self._role_sorter.fresh(hierarchical=False)
            for agent in self._agents:
                sorter.add_total(agent.total.stripped())
            self._role_sorter.add_client(role)
            self._role_sorter.deactivate(role)
            self._role_eligible[role] = 0
        sorter.add_client(framework_id)
        sorter.deactivate(framework_id)
        self._frameworks[framework_id] = framework
        self._roles.add_framework(role)
        self._sync_activity(framework)
        self._update_role_deferral()
        self._eligibility += 1
        self._pending_all = True

    def remove_framework(self, framework_id: str) -> None:
        """Remove a framework: its offers are rescinded (``framework_removed``),
        everything it held is released and its filters are dropped."""
        framework = self._framework(framework_id)
        self._rescind_all(self._offers.of_framework(framework_id), RescindReason.FRAMEWORK_REMOVED)
        for agent_id, used in sorted(framework.used.items()):
            self._release(framework, self._agents.get(agent_id), used)
        framework.used.clear()
        self._filters.clear_framework(framework_id)
        framework.active = False
        self._sync_activity(framework)
        sorter = self._framework_sorters[framework.role]
        sorter.remove_client(framework_id)
        del self._frameworks[framework_id]
        self._roles.remove_framework(framework.role)
        if framework.min_allocatable is not None:
            self._min_overrides[framework.min_allocatable] -= 1
            if not self._min_overrides[framework.min_allocatable]:
                del self._min_overrides[framework.min_allocatable]
            self._all_mins = (self.min_allocatable, *self._min_overrides)
        if not len(sorter):
            self._sync_roles()
            self._roles_deferred = False
            del self._framework_sorters[framework.role]
            del self._role_eligible[framework.role]
            self._role_sorter.remove_client(framework.role)
        self._update_role_deferral()

    def activate_framework(self, framework_id: str) -> None:
        """The framework (re)connected: offer to it again (unless suppressed)."""
        framework = self._framework(framework_id)
        framework.active = True
        self._sync_activity(framework)
        self._eligibility += 1
        self._pending_all = True

    def deactivate_framework(self, framework_id: str) -> None:
        """The framework disconnected: no more offers; outstanding ones are
        rescinded (``framework_deactivated``). Its tasks keep their resources."""
        framework = self._framework(framework_id)
        self._rescind_all(self._offers.of_framework(framework_id), RescindReason.FRAMEWORK_DEACTIVATED)
        framework.active = False
        self._sync_activity(framework)

    def suppress_offers(self, framework_id: str) -> None:
        """No offers to the framework until it revives (outstanding ones stay)."""
        framework = self._framework(framework_id)
        framework.suppressed = True
        self._sync_activity(framework)

    def revive_offers(self, framework_id: str) -> None:
        """Clear the framework's filters, lift suppression, trigger allocation."""
        framework = self._framework(framework_id)
        self._filters.clear_framework(framework_id)
        framework.suppressed = False
        self._sync_activity(framework)
        self._eligibility += 1
        self._pending_all = True

    def offer_filters_changed(self) -> None:
        """:attr:`offer_gate` may answer otherwise now: agents nobody could
        take may be taken (their idle stamps no longer hold)."""
        self._eligibility += 1

    def _sync_activity(self, framework: _Framework) -> None:
        """Keep the sorters' active sets equal to "active and not suppressed",
        with a per-role count so a role leaves the order with its last one."""
        eligible = framework.active and not framework.suppressed
        if eligible == (framework.id in self._eligible):
            return
        role = framework.role
        if eligible:
            self._eligible.add(framework.id)
            self._framework_sorters[role].activate(framework.id)
            self._role_eligible[role] = self._role_eligible.get(role, 0) + 1
            if self._role_eligible[role] == 1:
                self._role_sorter.activate(role)
                self._active_roles.add(role)
        else:
            self._eligible.discard(framework.id)
            self._framework_sorters[role].deactivate(framework.id)
            self._role_eligible[role] -= 1
            if self._role_eligible[role] == 0:
                self._role_sorter.deactivate(role)
                self._active_roles.discard(role)

    # ================================================================ offers
    def decline_offer(self, offer_id: str, refuse_seconds: float = DEFAULT_REFUSE_SECONDS) -> None:
        """The framework refused the whole offer; filter the agent for it for
        max(allocation_interval, refuse_seconds) unless refuse_seconds is 0."""
        refuse = _check_refuse(refuse_seconds)
        offer = self._offers.require(offer_id)
        self._offers.retire(offer)
        framework, agent = self._frameworks[offer.framework_id], self._agents.get(offer.agent_id)
        self._release(framework, agent, offer.resources)
        self._add_filter(offer.framework_id, offer.agent_id, offer.resources, refuse)
        self._counters["offers_declined"] += 1

    def accept_offer(self, offer_id: str, used: Resources,
                     refuse_seconds: float = DEFAULT_REFUSE_SECONDS) -> Resources:
        """The framework launched tasks using ``used`` of the offer; the rest
        is recovered and filtered like a decline. Returns the unused part."""
        refuse = _check_refuse(refuse_seconds)
        offer = self._offers.require(offer_id)
        if not offer.resources.contains(used):
            raise RecoveryError(f"offer {offer_id} holds {offer.resources}; cannot use {used}")
        self._offers.retire(offer)
        framework, agent = self._frameworks[offer.framework_id], self._agents.get(offer.agent_id)
        if used:  # an accept that launches nothing (only operations) holds nothing more
            framework.used[agent.id] = framework.used.get(agent.id, EMPTY) + used
        unused = offer.resources - used
        if unused:
            self._release(framework, agent, unused)
            self._add_filter(framework.id, agent.id, unused, refuse)
        self._counters["offers_accepted"] += 1
        return unused

    def recover_resources(self, framework_id: str, agent_id: str, resources: Resources,
                          refuse_seconds: float = 0.0) -> None:
        """Return ``resources`` the framework holds on the agent to the pool
        (tasks ended, or the unused part of an answered offer) and filter the
        agent for ``refuse_seconds`` (0 = no filter).

        Resources come first out of what the framework's tasks use there; if
        that is not enough, its outstanding offers on the agent count as
        answered (they are retired, their remainder becomes used). Recovering
        more than the framework holds there raises :class:`RecoveryError`.
        """
        refuse = _check_refuse(refuse_seconds)
        framework = self._framework(framework_id)
        agent = self._agents.get(agent_id)
        if not isinstance(resources, Resources):
            raise ResourcesError(f"resources must be Resources, got {type(resources).__name__}")
        used = framework.used.get(agent_id, EMPTY)
        if used.contains(resources):
            remaining_used = used - resources
        else:
            pool = agent.held.get(framework_id, EMPTY)
            if not pool.contains(resources):
                raise RecoveryError(
                    f"framework {framework_id!r} holds {pool} on agent {agent_id!r}; cannot recover {resources}"
                )
            for offer in list(self._offers.on(framework_id, agent_id).values()):
                self._offers.retire(offer)
            remaining_used = pool - resources
        if remaining_used:
            framework.used[agent_id] = remaining_used
        else:
            framework.used.pop(agent_id, None)
        self._release(framework, agent, resources)
        self._add_filter(framework_id, agent_id, resources, refuse)

    # ======================================================== reservations
    def convert_offered(self, offer_id: str, removed: Resources, added: Resources) -> Offer:
        """A RESERVE or UNRESERVE on an outstanding offer (Mesos's
        ``updateAllocation``): ``removed`` of the offer becomes ``added`` —
        the same quantities, reserved otherwise — in the offer, in what its
        framework holds on the agent and in the agent's total. DRF shares do
        not move (they count quantities, reserved or not); quota moves the
        quantities between the role's unreserved allocation and the
        reservations. Returns the offer as it is now. Raises
        :class:`RecoveryError` (changing nothing) unless the offer holds
        ``removed`` and ``added`` has the same quantities. O(kinds)."""
        offer = self._offers.require(offer_id)
        _check_conversion(removed, added)
        if not offer.resources.contains(removed):
            raise RecoveryError(f"offer {offer_id} holds {offer.resources}; cannot convert {removed}")
        framework, agent = self._frameworks[offer.framework_id], self._agents.get(offer.agent_id)
        self._agents.convert(agent, removed, added, framework.id)
        if self._quota:
            self._roles.charge(framework.role, removed.unreserved().millis(), -1)
            self._roles.charge(framework.role, added.unreserved().millis(), 1)
        self._reserve(removed, -1)
        self._reserve(added, 1)
        return self._offers.replace(offer, offer.resources - removed + added)

    def convert_available(self, agent_id: str, removed: Resources, added: Resources,
                          reason: str = RescindReason.OPERATOR) -> None:
        """An operator's reserve or unreserve on an agent: ``removed`` of
        what is available there becomes ``added`` (the same quantities,
        reserved otherwise) in the agent's total. If not enough is available
        because it is offered, the agent's outstanding offers are rescinded
        (``reason``) first, as Mesos's master does. Raises
        :class:`AgentCapacityError` (nothing changed, no offer rescinded)
        when tasks hold what is missing. Triggers allocation of
        the agent. O(kinds + offers on the agent)."""
        agent = self._agents.get(agent_id)
        _check_conversion(removed, added)
        if not agent.available.contains(removed):
            offers = self._offers_on_agent(agent)
            if not (agent.available + Resources.sum(o.resources for o in offers)).contains(removed):
                raise AgentCapacityError(f"agent {agent_id!r}: {removed} is not available there, nor offered "
                                         f"(available {agent.available}): tasks use it")
            self._rescind_all(offers, reason)
        self._agents.convert(agent, removed, added)
        self._reserve(removed, -1)
        self._reserve(added, 1)
        self._pending.add(agent_id)

    def rescind_offer(self, offer_id: str, reason: str = RescindReason.OPERATOR) -> Rescind:
        """Take an outstanding offer back (master-side reasons); the framework
        should be told. Also queued for :meth:`drain_rescinds`."""
        return self._rescind(self._offers.require(offer_id), reason)

    def drain_rescinds(self) -> list[Rescind]:
        """Rescinds made by the allocator since the last call (agent removed or
        deactivated, framework deactivated, weights or quota changed, offer
        timeout), oldest first. The resources are already back in the pool."""
        out, self._rescinds = self._rescinds, []
        return out

    def expire_offers(self) -> list[Rescind]:
        """Rescind offers older than ``offer_timeout`` (no-op if it is None)."""
        if self.offer_timeout is None:
            return []
        deadline = self.clock.now() - self.offer_timeout
        return [self._rescind(offer, RescindReason.OFFER_TIMEOUT) for offer in self._offers.timed_out(deadline)]

    def get_offer(self, offer_id: str) -> Offer | None:
        """The outstanding offer with this id, or None."""
        return self._offers.get(offer_id)

    def offer_made_at(self, offer_id: str) -> float | None:
        """When the outstanding offer with this id was made (the allocator's clock), or None."""
        return self._offers.created_at(offer_id) if self._offers.get(offer_id) is not None else None

    def outstanding_offers(self, framework_id: str | None = None) -> list[Offer]:
        """Offers not yet answered, oldest first."""
        if framework_id is None:
            return list(self._offers)
        self._framework(framework_id)
        return self._offers.of_framework(framework_id)

    # ======================================================= weights, quota
    def update_weights(self, weights: Mapping[str, float]) -> None:
        """Set role weights (kept for roles without frameworks too). If a
        changed role has frameworks, all outstanding offers are rescinded so
        the new weights take effect at once (as the Mesos master does)."""
        checked = {}
        for role, weight in weights.items():
            validate_role(role)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or weight <= 0:
                raise WeightError(f"weight of role {role!r} must be a finite number > 0, got {weight!r}")
            checked[role] = float(weight)
        for role, weight in checked.items():
            self._weights[role] = weight
            self._role_sorter.update_weight(role, weight)
        if any(self._roles.has_frameworks(role) for role in checked):
            self._rescind_all(list(self._offers), RescindReason.WEIGHTS_UPDATED)
            self._pending_all = True

    def update_quota(self, role: str, guarantee: QuotaAmount | None = None,
                     limit: QuotaAmount | None = None) -> None:
        """Set (or, with neither, clear) a role's quota. The guarantee is set
        aside for the role's subtree first; the limit caps what it may hold
        (strings and mappings may hold explicit zeros: ``"gpus:0"``).
        Outstanding offers are rescinded where the new quota needs them: offers
        of other roles until the unmet guarantee is covered, and offers of the
        role beyond its new limit."""
        validate_role(role)
        g, lim = self._quota.validate(role, guarantee, limit)
        self._sync_roles()
        self._roles_deferred = False
        self._quota.set(role, g, lim)
        self._sync_quota_tracking()
        self._update_role_deferral()
        self._rescind_for_quota(role)
        self._eligibility += 1
        self._pending_all = True

    def check_quota(self, role: str, guarantee: QuotaAmount | None = None, limit: QuotaAmount | None = None) -> None:
        """What the operator's quota request must pass besides
        :meth:`update_quota`'s own checks, as Mesos's master checks it unless
        forced: every resource name is one mesoslike knows (cpus, mem, disk,
        gpus) or one an agent offers — a near miss is refused naming what it
        looks like (``cpu`` -> did you mean cpus?) — and the guarantees of the
        top-level guaranteed roles, this one's included, fit in what the
        agents have in all (Mesos's capacity heuristic). Raises
        :class:`~mesoslike.errors.QuotaError`; changes nothing.
        O(agents + roles with quota)."""
        validate_role(role)
        g, lim = self._quota.validate(role, guarantee, limit)
        total = Resources.sum(agent.total for agent in self._agents).stripped()
        known = set(KNOWN_KINDS) - {"ports"} | set(total.scalars())
        for what, amounts in (("guarantee", g), ("limit", lim)):
            for kind in sorted(amounts or {}):
                if kind not in known:
                    near = similar_kind(kind, sorted(known))
                    hint = f"did you mean {near}? " if near else ""
                    raise QuotaError(f"unknown resource {kind!r} in the {what} of role {role!r} ({hint}known: "
                                     f"{', '.join(sorted(known))}); force sets it anyway")
        wanted, short = self._quota.capacity_shortfall(role, g, total.millis())
        if short:
            raise QuotaError(f"not enough cluster capacity for the guarantee of role {role!r}: the guarantees "
                             f"would add up to {format_millis(wanted)}, and the agents have "
                             f"{total.only(list(wanted)) or 'nothing'} in all; force sets it anyway")

    def _sync_roles(self) -> None:
        """Bring the role sorter up to date after deferred grants: the single
        role's allocation becomes the sum of its frameworks' (O(F)), and it
        has received one allocation per deferred grant."""
        if not self._roles_deferred:
            return
        (role,) = self._framework_sorters
        frameworks = self._framework_sorters[role]
        current = Resources.sum(frameworks.allocation(framework_id) for framework_id in frameworks.clients())
        before = self._role_sorter.allocation(role).millis()
        gained = Resources.from_millis(positive_gap(current.millis(), before))
        lost = Resources.from_millis(positive_gap(before, current.millis()))
        grants, self._deferred_grants = self._deferred_grants, 0
        if grants:  # without a grant the role only lost: gained is empty
            self._role_sorter.allocated(role, gained)
            for _ in range(grants - 1):
                self._role_sorter.allocated(role, EMPTY)  # counts an allocation received
        if lost:
            self._role_sorter.unallocated(role, lost)

    def _update_role_deferral(self) -> None:
        """Defer role-level accounting exactly while one role exists and no
        quota reads role consumption or order."""
        wanted = len(self._framework_sorters) == 1 and not self._quota
        if self._roles_deferred and not wanted:
            self._sync_roles()
            self._roles_deferred = False
        elif wanted and not self._roles_deferred:
            self._roles_deferred = True

    def _sync_quota_tracking(self) -> None:
        """Role consumption is tracked while some role has quota, and the free
        pool while some role has a guarantee; both are rebuilt when they start."""
        if self._quota and not self._roles.tracking:
            self._roles.start_tracking(self._holdings())
        elif not self._quota and self._roles.tracking:
            self._roles.stop_tracking()
        self._agents.track_free(bool(self._quota.guarantees))

    def _holdings(self) -> Iterator[tuple[str, Mapping[str, int]]]:
        """(role, scalar thousandths) of everything frameworks hold."""
        frameworks = self._frameworks
        for agent in self._agents:
            for framework_id, held in agent.held.items():
                yield frameworks[framework_id].role, held.unreserved().millis()

    def _rescind_for_quota(self, role: str) -> None:
        quota, tree = self._quota, self._roles
        if role in quota.limits:
            self._rescind_until(lambda o: tree.in_subtree(self._frameworks[o.framework_id].role, role),
                                quota.over_limit(role), RescindReason.QUOTA_UPDATED)
        root = quota.guarantee_root(role)
        if root is not None:
            short = quota.short_of_guarantee(root, self._agents.free)
            self._rescind_until(lambda o: not tree.in_subtree(self._frameworks[o.framework_id].role, root),
                                short, RescindReason.QUOTA_UPDATED)

    def _rescind_until(self, eligible: Callable[[Offer], bool], amounts: Millis, reason: str) -> None:
        """Rescind eligible offers (oldest first) until they cover ``amounts``."""
        left = dict(amounts)
        for offer in list(self._offers):
            if not any(v > 0 for v in left.values()):
                return
            if not eligible(offer):
                continue
            offered = offer.resources.millis()
            if not any(offered.get(k, 0) > 0 and v > 0 for k, v in left.items()):
                continue
            self._rescind(offer, reason)
            for kind, amount in offered.items():
                if kind in left:
                    left[kind] -= amount

    # ============================================================ allocation
    def allocate(self, agent_ids: Iterable[str] | None = None) -> list[Offer]:
        """Run one allocation cycle over the given agents (all if None) and
        return the offers made, at most one per (framework, agent)."""
        return self._cycle(agent_ids, self.clock.now())

    def tick(self) -> list[Offer]:
        """What a runtime calls whenever it wakes up: rescinds timed-out
        offers, then runs a batch cycle if one is due, or else allocates the
        agents touched by events since the last cycle (coalesced).

        A batch cycle that was due at time *t* sees the decline filters as
        they stood just before *t*, however late it runs: a filter expiring
        at *t* still holds in it. A filter lasts max(allocation_interval,
        refuse_seconds), so it always holds through the next batch cycle after
        it was made (Mesos's ``SmallOfferFilterTimeout``, MESOS-4302)."""
        self.expire_offers()
        now = self.clock.now()
        if now >= self._next_batch:
            due = self._next_batch
            self._next_batch = now + self.allocation_interval
            return self._cycle(None, math.nextafter(due, -math.inf))
        if self._pending_all:
            return self.allocate()
        if self._pending:
            return self.allocate(sorted(self._pending))
        return []

    def next_wakeup(self) -> float:
        """When ``tick`` next has work: now if events are pending, else the
        earlier of the next batch cycle and the next offer timeout."""
        if self._pending_all or self._pending:
            return self.clock.now()
        wake = self._next_batch
        if self.offer_timeout is not None:
            oldest = self._offers.oldest_time()
            if oldest is not None:
                wake = min(wake, oldest + self.offer_timeout)
        return wake

    def _cycle(self, agent_ids: Iterable[str] | None, filter_now: float) -> list[Offer]:
        """One cycle over ``agent_ids`` (all if None); decline filters are
        judged at ``filter_now`` (see :meth:`tick`)."""
        now = self.clock.now()
        if agent_ids is None:
            wanted = None
        else:
            wanted = sorted(set(agent_ids))
            chosen = [self._agents.get(agent_id) for agent_id in wanted]  # unknown ids raise before any change
        for agent_id in self._filters.expire(filter_now):
            agent = self._agents.find(agent_id)
            if agent is not None:
                agent.version += 1
        if not self._active_roles:
            # no framework wants offers (none yet, or all suppressed): nothing can be granted,
            # and the O(agents) list and shuffle cost ~0.1 s a cycle at 100,000 agents
            if wanted is None:
                self._pending_all = False
                self._pending.clear()
            else:
                self._pending.difference_update(wanted)
            self._counters["cycles"] += 1
            self._last_cycle_duration, self._last_cycle_offers = self.clock.now() - now, 0
            return []
        if wanted is None:
            # insertion order is deterministic for a given history: no need to sort
            candidates = [a for a in self._agents if a.active and a.available]
            self._pending_all = False
            self._pending.clear()
        else:
            candidates = [a for a in chosen if a.active and a.available]
            self._pending.difference_update(wanted)
        shuffle(self._rng, candidates)
        grants: Grants = {}
        prefer, guarantees, plain = self._stages
        if self._preferred:  # empty unless fair-share preemption freed something: nothing to pay
            self._drop_past_preferences(now)
            if self._preferred:
                self._run_stage(prefer, candidates, filter_now, grants)
        if self._quota.guarantees:
            self._run_stage(guarantees, candidates, filter_now, grants)
        if self._fast_path and not self._quota and len(self._all_mins) == 1 and len(self._active_roles) == 1:
            (role,) = self._active_roles
            rows: list[tuple[str, Agent, Resources]] = []
            self._allocate_plain(candidates, role, filter_now, rows)
            if grants:  # the prefer stage granted too: one offer per (framework, agent), in grant order
                for framework_id, agent, resources in rows:
                    grants[(framework_id, agent)] = resources
                rows = [(framework_id, agent, resources) for (framework_id, agent), resources in grants.items()]
        else:
            self._run_stage(plain, candidates, filter_now, grants)
            rows = [(framework_id, agent, resources) for (framework_id, agent), resources in grants.items()]
        offers = self._offers.issue_rows(rows, now)
        self._counters["offers_made"] += len(offers)
        self._counters["cycles"] += 1
        self._last_cycle_duration = self.clock.now() - now
        self.cycle_durations.observe(self._last_cycle_duration)
        self._last_cycle_offers = len(offers)
        return offers

    # ------------------------------------------------------ the stage loop
    def _run_stage(self, stage: _Stage, candidates: list[Agent], filter_now: float, grants: Grants) -> None:
        """The one allocation loop: for each agent, walk the roles the stage
        names, and in each the sorted frameworks, until one may be offered
        something that it has not filtered; grant it, then go on as the stage
        says. O(agents · (depth · log F + frameworks skipped))."""
        for agent in candidates:
            if stage.stamps_idle and agent.idle_stamp == (agent.version, self._eligibility):
                continue  # nobody could take it, and nothing changed since: O(1)
            served: set[str] = set()
            while self._offerable_at_all(agent):
                granted = False
                for role, caps, must_include in stage.roles(agent):
                    found = self._first_taker(role, agent, caps, must_include, served, filter_now)
                    if found is None:
                        continue
                    framework, offer = found
                    self._grant(framework, agent, offer, grants)
                    served.add(framework.id)
                    granted = True
                    if stage.after_grant != _NEXT_ROLE or not self._offerable_at_all(agent):
                        break  # the sorters changed: a live iterator must not be resumed
                if not granted:
                    if stage.stamps_idle:
                        agent.idle_stamp = (agent.version, self._eligibility)
                    break
                if stage.after_grant != _AGAIN:
                    break

    def _first_taker(self, role: str, agent: Agent, caps: Millis | None, must_include: Millis | None,
                     served: set[str], filter_now: float) -> tuple[_Framework, Resources] | None:
        """The first framework of ``role`` in sorted order (not in ``served``)
        that may be offered something on ``agent`` under ``caps`` — including
        some kind of ``must_include`` if given — and has not filtered it,
        with what it may be offered. Hot path: no mutation here, so the
        sorter's iterator stays valid."""
        frameworks = self._frameworks
        filters_here = agent.filters  # usually None or empty: no filter to check
        gate = self.offer_gate
        # _offerable_at_all checked the one minimum; an agent with reservations
        # needs the per-role view of _offerable
        plain = caps is None and len(self._all_mins) == 1 and not agent.reserved
        skipped = 0
        try:
            for framework_id in self._framework_sorters[role].iter_sorted():
                if served and framework_id in served:
                    continue
                if plain:
                    offer: Resources | None = agent.available
                else:
                    offer = self._offerable(agent, frameworks[framework_id], caps)
                if offer is None:
                    continue
                if must_include is not None:
                    offered = offer.millis()
                    if not any(offered.get(kind) for kind in must_include):
                        continue
                if filters_here:
                    refusals = filters_here.get(framework_id)
                    if refusals and refused_any(refusals, offer, filter_now):
                        skipped += 1
                        continue
                if gate is not None and not gate(framework_id, agent.id):
                    continue
                return frameworks[framework_id], offer
            return None
        finally:
            if skipped:
                self._counters["offers_filtered"] += skipped

    # the three walks the stages parameterise the loop with
    def _preferred_roles(self, agent: Agent) -> RoleWalk:
        """Stage *prefer*: an agent preferred for a role goes to that role's
        first framework that can take it (see :meth:`prefer_role`)."""
        pref = self._preferred.get(agent.id)
        if pref is not None and pref[0] in self._active_roles:
            yield pref[0], (self._quota.caps(pref[0], self._agents.free) if self._quota else None), None

    def _guaranteed_roles(self, agent: Agent) -> RoleWalk:
        """Stage *guarantees*: roles owed part of their (or an ancestor's)
        guarantee, in role order, each offered what makes progress on it."""
        quota = self._quota
        for role in self._role_sorter.sort():
            root = quota.guarantee_root(role)
            if root is None:
                continue
            owed = quota.unsatisfied(root)
            if owed:
                yield role, quota.caps(role, self._agents.free, owed), owed

    def _plain_roles(self, agent: Agent) -> RoleWalk:
        """Stage *plain*: every active role in order, under its quota caps."""
        roles, quota = self._active_roles, self._quota
        for role in (roles if len(roles) == 1 else self._role_sorter.iter_sorted()):
            yield role, (quota.caps(role, self._agents.free) if quota else None), None

    def _drop_past_preferences(self, now: float) -> None:
        preferred = self._preferred
        for agent_id in [a for a, (_, until) in preferred.items() if until <= now]:
            del preferred[agent_id]

    def _allocate_plain(self, candidates: list[Agent], role: str, filter_now: float,
                        rows: list[tuple[str, Agent, Resources]]) -> None:
        """The plain stage in the common case — no quota, one active role, one
        minimum for everyone — as one tight loop: the stage loop specialised
        (whole-agent grants; nothing can cut an offer short here), with
        :meth:`_hold` and the agent book's ``decrease_available`` inlined for
        a role without quota (and so without a free pool to keep). Its grants go to
        ``rows`` as (framework id, agent, resources), one per agent at most:
        no dict of grants to merge them in. It must decide
        exactly as :meth:`_run_stage` does: ``tests/test_allocator_fast_path.py``
        runs both on random histories."""
        sorter = self._framework_sorters[role]
        # the sorter's live order saves a call and an iterator over it per agent
        order: Iterable[tuple] = sorter.live_order() or _ClientEntries(sorter)
        framework_allocated = sorter.allocated
        role_allocated = None if self._roles_deferred else self._role_sorter.allocated
        assert not self._agents.tracking_free, "the fast path runs without quota, so without a free pool"
        mins = self.min_allocatable
        if mins is not self._fits_for:  # the agents' cache (Agent.fit) was for another minimum
            for agent in self._agents:
                agent.fit = None
            self._fits_for = mins
        eligibility = self._eligibility
        gate = self.offer_gate
        skipped = held = 0
        grant = rows.append
        for agent in candidates:
            stamp = agent.idle_stamp
            if stamp is not None and stamp == (agent.version, eligibility):
                continue
            available = agent.available
            if agent.reserved:
                available = available.allocatable_to(role)
                quantities = available.stripped()  # DRF counts reserved ones too
            else:
                quantities = available
            if agent.fit is not quantities:  # met the minimum before: Resources never change
                for minimum in mins:
                    if quantities.contains(minimum):
                        break
                else:
                    if mins or not available:  # without a minimum, anything but nothing (a preferred agent's rest)
                        continue
                agent.fit = quantities
            filters_here = agent.filters
            for entry in order:
                framework_id = entry[2]
                if filters_here:
                    refusals = filters_here.get(framework_id)
                    if refusals and refused_any(refusals, available, filter_now):
                        skipped += 1
                        continue
                if gate is not None and not gate(framework_id, agent.id):
                    continue
                break
            else:
                agent.idle_stamp = (agent.version, eligibility)
                continue
            # _hold, the sorters changed: the iterator is dropped. AgentBook.decrease_available
            # inlined: without quota no free pool is kept (_sync_quota_tracking)
            free = agent.available
            agent.available = EMPTY if available is free else free - available
            holdings = agent.held
            before = holdings.get(framework_id)
            holdings[framework_id] = available if before is None else before + available
            agent.version += 1
            if role_allocated is not None:
                role_allocated(role, quantities)
            framework_allocated(framework_id, quantities)
            held += 1
            grant((framework_id, agent, available))
        if role_allocated is None:
            self._deferred_grants += held
        self._counters["offers_filtered"] += skipped

    def _offerable_at_all(self, agent: Agent) -> bool:
        """Cheap pre-check: has the agent anything, and could any framework's
        minimum be met by it? Saves walking every framework for crumbs."""
        available = agent.available
        if not available:
            return False
        if agent.reserved:
            available = available.stripped()
        for mins in self._all_mins:
            if not mins:
                return True
            for minimum in mins:
                if available.contains(minimum):
                    return True
        return False

    def _offerable(self, agent: Agent, framework: _Framework, caps: Millis | None) -> Resources | None:
        """What ``framework`` may be offered on ``agent`` now, or None if
        that is below its minimum allocatable resources."""
        if agent.reserved:
            # another role's reservations are not for it; caps limit only
            # unreserved kinds (reserved ones already count as consumed)
            offer = agent.available.allocatable_to(framework.role)
            if caps:
                offer = offer.clipped(caps)
            quantities = offer.stripped()  # reserved cpus meet a cpus minimum too
        elif not caps:
            offer = quantities = agent.available
            if framework.min_allocatable is None and len(self._all_mins) == 1:
                return offer  # _offerable_at_all already checked the default minimum
        else:
            offer = quantities = agent.available.clipped(caps)
        if not offer:
            return None
        mins = framework.min_allocatable if framework.min_allocatable is not None else self.min_allocatable
        if not mins:
            return offer
        for minimum in mins:
            if quantities.contains(minimum):
                return offer
        return None

    def _grant(self, framework: _Framework, agent: Agent, resources: Resources, grants: Grants) -> None:
        self._hold(framework, agent, resources)
        key = (framework.id, agent)
        grants[key] = grants[key] + resources if key in grants else resources

    # ============================================================ bookkeeping
    def _hold(self, framework: _Framework, agent: Agent, resources: Resources) -> None:
        """Move resources from the agent's available pool to the framework."""
        self._agents.decrease_available(agent, framework.id, resources)
        self._charge(framework, agent, resources)

    def _charge(self, framework: _Framework, agent: Agent, resources: Resources) -> None:
        """The sorters' (and quotas') side of :meth:`_hold`: ``framework``
        holds ``resources`` more on ``agent`` (its book moved them already)."""
        quantities = resources.stripped() if agent.reserved else resources  # DRF counts reserved ones too
        if self._roles_deferred:
            self._deferred_grants += 1
        else:
            self._role_sorter.allocated(framework.role, quantities)
        self._framework_sorters[framework.role].allocated(framework.id, quantities)
        if self._quota:
            # reservations count as consumed already (QuotaBook.consumed)
            charged = resources.unreserved() if agent.reserved else resources
            self._roles.charge(framework.role, charged.millis(), 1)
            self._eligibility += 1  # quota caps moved

    def _release(self, framework: _Framework, agent: Agent, resources: Resources) -> None:
        """Move resources from the framework back to the agent's pool."""
        if not resources:
            return
        self._agents.increase_available(agent, framework.id, resources)
        quantities = resources.stripped() if agent.reserved else resources
        if not self._roles_deferred:
            self._role_sorter.unallocated(framework.role, quantities)
        self._framework_sorters[framework.role].unallocated(framework.id, quantities)
        if self._quota:
            charged = resources.unreserved() if agent.reserved else resources
            self._roles.charge(framework.role, charged.millis(), -1)
            self._eligibility += 1  # quota caps moved

    def _reserve(self, total: Resources, sign: int) -> None:
        """An agent whose total is ``total`` came (+1) or went (-1), or a
        reservation operation made (+1) or undid (-1) reserved resources:
        its reservations join or leave the quota book's per-role reservations."""
        if not total.has_reservations():
            return
        for role in total.reservation_roles():
            self._quota.reserve(role, total.reserved(role).stripped().millis(), sign)
        self._eligibility += 1  # quota consumption moved

    def _add_filter(self, framework_id: str, agent_id: str, refused: Resources, refuse: float) -> None:
        if refuse > 0 and refused:
            timeout = max(self.allocation_interval, refuse)
            table = self._filters.add(framework_id, agent_id, refused, self.clock.now() + timeout)
            self._agents.get(agent_id).filters = table  # the cycle reads it there

    def _offers_on_agent(self, agent: Agent) -> list[Offer]:
        return [o for framework_id in agent.held for o in self._offers.on(framework_id, agent.id).values()]

    def _rescind(self, offer: Offer, reason: str) -> Rescind:
        self._offers.retire(offer)
        self._release(self._frameworks[offer.framework_id], self._agents.get(offer.agent_id), offer.resources)
        rescind = Rescind(offer, reason)
        self._rescinds.append(rescind)
        self._counters["offers_rescinded"] += 1
        return rescind

    def _rescind_all(self, offers: list[Offer], reason: str) -> None:
        """Rescind ``offers``, oldest first."""
        for offer in self._offers.oldest_first(offers):
            self._rescind(offer, reason)

    def _framework(self, framework_id: str) -> _Framework:
        try:
            return self._frameworks[framework_id]
        except (KeyError, TypeError):
            raise UnknownFrameworkError(f"unknown framework {framework_id!r}") from None

    # ================================================================ queries
    def statistics(self) -> AllocatorStatistics:
        """A frozen snapshot of counters, totals and dominant shares."""
        total = Resources.sum(agent.total for agent in self._agents)
        allocated = Resources.sum(agent.total - agent.available for agent in self._agents)
        self._sync_roles()
        role_shares = {role: self._role_sorter.share(role) for role in self._framework_sorters}
        framework_shares = {fid: self._framework_sorters[f.role].share(fid) for fid, f in self._frameworks.items()}
        reserved: dict[str, list[Resources]] = {}
        role_allocated: dict[str, list[Resources]] = {}
        for agent in self._agents:
            if agent.reserved:
                for role in agent.total.reservation_roles():
                    reserved.setdefault(role, []).append(agent.total.reserved(role))
            for framework_id, held in agent.held.items():
                role_allocated.setdefault(self._frameworks[framework_id].role, []).append(held)
        return AllocatorStatistics(
            outstanding_offers=len(self._offers),
            active_filters=len(self._filters),
            agents=len(self._agents),
            frameworks=len(self._frameworks),
            last_cycle_duration=self._last_cycle_duration,
            last_cycle_offers=self._last_cycle_offers,
            total=total,
            allocated=allocated,
            role_shares=role_shares,
            framework_shares=framework_shares,
            reserved={role: Resources.sum(parts) for role, parts in sorted(reserved.items())},
            role_allocated={role: Resources.sum(parts) for role, parts in sorted(role_allocated.items())},
            **self._counters,
        )

    def offer_blockers(self, framework_ids: Iterable[str] | None = None) -> dict[str, list[OfferBlocker]]:
        """Why each framework of ``framework_ids`` (default: all) that holds
        no outstanding offer gets none now (:mod:`mesoslike.allocator.blockers`);
        frameworks holding an offer are left out. A query for people
        (``/state``): it changes nothing an allocation reads, and no cycle
        calls it. O(A + F · depth · kinds + G · A' + the filters of the
        frameworks asked about), A' the active agents with something free,
        G the distinct (role, minimum allocatable) pairs among the
        frameworks asked about — O(A + F) with one role and one minimum."""
        now = self.clock.now()
        self._sync_roles()
        agents = [agent for agent in self._agents if agent.active]
        # once for all: on a busy cluster most agents have nothing free, and the groups need look at the rest only
        candidates = [agent for agent in agents if self._offerable_at_all(agent)]
        fitting: dict[tuple[str, MinAllocatable | None], list[tuple[Agent, Resources]]] = {}
        out: dict[str, list[OfferBlocker]] = {}
        chosen = self._frameworks.values() if framework_ids is None else \
            [self._frameworks[f] for f in framework_ids if f in self._frameworks]
        for framework in chosen:
            if self._offers.of_framework(framework.id):
                continue
            key = (framework.role, framework.min_allocatable)
            if key not in fitting and framework.active and not framework.suppressed:
                caps = self._quota.caps(framework.role, self._agents.free) if self._quota else None
                fitting[key] = [(agent, offer) for agent in candidates
                                if (offer := self._offerable(agent, framework, caps)) is not None]
            out[framework.id] = self._blockers(framework, agents, fitting.get(key, []), now)
        return out

    def _blockers(self, framework: _Framework, agents: list[Agent], fitting: list[tuple[Agent, Resources]],
                  now: float) -> list[OfferBlocker]:
        """Why ``framework`` (holding no offer) gets none; ``fitting``: the
        active agents whose free resources it may be offered, with what."""
        role = framework.role
        if not framework.active:
            return [OfferBlocker(why.INACTIVE, "disconnected: no offers until it subscribes again")]
        if framework.suppressed:
            return [OfferBlocker(why.SUPPRESSED, f"it suppressed offers for role {role!r}: none until it revives",
                                 {"roles": [role]})]
        found = self._quota_blockers(role)
        if not agents:
            found.append(OfferBlocker(why.NO_AGENTS, "no agent is active (none registered, or all drained)"))
            return found
        if not fitting:
            if found:
                return found   # the quota explains it: what is free is not for this role
            mins = framework.min_allocatable if framework.min_allocatable is not None else self.min_allocatable
            free = Resources.sum(agent.available.allocatable_to(role) if agent.reserved else agent.available
                                 for agent in agents)
            wanted = " or ".join(str(m) for m in mins) or "anything"
            found.append(OfferBlocker(
                why.MIN_ALLOCATABLE, f"no agent has free what its minimum allocatable needs ({wanted}): the rest "
                f"is offered to or used by others (free on all agents: {free or 'nothing'})",
                {"min_allocatable": [str(m) for m in mins], "free": str(free)}))
            found.append(self._weight_share(framework))
            return found
        filters = self._filters.of_framework(framework.id)
        if all(agent.id in filters and refused_any(filters[agent.id], offer, now) for agent, offer in fitting):
            live = [(agent_id, flt.expires_at) for agent_id, flts in filters.items() for flt in flts
                    if flt.expires_at > now]
            soonest = min(expires for _, expires in live)
            found.append(OfferBlocker(
                why.DECLINE_FILTERS, f"it declined the {len(fitting)} agent(s) that could take it: {len(live)} "
                f"decline filter(s) in force on {len({a for a, _ in live})} agent(s), the soonest ends in "
                f"{soonest - now:.1f} s", {"filters": len(live), "agents": len({a for a, _ in live}),
                                           "soonest_expiry": soonest, "expires_in": round(soonest - now, 3)}))
            return found
        if not found:
            found.append(OfferBlocker(why.PENDING, f"nothing blocks it: {len(fitting)} agent(s) can take it at the "
                                      "next allocation", {"agents": len(fitting)}))
        return found

    def _quota_blockers(self, role: str) -> list[OfferBlocker]:
        """Quota that keeps ``role`` from more: limits reached (its own or
        an ancestor's), free resources held for other roles' guarantees."""
        quota = self._quota
        if not quota:
            return []
        found = [OfferBlocker(
            why.QUOTA_LIMIT, f"role {path!r} reached its quota limit for {', '.join(full)} (limit "
            f"{format_millis(limit)}, consumed {format_millis(consumed) or 'nothing'})",
            {"role": path, "kinds": full, "limit": format_millis(limit), "consumed": format_millis(consumed)})
            for path, full, limit, consumed in quota.limits_reached(role)]
        held, need = quota.held_for_guarantees(role, self._agents.free)
        if held:
            found.append(OfferBlocker(
                why.QUOTA_HEADROOM, f"the free {', '.join(held)} are held for other roles' quota guarantees "
                f"(still owed: {format_millis(need)})", {"kinds": held, "owed": format_millis(need)}))
        return found

    def _weight_share(self, framework: _Framework) -> OfferBlocker:
        """Where the framework's role stands in the allocation order (lower
        weighted dominant shares come first)."""
        role = framework.role
        share = self._role_sorter.share(role)
        roles = sorted(self._active_roles)
        ahead = [other for other in roles if other != role and self._role_sorter.share(other) < share]
        weight = self._weights.get(role, 1.0)
        return OfferBlocker(
            why.WEIGHT_SHARE, f"role {role!r} (weight {weight:g}) has a dominant share of {share:.3f}, "
            f"{ordinal(len(ahead) + 1)} of {len(roles)} active role(s) in the allocation order",
            {"role": role, "weight": weight, "share": share, "position": len(ahead) + 1, "roles": len(roles),
             "framework_share": self._framework_sorters[role].share(framework.id)})

    def quota_status(self) -> dict[str, dict[str, str | None]]:
        """Per role with quota: its ``guarantee``, ``limit`` (None: none)
        and what its subtree ``consumed`` (reservations included), as text.
        O(roles with quota · depth · kinds)."""
        return self._quota.snapshot()

    def weights(self) -> dict[str, float]:
        """The role weights set (roles left out weigh 1)."""
        return dict(sorted(self._weights.items()))

    def dominant_share(self, framework_id: str) -> float:
        """The framework's dominant share (DRF, among its role's frameworks)."""
        framework = self._framework(framework_id)
        return self._framework_sorters[framework.role].share(framework_id)

    def available(self, agent_id: str) -> Resources:
        return self._agents.get(agent_id).available

    def allocation(self, framework_id: str) -> dict[str, Resources]:
        """What the framework holds (offered + used) per agent."""
        self._framework(framework_id)
        return {a.id: a.held[framework_id] for a in self._agents if framework_id in a.held}

    def snapshot(self) -> dict:
        """The whole state as plain data (for ``/state`` and tests)."""
        return {
            "agents": {
                a.id: {"hostname": a.hostname, "attributes": dict(a.attributes), "total": str(a.total),
                       "available": str(a.available), "active": a.active,
                       "held": {f: str(r) for f, r in sorted(a.held.items())}}
                for a in sorted(self._agents, key=lambda a: a.id)
            },
            "frameworks": {
                f.id: {"role": f.role, "active": f.active, "suppressed": f.suppressed,
                       "min_allocatable": None if f.min_allocatable is None else [str(m) for m in f.min_allocatable],
                       "used": {a: str(r) for a, r in sorted(f.used.items())},
                       "offers": sorted(o.id for o in self._offers.of_framework(f.id))}
                for f in sorted(self._frameworks.values(), key=lambda f: f.id)
            },
            "offers": self._offers.snapshot(),
            "filters": self._filters.snapshot(),
            "weights": dict(sorted(self._weights.items())),
            "quota": self._quota.snapshot(),
            "reservations": {role: format_millis(millis) for role, millis in sorted(self._quota.reservations.items())},
            "pending": {"all": self._pending_all, "agents": sorted(self._pending)},
            "preferred": {a: {"role": role, "until": until} for a, (role, until) in self.preferences().items()},
            "counters": dict(self._counters),
            "rescinds": [(r.offer.id, r.reason) for r in self._rescinds],
        }

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if the bookkeeping is inconsistent: each
        part's own ``_check()`` (agent book, offer book, role tree), then that
        the parts agree — offers and used resources make up the holdings, the
        sorters' allocations are the holdings. O(A·F) — for tests."""
        self._sync_roles()
        self._agents._check()
        self._offers._check()
        self._roles._check(self._holdings())
        for agent in self._agents:
            assert (agent.filters or None) is self._filters.on_agent(agent.id), f"{agent.id}: stale filter table"
            for framework_id, resources in agent.held.items():
                framework = self._frameworks[framework_id]
                parts = framework.used.get(agent.id, EMPTY)
                for offer in self._offers.on(framework_id, agent.id).values():
                    parts = parts + offer.resources
                assert parts == resources, f"{framework_id}@{agent.id}: used+offered {parts} != held {resources}"
        for framework in self._frameworks.values():
            for agent_id in framework.used:
                assert framework.id in self._agents.get(agent_id).held, f"{framework.id} uses {agent_id} unheld"
            expected = Resources.sum(agent.held.get(framework.id, EMPTY) for agent in self._agents)
            got = self._framework_sorters[framework.role].allocation(framework.id)
            scalars = expected.stripped()
            assert got == scalars.only(scalars.scalars()), f"sorter allocation of {framework.id}: {got} != {expected}"
        for offer in self._offers:
            assert offer.framework_id in self._frameworks and offer.agent_id in self._agents, f"stray offer {offer.id}"
        assert self._roles.roles() == sorted(self._framework_sorters), "role tree and framework sorters disagree"
